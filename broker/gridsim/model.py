"""What the grid simulator simulates: CEs, jobs, and the CE spec files.

Units: a CE has ``cpus`` CPUs of ``si00`` each (GlueHostBenchmarkSI00, SpecInt2000 of one CPU);
its capacity C_j = cpus x si00 (seed 004 Section 4.2, :func:`broker.selection.cpu_capacity`).
A job's ``work`` is in SI00-seconds: alone on a CPU of benchmark s it runs ``work / s`` seconds.
Times are seconds of simulated time from the start of the run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from broker.selection import cpu_capacity
from vgrid_runtime.config import read_toml


class SpecError(ValueError):
    """A CE or workload spec is wrong; ``str()`` names the file or field and what is wrong."""


@dataclass(frozen=True)
class CESpec:
    """One simulated Computing Element.

    ``ce_id`` is its GlueCEUniqueID, ``cpus`` its GlueCEInfoTotalCPUs (>= 1), ``si00`` the
    GlueHostBenchmarkSI00 of one CPU (> 0, a whole number as GLUE publishes it), ``label`` a
    free description.
    """

    ce_id: str
    cpus: int
    si00: float
    label: str = ""

    @property
    def capacity(self) -> float:
        """C_j = cpus x si00 (SI00), :func:`broker.selection.cpu_capacity`."""
        return cpu_capacity(self.cpus, self.si00)


@dataclass(eq=False)
class Job:
    """One simulated grid job and its outcome.

    Input: ``job_id``, ``user``, ``submit_s`` (creation time, s), ``work`` (SI00-seconds, >= 0),
    ``deadline_s`` (absolute, s) or None, ``site`` (the site a trace ran it at, else "").
    Outcome, filled by the engine: ``ce`` (chosen CE id), ``start_s`` (left the CE's queue: got
    a CPU or a virtual worker node), ``end_s`` (finished).
    """

    job_id: int
    user: str
    submit_s: float
    work: float
    deadline_s: float | None = None
    site: str = ""
    ce: str | None = field(default=None)
    start_s: float | None = field(default=None)
    end_s: float | None = field(default=None)


#: seed 004 Table II: one site, four CEs each with one worker node. The paper gives the
#: processors, not benchmarks; as the paper allows (Section 4.2: "each of these CPU
#: characteristics can be used for expressing the computational capacity"), the per-CPU
#: capacity is the clock speed in MHz, and the Core 2 Duo machines have 2 CPUs.
SEED004_TABLE2: tuple[CESpec, ...] = (
    CESpec("ce1.seed004.vgrid.local:8443/vgrid-pbs-production", 1, 1800.0,
           "CE/WN 1: Pentium 4 1.8 GHz, 512 MB"),
    CESpec("ce2.seed004.vgrid.local:8443/vgrid-pbs-production", 1, 3000.0,
           "CE/WN 2: Pentium 4 3.0 GHz, 512 MB"),
    CESpec("ce3.seed004.vgrid.local:8443/vgrid-pbs-production", 2, 3000.0,
           "CE/WN 3: Intel Core 2 Duo 3.0 GHz, 512 MB"),
    CESpec("ce4.seed004.vgrid.local:8443/vgrid-pbs-production", 2, 3000.0,
           "CE/WN 4: Intel Core 2 Duo 3.0 GHz, 1 GB"),
)

BUILTIN_CES = {"seed004": SEED004_TABLE2, "seed004-table2": SEED004_TABLE2}


def validate_ces(ces: Sequence[CESpec], source: str = "CE spec") -> tuple[CESpec, ...]:
    """The CEs unchanged, or SpecError when empty, an id repeats, cpus < 1, si00 <= 0 or si00
    is not a whole number."""
    if not ces:
        raise SpecError(f"{source}: no CE defined")
    seen: set[str] = set()
    for i, ce in enumerate(ces):
        where = f"{source}: ce[{i}]"
        if not ce.ce_id:
            raise SpecError(f"{where}.id: must be a non-empty GlueCEUniqueID")
        if ce.ce_id in seen:
            raise SpecError(f"{where}.id: {ce.ce_id!r} is defined twice")
        seen.add(ce.ce_id)
        if isinstance(ce.cpus, bool) or not isinstance(ce.cpus, int) or ce.cpus < 1:
            raise SpecError(f"{where}.cpus: must be an integer >= 1, got {ce.cpus!r}")
        if isinstance(ce.si00, bool) or not isinstance(ce.si00, (int, float)) or not ce.si00 > 0:
            raise SpecError(f"{where}.si00: must be a number > 0, got {ce.si00!r}")
        if ce.si00 != int(ce.si00):
            raise SpecError(f"{where}.si00: must be a whole number (GLUE publishes "
                            f"GlueHostBenchmarkSI00 as an integer), got {ce.si00!r}")
    return tuple(ces)


def ces_from_toml(path: str | Path) -> tuple[CESpec, ...]:
    """CEs from a TOML file: ``[[ce]]`` tables with ``id``, ``cpus``, ``si00`` and ``label``.

    A ``[defaults]`` table may give ``si00`` (and ``cpus``) for CEs that omit them. Raises
    SpecError naming the file (and line/column for TOML syntax errors) or the field.
    """
    path = Path(path)
    data = read_toml(path, SpecError, "CE spec")
    defaults = data.get("defaults", {})
    rows = data.get("ce")
    if not isinstance(rows, list) or not rows:
        raise SpecError(f"{path}: expected one or more [[ce]] tables")
    ces = []
    for i, row in enumerate(rows):
        unknown = set(row) - {"id", "cpus", "si00", "label"}
        if unknown:
            raise SpecError(f"{path}: ce[{i}]: unknown field(s) {', '.join(sorted(unknown))}")
        ces.append(CESpec(ce_id=row.get("id", ""), cpus=row.get("cpus", defaults.get("cpus", 1)),
                          si00=row.get("si00", defaults.get("si00", 1000.0)),
                          label=str(row.get("label", ""))))
    return validate_ces(ces, str(path))


def site_ce_id(site: str) -> str:
    """GlueCEUniqueID of the CE built for trace site ``site``."""
    return f"{site}:8443/vgrid-lrms-lcg"


def ces_from_sites(peak_jobs: dict[str, int], si00: float = 1000.0) -> tuple[CESpec, ...]:
    """One CE per trace site, with as many CPUs as the site ever ran jobs at once (>= 1).

    The LCG trace records neither CPUs nor benchmarks per site; the peak number of jobs the
    site ran concurrently is a lower bound of its CPUs, and every CPU gets ``si00``.
    """
    return validate_ces([CESpec(site_ce_id(site), max(1, int(n)), float(si00), f"trace site {site}")
                         for site, n in sorted(peak_jobs.items())], "trace sites")


def describe(ces: Sequence[CESpec]) -> list[dict[str, Any]]:
    """CEs as JSON-ready dicts with their capacity share."""
    total = sum(ce.capacity for ce in ces)
    return [{"id": ce.ce_id, "cpus": ce.cpus, "si00": ce.si00, "label": ce.label,
             "capacity": ce.capacity, "capacity_share": ce.capacity / total} for ce in ces]
