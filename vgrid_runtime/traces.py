"""The workload traces bundled with vgrid, by name: the one catalogue (``examples/traces/``).

``vgrid simulate blue-30days``, ``--inject-ar work_30-dur_4h-size_3large``, ``vgrid simulate-grid
--ces swf:lcg-2005-1`` and the benchmarks all resolve names here. Names:

- ``blue-15days``, ``blue-30days``, ``blue-60days``: Haizea's SDSC Blue Horizon SWF extracts
  (Sotomayor et al., HPDC 2008);
- ``work_RR-dur_Dh-size_S`` (RR 05..30, D 1..4, S 1small/2medium/3large): the paper's 72
  advance-reservation LWF sets for the 30-day trace (the file stem);
- the stems of Haizea's unit-test LWFs (``migrate``, ``preemption``, ``reuse1``, ...);
- ``haizea-blue-60days-inj-work_{20,25,30}-dur_1h-size_1small``: old-format LWF, 60 days + ARs;
- ``lcg-2005-1``, ``lublin-256``: Parallel Workloads Archive SWF logs (gzipped);
- ``datastar-express``: the SDSC DataStar log's express queue (queue 1), jobs #21543-#21665 (an
  80-minute stretch; seed 000 Section 8.2, Traces III and IV), header kept verbatim.

Files are found relative to this package's location (vgrid is installed editable from its
repository); sources and licence terms are in ``examples/traces/README.md``.
"""
from __future__ import annotations

from pathlib import Path

TRACES_DIR = Path(__file__).resolve().parents[1] / "examples" / "traces"

HAIZEA_TESTS = ("migrate", "piggybacking", "preemption", "preemption_prematureend", "preemption_prematureend2",
                "reservation", "reservation_prematureend", "reuse1", "reuse2", "sample", "wait")
AR_SIZES = ("1small", "2medium", "3large")
AR_SETS = tuple(f"work_{load:02d}-dur_{hours}h-size_{size}"
                for load in range(5, 31, 5) for hours in range(1, 5) for size in AR_SIZES)
BLUE_60DAYS_INJ = tuple(f"haizea-blue-60days-inj-work_{load}-dur_1h-size_1small" for load in (20, 25, 30))

#: name -> path relative to TRACES_DIR
CATALOGUE: dict[str, str] = {
    **{f"blue-{days}days": f"haizea/blue/{days}days.swf" for days in (15, 30, 60)},
    "lcg-2005-1": "swf/LCG-2005-1.swf.gz",
    "lublin-256": "swf/lublin_256.swf.gz",
    "datastar-express": "swf/SDSC-DS-2004-2.1-cln-express-21543-21665.swf",
    **{name: f"lwf/haizea-tests/{name}.lwf" for name in HAIZEA_TESTS},
    **{name: f"haizea/injected_leases/30days/{name}.lwf" for name in AR_SETS},
    **{name: f"lwf/{name}.lwf" for name in BLUE_60DAYS_INJ},
}


class TraceNameError(ValueError):
    """A trace argument that is neither a file nor a bundled name, or a bundled file that is missing."""


def known_names() -> str:
    """The bundled names on one line, the 72 AR sets as their pattern."""
    return ("blue-15days, blue-30days, blue-60days, lcg-2005-1, lublin-256, datastar-express, "
            + ", ".join(HAIZEA_TESTS) + ", " + ", ".join(BLUE_60DAYS_INJ)
            + ", work_RR-dur_Dh-size_S (RR 05-30 by 5, D 1-4, S 1small/2medium/3large)")


def bundled(name: str) -> Path:
    """The file of a bundled trace; TraceNameError if ``name`` is unknown or its file is missing."""
    if name not in CATALOGUE:
        raise TraceNameError(f"unknown trace {name!r}: not a file nor a bundled trace name; "
                             f"known names: {known_names()}")
    path = TRACES_DIR / CATALOGUE[name]
    if not path.is_file():
        raise TraceNameError(f"bundled trace {name!r} is missing: {path} (see examples/traces/README.md)")
    return path


def resolve(arg: str | Path) -> Path:
    """A trace argument as a file: an existing file as given, else a bundled name's file.

    An argument that looks like a path (a directory part or a file suffix) and does not exist
    is returned as it is, so that its reader reports the missing file; any other unknown word
    raises TraceNameError listing the known names.
    """
    path = Path(arg)
    if path.exists():
        return path
    text = str(arg)
    if text in CATALOGUE:
        return bundled(text)
    if len(path.parts) > 1 or path.suffix:
        return path
    return bundled(text)
