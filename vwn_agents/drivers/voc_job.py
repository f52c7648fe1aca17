"""A job in a running VOC VM (``VWNRequest.voc_node``; issue 15, seed 003 Section 3.3).

``run(agent, v)`` is ``vm_job.run`` for a VWN whose request names a VOC node of this node agent
(``node_voc``): the VM already runs (booted by the CE agent's watchdog), so instead of starting a
domain it

1. stages the input sandbox into the VWN's work directory (``stage_in_and_start``, as always);
2. hands the job to the VM over its job channel (``guest_serve.send_job``; sequence number
   recorded in ``<job dir>/voc-seq`` so a restarted agent watches the same job); the VWN's
   ``wrapper_pid`` is 0 (no host process of its own: the VM is the VOC's, never killed with the job);
3. watches the VM's channel for that job (``VGRID-JOB`` -> the ``running`` event, then its
   result) and the domain, every ``POLL_S``;
4. writes the returned output files and stages out (``vm_job``'s steps); the VM stays up and
   waits for its next job.

Failures, each with a typed outcome: the VOC node has no ready VM (``node-lost``: the CE's VOC
sent the job to a node that died meanwhile), the job did not arrive intact or is too large
(``wrapper-error``), the VM's domain is gone while the job runs (``node-lost``: killed or crashed;
the broker's resubmission rules apply). A cancelled job destroys the VM (a serving guest cannot
stop one job), which the CE agent's next VOC check then finds lost.
"""
from __future__ import annotations

import logging
import time

from vgrid_runtime.outcomes import Outcome

from ..vwn_process import stage_in_and_start, write_spec
from ..vwn_states import VWNState
from .guest_serve import ServeError

log = logging.getLogger(__name__)

POLL_S = 0.25


def _seq_file(agent, v):
    return agent.job_dir(v.vwn) / "voc-seq"


def _submit(agent, v) -> None:
    from .vm_job import _outputs
    voc, node_id = agent.voc, v.request.voc_node
    spec = write_spec(v)
    try:
        seq = voc.driver.submit(node_id, spec, v.jail.workdir, _outputs(v.request))
    except ValueError as exc:
        v.fail(Outcome.WRAPPER_ERROR, str(exc))
        return
    except ServeError as exc:
        v.fail(Outcome.NODE_LOST if not voc.ready(node_id) else Outcome.WRAPPER_ERROR,
               f"VOC node {node_id}: {exc}")
        return
    _seq_file(agent, v).write_text(str(seq))
    v.wrapper_pid, v.wrapper_start = 0, None     # handed over: no host process is the VWN's
    voc.count_job(node_id)
    agent._save(v)


def run(agent, v) -> None:
    """Module doc. Always returns (the caller's ``_finish`` ends and reports the VWN)."""
    from .vm_job import _write_outputs
    voc, node_id = agent.voc, v.request.voc_node
    if v.wrapper_pid is None:
        if not voc.ready(node_id):
            v.fail(Outcome.NODE_LOST, f"VOC node {node_id} has no running VM on node {agent.config.node}")
            return
        if not stage_in_and_start(agent, v, lambda v: _submit(agent, v)) or v.wrapper_pid is None:
            return
    try:
        seq = int(_seq_file(agent, v).read_text())
    except (OSError, ValueError):
        v.fail(Outcome.WRAPPER_ERROR, f"VOC node {node_id}: the job's sequence number is lost")
        return
    vwn = voc.vwn(node_id)
    while True:
        st = voc.driver.result(node_id, seq)
        if st.started and v.state is VWNState.STARTING:
            with agent._lock:
                v.to(VWNState.RUNNING)
                agent._emit(v, "running")
                agent._save(v)
        if st.bad:
            v.fail(Outcome.WRAPPER_ERROR, f"VOC node {node_id}: the job did not arrive intact in its VM")
            return
        if st.complete or v.cancelled or agent._stopping:
            break
        if agent.driver.vms.state(vwn) == "gone":
            st = voc.driver.result(node_id, seq)        # it may have ended just before
            if st.complete:
                break
            voc.list()                                  # the node is lost now (its record says why)
            v.fail(Outcome.NODE_LOST, f"VOC node {node_id}: its VM is gone (killed or crashed) while the job ran")
            return
        time.sleep(POLL_S)
    if v.cancelled:
        log.warning("%s cancelled in VOC node %s: its VM is destroyed", v.vwn, node_id)
        agent.driver.vms.destroy(vwn)
        return
    if not st.complete:
        v.fail(Outcome.NODE_SHUTDOWN, f"node agent {agent.config.node} shut down")
        return
    _write_outputs(agent, v, st.files or {})
    v.exit_code, v.outcome = st.exit_code, Outcome.EXIT
    agent._stage_out(v)
