"""Compound requests in the broker: parametric jobs, collections and DAGs.

A compound request is stored as a parent row (kind "parametric", "collection" or "dag") and
one row per plain job of its expansion (kind "node", ``parent_key`` set); ``jdl.expand`` does
the expansion (gLite JDL Attributes Specification, Sections 3.3, 4 and 5). Only nodes are
matched and run. The parent's state follows its nodes as the gLite LB shows it:
Submitted -> Waiting (accepted) -> Running (some node is running or has run) -> Done
(every node Done), Cancelled (every node that did not end Done was cancelled) or Aborted
(some node failed otherwise; the reason names them).

DAG nodes whose parents have not finished stay Submitted; :func:`nodes_to_release` says which
may go to Waiting (every DAG parent Done with exit code 0, as Condor DAGMan decides) and which
must end Aborted (a DAG parent failed). Plain logic over :class:`broker.db.Job` records: no I/O here.
"""
from __future__ import annotations

from typing import Any

import jdl as jdlmod
from jdl.printer import record_text

from .db import Job, new_key
from .taskqueues import match_fields
from vgrid_runtime.job_states import ENDED, JobState

COMPOUND_KINDS = ("parametric", "collection", "dag")
_STARTED = {JobState.RUNNING, JobState.DONE, JobState.CLEARED}


def expansion_specs(desc: "jdlmod.JobDescription", text: str, filename: str) -> list[dict[str, Any]]:
    """Rows to store for one submitted request: ``[parent, node...]`` or ``[job]``.

    Each plain job (a job or a node) carries what the matcher reads instead of its JDL
    (``match_class``, ``input_sandbox``: :func:`broker.taskqueues.match_fields`).

    Raises ``jdl.JDLValidationError`` when the expansion fails (unknown DAG node, cycle,
    unreadable node file, too many jobs), with every problem.
    """
    expansion = jdlmod.expand(desc, local_files=False)  # never read files on the broker host
    if expansion.kind == "job":
        return [{"jdl": text, "filename": filename, "kind": "job", **match_fields(desc, text)}]
    parent_key = new_key()
    keys = {pj.name: new_key() for pj in expansion.jobs}
    specs: list[dict[str, Any]] = [{"jdl": text, "filename": filename, "key": parent_key,
                                    "kind": expansion.kind}]
    for pj in expansion.jobs:
        node_text = record_text(pj.description.record, indent=2)
        specs.append({"jdl": node_text, "filename": f"{filename}#{pj.name}",
                      "key": keys[pj.name], "kind": "node", "parent_key": parent_key,
                      "node_name": pj.name, "depends_on": [keys[p] for p in pj.parents],
                      **match_fields(pj.description, node_text)})
    return specs


def nodes_to_release(blocked: list[Job], by_key: dict[str, Job]) -> tuple[list[Job], list[tuple[Job, str]]]:
    """Split Submitted DAG nodes into (ready to wait for a match, [(node, abort reason)]).

    ``by_key`` maps sibling keys to their current records.
    """
    ready, doomed = [], []
    for node in blocked:
        parents = [by_key[k] for k in node.depends_on if k in by_key]
        failed = [p for p in parents if p.ended and not _succeeded(p)]
        if failed:
            names = ", ".join(f"{p.node_name} ({_outcome(p)})" for p in failed)
            doomed.append((node, f"DAG dependency did not succeed: {names}"))
        elif all(_succeeded(p) for p in parents):
            ready.append(node)
    return ready, doomed


def _succeeded(job: Job) -> bool:
    """Done with exit code 0: what a DAG dependency needs (as Condor DAGMan, which gLite uses)."""
    return job.state in (JobState.DONE, JobState.CLEARED) and job.exit_code in (0, None)


def _outcome(job: Job) -> str:
    if job.state is JobState.DONE and job.exit_code not in (0, None):
        return f"Done, exit code {job.exit_code}"
    return job.state.value


def parent_target(nodes: list[Job]) -> tuple[JobState | None, str | None]:
    """The state the parent of ``nodes`` should be in, and a reason; (None, None) = Waiting."""
    if not nodes:
        return JobState.ABORTED, "the request expanded to no job"
    if all(n.state in ENDED for n in nodes):
        bad = [n for n in nodes if n.state not in (JobState.DONE, JobState.CLEARED)]
        if not bad:
            return JobState.DONE, None
        if all(n.state is JobState.CANCELLED for n in bad):
            return JobState.CANCELLED, f"{len(bad)} of {len(nodes)} nodes cancelled"
        names = ", ".join(f"{n.node_name} ({n.state.value})" for n in bad[:10])
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        return JobState.ABORTED, f"{len(bad)} of {len(nodes)} nodes did not end Done: {names}{more}"
    if any(n.state in _STARTED for n in nodes):
        return JobState.RUNNING, None
    return None, None


def path_to(current: JobState, target: JobState) -> list[JobState]:
    """Legal steps from ``current`` to ``target`` for a parent (Waiting -> Running -> Done)."""
    if current == target:
        return []
    if current == JobState.WAITING and target == JobState.DONE:
        return [JobState.RUNNING, JobState.DONE]
    return [target]
