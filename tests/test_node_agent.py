"""The node agent over real loopback HTTP, with real cgroups where the kernel offers them."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import requests
from hypothesis import given, settings, strategies as st

from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.config import ConfigError
from vwn_agents.node_agent import NodeAgentConfig, create_app
from vwn_agents.outbox import Outbox
from vwn_agents.proctree import is_running
from vwn_agents.testing import Receiver
from vgrid_runtime.wsgi import BackgroundServer

from .node_site import node_starter
from .waiting import gate_file, gate_script, release, wait_until
from .paths import JOB_PYTHON

_names = itertools.count(1)


@pytest.fixture
def start_node(tmp_path):
    """start_node(**config) -> (url, NodeAgent); every node is shut down after the test."""
    with node_starter("tn", lambda n: {"work_dir": str(tmp_path / "work"), "keep_workdirs": True,
                                       "retry_initial_s": 0.05}) as start:
        yield start


def submit(node_url: str, receiver: Receiver, key: str, executable: str, arguments: str = "",
           **extra) -> dict:
    body = {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "executable": executable,
            "arguments": arguments, "callback_url": f"{receiver.url}/events",
            "output_upload_url": f"{receiver.url}/jobs/{key}/output", **extra}
    resp = requests.post(f"{node_url}/vwns", json=body, timeout=10)
    assert resp.status_code in (200, 201), resp.text
    return resp.json()


def require_caps(agent):
    if not agent.cg.capped:
        pytest.skip(f"this kernel offers no writable CPU cgroup: {agent.cg.reason}")


def cap_file_value(agent, vwn: str) -> float:
    """The cap as written in the kernel's files, independent of the driver's own reader."""
    path = agent.cg.path(vwn)
    if agent.cg.version == "v1":
        return int((path / "cpu.cfs_quota_us").read_text()) / int(
            (path / "cpu.cfs_period_us").read_text())
    quota, period = (path / "cpu.max").read_text().split()
    return int(quota) / int(period)


def test_caps_readjusted_on_arrival_and_departure(start_node, receiver, tmp_path):
    """Seed 004, 5.1: first VWN gets C, a second one C/2 (the first readjusted), back on departure."""
    url, agent = start_node(capacity=1.0)
    require_caps(agent)
    a = submit(url, receiver, "cap-a", "/bin/sleep", "30")
    assert (a["cpu_cap"], a["capped"], a["cap_reason"]) == (1.0, True, None)
    assert cap_file_value(agent, a["vwn"]) == 1.0
    gate_b = gate_file(tmp_path, "cap-b")                      # b runs until released, not for a time
    b = submit(url, receiver, "cap-b", str(gate_script(tmp_path)), str(gate_b))
    assert b["cpu_cap"] == 0.5
    assert cap_file_value(agent, a["vwn"]) == 0.5
    assert cap_file_value(agent, b["vwn"]) == 0.5
    caps_a = receiver.wait_event("cap-a", "caps")
    assert [c[1] for c in caps_a["cpu_caps"]] == [1.0, 0.5]
    release(gate_b)
    receiver.wait_event("cap-b", "done")
    assert not agent.cg.path(b["vwn"]).exists()               # cgroup removed on VWN end
    receiver.wait_for(lambda r: len(r.events_for("cap-a", "caps")) == 2)   # sent after b's "done"
    assert cap_file_value(agent, a["vwn"]) == 1.0             # readjusted (increased) again
    receiver.wait_event("cap-a", "running")                   # a's stage-in may take longer than b's life
    record = requests.get(f"{url}/vwns/{a['vwn']}", timeout=5).json()
    assert [c[1] for c in record["cpu_caps"]] == [1.0, 0.5, 1.0]
    assert record["state"] == "running" and record["capped"] is True


def test_cpu_bound_job_is_throttled(start_node, receiver):
    """What the cgroup guarantees, not that a job on a loaded machine got its whole cap: the
    cap the VWN was given, and at most that much CPU per second of wall time."""
    url, agent = start_node(capacity=0.25, disk_quota_mb=0)     # "out" is read after the end
    require_caps(agent)
    burn = ("import time; t, c = time.monotonic(), time.process_time()\n"
            "while time.process_time() - c < 0.25: pass\n"
            "print(time.monotonic() - t, time.process_time() - c)")
    v = submit(url, receiver, "burn", JOB_PYTHON,
               f"-c '{burn}'", std_output="out")
    assert (v["cpu_cap"], v["capped"]) == (0.25, True)
    done = receiver.wait_event("burn", "done", timeout_s=60)
    assert done["exit_code"] == 0 and [c for _, c in done["cpu_caps"]] == [0.25]
    wall, cpu = map(float, (agent.job_dir(v["vwn"]) / "out").read_text().split())
    assert wall >= 0.85 * cpu / 0.25, f"{cpu:.2f} s CPU in {wall:.2f} s wall: not capped at 0.25"
    record = requests.get(f"{url}/vwns/{v['vwn']}", timeout=5).json()
    if record["cpu_time_s"] is not None:                       # cpuacct usage of the whole VWN
        assert record["cpu_time_s"] >= 0.25


def test_missing_executable_is_aborted_with_the_wrappers_error(start_node, receiver):
    url, _ = start_node()
    submit(url, receiver, "nx", "/nonexistent/foo")
    aborted = receiver.wait_event("nx", "aborted")
    assert aborted["reason"] == "Executable /nonexistent/foo not found" and aborted["outcome"] == "wrapper-error"
    assert aborted["exit_code"] is None
    assert receiver.events_for("nx", "running") == []


def test_events_and_output_sandbox(start_node, receiver):
    url, _ = start_node()
    v = submit(url, receiver, "out1", "/bin/sh", "-c 'echo hello $WHO; echo warn >&2'",
               environment=["WHO=grid"], std_output="std.out", std_error="std.err",
               output_sandbox=["std.out", "std.err"])
    done = receiver.wait_event("out1", "done")
    kinds = [e["event"] for e in receiver.events_for("out1")]
    assert kinds == ["running", "done"]
    assert done["exit_code"] == 0 and done["vwn"] == v["vwn"] and done["node"]
    assert receiver.outputs[("out1", "std.out")] == b"hello grid\n"
    assert receiver.outputs[("out1", "std.err")] == b"warn\n"


@pytest.mark.parametrize("cgroup", ["auto", "none"])
def test_cancel_kills_the_whole_process_tree(start_node, receiver, cgroup):
    """With a cgroup its task list is used; without one (cgroup = "none") the /proc tree."""
    url, agent = start_node(cgroup=cgroup)
    script = "setsid sleep 300 & echo $! > pids; sleep 300 & echo $! >> pids; wait"
    key = f"cancel-{cgroup}"
    v = submit(url, receiver, key, "/bin/sh", f"-c '{script}'")
    receiver.wait_event(key, "running")
    pids_file = agent.job_dir(v["vwn"]) / "pids"
    wait_until(lambda: pids_file.exists() and len(pids_file.read_text().split()) >= 2,
               "the job to write both children's pids", interval_s=0.02)
    pids = [int(p) for p in pids_file.read_text().split()]
    assert all(is_running(p) for p in pids)
    resp = requests.delete(f"{url}/vwns/{v['vwn']}", timeout=15)
    assert resp.status_code == 200 and resp.json()["state"] == "cancelled"
    assert not [p for p in pids if is_running(p)]
    if agent.cg.capped:
        assert not agent.cg.path(v["vwn"]).exists()
    assert receiver.events_for(key, "done") == []


def test_uncapped_node_says_so(start_node, receiver):
    url, _ = start_node(cgroup="none")
    v = submit(url, receiver, "unc1", "/bin/true")
    assert v["capped"] is False and "disabled by configuration" in v["cap_reason"]
    status = requests.get(f"{url}/status", timeout=5).json()
    assert status["cgroup"]["writable"] is False and status["cgroup"]["reason"]
    done = receiver.wait_event("unc1", "done")
    assert done["capped"] is False and "disabled by configuration" in done["cap_reason"]


def test_post_is_idempotent_on_key(start_node, receiver):
    url, _ = start_node()
    first = submit(url, receiver, "idem1", "/bin/sleep", "5")
    again = requests.post(f"{url}/vwns", json={"job_id": "j", "key": "idem1",
                                               "executable": "/bin/true"}, timeout=5)
    assert again.status_code == 200 and again.json()["vwn"] == first["vwn"]
    assert len(requests.get(f"{url}/vwns", timeout=5).json()) == 1


@pytest.mark.parametrize("body, field", [
    ({"key": "k", "executable": "/bin/true"}, "missing required field 'job_id'"),
    ({"job_id": "j", "key": "k", "executable": "/bin/true", "colour": 1}, "unknown field 'colour'"),
    ({"job_id": "j", "key": "k", "executable": 5}, "field 'executable': expected str"),
    ({"job_id": "j", "key": "k", "executable": "x", "input_sandbox": [{"name": "a"}]},
     "field 'input_sandbox[0]'"),
])
def test_bad_requests_are_json_errors(start_node, body, field):
    url, _ = start_node()
    resp = requests.post(f"{url}/vwns", json=body, timeout=5)
    assert resp.status_code == 400 and field in resp.json()["error"]["message"]
    resp = requests.post(f"{url}/vwns", data="not json", timeout=5)
    assert resp.status_code == 400 and "error" in resp.json()
    resp = requests.get(f"{url}/vwns/vwn-nope-1", timeout=5)
    assert resp.status_code == 404 and resp.json()["error"]["vwn"] == "vwn-nope-1"


def test_cap_history_uses_the_clock_passed_in(start_node, receiver):
    clock = SimulatedClock(1000.0)
    url, _ = start_node(clock=clock)
    a = submit(url, receiver, "clk-a", "/bin/sleep", "30")
    clock.advance(50)
    submit(url, receiver, "clk-b", "/bin/sleep", "30")
    record = requests.get(f"{url}/vwns/{a['vwn']}", timeout=5).json()
    assert record["cpu_caps"] == [[1000.0, 1.0], [1050.0, 0.5]]


def test_shutdown_aborts_running_vwns_and_removes_cgroups(tmp_path, receiver):
    app = create_app(NodeAgentConfig.from_dict({"node": f"tn{next(_names)}",
                                                "work_dir": str(tmp_path)}))
    server = BackgroundServer(app)
    agent = app.config["VGRID_AGENT"]
    submit(server.url, receiver, "shut1", "/bin/sleep", "300")
    receiver.wait_event("shut1", "running")
    server.close()                               # calls the agent's shutdown
    aborted = receiver.wait_event("shut1", "aborted")
    assert aborted["reason"] == f"node agent {agent.config.node} shut down" and aborted["outcome"] == "node-shutdown"
    if agent.cg.capped:
        assert not agent.cg.node_dir.exists()


def test_outbox_retries_in_order(receiver):
    receiver.fail_events = 2
    box = Outbox(retry_initial_s=0.05)
    for i in range(3):
        box.post(f"{receiver.url}/events", {"key": "ob1", "event": "caps", "n": i}, "ob1")
    assert box.flush(10)
    assert [e["n"] for e in receiver.events_for("ob1")] == [0, 1, 2]
    assert box.delivered == 3 and box.dropped == {}
    box.post(f"{receiver.url}/nowhere", {"key": "ob2"}, "ob2")     # 404: refused, dropped
    assert box.flush(10) and box.dropped == {"refused": 1}
    assert box.drops[0]["error"].startswith("HTTP 404")
    box.close()


@pytest.mark.parametrize("d, message", [
    ({}, "missing required field 'node'"),
    ({"node": "n", "capacity": "lots"}, "field 'capacity': expected float"),
    ({"node": "n", "capacity": 0}, "field 'capacity': must be > 0"),
    ({"node": "n", "cgroups": "v1"}, "unknown field 'cgroups'"),
    ({"node": "n", "cgroup": "v3"}, "field 'cgroup': must be auto, v1, v2 or none"),
    ({"node": "n", "keep_workdirs": "yes"}, "field 'keep_workdirs': expected bool"),
])
def test_config_errors_name_the_field(d, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        NodeAgentConfig.from_dict(d)


def test_config_from_toml(tmp_path: Path):
    f = tmp_path / "node.toml"
    f.write_text('node = "wn1"\ncapacity = 0.5\nport = 0\n')
    cfg = NodeAgentConfig.from_toml(f)
    assert (cfg.node, cfg.capacity, cfg.cgroup) == ("wn1", 0.5, "auto")
    f.write_text('node = "wn1"\ncapacity = \n')
    with pytest.raises(ConfigError, match=str(f)):
        NodeAgentConfig.from_toml(f)


def test_restarted_agent_reuses_its_work_dir(receiver, tmp_path):
    """A directory left by the previous agent must not abort the job; VWN ids stay unique
    across restarts and the earlier VWNs are still known; two agents of one node and work
    directory at once are refused."""
    cfg = NodeAgentConfig.from_dict({"node": f"again{next(_names)}", "work_dir": str(tmp_path / "w")})
    first = BackgroundServer(create_app(cfg))
    one = submit(first.url, receiver, "again-1", "/bin/true")
    receiver.wait_event("again-1", "done")
    with pytest.raises(RuntimeError, match="another node agent"):
        create_app(cfg)
    first.close()
    second = BackgroundServer(create_app(cfg))
    try:
        v = submit(second.url, receiver, "again-2", "/bin/true")
        assert v["vwn"] != one["vwn"]
        assert receiver.wait_event("again-2", "done")["exit_code"] == 0
        old = requests.get(f"{second.url}/vwns/{one['vwn']}", timeout=5).json()
        assert (old["state"], old["exit_code"]) == ("done", 0)
        again = submit(second.url, receiver, "again-1", "/bin/true")      # same key: same VWN
        assert again["vwn"] == one["vwn"]
    finally:
        second.close()


_values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                    st.text(max_size=5), st.lists(st.text(max_size=3), max_size=2))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["node", "capacity", "port", "cgroup", "keep_workdirs",
                                        "work_dir", "retry_max_s", "bogus"]), _values))
def test_config_loader_accepts_or_names_the_field(d):
    """Any mapping gives a valid config or a ConfigError naming a field, never anything else."""
    try:
        cfg = NodeAgentConfig.from_dict(d)
    except ConfigError as exc:
        assert "field '" in str(exc)
        return
    assert isinstance(cfg.node, str) and cfg.node and cfg.capacity > 0
    assert isinstance(cfg.port, int) and not isinstance(cfg.port, bool)


@settings(max_examples=8, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=12),
       st.integers(min_value=0, max_value=3))
def test_outbox_keeps_order_per_job(receiver, keys, failures):
    """Whatever the interleaving of jobs and transient failures, each job's events arrive in order."""
    tag = f"ord{next(_names)}"
    receiver.fail_events = failures
    box = Outbox(retry_initial_s=0.01)
    for i, k in enumerate(keys):
        box.post(f"{receiver.url}/events", {"key": f"{tag}-{k}", "n": i}, f"{tag}-{k}")
    assert box.flush(20)
    box.close()
    for k in set(keys):
        got = [e["n"] for e in receiver.events_for(f"{tag}-{k}")]
        assert got == [i for i, kk in enumerate(keys) if kk == k]


def test_ended_vwns_are_dropped_keep_ended_s_after_their_end(receiver, tmp_path):
    clock = SimulatedClock(1000.0)
    cfg = NodeAgentConfig.from_dict({"node": f"prune{next(_names)}", "work_dir": str(tmp_path / "w"),
                                     "disk_quota_mb": 0, "keep_ended_s": 3600})
    server = BackgroundServer(create_app(cfg, clock=clock))
    old = submit(server.url, receiver, "prune-1", "/bin/true")
    receiver.wait_event("prune-1", "done")
    server.close()
    clock.advance(3599)
    server = BackgroundServer(create_app(cfg, clock=clock))
    assert requests.get(f"{server.url}/vwns/{old['vwn']}", timeout=5).status_code == 200
    server.close()
    clock.advance(2)
    server = BackgroundServer(create_app(cfg, clock=clock))
    try:
        assert requests.get(f"{server.url}/vwns/{old['vwn']}", timeout=5).status_code == 404
        assert submit(server.url, receiver, "prune-2", "/bin/true")["vwn"] != old["vwn"]
    finally:
        server.close()
