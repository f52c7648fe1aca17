"""A node agent that never comes back (issue 11), over real processes on loopback.

Broker, 2 CE agents and 4 node agents as `vgrid serve` processes with 1 s heartbeats. A job with
``RetryCount = 1`` runs on a node agent that is then killed with SIGKILL. Its CE agent hears
nothing from it for ``node_lost_s`` (3 heartbeats), ends the job Aborted ``node-lost``, and the
broker resubmits it (deep) to the *other* CE, where it runs to Done. The VWN the dead node agent
left running is killed once that node agent does come back: its heartbeat lists the VWN, the CE
answers ``unknown``. So the payload never finishes twice.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import requests

from broker.client import BrokerClient
from vgrid_cli.demo import start_site
from vgrid_cli.personal import PortPicker
from vgrid_cli.services import ServiceGroup

from .waiting import gated_jdl, release, wait_until

pytestmark = pytest.mark.slow
HEARTBEAT_S = 1.0
NODE_LOST_S = 3 * HEARTBEAT_S          # the CE's default: 3 x the node's interval


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_node_that_never_returns_costs_a_deep_resubmission_not_a_job(tmp_path):
    # a cgroup parent of its own: no other node agent named like these sweeps the dead agent's cgroups
    opts = {"node": {"heartbeat_s": HEARTBEAT_S, "cgroup_parent": "vgrid-node-lost-test"},
            "ce": {"heartbeat_s": HEARTBEAT_S},
            "broker": {"stalled_resubmit_s": 60.0}}
    with ServiceGroup(tmp_path) as group:
        ports = PortPicker()          # fixed ports: a restarted node agent keeps its URL
        try:
            url = start_site(group, n_ces=2, ism_refresh_s=1.0, state_dir=tmp_path, match_expiry_s=60.0,
                             port=ports, options=opts)
        finally:
            ports.release()
        client = BrokerClient(url)
        jdl, gate = gated_jdl(tmp_path, "lost", "RetryCount = 1; ShallowRetryCount = 0;")
        key = client.submit_text(jdl, "lost.jdl")["key"]
        first = wait_until(lambda: (lambda j: j if j["state"] == "Running" else None)(client.job(key)),
                           "the job to run", timeout_s=60)
        node = next(s for s in group.services if s.kind == "node" and s.name == first["node"])
        old_vwn = first["vwn"]

        # kill -9 of the node agent only: its VWN (own session) goes on running, unheard of
        for pid in node.pids():
            os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        wait_until(lambda: not any(_alive(p) for p in node.pids()), "the node agent to die")

        second = wait_until(lambda: (lambda j: j if j["attempt"] == 1 and j["state"] == "Running" else None)(
            client.job(key)), "the resubmitted attempt to run elsewhere", timeout_s=90)
        lost = [h for h in second["history"] if h["state"] == "Waiting" and "node-lost" in (h["reason"] or "")]
        assert lost, second["history"]
        assert "deep resubmission 1/1 as attempt 1" in lost[0]["reason"]
        assert node.url in lost[0]["reason"]              # the CE names the silent node
        assert second["ce"] != first["ce"] and first["ce"] in second["failed_ces"]
        # resubmitted after node_lost_s of silence, not much later (3 heartbeats + the CE's
        # probe, the event's way to the broker and the matcher's pass; generous on a loaded box)
        resubmitted_after = time.monotonic() - killed_at
        assert resubmitted_after < NODE_LOST_S + 30, resubmitted_after

        # the node agent comes back: it adopts its VWN, heartbeats, is told the CE no longer
        # knows it, and kills it -- before the gate opens, so the first attempt never finishes
        restarted = _restart(node, tmp_path)

        def old_vwn_state():
            try:
                vwns = requests.get(f"{node.url}/vwns", timeout=5).json()
            except requests.RequestException:
                return None
            state = next((v["state"] for v in vwns if v["vwn"] == old_vwn), None)
            return state if state in ("cancelled", "done", "aborted") else None

        assert wait_until(old_vwn_state, "the dead node's VWN to be killed on its return",
                          timeout_s=60) == "cancelled"
        release(gate)
        done = wait_until(lambda: (lambda j: j if j["state"] in ("Done", "Aborted", "Cancelled") else None)(
            client.job(key)), "the job to end", timeout_s=60)
        assert done["state"] == "Done" and done["exit_code"] == 0, done
        assert done["attempt"] == 1 and done["deep_resubmissions"] == 1 and done["ce"] == second["ce"]
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(timeout=30)


def _restart(node, cwd) -> subprocess.Popen:
    """Start the node agent again with the command line the group used (what an operator does)."""
    with node.log.open("ab") as out:
        return subprocess.Popen(list(node.cmd), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=cwd)
