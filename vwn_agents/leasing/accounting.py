"""Measurement: per-lease records and the metrics of a run.

Metrics (times in seconds from the start of the simulation):

* ``all_best_effort_s``: when the last best-effort lease finished (Haizea's "all-best-effort");
* ``mean_wait_s``: mean of first start - submission over best-effort leases that started;
* ``mean_bounded_slowdown``: mean of max(1, (end - submit) / max(run time, 10 s));
* ``utilization``: CPU-seconds used by running VMs / (site CPU x time until the last lease ended);
* ``ar_accepted``, ``ar_rejected``; ``ar_client_satisfaction``: mean over accepted ARs of the
  fraction of the requested interval the client really got (seed 000 Section 8.1); with the
  naive staging strategies images may arrive late (processor-shared link);
* ``mb_transferred`` and ``peak_disk_mb_per_node`` (image pools plus full local copies,
  seed 000 Figure 8.4);
* seed 002 Section 7.1 (``preemption_metrics``): ``local_rejection_rate`` and
  ``external_rejection_rate`` (fractions of the local / external requests rejected, None
  without such requests); ``utilization_eq11``: eq. (11)-(12) as a fraction, the computation
  time sum v(L) d(L) x CPU of the leases that completed, over site CPU x time until the last
  lease ended, so suspension, resumption and the lost work of cancelled leases count as waste;
  ``preemptions`` (number of lease preemptions, 7.1.3) and ``preemption_overhead_s`` (sum of
  h(L) over them); ``makespan_external_s``: eq. (13), the mean over completed best-effort
  external leases of completion - ready time; ``last_end_s``: when the last lease ended (the
  "overall makespan" of seed 002 Figure 10 and Table III).
"""
from __future__ import annotations

from .model import CPU, LeaseState, LeaseType
from .staging import processor_sharing_ends

TYPE_NAMES = {LeaseType.ADVANCE_RESERVATION: "AR", LeaseType.BEST_EFFORT: "BE", LeaseType.IMMEDIATE: "IM"}


def reported(sched) -> list:
    """The leases as submitted (serial best-effort requests as one record, not per VM)."""
    return [l for l in sched.leases.values() if l.parent_id is None]


def bounded_slowdown(lease) -> float:
    """A finished lease's bounded slowdown: (end - submit) / max(time run, 10 s), at least 1
    (dimensionless; the 10 s bound keeps very short leases from dominating the mean)."""
    return max(1.0, (lease.end_s - lease.submit_s) / max(lease.time_run, 10.0))


def lease_record(lease, nodes) -> dict:
    start, end = lease.start_s, lease.end_s
    used = sorted({nodes[n].name for seg in lease.segments for n in seg.nodes})
    return {
        "id": lease.id,
        "type": TYPE_NAMES[lease.type],
        "state": lease.state.value,
        "submit_s": lease.submit_s,
        "requested_start_s": lease.requested_start_s,
        "start_s": start,
        "end_s": end,
        "nodes": used,
        "wait_s": None if start is None else start - lease.submit_s,
        "suspensions": lease.suspensions,
        "transfers": lease.transfers,
        "mb_transferred": lease.mb_transferred,
        "origin": "local" if lease.local else "external",
        "request_type": lease.request_type.value,
        "deadline_s": lease.deadline_s,
        "preemptions": lease.preemptions,
        "overhead_s": lease.overhead_s,
        # Haizea-style per-lease detail: run segments between suspensions, bounded slowdown
        # (best-effort: (end - submit) / max(time run, 10 s), at least 1), why it was rejected
        "segments": [{"start_s": seg.start, "end_s": seg.end,
                      "nodes": [nodes[n].name for n in seg.nodes]} for seg in lease.segments],
        "slowdown": (bounded_slowdown(lease)
                     if lease.is_be and end is not None and lease.state is LeaseState.DONE else None),
        "reject_reason": lease.reject_reason or None,
    }


def utilization_series(leases, total_cpu: float) -> list[tuple[float, float]]:
    """Step function [(t, fraction of site CPU in use from t)] from the leases' run segments."""
    deltas: dict = {}
    for lease in leases:
        for seg in lease.segments:
            cpu = lease.per_vm[CPU] * len(seg.nodes)
            deltas[seg.start] = deltas.get(seg.start, 0.0) + cpu
            deltas[seg.end] = deltas.get(seg.end, 0.0) - cpu
    out, level = [], 0.0
    for t in sorted(deltas):
        level += deltas[t]
        out.append((t, level / total_cpu if total_cpu else 0.0))
    return out


def disk_series(sched) -> dict[int, list[tuple[float, float]]]:
    """Per node, [(t, MB used from t)]: pool images plus full local copies of running VMs."""
    events = list(sched.pools.disk_events)
    if sched.cfg.diskimage_copy == "copy" and sched.staging.enabled:
        for lease in reported(sched):
            for seg in lease.segments:
                for n in seg.nodes:
                    events.append((seg.start, n, lease.image_mb))
                    events.append((seg.end, n, -lease.image_mb))
    per_node: dict = {}
    for t, n, d in sorted(events, key=lambda e: (e[0], e[2] > 0)):
        lst = per_node.setdefault(n, [])
        level = (lst[-1][1] if lst else 0.0) + d
        lst.append((t, level))
    return per_node


def ar_satisfaction(sched) -> dict[int, float]:
    """Per accepted AR, fraction of [t_s, t_e) the client got (1.0 when on time)."""
    out = {}
    late: dict = {}
    if sched.staging.naive:
        bw = sched.cfg.link_bandwidth_mbs("ar")
        ends = processor_sharing_ends([(r.start, r.mb) for r in sched.staging.naive], bw)
        for r, e in zip(sched.staging.naive, ends):
            late[r.lease.id] = max(late.get(r.lease.id, 0.0), e)
    for lease in sched.leases.values():
        if not lease.is_ar or lease.state is LeaseState.REJECTED:
            continue
        t_s = lease.requested_start_s
        t_e = t_s + lease.duration_s
        got_from = max(t_s, late.get(lease.id, t_s))
        if lease.start_s is None:
            out[lease.id] = 0.0
        else:
            got_from = max(got_from, lease.start_s)
            out[lease.id] = max(0.0, min(1.0, (t_e - got_from) / (t_e - t_s)))
    return out


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def preemption_metrics(leases, total_cpu: float) -> dict:
    """Seed 002 Section 7.1's metrics of the reported ``leases`` (see module doc)."""
    local = [l for l in leases if l.local]
    external = [l for l in leases if not l.local]
    ends = [l.end_s for l in leases if l.end_s is not None]
    horizon = max(ends, default=0.0)
    useful = sum(l.per_vm[CPU] * l.n_vms * l.effective_duration_s for l in leases if l.state is LeaseState.DONE)
    be_done = [l for l in external if l.request_type.best_effort and l.state is LeaseState.DONE
               and l.end_s is not None]
    return {
        "local_rejection_rate": _rate(sum(l.state is LeaseState.REJECTED for l in local), len(local)),
        "external_rejection_rate": _rate(sum(l.state is LeaseState.REJECTED for l in external), len(external)),
        "utilization_eq11": (useful / (total_cpu * horizon)) if horizon > 0 and total_cpu else 0.0,
        "preemptions": sum(l.preemptions for l in leases),
        "preemption_overhead_s": sum(l.overhead_s for l in leases),
        "makespan_external_s": (sum(l.end_s - l.ready_s for l in be_done) / len(be_done)) if be_done else None,
        "last_end_s": horizon if ends else None,
    }


def report(sched) -> dict:
    """``{"leases": [...], "metrics": {...}}`` as ``vgrid simulate --json`` prints it."""
    nodes = sched.nodes
    leases = sorted(reported(sched), key=lambda l: l.id)
    be = [l for l in leases if l.is_be]
    be_done = [l for l in be if l.end_s is not None and l.state is LeaseState.DONE]
    started = [l for l in be if l.start_s is not None]
    ends = [l.end_s for l in leases if l.end_s is not None]
    horizon = max(ends, default=0.0)
    total_cpu = sum(n.capacity[CPU] for n in nodes)
    used = sum(l.per_vm[CPU] * len(seg.nodes) * (seg.end - seg.start) for l in leases for seg in l.segments)
    slow = [bounded_slowdown(l) for l in be_done]
    ars = [l for l in leases if l.is_ar]
    sat = ar_satisfaction(sched)
    peak = {}
    for n, series in disk_series(sched).items():
        peak[nodes[n].name] = max((v for _, v in series), default=0.0)
    metrics = {
        "all_best_effort_s": max((l.end_s for l in be_done), default=None),
        "mean_wait_s": (sum(l.start_s - l.submit_s for l in started) / len(started)) if started else None,
        "mean_bounded_slowdown": (sum(slow) / len(slow)) if slow else None,
        "utilization": (used / (total_cpu * horizon)) if horizon > 0 and total_cpu else 0.0,
        "ar_accepted": sum(1 for l in ars if l.state is not LeaseState.REJECTED),
        "ar_rejected": sum(1 for l in ars if l.state is LeaseState.REJECTED),
        "ar_client_satisfaction": (sum(sat.values()) / len(sat)) if sat else None,
        "mb_transferred": sum(l.mb_transferred for l in leases),
        "peak_disk_mb_per_node": peak,
        **preemption_metrics(leases, total_cpu),
    }
    return {"leases": [lease_record(l, nodes) for l in leases], "metrics": metrics}
