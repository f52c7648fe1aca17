"""The VOC watchdog (seed 003, Sections 4 and 5.2): once per interval, size every VO's cluster.

``Watchdog.tick(now, demand)`` is the whole loop body, the same code in the simulator
(``sim.py``) and in the CE agent (``live.py``): it reads the VOs' queues (``demand``: {vo:
(waiting jobs, running jobs)}), asks the policy for targets and scores (``policies``), then
terminates idle (and, for the greedy policy, booting) nodes of VOCs larger than their target and
boots nodes into free slots for VOCs smaller than theirs. It never blocks on a boot: the driver
reports the node ready later (``VOCPool.ready``). Returns a ``TickReport`` (what it did, for
traces and ``GET /status``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .policies import fair_shares
from .pool import VOCNodeState, VOCPool, VOView


@dataclass
class TickReport:
    """One watchdog interval: ``time`` (s), per VO its ``targets`` and fair ``shares`` (nodes),
    and the node ids ``booted`` and ``terminated`` ({vo: [ids]})."""

    time: float
    targets: dict[str, int] = field(default_factory=dict)
    shares: dict[str, int] = field(default_factory=dict)
    booted: dict[str, list[str]] = field(default_factory=dict)
    terminated: dict[str, list[str]] = field(default_factory=dict)

    def record(self) -> dict:
        return {"time": self.time, "targets": self.targets, "shares": self.shares,
                "booted": self.booted, "terminated": self.terminated}


@dataclass
class Watchdog:
    """Sizes the VOCs of ``pool`` with ``policy`` (a ``policies`` object); ``interval_s`` is the
    period its caller runs ``tick`` at (s, > 0, else ValueError)."""

    pool: VOCPool
    policy: object
    interval_s: float = 10.0
    last: TickReport | None = None

    def __post_init__(self) -> None:
        if self.interval_s <= 0:
            raise ValueError(f"VOC watchdog interval must be > 0 s, got {self.interval_s}")

    def views(self, demand: Mapping[str, tuple[int, int]]) -> dict[str, VOView]:
        vos = list(demand) + sorted({n.vo for n in self.pool.live()} - set(demand))
        return {vo: self.pool.view(vo, *demand.get(vo, (0, 0))) for vo in vos}

    def tick(self, now: float, demand: Mapping[str, tuple[int, int]]) -> TickReport:
        """One interval at time ``now`` (s) for the VOs' (waiting, running) job counts."""
        policy, pool = self.policy, self.pool
        views = self.views(demand)
        report = TickReport(now)
        report.targets = {vo: max(0, int(policy.target(v, now))) for vo, v in views.items()}
        report.shares = shares = fair_shares(pool.slots, report.targets)
        for vo, v in views.items():
            self._shrink(vo, v.size - report.targets[vo], now, shares[vo], v, report)
        if getattr(policy, "reclaims", False):
            self._reclaim(demand, shares, now, report)
        views = self.views(demand)
        want = {vo: report.targets[vo] - v.size for vo, v in views.items()}
        granted = {vo: 0 for vo in views}
        while pool.free > 0:
            scored = [(policy.grow_score(views[vo], granted[vo], shares[vo]), -i, vo)
                      for i, vo in enumerate(views) if granted[vo] < want[vo]]
            scored = [s for s in scored if s[0] is not None]
            if not scored:
                break
            _, _, vo = max(scored)
            node = pool.boot(vo, now)
            if node is None:
                break
            granted[vo] += 1
            report.booted.setdefault(vo, []).append(node.id)
        self.last = report
        return report

    def _shrink(self, vo: str, excess: int, now: float, share: int, view: VOView, report: TickReport) -> None:
        if excess <= 0:
            return
        nodes = self.pool.live(vo)
        idle = [(self.policy.release_score(view, n.idle_since, now, share), n.id) for n in nodes
                if n.state is VOCNodeState.IDLE]
        victims = [nid for score, nid in sorted((s for s in idle if s[0] is not None), reverse=True)]
        if self.policy.release_booting:
            victims += [n.id for n in reversed(nodes) if n.state is VOCNodeState.BOOTING]
        for nid in victims[:excess]:
            self.pool.terminate(nid, now)
            report.terminated.setdefault(vo, []).append(nid)

    def _reclaim(self, demand, shares: dict[str, int], now: float, report: TickReport) -> None:
        """Idle nodes of VOs above their fair share give way to a VO below its share with
        waiting jobs when no slot is free."""
        views = self.views(demand)
        starved = sum(max(0, min(shares.get(vo, 0) - v.size, v.waiting - v.idle - v.booting))
                      for vo, v in views.items())
        need = starved - self.pool.free
        for vo, v in views.items():
            if need <= 0:
                return
            above = v.size - shares.get(vo, 0)
            idle = sorted((n for n in self.pool.live(vo) if n.state is VOCNodeState.IDLE),
                          key=lambda n: n.idle_since)
            for n in idle[:max(0, min(above, need))]:
                self.pool.terminate(n.id, now)
                report.terminated.setdefault(vo, []).append(n.id)
                need -= 1
