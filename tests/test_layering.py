"""Package layering: jdl <- infosys <- vwn_agents <- broker, no cycles (STYLE.md, "Ours").

Also: no two files import each other, directly or through others (lazy imports inside
functions count); scheduling and bookkeeping code takes a clock, and nobody but
vgrid_runtime/clock.py reads the wall clock (time.time, datetime.now, ... through any alias).
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


# ---- no import cycle between files ---------------------------------------------------------

def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path = REPO, packages=ORDER) -> dict[str, set[str]]:
    """Module -> the vgrid modules it imports anywhere in the file (module level or inside a
    function; absolute or relative). `from pkg import sub` imports pkg.sub when that is a
    module, else pkg; `import a.b.c` imports a.b.c (the parent packages' __init__ files that
    Python runs on the way are not counted: a package is not a cycle with its own modules)."""
    files = {_module_name(p, root): p for pkg in packages for p in (root / pkg).rglob("*.py")}
    graph = {}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base
                         for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in files:
                    name = name.rpartition(".")[0]
                if name and name != mod:
                    targets.add(name)
        graph[mod] = targets
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles (a -> b -> ... -> a), shortest first within each strongly connected group of
    modules, until every module of the group is on one of them."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []
    for root in sorted(graph):  # Tarjan, iteratively
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    group.add(w)
                    if w == v:
                        break
                if len(group) > 1:
                    groups.append(group)
    cycles = []
    for group in groups:  # shortest cycles until every module of the group is on one
        left = set(group)
        while left:
            cycles.append(_shortest_cycle(graph, group, min(left)))
            left -= set(cycles[-1])
    return cycles


def _shortest_cycle(graph, group: set[str], start: str) -> list[str]:
    paths, frontier = {start: [start]}, [start]
    while True:
        for v in frontier:
            if start in graph[v]:
                return paths[v] + [start]
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & group):
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt


def test_import_cycle_detection_sees_lazy_and_relative_imports(tmp_path):
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}}
    assert import_cycles(graph) == [["a.x", "a.y", "a.z", "a.x"]]
    files = {"p/__init__.py": "from .x import f\n",
             "p/x.py": "def f():\n    from .sub import y  # lazy\n",
             "p/sub/__init__.py": "", "p/sub/y.py": "from p import z\n",
             "p/z.py": "import p.x as px\n", "q/w.py": "from p.sub import y\nimport os\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    g = import_graph(tmp_path, ["p", "q"])
    assert g == {"p": {"p.x"}, "p.x": {"p.sub.y"}, "p.sub": set(), "p.sub.y": {"p.z"},
                 "p.z": {"p.x"}, "q.w": {"p.sub.y"}}
    assert import_cycles(g) == [["p.sub.y", "p.z", "p.x", "p.sub.y"]]
    g = import_graph()
    assert "jdl.values" in g["jdl.printer"]  # relative `from .values import ...`
    assert "jdl.nodes" in g["jdl.printer"]  # `from . import nodes as n`
    assert "vgrid_runtime.clock" in g["infosys.ism"]  # absolute


def test_no_import_cycle_between_files():
    graph = import_graph()
    cycles = [" -> ".join(c) for c in import_cycles(graph)]
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


# ---- the wall clock ------------------------------------------------------------------------

# time-module functions that read the wall clock; the ones in _NO_ARG_READS only without a
# time argument (time.localtime(t) formats t). monotonic / perf_counter (timeouts) are fine.
_WALL_CLOCK = {"time", "time_ns"}
_NO_ARG_READS = {"localtime": 0, "gmtime": 0, "ctime": 0, "asctime": 0, "strftime": 1}
_DATETIME_READS = {"now", "utcnow", "today"}  # datetime.datetime.*, datetime.date.today


def wall_clock_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every wall-clock read in a module, through any alias of time, datetime,
    datetime.datetime or datetime.date; referencing time.time without calling it counts."""
    time_mod, dt_mod, dt_cls = set(), set(), set()
    time_fns = {}  # local name -> time function (from time import gmtime as g)
    found = []
    nodes = list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "time":
                    time_mod.add(a.asname or "time")
                elif a.name == "datetime":
                    dt_mod.add(a.asname or "datetime")
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
            for a in node.names:
                if node.module == "time" and a.name in _WALL_CLOCK:
                    found.append((node.lineno, f"from time import {a.name}"))
                elif node.module == "time" and a.name in _NO_ARG_READS:
                    time_fns[a.asname or a.name] = a.name
                elif node.module == "datetime" and a.name in ("datetime", "date"):
                    dt_cls.add(a.asname or a.name)
    changed = True
    while changed:  # plain assignments of an alias: `clock_mod = time`
        changed = False
        for node in nodes:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                    and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                src, dst = node.value.id, node.targets[0].id
                for aliases in (time_mod, dt_mod, dt_cls):
                    if src in aliases and dst not in aliases:
                        aliases.add(dst)
                        changed = True
    for node in nodes:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            base, attr = node.value.id, node.attr
            if base in time_mod and attr in _WALL_CLOCK:
                found.append((node.lineno, f"{base}.{attr}"))
            elif base in dt_cls and attr in _DATETIME_READS:
                found.append((node.lineno, f"{base}.{attr}"))
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name) and node.value.value.id in dt_mod
                and node.value.attr in ("datetime", "date") and node.attr in _DATETIME_READS):
            found.append((node.lineno, f"{node.value.value.id}.{node.value.attr}.{node.attr}"))
        if isinstance(node, ast.Call) and not node.keywords:
            f = node.func
            name = None
            if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                    and f.value.id in time_mod):
                name = f.attr
            elif isinstance(f, ast.Name) and f.id in time_fns:
                name = time_fns[f.id]
            if name in _NO_ARG_READS and len(node.args) <= _NO_ARG_READS[name]:
                found.append((node.lineno, f"{name}() without a time"))
    return sorted(set(found))


def test_wall_clock_detection_sees_aliases():
    cases = {
        "import time\ntime.time()": 1, "import time as _t\nx = _t.time": 1,
        "from time import time": 1, "from time import time as now": 1,
        "import time\nx.clock = time.time": 1, "import time\nt = time\nt.time()": 1,
        "from datetime import datetime\ndatetime.now()": 1,
        "from datetime import datetime as dt\ndt.utcnow()": 1,
        "import datetime\ndatetime.datetime.today()": 1, "import datetime as d\nd.date.today()": 1,
        "from datetime import date\ndate.today()": 1,
        "import time\ntime.localtime()": 1, "import time\ntime.gmtime()": 1,
        "import time\ntime.ctime()": 1, "from time import gmtime\ngmtime()": 1,
        "import time\ntime.strftime('%Y')": 1,
        "import time\ntime.localtime(t)": 0, "import time\ntime.strftime('%Y', t)": 0,
        "import time\ntime.monotonic(); time.perf_counter(); time.sleep(1)": 0,
        "from datetime import datetime\ndatetime.fromtimestamp(t)": 0,
        "x.time()": 0, "clock.now()": 0,
    }
    for source, n in cases.items():
        assert len(wall_clock_reads(ast.parse(source))) == n, source


def test_no_wall_clock_reads_outside_the_clock_module():
    offenders = []
    for pkg in ORDER:
        for p in (REPO / pkg).rglob("*.py"):
            if p == REPO / "vgrid_runtime" / "clock.py":
                continue
            for line, what in wall_clock_reads(ast.parse(p.read_text(encoding="utf-8"))):
                offenders.append(f"{p.relative_to(REPO)}:{line}: {what}")
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
    "vwn_agents/sandbox.py",         # sandbox staging (node agent) to/from URLs given with the job
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
