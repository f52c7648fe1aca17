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
