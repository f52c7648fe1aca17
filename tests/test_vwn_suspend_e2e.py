"""A VWN suspended and resumed under a running grid job: the CE agent forwards the node agent's
``suspended`` / ``resumed`` events and the broker records them as notes in the job's history
(Running -> Running "suspended: ..." -> Running "resumed: ..." -> Done; no new job state).

Real processes on loopback: broker, CE agent and node agents (``vgrid_cli.demo.start_site``).
"""
import pytest

from broker.client import BrokerClient
from vgrid_cli.demo import start_site
from vgrid_cli.services import ServiceGroup
from vwn_agents.node_client import NodeAgentClient, NodeAgentError

from .waiting import gated_jdl, release, wait_until

pytestmark = pytest.mark.slow


def test_the_broker_history_shows_the_suspension_of_a_running_job(tmp_path):
    (tmp_path / "svc").mkdir()
    with ServiceGroup(tmp_path / "svc") as group:
        url = start_site(group, n_ces=1, ism_refresh_s=2.0, state_dir=tmp_path, match_expiry_s=3.0)
        client = BrokerClient(url)
        jdl, gate = gated_jdl(tmp_path, "e2e-suspend")
        key = client.submit_text(jdl, "suspend.jdl")["key"]
        job = wait_until(lambda: (j := client.job(key))["state"] == "Running" and j, "the job to run", 90)

        def node_of(vwn: str) -> NodeAgentClient:
            for svc in group.services:
                if svc.kind == "node":
                    try:
                        NodeAgentClient(svc.url).vwn(vwn)
                        return NodeAgentClient(svc.url)
                    except NodeAgentError:
                        continue
            raise AssertionError(f"no node agent has {vwn}")

        node = node_of(job["vwn"])
        if node.status()["freezer"]["version"] == "none":
            release(gate)
            pytest.skip(f"no cgroup freezer: {node.status()['freezer']['reason']}")
        assert node.suspend_vwn(job["vwn"])["state"] == "suspended"
        wait_until(lambda: any("suspended" in (h["reason"] or "") for h in client.job(key)["history"]),
                   "the broker to record the suspension")
        assert node.resume_vwn(job["vwn"])["state"] == "running"
        wait_until(lambda: any("resumed" in (h["reason"] or "") for h in client.job(key)["history"]),
                   "the broker to record the resumption")
        release(gate)
        done = wait_until(lambda: (j := client.job(key))["state"] == "Done" and j, "the job to end", 90)
        hist = done["history"]
        assert [h["state"] for h in hist] == ["Submitted", "Waiting", "Ready", "Scheduled", "Running",
                                             "Running", "Running", "Done"]
        assert hist[5]["reason"].startswith("suspended: VWN " + job["vwn"])
        assert hist[6]["reason"].startswith("resumed: VWN " + job["vwn"])
        assert hist[4]["time"] <= hist[5]["time"] <= hist[6]["time"] <= hist[7]["time"]
        assert done["exit_code"] == 0
