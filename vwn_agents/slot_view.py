"""The lease engine's slot table as JSON, for the broker's dashboard Gantt chart (issue 17).

``slot_view(engine, now, history_s)`` (called as ``LeaseEngine.slot_table``) reads a live
``lease_engine.LeaseEngine`` under its lock (its scheduler, enactment and job bodies) and answers::

    {"now": s, "nodes": [node agent URL, ...],
     "reservations": [{"id", "kind", "state", "lease", "key", "lease_type", "start", "end",
                       "nodes": [URL, ...], "image", "mb"}],
     "history": [{"lease", "key", "lease_type", "start", "end", "nodes": [URL, ...]}]}

``reservations`` are what the slot table holds now (scheduled and active; Haizea's "one
currency": ``VM``, ``SUSPEND``, ``RESUME``, ``MIGRATE``, ``TRANSFER`` image transfers and
``HOLD``, the memory a lease suspended in place keeps; ``end`` is null for an open-ended one).
The table drops reservations once they end, so ``history`` gives the run segments (seed 000
Section 6.1: a lease's VMs ran on those nodes over [start, end)) of leases that ended less than
``history_s`` seconds before ``now``, or still run: gaps between a lease's segments are its
suspensions. ``key`` is the job key of the lease (the CE agent's job), ``lease_type`` AR, BE or
IM. Times are clock seconds.
"""
from __future__ import annotations

import math

from .leasing.accounting import TYPE_NAMES


def _t(value: float) -> float | None:
    return None if value is None or math.isinf(value) else float(value)


def slot_view(engine, now: float, history_s: float = 600.0) -> dict:
    """The JSON document of the module doc for ``engine`` at ``now`` (s)."""
    with engine._lock:
        sched, urls = engine.scheduler, engine.enactment.node_urls

        def key_of(lease) -> str | None:
            if lease is None:
                return None
            body = engine._bodies.get(lease.id if lease.parent_id is None else lease.parent_id)
            return body.get("key") if body else None

        reservations = []
        for res in sorted(sched.st.reservations(), key=lambda r: (r.start, r.id)):
            nodes = sorted(res.use) if res.use else sorted(set(res.dest) | set(res.mapping))
            reservations.append({
                "id": res.id, "kind": res.kind.name, "state": res.state.value,
                "lease": res.lease.id if res.lease is not None else None, "key": key_of(res.lease),
                "lease_type": TYPE_NAMES[res.lease.type] if res.lease is not None else None,
                "start": _t(res.start), "end": _t(res.end),
                "nodes": [urls[n] for n in nodes if 0 <= n < len(urls)],
                "image": res.image_id or None, "mb": res.mb or None})
        history = []
        for lease in list(sched.leases.values()):
            for seg in lease.segments:
                if seg.end is not None and seg.end < now - history_s:
                    continue
                history.append({"lease": lease.id, "key": key_of(lease),
                                "lease_type": TYPE_NAMES[lease.type], "start": _t(seg.start),
                                "end": _t(seg.end),
                                "nodes": sorted({urls[n] for n in seg.nodes if 0 <= n < len(urls)})})
    return {"now": now, "nodes": list(urls), "reservations": reservations, "history": history}
