"""The lease engine in live time driving a real node agent over loopback HTTP."""
import itertools
import time

import pytest

from vgrid_runtime.clock import SimulatedClock
from vwn_agents.leasing import LeaseConfig
from vwn_agents.lease_engine import LeaseEngine
from vwn_agents.node_client import NodeAgentClient, NodeAgentError
from vwn_agents.node_agent import NodeAgentConfig, create_app
from vwn_agents.testing import Receiver
from vgrid_runtime.wsgi import BackgroundServer

from .paths import JOB_PYTHON

_names = itertools.count(1)


@pytest.fixture
def node(tmp_path):
    receiver = Receiver()
    app = create_app(NodeAgentConfig.from_dict({"node": f"le{next(_names)}", "work_dir": str(tmp_path / "w"),
                                                "retry_initial_s": 0.05, "cgroup": "none"}))
    server = BackgroundServer(app)
    yield server.url, receiver
    server.close()
    receiver.close()


def body(receiver, key, seconds):
    return {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "executable": JOB_PYTHON,
            "arguments": f"-c 'import time; time.sleep({seconds})'", "callback_url": f"{receiver.url}/events",
            "output_upload_url": f"{receiver.url}/jobs/{key}/output"}


def pump(engine, receiver, until, timeout=60.0):
    """Forward the node agent's events to the engine (as a CE agent does) until ``until()``."""
    seen = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = list(receiver.events)
        for ev in events[seen:]:
            engine.job_event(ev)
        seen = len(events)
        engine.tick()
        if until():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_jobs_queue_on_a_full_node_and_start_when_it_frees(node):
    url, receiver = node
    engine = LeaseEngine([(url, 1, 2048)], LeaseConfig({"backfilling": "aggressive"}))
    first = engine.submit_job("j1", body(receiver, "j1", 0.3), duration_s=60)
    second = engine.submit_job("j2", body(receiver, "j2", 0.1), duration_s=60)
    assert first["state"] == "Active" and first["vwns"]
    assert second["state"] in ("Queued", "Scheduled") and not second["vwns"]
    pump(engine, receiver, lambda: engine.status("j2")["state"] == "Done")
    s1, s2 = engine.status("j1"), engine.status("j2")
    assert s1["state"] == "Done" and s2["end_s"] > s2["start_s"] >= s1["end_s"]
    assert [e["event"] for e in receiver.events_for("j2")] == ["running", "done"]


def test_wall_clock_limit_deletes_the_vwn(node):
    url, receiver = node
    engine = LeaseEngine([(url, 1, 2048)])
    vwn = engine.submit_job("long", body(receiver, "long", 30), duration_s=0.5)["vwns"][0]
    pump(engine, receiver, lambda: engine.status("long")["state"] == "Done")
    record = NodeAgentClient(url).vwn(vwn)
    assert record["state"] != "running" and record.get("reason") == "cancelled"


def test_cancel_and_immediate_rejection(node):
    url, receiver = node
    engine = LeaseEngine([(url, 1, 2048)])
    vwn = engine.submit_job("a", body(receiver, "a", 30), duration_s=60)["vwns"][0]
    im = engine.submit_job("b", body(receiver, "b", 1), duration_s=60, immediate=True)
    assert im["state"] == "Rejected"
    assert engine.cancel("a")["state"] == "Cancelled"
    record = NodeAgentClient(url).vwn(vwn)
    assert record["state"] != "running" and record.get("reason") == "cancelled"


def test_lease_arguments_from_jdl():
    import jdl
    from vwn_agents.lease_engine import lease_args_from_jdl
    job = jdl.parse_jdl('[ Executable = "/bin/true"; LeaseType = "advance-reservation"; '
                        'LeaseStart = "2026-11-21T10:00:00Z"; LeaseDuration = 3600; VMMemory = 512; '
                        'CpuNumber = 2; PreemptionClass = "suspendable"; VMImage = "http://i/sl5.img"; '
                        'VMImageSize = 1024; ]', "ar.jdl")
    args = lease_args_from_jdl(job)
    assert args == {"vms": 2, "memory_mb": 512, "duration_s": 3600, "image_mb": 1024,
                    "image_id": "http://i/sl5.img", "start_s": 1795255200.0, "preemptible": True,
                    "request_type": "suspendable"}
    plain = jdl.parse_jdl('[ Executable = "/bin/true"; ]', "plain.jdl")
    assert lease_args_from_jdl(plain) == {}
    im = jdl.parse_jdl('[ Executable = "/bin/true"; LeaseType = "immediate"; LeaseDuration = 60; '
                       'PreemptionClass = "non-preemptable"; ]', "im.jdl")
    assert lease_args_from_jdl(im) == {"duration_s": 60, "immediate": True, "preemptible": False,
                                       "request_type": "non-preemptable"}
    local = jdl.parse_jdl('[ Executable = "/bin/true"; LeaseType = "advance-reservation"; LeaseDuration = 60; '
                          'LeaseStart = 1795255200; RequestOrigin = "local"; LeaseDeadline = 1795255800; ]',
                          "local.jdl")
    assert lease_args_from_jdl(local) == {"duration_s": 60, "start_s": 1795255200.0, "local": True,
                                          "deadline_s": 1795255800.0}
    with pytest.raises(jdl.JDLValidationError, match="local request"):
        jdl.parse_jdl('[ Executable = "/bin/true"; RequestOrigin = "local"; PreemptionClass = "cancellable"; ]',
                      "bad.jdl")


def test_advance_reservation_job_starts_at_its_time(node):
    url, receiver = node
    clock = SimulatedClock(time.time())       # LeaseStart cannot slip into the past on a slow machine
    engine = LeaseEngine([(url, 1, 2048)], clock=clock)
    start = engine.clock.now() + 1.0
    st = engine.submit_job("ar", body(receiver, "ar", 0.1), duration_s=30, start_s=start)
    assert st["state"] == "Scheduled" and not st["vwns"]
    engine.tick()
    assert engine.status("ar")["state"] == "Scheduled" and not engine.status("ar")["vwns"]   # not before
    clock.advance_to(start)
    pump(engine, receiver, lambda: engine.status("ar")["state"] == "Done")
    assert engine.status("ar")["start_s"] >= start


def test_unreachable_node_agent_is_retried_on_the_next_tick(node, tmp_path):
    url, receiver = node
    import socket
    with socket.socket() as s:  # a loopback port with nothing listening
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    engine = LeaseEngine([(dead, 1, 2048)])
    with pytest.raises(NodeAgentError):
        engine.submit_job("x", body(receiver, "x", 0.1), duration_s=30)
    assert engine.status("x")["state"] in ("Scheduled", "Active") and not engine.status("x")["vwns"]
    engine.enactment.node_urls[0] = url  # the node agent is back (same node, new address)
    engine.tick()
    assert engine.status("x")["vwns"]
    pump(engine, receiver, lambda: engine.status("x")["state"] == "Done")
