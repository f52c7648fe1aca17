"""Discrete-event simulation: the lease scheduler on a ``SimulatedClock`` with ``SimulatedNodes``.

The clock only jumps to the next change point: the next submission, the slot table's next
reservation start/end, or the next premature end reported by the simulated nodes. At each
point: ends are handled, new requests are submitted (ARs and immediate leases are decided at
once), the queue is scheduled, and due reservations start (Haizea's order).
"""
from __future__ import annotations

from dataclasses import dataclass

from vgrid_runtime.clock import SimulatedClock

from .accounting import report
from .config import LeaseConfig
from .enactment import SimulatedNodes
from .model import Lease, Node
from .scheduler import LeaseScheduler
from .slottable import INF
from .haizea_options import StatusTicker, StopRule, frontend


@dataclass
class SimulationResult:
    scheduler: LeaseScheduler
    enactment: SimulatedNodes
    events: int

    def report(self) -> dict:
        return report(self.scheduler)


def simulate(leases: list[Lease], nodes: list[Node], config: LeaseConfig | None = None,
             progress=None, max_events: int = 50_000_000, status=None,
             decisions=None, on_step=None) -> SimulationResult:
    """Run ``leases`` on ``nodes``; ``progress(done_leases, total)`` is called now and then.
    The configuration's VM overheads (``add-overhead``), ``override-memory`` and shutdown time
    are applied to copies of the leases first (``haizea_options.frontend``); the run stops as
    ``stop-when`` says; ``status(now_s, {state: count})`` is called every
    ``status-message-interval`` simulated minutes; ``decisions`` (a ``decisionlog.DecisionLog``
    or None) records why each lease went where it did; ``on_step(scheduler, now_s)``, if given,
    is called after every step's scheduling pass (an observer, e.g. for when each lease was
    placed; it must not change the schedule).

    Raises RuntimeError if the simulation does not finish in ``max_events`` steps, ConfigError
    for ``stop-when = exact`` without ``stop-when-time``.
    """
    config = config or LeaseConfig()
    leases = frontend(leases, config)
    clock = SimulatedClock(0.0)
    nodes_enact = SimulatedNodes(nodes)
    sched = LeaseScheduler(nodes, config, clock, nodes_enact)
    sched.decisions = decisions
    pending = sorted(leases, key=lambda l: (l.submit_s, l.id))
    i, steps = 0, 0
    stop = StopRule(config, pending)
    ticker = StatusTicker(config, status)
    be_left = stop.be_total
    while steps < max_events:
        t_sub = pending[i].submit_s if i < len(pending) else INF
        t = min(t_sub, sched.next_event_time())
        if t == INF:
            break
        if t > clock.now():
            clock.advance_to(t)
        now = clock.now()
        sched.process(now, ends_only=True)
        while i < len(pending) and pending[i].submit_s <= now:
            be_left -= pending[i].is_be
            sched.submit(pending[i])
            i += 1
        sched.process(now)
        if on_step is not None:
            on_step(sched, now)
        steps += 1
        if progress is not None and steps % 500 == 0:
            progress(sum(1 for l in sched.leases.values() if l.done), len(pending))
        ticker.tick(sched, now)
        if stop.done(sched, now, i == len(pending), be_left):
            break
    else:
        raise RuntimeError(f"simulation did not finish in {max_events} steps")
    if progress is not None:
        progress(sum(1 for l in sched.leases.values() if l.done), len(pending))
    return SimulationResult(sched, nodes_enact, steps)
