"""The preforked job-wrapper starter (issue 12, ``vwn_agents.zygote``, ``wrapper_launch``): a
wrapper forked by the zygote runs as the pool account, never root, inside the VWN's cgroups,
without privileges or descriptors of the zygote; the agent follows it and knows how it ended."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from vwn_agents.zygote import Zygote, ZygoteError

from .node_site import node_starter
from .waiting import wait_until

OWNER = {"dn": "/DC=org/DC=vgrid/OU=users/CN=Zoe Zygote", "vo": "dteam", "fqans": ["/dteam"]}


@pytest.fixture
def start_node(tmp_path):
    with node_starter("zy", lambda n: {"work_dir": str(tmp_path / f"w{n}"), "retry_initial_s": 0.05,
                                       "pool_size": 5, "disk_quota_mb": 0,
                                       "cgroup_parent": "vgrid-zygote-test"}) as start:
        yield start


def post(url, receiver, key, script, **extra):
    body = {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "executable": "/bin/sh",
            "arguments": f"-c '{script}'", "callback_url": f"{receiver.url}/events",
            "output_upload_url": f"{receiver.url}/jobs/{key}/output", "owner": OWNER, **extra}
    resp = requests.post(f"{url}/vwns", json=body, timeout=10)
    assert resp.status_code == 201, resp.text
    return resp.json()["vwn"]


def ended(receiver, key, timeout_s=30):
    return receiver.wait_for(lambda r: next((e for e in r.events_for(key)
                                             if e["event"] in ("done", "aborted")), None), timeout_s)


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def _fds(pid: int) -> dict[str, str]:
    """The process's open descriptors and what they point to (for a failure's message)."""
    out = {}
    for n in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[n] = os.readlink(f"/proc/{pid}/fd/{n}")
        except OSError:
            pass
    return out


def test_a_zygote_child_runs_as_the_pool_account_in_the_vwns_cgroups(start_node, receiver):
    url, agent = start_node()
    assert agent.zygote is not None and agent.zygote.alive
    vwn = post(url, receiver, "who", "id -u > o; id -G >> o; exec sleep 30", output_sandbox=["o"])
    receiver.wait_event("who", "running")
    v = agent.get(vwn)
    wrapper = v.wrapper_pid
    st = _status(wrapper)
    uid = v.jail.account.uid
    assert st["Uid"].split() == [str(uid)] * 4 and st["Gid"].split() == [str(v.jail.account.gid)] * 4
    assert st["Groups"] == "" and st["NoNewPrivs"] == "1" and uid != 0
    assert st["PPid"] == str(agent.zygote.proc.pid)          # forked by the zygote, not exec'd
    assert os.getsid(wrapper) == wrapper                     # its own session
    fds = _fds(wrapper)
    assert sorted(fds) == ["0", "1", "2", "3"] and fds["3"].startswith("pipe:"), fds   # 3: the doorbell
    assert os.readlink(f"/proc/{wrapper}/fd/1") == str(v.jail.vdir / "wrapper.out")
    cgroups = Path(f"/proc/{wrapper}/cgroup").read_text()
    if v.capped:
        assert f"/{v.home}/{vwn}\n" in cgroups, cgroups
    for name in agent.conf.limits.dirs:                      # memory, pids: joined too
        assert str(wrapper) in (agent.conf.limits.dirs[name] / vwn / "cgroup.procs").read_text().split()
    job = _status(v.pid)                                     # the job itself
    assert job["Uid"].split()[0] == str(uid) and job["NoNewPrivs"] == "1"
    wait_until(lambda: _status(v.pid)["Name"] == "sleep", "the job to exec sleep")
    # no doorbell, no socket: the job's descriptors settle to 0-2 (right after the exec, sleep's
    # dynamic loader briefly holds a library open as descriptor 3; a leaked one stays, and fails)
    try:
        wait_until(lambda: sorted(_fds(v.pid)) == ["0", "1", "2"], "the job's descriptors", timeout_s=10)
    except AssertionError:
        raise AssertionError(f"the job keeps descriptors beyond 0-2: {_fds(v.pid)}") from None
    requests.delete(f"{url}/vwns/{vwn}", timeout=15)
    wait_until(lambda: not v.active, "the VWN to end")


def test_a_job_ends_done_with_its_output_and_exit_code(start_node, receiver):
    url, agent = start_node()
    post(url, receiver, "out", "id -u > o; exit 3", output_sandbox=["o"])
    done = ended(receiver, "out")
    assert done["event"] == "done" and done["exit_code"] == 3, done
    assert int(receiver.outputs[("out", "o")]) > 0
    assert agent.zygote.spawned == 1


def test_a_wrapper_killed_without_a_result_is_reported_with_its_signal(start_node, receiver):
    url, agent = start_node()
    vwn = post(url, receiver, "kill", "exec sleep 30")
    receiver.wait_event("kill", "running")
    os.kill(agent.get(vwn).wrapper_pid, signal.SIGKILL)       # the wrapper, not the job
    done = ended(receiver, "kill")
    assert done["event"] == "aborted" and done["outcome"] == "wrapper-error", done
    assert "exit status -9" in done["reason"], done["reason"]


def test_a_dead_zygote_is_replaced_and_running_wrappers_go_on(start_node, receiver):
    url, agent = start_node()
    post(url, receiver, "before", "sleep 2; echo ok > o", output_sandbox=["o"])
    receiver.wait_event("before", "running")
    old = agent.zygote.proc.pid
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: not agent.zygote.alive, "the zygote to die")
    post(url, receiver, "after", "echo ok > o", output_sandbox=["o"])
    assert ended(receiver, "after")["event"] == "done"
    assert agent.zygote.alive and agent.zygote.proc.pid != old
    done = ended(receiver, "before")
    assert done["event"] == "done" and receiver.outputs[("before", "o")] == b"ok\n", done


def test_the_exec_way_still_works(start_node, receiver):
    url, agent = start_node(wrapper_start="exec")
    assert agent.zygote is None
    vwn = post(url, receiver, "exec", "id -u > o", output_sandbox=["o"])
    done = ended(receiver, "exec")
    assert done["event"] == "done" and done["exit_code"] == 0, done
    assert agent.get(vwn).record()["marks"].keys() >= {"prepared", "spawned", "running", "exited"}


def test_the_zygote_refuses_root_and_bad_requests(tmp_path):
    z = Zygote(sys.executable, str(Path(__file__).resolve().parents[1]), tmp_path / "z.log")
    try:
        with open(tmp_path / "out", "ab") as out:
            for uid, gid in ((0, 1000), (1000, 0)):
                with pytest.raises(ZygoteError, match="never runs as root"):
                    z.spawn(uid, gid, [], {}, str(tmp_path), {"workdir": str(tmp_path),
                                                              "executable": "/bin/true"},
                            out.fileno(), out.fileno())
        assert z._ask({"uid": 1000, "gid": 1000}, []) == {"error": "expected 2 or 3 descriptors, got 0"}
        assert z.spawned == 0 and z.alive
    finally:
        z.close()
    assert z.proc.returncode == 0                             # it exits when the agent's end closes


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_zygote_exits_when_its_agent_dies(tmp_path):
    """A kill -9 of the agent closes its end of the socket: the zygote exits (its wrappers,
    in their own sessions, live on for the next agent to adopt)."""
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); "
            "from vwn_agents.zygote import Zygote; "
            "z = Zygote(sys.executable, sys.argv[1], sys.argv[2]); "
            "print(z.proc.pid, flush=True); time.sleep(60)")
    agent = subprocess.Popen([sys.executable, "-c", code, str(Path(__file__).resolve().parents[1]),
                              str(tmp_path / "z.log")], stdout=subprocess.PIPE)
    try:
        zpid = int(agent.stdout.readline())
        assert not _gone(zpid)
        agent.kill()
        agent.wait()
        wait_until(lambda: _gone(zpid), "the zygote to exit after its agent", timeout_s=20)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def test_a_refused_cgroup_join_runs_nothing_and_says_why(tmp_path):
    os.chmod(tmp_path, 0o777)
    z = Zygote(sys.executable, str(Path(__file__).resolve().parents[1]), tmp_path / "z.log")
    try:
        with open(tmp_path / "out", "ab") as out:
            pid, _ = z.spawn(65534, 65534, [str(tmp_path / "no-such-cgroup" / "cgroup.procs")], {},
                             str(tmp_path), {"workdir": str(tmp_path), "executable": "/bin/sh",
                                             "arguments": "-c 'touch ran'"}, out.fileno(), out.fileno())
        lines = [json.loads(line) for line in (tmp_path / "out").read_text().splitlines()]
        assert lines[0]["event"] == "result" and lines[0]["exit_code"] is None
        assert lines[0]["error"].startswith("cannot join the VWN's cgroup: ")
        assert not (tmp_path / "ran").exists() and _gone(pid)
        assert z.alive
    finally:
        z.close()
