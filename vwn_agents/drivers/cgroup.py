"""The ``cgroup`` VWN driver: today's process-tree VWNs (docs/vwn.md, "cgroups", "Suspend").

It only joins the CPU driver (``cgroups.open_cpu_cgroups``: v2, v1 or ``Uncapped``) and the
freezer (``node_suspend.open_freezer``) under the ``base.VWNDriver`` interface; the node agent
starts the job wrapper in them itself (``runs_jobs`` False).
"""
from __future__ import annotations

from .base import VWNDriver


class CgroupDriver(VWNDriver):
    """``cpu``: a ``cgroups.CpuCgroups``; ``freezer``: a ``freezer.Freezer``."""

    kind = "cgroup"

    def __init__(self, cpu, freezer) -> None:
        self._cg, self._fz = cpu, freezer
        self.why = (f"cgroup {cpu.version}" + ("" if cpu.capped else f", uncapped: {cpu.reason}")
                    + f"; freezer {freezer.version}")

    @property
    def cg(self):
        return self._cg

    @property
    def fz(self):
        return self._fz

    def state(self, vwn: str) -> str:
        if self._fz.available and self._fz.frozen(vwn):
            return "suspended"
        return "running" if self._cg.pids(vwn) else "gone"
