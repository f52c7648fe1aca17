"""Live suspend and resume of a VWN on a real cgroup freezer (issue 13, "Live, on real VWNs").

A CPU-burning job that prints a counter every 0.2 s is frozen through POST /vwns/<vwn>/suspend:
its cgroup's CPU usage does not grow over a measured window and it prints nothing; after
/resume its counter goes on from where it stopped (no restart). The suspended VWN leaves its CPU
share to the others, survives a kill -9 + restart of the node agent still frozen, and DELETE
kills it. Skips only where the kernel offers no freezer (the reason is printed).
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from vwn_agents.node_client import NodeAgentClient, NodeAgentError
from vwn_agents.proctree import is_running

from .node_site import node_starter
from .paths import JOB_PYTHON
from .test_node_restart import kill_9, site, start  # noqa: F401  (site: a fixture)
from .waiting import gate_dir, gate_file, release, wait_until

BURN = """import os, sys, time
i, t = 0, time.monotonic()
while not os.path.exists(sys.argv[1]):
    while time.monotonic() - t < 0.2:
        pass
    t = time.monotonic()
    print(i, flush=True)
    i += 1
"""


@pytest.fixture
def start_node(tmp_path):
    with node_starter("sus", lambda n: {"work_dir": str(tmp_path / "work"), "keep_workdirs": True,
                                        "retry_initial_s": 0.05}) as start_:
        yield start_


def burner(tmp_path, name: str) -> tuple[str, Path]:
    """Arguments of a CPU-burning counter job (to ``executable`` JOB_PYTHON) and its gate."""
    script = gate_dir(tmp_path) / "burn.py"
    script.write_text(BURN)
    script.chmod(0o644)
    gate = gate_file(tmp_path, name)
    return f"{script} {gate}", gate


def submit(url: str, receiver, key: str, args: str, executable: str = JOB_PYTHON) -> dict:
    body = {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "executable": executable,
            "arguments": args, "std_output": "out.txt", "callback_url": f"{receiver.url}/events"}
    r = requests.post(f"{url}/vwns", json=body, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()


def counters(out: Path) -> list[int]:
    try:
        text = out.read_text()
    except OSError:
        return []
    return [int(x) for x in text.split("\n")[:-1]]     # complete lines only


def require_freezer(status: dict) -> None:
    if status["freezer"]["version"] == "none":
        pytest.skip(f"this kernel offers no cgroup freezer: {status['freezer']['reason']}")
    if not status["cgroup"]["writable"]:
        pytest.skip(f"no CPU cgroup to measure usage in: {status['cgroup']['reason']}")


def usage_flat(usage, window_s: float = 1.0) -> tuple[float, float]:
    """CPU usage (s) at the start and end of a window of at least ``window_s`` seconds, measured
    by waiting on the monotonic clock (a condition with a deadline, not a fixed sleep)."""
    u0, t0 = usage(), time.monotonic()
    wait_until(lambda: time.monotonic() - t0 >= window_s, "the measuring window", timeout_s=window_s + 30)
    return u0, usage()


def test_a_suspended_vwn_uses_no_cpu_and_continues_where_it_stopped(start_node, receiver, tmp_path):
    url, agent = start_node(capacity=1.0)
    status = requests.get(f"{url}/status", timeout=5).json()
    require_freezer(status)
    node = NodeAgentClient(url)
    args, gate = burner(tmp_path, "burn-1")
    a = submit(url, receiver, "burn-1", args)
    vwn = a["vwn"]
    out = agent.job_dir(vwn) / "out.txt"
    receiver.wait_event("burn-1", "running")
    wait_until(lambda: len(counters(out)) >= 3, "the counter to print")
    b = submit(url, receiver, "sleep-2", "30", executable="/bin/sleep")    # shares the CPU with it
    assert b["cpu_cap"] == 0.5 and agent.read_cap(vwn) == 0.5

    rec = node.suspend_vwn(vwn)
    assert rec["state"] == "suspended" and agent.fz.frozen(vwn)
    assert agent.read_cap(b["vwn"]) == 1.0                 # the suspended VWN's share went to b
    assert node.suspend_vwn(vwn)["state"] == "suspended"    # repeated: nothing changes
    ev = receiver.wait_event("burn-1", "suspended")
    assert ev["vwn"] == vwn
    printed = len(counters(out))
    u0, u1 = usage_flat(lambda: agent.cg.cpu_usage_s(vwn))
    assert u1 - u0 < 0.005, f"a frozen VWN used {u1 - u0:.4f} s of CPU"
    assert len(counters(out)) == printed, "a frozen job printed"
    assert node.vwn(vwn)["state"] == "suspended"

    rec = node.resume_vwn(vwn)
    assert rec["state"] == "running" and not agent.fz.frozen(vwn)
    assert agent.read_cap(vwn) == 0.5 and agent.read_cap(b["vwn"]) == 0.5
    receiver.wait_event("burn-1", "resumed")
    wait_until(lambda: len(counters(out)) >= printed + 3, "the counter to go on")
    seen = counters(out)
    assert seen == list(range(len(seen))), "the job restarted or lost its place"
    assert agent.cg.cpu_usage_s(vwn) > u1
    release(gate)
    done = receiver.wait_event("burn-1", "done")
    assert done["exit_code"] == 0
    seen = counters(out)
    assert seen == list(range(len(seen)))                 # it ran once, from 0, with no reset
    with pytest.raises(NodeAgentError) as err:            # an ended VWN cannot be suspended
        node.suspend_vwn(vwn)
    assert err.value.status == 409
    with pytest.raises(NodeAgentError) as err:
        node.resume_vwn(b["vwn"] + "x")
    assert err.value.status == 404
    kinds = [e["event"] for e in receiver.events_for("burn-1")]
    assert kinds.index("suspended") < kinds.index("resumed") < kinds.index("done")
    node.delete_vwn(b["vwn"])


def test_resume_of_a_running_vwn_changes_nothing(start_node, receiver, tmp_path):
    url, agent = start_node(capacity=1.0)
    require_freezer(requests.get(f"{url}/status", timeout=5).json())
    node = NodeAgentClient(url)
    args, gate = burner(tmp_path, "burn-r")
    a = submit(url, receiver, "burn-r", args)
    receiver.wait_event("burn-r", "running")
    assert node.resume_vwn(a["vwn"])["state"] == "running"    # already running: 200, unchanged
    assert "resumed" not in [e["event"] for e in receiver.events_for("burn-r")]
    release(gate)
    receiver.wait_event("burn-r", "done")


def test_delete_of_a_suspended_vwn_kills_it(start_node, receiver, tmp_path):
    url, agent = start_node(capacity=1.0)
    require_freezer(requests.get(f"{url}/status", timeout=5).json())
    node = NodeAgentClient(url)
    args, _gate = burner(tmp_path, "burn-d")
    a = submit(url, receiver, "burn-d", args)
    receiver.wait_event("burn-d", "running")
    pid = node.vwn(a["vwn"])["pid"]
    node.suspend_vwn(a["vwn"])
    path = agent.fz.path(a["vwn"])
    rec = node.delete_vwn(a["vwn"])
    assert rec["state"] == "cancelled" and rec["outcome"] == "cancelled"
    wait_until(lambda: not is_running(pid), "the frozen job to die")
    assert not path.exists() and not agent.cg.path(a["vwn"]).exists()


def test_a_suspended_vwn_stays_suspended_across_a_kill_9_of_its_node_agent(site, tmp_path):  # noqa: F811
    group, config, receiver, work = site
    svc = start(group, config)
    status = requests.get(f"{svc.url}/status", timeout=5).json()
    require_freezer(status)
    args, gate = burner(tmp_path, "burn-k9")
    v = submit(svc.url, receiver, "burn-k9", args)["vwn"]
    receiver.wait_event("burn-k9", "running")
    jobs_dir = Path(requests.get(f"{svc.url}/status", timeout=5).json()["confinement"]["jobs_dir"])
    out = jobs_dir / v / "out.txt"
    wait_until(lambda: len(counters(out)) >= 2, "the counter to print")
    assert NodeAgentClient(svc.url).suspend_vwn(v)["state"] == "suspended"
    pid = NodeAgentClient(svc.url).vwn(v)["pid"]
    printed = len(counters(out))

    kill_9(group, svc)
    svc = start(group, config)
    node = NodeAgentClient(svc.url)
    rec = node.vwn(v)
    assert rec["state"] == "suspended" and rec["adopted"] and is_running(pid)
    usage_file = _usage_file(pid)
    u0, u1 = usage_flat(lambda: _usage(usage_file))
    assert u1 - u0 < 0.005 and len(counters(out)) == printed, "the restart thawed the VWN"
    assert node.resume_vwn(v)["state"] == "running"
    wait_until(lambda: len(counters(out)) >= printed + 2, "the counter to go on")
    seen = counters(out)
    assert seen == list(range(len(seen)))
    assert node.suspend_vwn(v)["state"] == "suspended"       # and DELETE of the adopted, frozen VWN
    assert node.delete_vwn(v)["state"] == "cancelled"
    wait_until(lambda: not is_running(pid), "the frozen job to die")
    release(gate)


def _usage_file(pid: int) -> Path:
    """The CPU usage file of ``pid``'s CPU cgroup (v2 cpu.stat, v1 cpuacct.usage), read from
    /proc/<pid>/cgroup: the test measures the kernel's account, not the agent's."""
    from vwn_agents.cgroups import read_mounts
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    mounts = read_mounts()
    for line in lines:
        _, ctrls, rel = line.split(":", 2)
        if "cpuacct" in ctrls.split(","):
            m = next(m for m in mounts if m.fstype == "cgroup" and "cpuacct" in m.options)
            return Path(m.path) / rel.lstrip("/") / "cpuacct.usage"
    rel = next(line.split(":", 2)[2] for line in lines if line.startswith("0::"))
    m = next(m for m in mounts if m.fstype == "cgroup2")
    return Path(m.path) / rel.lstrip("/") / "cpu.stat"


def _usage(path: Path) -> float:
    text = path.read_text()
    if path.name == "cpuacct.usage":
        return int(text) / 1e9
    return int(dict(line.split() for line in text.splitlines())["usage_usec"]) / 1e6

