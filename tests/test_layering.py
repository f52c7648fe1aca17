"""Package layering: jdl <- infosys <- vwn_agents <- broker, no cycles (STYLE.md, "Ours").

Also: scheduling and bookkeeping code takes a clock; nobody but vgrid_runtime/clock.py reads the
wall clock with time.time().
"""
import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ORDER = ["vgrid_runtime", "jdl", "infosys", "vwn_agents", "broker", "vgrid_cli"]


def imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(ORDER)


@pytest.mark.parametrize("pkg", ORDER)
def test_packages_import_only_lower_layers(pkg):
    allowed = set(ORDER[: ORDER.index(pkg) + 1])
    bad = {str(p.relative_to(REPO)): sorted(imported_packages(p) - allowed)
           for p in (REPO / pkg).rglob("*.py") if imported_packages(p) - allowed}
    assert bad == {}, f"{pkg} must not import {bad}"


def test_no_wall_clock_reads_outside_the_clock_module():
    offenders = []
    for pkg in ORDER:
        for p in (REPO / pkg).rglob("*.py"):
            if p.name == "clock.py":
                continue
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "time" and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "time"):
                    offenders.append(f"{p.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


HTTP_LIBRARIES = {"requests", "urllib3", "httpx", "flask", "werkzeug", "waitress"}


def imported_modules(path: Path, package: str) -> set[str]:
    """Every module the file at ``path`` imports (``imports_of``)."""
    return imports_of(path.read_text(encoding="utf-8"), package)


def imports_of(text: str, package: str) -> set[str]:
    """Every module ``text`` imports, relative imports resolved against ``package`` (the dotted
    package the file is in): ``from ..x import y`` in vwn_agents.leasing is ``vwn_agents.x``."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            parts = parts[: len(parts) - node.level + 1] if node.level else []
            base = ".".join(parts + ([node.module] if node.module else []))
            found.add(base)
            if not node.module:             # from .. import x: x may be a module
                found |= {f"{base}.{a.name}" for a in node.names}
    return found


def test_lease_engine_imports_nothing_of_the_agents_and_no_http():
    """vwn_agents/leasing drives nodes through the Enactment interface it defines: it imports no
    vwn_agents module outside vwn_agents.leasing (absolute or ``..`` relative) and no HTTP library."""
    root = REPO / "vwn_agents" / "leasing"
    bad = {}
    for p in root.rglob("*.py"):
        package = ".".join(p.relative_to(REPO).parts[:-1])
        wrong = sorted(m for m in imported_modules(p, package)
                       if (m.split(".")[0] == "vwn_agents" and not (m + ".").startswith("vwn_agents.leasing."))
                       or m.split(".")[0] in HTTP_LIBRARIES)
        if wrong:
            bad[str(p.relative_to(REPO))] = wrong
    assert bad == {}, f"vwn_agents/leasing must not import {bad}"


def test_relative_imports_are_resolved():
    text = "from ..ce_agent import X\nfrom .. import node_client\nfrom .model import L\nimport requests\n"
    assert imports_of(text, "vwn_agents.leasing") == {
        "vwn_agents.ce_agent", "vwn_agents", "vwn_agents.node_client", "vwn_agents.leasing.model", "requests"}


# HTTP to a service goes through its one client (docs/architecture.md, "Clients"); these modules
# own a session for other reasons, each documented there.
HTTP_CALLERS = {
    "vgrid_runtime/httpclient.py",   # ServiceClient: the node agent and CE agent clients
    "broker/client.py",              # the broker API's client (vgrid CLI, demo)
    "infosys/sources.py",            # fetch_glue: the GIP reader (GET /glue) of the ISM and BDII feeder
    "vwn_agents/outbox.py",          # event delivery to callback URLs
    "vwn_agents/wrapper.py",         # sandbox transfers to/from URLs given with the job
}


def test_only_the_client_modules_use_an_http_client_library():
    users = set()
    for pkg in ORDER:
        for p in (REPO / pkg).rglob("*.py"):
            rel = p.relative_to(REPO)
            mods = imported_modules(p, ".".join(rel.parts[:-1]))
            if any(m.split(".")[0] in {"requests", "urllib3", "httpx"} for m in mods):
                users.add(rel.as_posix())
    assert users <= HTTP_CALLERS, sorted(users - HTTP_CALLERS)
