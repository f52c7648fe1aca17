"""Measured suspend/resume/migration rates fed back into the CE agent's lease engine (issue 14).

The lease engine plans a suspension as memory / ``suspend-rate``, a resumption as memory /
``resume-rate`` and a cold migration's copy as memory / ``migration-bandwidth`` (seed 000
Section 6; seed 002 eq. (5)-(8)); the lease configuration gives them (MB/s). With libvirt node
agents the real rates are measured at every save and restore and published in the node's
``GET /status`` ``driver`` (``last_save`` / ``last_restore``: ``{"mb","seconds","mb_s"}``), and
the CE agent measures every migration copy itself (``ce_migration``).

``MeasuredRates`` keeps, per node agent, an exponentially smoothed rate of each kind: a new
measurement m (one not seen before: its ``(mb, seconds)`` differ from the last one) gives
``r <- alpha * m + (1 - alpha) * r`` (``alpha`` = 0.5; the first one is taken as is).
Measurements of less than ``MIN_MB`` are ignored (a tiny image's rate is mostly fixed cost).
The rate the engine plans with (``planning``) is, for each kind, the **slowest** smoothed rate
over the nodes that measured one (the engine has one site-wide rate, so the conservative one:
no node is planned faster than it went), else the configured value (no node measured yet, or
``driver = "cgroup"`` nodes, which freeze in place and measure nothing). ``apply(scheduler)``
sets ``scheduler.suspend_rate`` / ``resume_rate`` (the estimates of ``besteffort``) and the
configuration's ``suspend-rate`` / ``resume-rate`` / ``migration-bandwidth`` (the reservations
of ``preemption``), so decisions made after a measurement use it; plans already made stay.
"""
from __future__ import annotations

import threading

ALPHA = 0.5
MIN_MB = 1.0
KINDS = {"save": "suspend-rate", "restore": "resume-rate", "copy": "migration-bandwidth"}


class MeasuredRates:
    """Per-node smoothed rates (module doc). Thread-safe."""

    def __init__(self, alpha: float = ALPHA) -> None:
        self.alpha = alpha
        self.rates: dict[str, dict[str, float]] = {k: {} for k in KINDS}   # kind -> node -> MB/s
        self.samples: dict[str, dict[str, int]] = {k: {} for k in KINDS}
        self._last: dict[tuple[str, str], tuple] = {}
        self._lock = threading.Lock()

    def observe(self, node: str, kind: str, record: dict | None) -> bool:
        """One measurement ``{"mb","seconds"}`` of ``kind`` (save | restore | copy) on ``node``;
        True when it was new and counted."""
        if not record or kind not in KINDS:
            return False
        try:
            mb, seconds = float(record["mb"]), float(record["seconds"])
        except (KeyError, TypeError, ValueError):
            return False
        if mb < MIN_MB or seconds <= 0:
            return False
        with self._lock:
            if self._last.get((node, kind)) == (mb, seconds):
                return False
            self._last[(node, kind)] = (mb, seconds)
            m = mb / seconds
            old = self.rates[kind].get(node)
            self.rates[kind][node] = m if old is None else self.alpha * m + (1 - self.alpha) * old
            self.samples[kind][node] = self.samples[kind].get(node, 0) + 1
            return True

    def observe_status(self, node: str, status: dict) -> None:
        """A node's ``GET /status``: its driver's ``last_save`` and ``last_restore``."""
        drv = status.get("driver") if isinstance(status, dict) else None
        if isinstance(drv, dict):
            self.observe(node, "save", drv.get("last_save"))
            self.observe(node, "restore", drv.get("last_restore"))

    def planning(self, cfg) -> dict:
        """``{option: (MB/s, source)}`` for suspend-rate, resume-rate and migration-bandwidth:
        the slowest measured rate and its node, else the configured value ("config")."""
        out = {}
        with self._lock:
            for kind, option in KINDS.items():
                measured = self.rates[kind]
                if measured:
                    node = min(measured, key=measured.get)
                    out[option] = (measured[node], f"measured on {node}")
                else:
                    out[option] = (cfg.get(option), "config")
        return out

    def apply(self, scheduler, base_cfg) -> None:
        """Set the scheduler's planning rates (module doc); ``base_cfg``: the configured values."""
        plan = self.planning(base_cfg)
        values = {opt: v for opt, (v, _) in plan.items()}
        if all(scheduler.cfg.get(opt) == v for opt, v in values.items()):
            return
        scheduler.cfg = scheduler.cfg.with_options(**values)
        scheduler.suspend_rate = values["suspend-rate"]
        scheduler.resume_rate = values["resume-rate"]

    def view(self, base_cfg) -> dict:
        """For the CE's GET /status: ``{"planning": {option: {"mb_s","source"}}, "nodes":
        {kind: {node: {"mb_s","samples"}}}, "alpha"}``."""
        with self._lock:
            nodes = {k: {n: {"mb_s": round(r, 3), "samples": self.samples[k][n]} for n, r in v.items()}
                     for k, v in self.rates.items()}
        return {"planning": {o: {"mb_s": round(v, 3), "source": s} for o, (v, s) in self.planning(base_cfg).items()},
                "nodes": nodes, "alpha": self.alpha}
