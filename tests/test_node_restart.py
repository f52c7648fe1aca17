"""A node agent process killed with SIGKILL and restarted with the same configuration (issue 11):
its jobs are neither killed nor lost, and neither are its undelivered events.

Node agents run as real ``vgrid serve node`` processes (``vgrid_cli.services.ServiceGroup``) with
real cgroups and pool accounts; the events go to an in-process ``Receiver``. Each test uses its
own cgroup parent and gridmapdir, so that no other node agent on the host sweeps its cgroups or
leases while its agent is down.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import uuid
from pathlib import Path

import pytest
import requests

from vgrid_cli.services import ServiceGroup
from vwn_agents.mounts import mounted_below
from vwn_agents.node_cleanup import cleanup
from vwn_agents.cgroups import own_cgroups, read_mounts
from vwn_agents.proctree import is_running
from vwn_agents.testing import Receiver
from vwn_agents.vwn_process import start_time

from .waiting import gate_dir, gate_file, release, wait_until


@pytest.fixture
def site(tmp_path):
    """``(group, config_text, receiver, work_dir)`` for one node agent process."""
    receiver = Receiver()
    tag = f"r{uuid.uuid4().hex[:10]}x"
    jobs = gate_dir(tmp_path) / f"jobs-{tag}"
    work = tmp_path / "node"
    node = f"rs{tag[1:7]}"
    config = "\n".join([
        f'node = "{node}"', f'work_dir = "{work}"', f'jobs_dir = "{jobs}"',
        f'gridmapdir = "{tmp_path / "gridmapdir"}"', f'cgroup_parent = "vgrid-h1test/{tag}"',
        "retry_initial_s = 0.05", "retry_max_s = 0.5", "heartbeat_s = 0", "disk_quota_mb = 64", ""])
    with ServiceGroup(tmp_path / "svc") as group:
        (tmp_path / "svc").mkdir(exist_ok=True)
        yield group, config, receiver, work
    # an agent killed with -9 leaves its spare quota mounts (its restart adopts them): the
    # operator's path for a node never restarted (vgrid node-cleanup) removes them
    if work.is_dir():
        cleanup(work, node)
    assert mounted_below(tmp_path) == [], "a mount was left below the test's directory"
    receiver.close()
    shutil.rmtree(jobs, ignore_errors=True)
    own = own_cgroups()
    for mount in read_mounts():                     # empty cgroup directories left behind
        sub = own.get(next((c for c in mount.options if c in own), ""), "/").lstrip("/")
        base = Path(mount.path) / sub / "vgrid-h1test"
        for d in [Path(w[0]) for w in os.walk(base / tag, topdown=False)] + [base]:
            try:
                d.rmdir()
            except OSError:
                pass


def start(group, config):
    return group.start("node", "node", config)


def kill_9(group, svc) -> None:
    os.kill(svc.process.pid, signal.SIGKILL)
    svc.process.wait()
    group.stop(svc)                         # already dead: only forgets it


def submit(url, receiver, key, args, **extra) -> dict:
    body = {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "executable": "/bin/sh",
            "arguments": args, "callback_url": f"{receiver.url}/events", **extra}
    r = requests.post(f"{url}/vwns", json=body, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()


def gated(tmp_path, name: str, code: int) -> tuple[str, Path]:
    """Shell arguments of a job that waits for its gate file, then exits with ``code``."""
    gate = gate_file(tmp_path, name)
    return f"-c 'while [ ! -e {gate} ]; do sleep 0.05; done; exit {code}'", gate


def wrapper_of(work: Path, key: str) -> tuple[int, int]:
    """(wrapper pid, start time) of VWN ``key`` as the node's database has it."""
    with sqlite3.connect(work / "node.db") as db:
        return db.execute("SELECT wrapper_pid, wrapper_start FROM vwns WHERE key = ?", (key,)).fetchone()


def test_kill_9_of_a_node_agent_neither_kills_nor_loses_its_jobs(site, tmp_path):
    group, config, receiver, work = site
    svc = start(group, config)
    jobs = {}
    for i, code in ((1, 3), (2, 4), (3, 5)):
        args, gate = gated(tmp_path, f"k9-{i}", code)
        jobs[f"k9-{i}"] = {"vwn": submit(svc.url, receiver, f"k9-{i}", args)["vwn"], "gate": gate, "code": code}
    for key in jobs:
        receiver.wait_event(key, "running")
    for key, job in jobs.items():
        job["pid"] = requests.get(f"{svc.url}/vwns/{job['vwn']}", timeout=5).json()["pid"]
    old_pid = svc.process.pid

    kill_9(group, svc)
    assert all(is_running(j["pid"]) for j in jobs.values()), "kill -9 of the agent killed a job"
    release(jobs["k9-3"]["gate"])                            # k9-3 ends while the agent is down
    pid, started = wrapper_of(work, "k9-3")
    wait_until(lambda: start_time(pid) != started, "k9-3's wrapper to end")

    svc = start(group, config)
    assert is_running(jobs["k9-1"]["pid"]) and is_running(jobs["k9-2"]["pid"]), "the restart killed a job"
    status = requests.get(f"{svc.url}/status", timeout=5).json()
    assert status["adopted"] == 2 and status["vwns"] == 2
    done = receiver.wait_event("k9-3", "done")
    assert (done["exit_code"], done["outcome"], done["vwn"]) == (5, "exit", jobs["k9-3"]["vwn"])
    # the adopted jobs kept their cgroups (named after the dead agent) and pool-account leases
    cgroup = Path(f"/proc/{jobs['k9-1']['pid']}/cgroup").read_text()
    if status["cgroup"]["writable"]:
        assert f"-{old_pid}/{jobs['k9-1']['vwn']}" in cgroup
    holders = {p.name for p in (tmp_path / "gridmapdir" / ".holders").iterdir()}
    assert {f"{svc.process.pid}.{jobs[k]['vwn']}" for k in ("k9-1", "k9-2")} <= holders

    r = requests.delete(f"{svc.url}/vwns/{jobs['k9-2']['vwn']}", timeout=15)   # an adopted VWN
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    assert not is_running(jobs["k9-2"]["pid"])
    release(jobs["k9-1"]["gate"])
    done = receiver.wait_event("k9-1", "done")
    assert (done["exit_code"], done["outcome"]) == (3, "exit")
    for key in jobs:                           # one end each, nothing aborted, nothing twice
        ends = [e["event"] for e in receiver.events_for(key) if e["event"] in ("done", "aborted")]
        assert ends == ([] if key == "k9-2" else ["done"]), (key, receiver.events_for(key))
    if status["cgroup"]["writable"]:
        old_dir = Path(status["cgroup"]["path"]).parent / f"{Path(status['cgroup']['path']).name.rsplit('-', 1)[0]}-{old_pid}"
        wait_until(lambda: not old_dir.exists(), "the dead agent's node cgroup to be removed")


def test_undelivered_events_survive_a_kill_9_and_are_delivered_after_the_restart(site, tmp_path):
    group, config, receiver, work = site
    receiver.fail_events = 10**6                   # the CE answers 503: events wait in the outbox
    svc = start(group, config)
    v = submit(svc.url, receiver, "ob-1", "-c 'exit 6'")
    wait_until(lambda: requests.get(f"{svc.url}/vwns/{v['vwn']}", timeout=5).json()["state"] == "done",
               "the VWN to end")
    status = wait_until(lambda: (s := requests.get(f"{svc.url}/status", timeout=5).json())
                        ["outbox"]["pending"] == 2 and s, "2 undelivered events")
    assert status["outbox"]["dropped"] == {}
    kill_9(group, svc)
    with sqlite3.connect(work / "node.db") as db:
        assert db.execute("SELECT count(*) FROM outbox").fetchone()[0] == 2
    receiver.fail_events = 0
    svc = start(group, config)
    receiver.wait_event("ob-1", "done")
    assert [e["event"] for e in receiver.events_for("ob-1")] == ["running", "done"]
    assert receiver.events_for("ob-1", "done")[0]["exit_code"] == 6
    wait_until(lambda: requests.get(f"{svc.url}/status", timeout=5).json()["outbox"]["pending"] == 0,
               "the outbox to be empty")


def _in_group(pgid: int) -> list[int]:
    """Live processes of process group ``pgid``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.getpgid(int(entry)) == pgid and is_running(int(entry)):
                found.append(int(entry))
        except OSError:
            pass
    return found


def test_node_cleanup_removes_what_a_node_agent_killed_for_good_left_mounted(site, tmp_path):
    """``vgrid node-cleanup``: refused while the agent runs; after its kill -9, every mount below
    its work_dir (the spare quota file systems) goes and the spare images with them."""
    import subprocess
    import sys
    group, config, receiver, work = site
    svc = start(group, config)
    status = requests.get(f"{svc.url}/status", timeout=5).json()
    disk = status["confinement"]["disk"]
    if disk["reason"]:
        pytest.skip(f"no loop-mounted quota on this host: {disk['reason']}")
    spares = work / "vwns" / ".spares"
    wait_until(lambda: mounted_below(spares), "a spare quota file system to be mounted")
    cmd = [sys.executable, "-m", "vgrid_cli", "node-cleanup", "--config", str(svc.cmd[svc.cmd.index("--config") + 1])]
    busy = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert busy.returncode == 1 and "another node agent" in busy.stderr, busy.stderr
    assert mounted_below(spares)                           # a running agent's mounts are its own
    kill_9(group, svc)
    # a mkfs.ext4 or mount the agent had started (its process group) may still finish a spare
    wait_until(lambda: not _in_group(svc.process.pid), "the killed agent's mkfs/mount children to end")
    assert mounted_below(spares), "kill -9 left no mount: nothing to clean up"
    done = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["unmounted"] and result["failed"] == {} and result["spares_removed"] >= 2
    assert mounted_below(work) == [] and list(spares.iterdir()) == []


def test_a_vwn_whose_wrapper_never_started_is_started_by_the_next_agent(tmp_path, receiver):
    """The agent recorded the VWN (201) and died before its wrapper started: the next agent
    starts it from the beginning (stage-in included), once."""
    from vwn_agents.node_agent import NodeAgent, NodeAgentConfig, VWNRequest
    cfg = NodeAgentConfig.from_dict({"node": f"rl{uuid.uuid4().hex[:6]}", "work_dir": str(tmp_path / "w"),
                                     "disk_quota_mb": 0, "gridmapdir": str(tmp_path / "gm"),
                                     "retry_initial_s": 0.05, "heartbeat_s": 0})
    first = NodeAgent(cfg)
    first._launch = lambda v: None                   # "dies" between the record and the start
    receiver.inputs["rl.txt"] = b"staged\n"
    req = VWNRequest(job_id="j", key="rl-1", executable="/bin/sh", arguments="-c 'cat rl.txt; exit 2'",
                     std_output="out", output_sandbox=["out"], callback_url=f"{receiver.url}/events",
                     input_sandbox=[{"name": "rl.txt", "url": f"{receiver.url}/files/rl.txt"}],
                     output_upload_url=f"{receiver.url}/jobs/rl-1/output")
    v, created = first.create_vwn(req)
    assert created and v.wrapper_pid is None
    first.outbox.close()
    first.heartbeats.close()
    first._node_lock.close()                         # what the kernel does for a dead agent
    second = NodeAgent(cfg)
    try:
        done = receiver.wait_event("rl-1", "done")
        assert (done["exit_code"], done["vwn"]) == (2, v.vwn)
        assert receiver.outputs[("rl-1", "out")] == b"staged\n"
        assert [e["event"] for e in receiver.events_for("rl-1")] == ["running", "done"]
    finally:
        second.shutdown()
