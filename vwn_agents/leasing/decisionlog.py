"""The per-decision debug log: why each lease went where it did (issue 16).

``vgrid simulate --decision-log FILE`` (or ``simulate(..., decisions=DecisionLog(file))``) writes
one JSON object per line for every scheduling decision:

* ``{"t", "lease", "type", "decision": "placed", "start", "end", "nodes", "suspend_at_end",
  "resuming", "threshold_s", "future", "candidates": [[start_s, vms_that_fit], ...],
  "hosts": [{"node", "vms", "hostable", "score"}, ...]}`` -- a best-effort or immediate lease
  placed by ``besteffort.place_besteffort``: the start times the mapper considered up to the
  chosen one, each with the number of the lease's VMs that fit for its minimum slot length
  (``threshold_s`` when it may be suspended, else its remaining time), on nodes whose image is
  ready (the lease needs ``n_vms``); for every chosen node, how many of its VMs it got, how many
  it could host and the host-selection policy's score (``policy-host-selection``: image usable
  there, VMs hostable; None without image transfers, when the mapper's own order -- most VMs
  hostable first -- decides);
* ``{"decision": "accepted", "start", "end", "nodes", "hosts"}`` -- an advance reservation;
* ``{"decision": "preempted", "victims": [{"lease", "order", "submit_s", "score",
  "preempted"}], "older_than_horizon": [ids], "policy", "order"}`` -- the best-effort leases an
  AR preempted, in the order the preemption policy tried them (``policy-preemption``,
  ``preemption-order``; ``score``: the policy's, higher first), and those the aging horizon
  (``preemption-horizon``) protected;
* ``{"decision": "rejected", "reason"}`` -- any lease rejected at submission, with its reason.

Times in seconds of simulated time, nodes by name. Off by default: the scheduler tests
``sched.decisions is not None`` once per decision, so a run without a log does no other work.

A record is written when the slot-table changes it describes are final
(``SlotTable.after_commit``, bound by ``LeaseScheduler.decisions``): a decision made inside a
transaction that is then rolled back -- an AR's preemption committed before its image staging
failed, a what-if placement -- is never written.
"""
from __future__ import annotations

import json

import numpy as np

from .slottable import INF, ResKind


class DecisionLog:
    """JSON lines to ``out`` (a text file object). ``records`` counts what was written.
    ``st``: the slot table whose commits make a record final (``after_commit``; set by
    ``LeaseScheduler.decisions``), None: written at once."""

    def __init__(self, out, nodes) -> None:
        self.out = out
        self.names = [n.name for n in nodes]
        self.records = 0
        self.st = None

    def write(self, t: float, lease, decision: str, **fields) -> None:
        rec = {"t": t, "lease": lease.id, "type": lease.type.value, "decision": decision}
        rec.update(fields)
        line = json.dumps(rec, default=_plain) + "\n"   # the record as it is now
        if self.st is None:
            self._emit(line)
        else:
            self.st.after_commit(lambda: self._emit(line))

    def _emit(self, line: str) -> None:
        self.out.write(line)
        self.records += 1

    def _nodes(self, mapping) -> list:
        return [self.names[m] for m in mapping]

    # ------------------------------------------------------------ best-effort placement
    def explain(self, sched, lease, now: float, found, length: float, ready, allow_future: bool) -> dict:
        """Before a placement is committed: the start times considered up to the chosen one and
        the chosen nodes' host scores (see module doc). ``found`` = (start, end, mapping)."""
        s, _e, mapping = found
        need = lease.per_vm
        rdy = np.asarray(ready if ready is not None else [-INF] * len(sched.nodes), dtype=float)
        times = {now, s}
        if ready is not None:
            times |= {t for t in ready if now < t < INF}
        if allow_future:
            A, _B, _N, _ = sched.mapper.slot_arrays(need)
            times |= set(A[(A > now) & (A < s)].tolist())
        cands = [[t, sched.mapper.count_ready_at(need, t, length, rdy)] for t in sorted(times) if t <= s]
        return {"candidates": cands[-20:], "hosts": self.hosts(sched, lease, mapping, s, s + length)}

    def hosts(self, sched, lease, mapping, t1: float, t2: float) -> list:
        score = sched.host_score(lease, t1)
        out = []
        for node in sorted(set(mapping)):
            hostable = sched.st.vms_fit(node, lease.per_vm, t1, t2)
            out.append({"node": self.names[node], "vms": mapping.count(node), "hostable": hostable,
                        "score": list(score(node, hostable)) if score is not None else None})
        return out

    def placed(self, sched, lease, now: float, start: float, end: float, mapping, explained: dict,
               resuming: bool, threshold, allow_future: bool) -> None:
        vm_end = max((r.end for r in sched.st.of_lease(lease) if r.kind is ResKind.VM), default=end)
        self.write(now, lease, "placed", start=start, end=end, nodes=self._nodes(mapping),
                   suspend_at_end=vm_end < start + lease.remaining_s - 1e-6, resuming=resuming,
                   threshold_s=threshold, future=start > now, allow_future=allow_future, **explained)

    # ------------------------------------------------------------ advance reservations
    def accepted(self, sched, lease, now: float, mapping, t_s: float, t_e: float, hosts: list) -> None:
        self.write(now, lease, "accepted", start=t_s, end=t_e, nodes=self._nodes(mapping), hosts=hosts)

    def preempted(self, sched, lease, now: float, candidates: list, chosen: list, protected: list) -> None:
        cfg = sched.cfg
        victims = []
        for order, other in enumerate(candidates):
            vm = sched.vm_reservation(other)
            sc = sched.policy.score(other, vm, now) if vm is not None and sched.policy is not None else None
            victims.append({"lease": other.id, "order": order, "submit_s": other.submit_s,
                            "score": list(sc) if isinstance(sc, tuple) else sc,
                            "preempted": other in chosen})
        self.write(now, lease, "preempted", victims=victims, older_than_horizon=[l.id for l in protected],
                   policy=cfg.policy_preemption, order=cfg.preemption_order)

    # ------------------------------------------------------------ rejections
    def rejected(self, lease, now: float) -> None:
        self.write(now, lease, "rejected", reason=lease.reject_reason)


def _plain(value):
    """JSON for numpy scalars and tuples the records may hold."""
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not JSON: {type(value).__name__}")
