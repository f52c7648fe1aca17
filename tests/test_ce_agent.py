"""The CE agent with two real node agents and a loopback receiver in the broker's place."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import requests
from hypothesis import given, strategies as st

from infosys.ldif import parse_ldif
from vwn_agents.ce_agent import CEAgentConfig, create_app
from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.config import ConfigError
from vwn_agents.node_agent import NodeAgentConfig, create_app as create_node_app
from vwn_agents.placement import NodeLoad, fewest_vwns
from vwn_agents.testing import Receiver
from vgrid_runtime.wsgi import BackgroundServer

from .paths import SHARED_JDL as DATA  # noqa: E402
REPO_JDL = Path(__file__).resolve().parent.parent / "examples" / "jdl"
_keys = itertools.count(1)

HOSTNAME_JDL = """Executable = "/bin/hostname";
StdOutput  = "std.out";
StdError   = "std.err";
OutputSandbox = {"std.out","std.err"};
Requirements =  other.GlueCEStateStatus == "Production"  ;
rank = - other.GlueCEStateEstimatedResponseTime;
"""


def sleep_jdl(seconds: float) -> str:
    return f'[ Executable = "/bin/sleep"; Arguments = "{seconds}"; ]'


@pytest.fixture
def site(tmp_path):
    """site(n_nodes=2, extra_nodes=[], clock=None, **ce_config) -> (ce_url, CEAgent, [node agents]);
    ``clock`` (e.g. a SimulatedClock) is given to the CE agent and its node agents."""
    servers = []

    def start(n_nodes: int = 2, extra_nodes: list[str] = (), clock=None, **ce_overrides):
        agents, urls = [], list(extra_nodes)
        for i in range(n_nodes):
            app = create_node_app(NodeAgentConfig.from_dict(
                {"node": f"cewn{next(_keys)}", "capacity": 1.0, "retry_initial_s": 0.05,
                 "work_dir": str(tmp_path / f"wn{i}")}), clock)
            servers.append(BackgroundServer(app))
            agents.append(app.config["VGRID_AGENT"])
            urls.append(servers[-1].url)
        cfg = {"ce_id": "ce1.vgrid.local:8443/vgrid-vwn-long", "host": "ce1.vgrid.local",
               "site": "VGRID-TEST", "queue": "long", "nodes": urls, "si00": 1500,
               "ram_mb": 2048, "max_wallclock_s": 7200, "vos": ["dteam"], "retry_s": 0.2,
               "retry_initial_s": 0.05, **ce_overrides}
        app = create_app(CEAgentConfig.from_dict(cfg), clock)
        servers.append(BackgroundServer(app))
        return servers[-1].url, app.config["VGRID_AGENT"], agents

    yield start
    for server in servers:          # node agents first: their last events reach the CE agent
        server.close()


def submit(ce_url: str, receiver: Receiver, jdl: str, filename: str = "job.jdl",
           key: str | None = None) -> tuple[str, requests.Response]:
    key = key or f"k{next(_keys)}"
    body = {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "jdl": jdl, "filename": filename,
            "callback_url": f"{receiver.url}/jobs/{key}/events",
            "output_upload_url": f"{receiver.url}/jobs/{key}/output", "input_sandbox": []}
    return key, requests.post(f"{ce_url}/jobs", json=body, timeout=10)


def glue_attrs(ce_url: str) -> dict:
    text = requests.get(f"{ce_url}/glue", timeout=5).text
    ce = [e for e in parse_ldif(text, "glue") if e.dn.startswith("GlueCEUniqueID=")][0]
    return {k: v for k, v in ce.attrs.items()}


def test_real_jdl_runs_to_done_and_output_comes_back(site, receiver):
    ce_url, _, _ = site()
    key, resp = submit(ce_url, receiver, (DATA / "01_hostname_nobrackets.jdl").read_text(),
                       "01_hostname_nobrackets.jdl")
    assert resp.status_code == 202 and resp.json()["state"] == "Scheduled"
    done = receiver.wait_event(key, "done")
    assert done["exit_code"] == 0 and done["ce"] == "ce1.vgrid.local:8443/vgrid-vwn-long"
    assert done["vwn"].startswith("vwn-cewn") and done["node"]
    assert [e["event"] for e in receiver.events_for(key)] == ["running", "done"]
    assert receiver.outputs[(key, "std.out")].strip()            # the host name
    record = requests.get(f"{ce_url}/jobs/{key}", timeout=5).json()
    assert record["state"] == "Done" and record["exit_code"] == 0


@pytest.mark.parametrize("scheduler, free_cpus", [("fair-share", "0"), ("leases", "5")])
def test_placement_on_fewest_vwns_and_glue_counts(site, receiver, scheduler, free_cpus):
    # leases: the engine's mapper also takes the node with the most free VWN slots; FreeCPUs
    # counts free VWN slots (2 nodes x K=4 - 3 running)
    ce_url, ce, nodes = site(n_nodes=2, scheduler=scheduler)
    keys = [submit(ce_url, receiver, sleep_jdl(30))[0] for _ in range(3)]
    for k in keys:
        receiver.wait_event(k, "running")
    per_node = sorted(len(n.active()) for n in nodes)
    assert per_node == [1, 2]
    busy = max(nodes, key=lambda n: len(n.active()))
    assert [v.cpu_caps[-1][1] for v in busy.active()] == [0.5, 0.5]   # C/(N+1) on that node
    glue = glue_attrs(ce_url)
    assert glue["GlueCEInfoTotalCPUs"] == ["2"] and glue["GlueCEStateRunningJobs"] == ["3"]
    assert glue["GlueCEStateWaitingJobs"] == ["0"] and glue["GlueCEStateTotalJobs"] == ["3"]
    assert glue["GlueCEStateFreeCPUs"] == [free_cpus]
    assert glue["GlueCEInfoLRMSType"] == ["vgrid-vwn"]
    assert glue["GlueCEInfoContactString"] == [ce.url]
    assert glue["GlueCEAccessControlBaseRule"] == ["VO:dteam"]
    assert glue["GlueCEPolicyMaxWallClockTime"] == ["120"]
    caps = receiver.wait_for(lambda r: [e for k in keys for e in r.events_for(k, "caps")])
    assert caps[0]["cpu_caps"][-1][1] == 0.5


def test_submit_is_idempotent_on_key(site, receiver):
    ce_url, ce, nodes = site(n_nodes=1)
    key, first = submit(ce_url, receiver, sleep_jdl(5))
    _, again = submit(ce_url, receiver, sleep_jdl(5), key=key)
    assert first.status_code == again.status_code == 202
    receiver.wait_event(key, "running")
    assert len(requests.get(f"{ce_url}/jobs", timeout=5).json()) == 1
    assert len(nodes[0].vwns) == 1


def test_jdl_syntax_error_is_rejected_with_its_position(site, receiver):
    ce_url, _, _ = site(n_nodes=1)
    key, resp = submit(ce_url, receiver, 'Executable = "/bin/true"\nArguments = ;\n', "bad.jdl")
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["file"] == "bad.jdl" and err["line"] >= 1 and err["column"] >= 1
    assert err["message"].startswith("bad.jdl:")
    assert requests.get(f"{ce_url}/jobs/{key}", timeout=5).status_code == 404


def test_jdl_validation_error_lists_the_problems(site, receiver):
    ce_url, _, _ = site(n_nodes=0)
    key, resp = submit(ce_url, receiver, "[\n  Executable = 5;\n]", "typed.jdl")
    assert resp.status_code == 400
    err = resp.json()["error"]
    # the wording is the jdl package's; what the CE agent adds is the position and the list
    assert err["message"].startswith("typed.jdl:2:16: Executable must be a string")
    assert (err["file"], err["line"], err["column"]) == ("typed.jdl", 2, 16)
    assert [(p["line"], p["column"]) for p in err["problems"]] == [(2, 16)]
    assert err["message"] == f"typed.jdl:2:16: {err['problems'][0]['message']}"
    assert requests.get(f"{ce_url}/jobs/{key}", timeout=5).status_code == 404


def test_missing_executable_is_forwarded_as_aborted(site, receiver):
    ce_url, _, _ = site(n_nodes=1)
    key, _ = submit(ce_url, receiver, '[ Executable = "/nonexistent/foo"; ]')
    aborted = receiver.wait_event(key, "aborted")
    assert aborted["reason"] == "Executable /nonexistent/foo not found" and aborted["outcome"] == "wrapper-error"
    assert requests.get(f"{ce_url}/jobs/{key}", timeout=5).json()["state"] == "Aborted"


def test_cancel_kills_the_vwn(site, receiver):
    ce_url, _, nodes = site(n_nodes=1)
    key, _ = submit(ce_url, receiver, sleep_jdl(300))
    running = receiver.wait_event(key, "running")
    resp = requests.post(f"{ce_url}/jobs/{key}/cancel", timeout=15)
    assert resp.status_code == 200 and resp.json()["state"] == "Cancelled"
    assert nodes[0].vwns[running["vwn"]].state == "cancelled"
    assert nodes[0].active() == []
    again = requests.post(f"{ce_url}/jobs/{key}/cancel", timeout=5)
    assert again.status_code == 409 and again.json()["error"]["state"] == "Cancelled"


def test_unreachable_node_is_skipped_and_unplaced_jobs_wait(site, receiver):
    # fair-share placement tries the next node; the lease engine has no node-down state (below)
    ce_url, _, nodes = site(n_nodes=1, extra_nodes=["http://127.0.0.1:9"], scheduler="fair-share")
    key, _ = submit(ce_url, receiver, sleep_jdl(0.1))
    receiver.wait_event(key, "done")
    ce_url2, _, _ = site(n_nodes=0, extra_nodes=["http://127.0.0.1:9"], scheduler="fair-share")
    key2, _ = submit(ce_url2, receiver, sleep_jdl(0.1))

    def tried(_):
        record = requests.get(f"{ce_url2}/jobs/{key2}", timeout=5).json()
        return record if record["reason"] else None

    record = receiver.wait_for(tried, timeout_s=30)
    assert record["state"] == "Scheduled" and record["reason"].startswith("not placed yet")
    assert record["outcome"] == "not-placed"
    assert glue_attrs(ce_url2)["GlueCEStateWaitingJobs"] == ["1"]


def test_lease_on_an_unreachable_node_waits_with_a_reason(site, receiver):
    # a clock that stands still: the node is never failing for node_down_after_s (30 s), however
    # slowly this test runs, so the lease stays on it and says why it waits
    ce_url, _, _ = site(n_nodes=0, extra_nodes=["http://127.0.0.1:9"], clock=SimulatedClock(1000.0))
    key, _ = submit(ce_url, receiver, sleep_jdl(0.1))

    def tried(_):
        record = requests.get(f"{ce_url}/jobs/{key}", timeout=5).json()
        return record if record["reason"] else None

    record = receiver.wait_for(tried, timeout_s=30)
    assert record["state"] == "Scheduled"
    assert record["reason"].startswith("not started yet: node agent http://127.0.0.1:9 did not take the VWN")
    assert record["outcome"] == "not-started"
    assert record["lease"]["nodes"] == ["http://127.0.0.1:9"] and record["lease"]["vwns"] == []
    assert glue_attrs(ce_url)["GlueCEStateWaitingJobs"] == ["1"]
    assert receiver.events_for(key) == []


def test_http_errors_are_json(site):
    ce_url, _, _ = site(n_nodes=0)
    for method, path, body in [("post", "/jobs", {"key": "x"}), ("get", "/jobs/none", None),
                               ("post", "/node-events", {"key": "x", "event": "bogus"}),
                               ("post", "/jobs/none/cancel", None), ("get", "/nowhere", None)]:
        resp = getattr(requests, method)(f"{ce_url}{path}", json=body, timeout=5)
        assert resp.status_code in (400, 404) and "message" in resp.json()["error"], path
        assert "Traceback" not in resp.text


@given(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=8))
def test_fewest_vwns_orders_by_load_then_configuration(loads):
    nodes = [NodeLoad(f"http://n{i}", i, n) for i, n in enumerate(loads)]
    order = fewest_vwns(nodes)
    assert sorted(order, key=lambda n: n.index) == nodes
    assert [(n.vwns, n.index) for n in order] == sorted((n.vwns, n.index) for n in nodes)
    assert order[0].vwns == min(loads)


@pytest.mark.parametrize("change, message", [
    ({"nodes": "http://a"}, "field 'nodes': expected a list"),
    ({"si00": 1.5}, "field 'si00': expected int"),
    ({"placement": "random"}, "field 'placement': unknown policy 'random'"),
    ({"colour": "red"}, "unknown field 'colour'"),
    ({"status": "Open"}, "field 'status'"),
])
def test_config_errors_name_the_field(change, message):
    base = {"ce_id": "c:1/vgrid-vwn-q", "host": "c", "site": "s", "queue": "q", "nodes": []}
    with pytest.raises(ConfigError, match=message):
        CEAgentConfig.from_dict({**base, **change})
    with pytest.raises(ConfigError, match="missing required field 'ce_id'"):
        CEAgentConfig.from_dict({k: v for k, v in base.items() if k != "ce_id"})


def test_config_from_toml(tmp_path):
    f = tmp_path / "ce.toml"
    f.write_text('ce_id = "ce1.vgrid.local:8443/vgrid-vwn-long"\nhost = "ce1.vgrid.local"\n'
                 'site = "S"\nqueue = "long"\nnodes = ["http://127.0.0.1:1"]\nsi00 = 2000\n'
                 'vos = ["dteam", "vgrid"]\nport = 0\n')
    cfg = CEAgentConfig.from_toml(f)
    assert cfg.si00 == 2000 and cfg.vos == ["dteam", "vgrid"] and cfg.lrms_type == "vgrid-vwn"


def test_glue2_endpoint_publishes_the_same_ce_in_glue2_units(site):
    from infosys.glue2 import glue2_ce_ads
    ce_url, _, _ = site()
    entries = parse_ldif(requests.get(f"{ce_url}/glue2", timeout=5).text, "glue2")
    ads, rejected = glue2_ce_ads(entries)
    assert not rejected and len(ads) == 1
    ad = ads[0]
    assert ad["GlueCEUniqueID"] == "ce1.vgrid.local:8443/vgrid-vwn-long"
    # GLUE 2.0 publishes seconds; mapped back to GLUE 1.3 names it is minutes again
    g13 = glue_attrs(ce_url)
    assert int(g13["GlueCEPolicyMaxWallClockTime"][0]) == ad["GlueCEPolicyMaxWallClockTime"]
