"""Storing new jobs in bulk: one transaction, two multi-row INSERTs, no read back (issue 12,
"Bulk paths").

A submission (one job, or a gLite collection / parametric job / DAG and its nodes) is stored by
:meth:`broker.db.JobStore.create_many` from the plan :func:`plan_insert` makes: every ``jobs``
row in one ``INSERT`` executed with many parameter sets, then every ``job_history`` row in
another, in one transaction, so a request is stored whole or not at all. The
:class:`broker.db.Job` records are built from what is written (the same values
:meth:`broker.db.JobStore.get` would read back), so a submission costs no read. Each job's history
is ``Submitted``, then ``Waiting`` when it is queued at once. Plain data here: no I/O.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from vgrid_runtime.job_states import JobState, check_transition


@dataclass
class InsertPlan:
    """What one request writes: ``rows`` (``jobs`` columns), ``history`` (``job_history``
    columns, in order) and ``jobs`` (keyword arguments of :class:`broker.db.Job`, in order)."""

    rows: list[dict[str, Any]]
    history: list[dict[str, Any]]
    jobs: list[dict[str, Any]]


def plan_insert(specs: list[dict[str, Any]], now: float, new_key: Callable[[], str]) -> InsertPlan:
    """The rows of ``specs`` (the shape of :meth:`broker.db.JobStore.create_many`) stored at
    ``now`` (s); ``new_key()`` gives a key to a spec without one.

    Raises ``vgrid_runtime.states.IllegalTransition`` for a ``state`` not reachable from Submitted.
    """
    plan = InsertPlan([], [], [])
    for spec in specs:
        key = spec.get("key") or new_key()
        owner = spec.get("owner") or {}
        scope, idem_key = spec.get("idempotency") or (None, None)
        state = JobState(spec.get("state") or JobState.SUBMITTED)
        depends_on, fqans = list(spec.get("depends_on") or []), list(owner.get("fqans") or [])
        isb = spec.get("input_sandbox")
        common = {"key": key, "jdl": spec["jdl"], "filename": spec["filename"],
                  "submitted_at": now, "updated_at": now, "kind": spec.get("kind") or "job",
                  "parent_key": spec.get("parent_key"), "node_name": spec.get("node_name"),
                  "owner_dn": owner.get("dn"), "owner_vo": owner.get("vo")}
        plan.rows.append({**common, "state": state.value, "cpu_caps": "[]", "dispatch_attempts": 0,
                          "attempt": 0, "deep_count": 0, "shallow_count": 0, "failed_ces": "[]",
                          "depends_on": json.dumps(depends_on), "owner_fqans": json.dumps(fqans),
                          "idem_scope": scope, "idem_key": idem_key, "match_class": spec.get("match_class"),
                          "input_sandbox": None if isb is None else json.dumps(list(isb))})
        steps = [JobState.SUBMITTED]
        if state is not JobState.SUBMITTED:
            check_transition(key, JobState.SUBMITTED, state)
            steps.append(state)
        history = [{"state": st.value, "time": now, "reason": None} for st in steps]
        plan.history.extend({"key": key, **h} for h in history)
        plan.jobs.append({**common, "state": state, "depends_on": depends_on, "owner_fqans": fqans,
                          "history": history, "match_class": spec.get("match_class"),
                          "input_sandbox": None if isb is None else list(isb)})
    return plan
