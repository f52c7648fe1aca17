"""Jobs under pool accounts, confined (issue 10): each attack a hostile job or client tried, as a
real node agent (real pool accounts, cgroups and loop mounts) or broker sees it.

Tests that need a facility this machine lacks (a memory or pids cgroup controller, loop mounts)
skip naming it.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import requests

from broker.api import create_app as create_broker_app
from broker.config import BrokerConfig
from broker.server import build_broker
from vwn_agents.ce_agent import CEAgentConfig, create_app as create_ce_app
from vwn_agents.node_agent import NodeAgentConfig, create_app
from vwn_agents.pool_accounts import AccountError, AccountMap, Owner, PoolAccounts, parse_map_file
from vgrid_runtime.wsgi import BackgroundServer

from .node_site import node_starter
from .paths import JOB_PYTHON
from .waiting import wait_until

_names = itertools.count(1)
ALICE = {"dn": "/DC=org/DC=vgrid/OU=users/CN=Alice", "vo": "dteam",
         "fqans": ["/dteam/Role=NULL/Capability=NULL"]}
BOB = {"dn": "/DC=org/DC=vgrid/OU=users/CN=Bob", "vo": "dteam", "fqans": ["/dteam"]}
SH = "/bin/sh"


@pytest.fixture
def start_node(tmp_path):
    """start_node(**config) -> (url, NodeAgent); shut down after the test."""
    with node_starter("cf", lambda n: {"work_dir": str(tmp_path / f"w{n}"), "retry_initial_s": 0.05,
                                       "pool_size": 5}) as start:
        yield start


def post(url: str, receiver, key: str, script: str, **extra) -> requests.Response:
    body = {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "executable": SH,
            "arguments": f"-c '{script}'", "callback_url": f"{receiver.url}/events",
            "output_upload_url": f"{receiver.url}/jobs/{key}/output", **extra}
    return requests.post(f"{url}/vwns", json=body, timeout=10)


def run(url: str, receiver, key: str, script: str, timeout_s: float = 30, **extra) -> dict:
    """Run ``script`` in a VWN; its final event (done or aborted)."""
    resp = post(url, receiver, key, script, **extra)
    assert resp.status_code == 201, resp.text
    return receiver.wait_for(lambda r: next((e for e in r.events_for(key)
                                             if e["event"] in ("done", "aborted")), None), timeout_s)


def test_job_runs_as_a_pool_account_never_root(start_node, receiver):
    url, agent = start_node()
    done = run(url, receiver, "who", "id -u > o; id -G >> o; ls -ld . >> o", std_output="so",
               output_sandbox=["o"], owner=ALICE)
    assert done["event"] == "done" and done["exit_code"] == 0, done
    uid, groups, listing = receiver.outputs[("who", "o")].decode().splitlines()
    assert uid != "0" and "0" not in groups.split()
    assert listing.startswith("drwx------")                       # the work dir: 0700, its own
    record = agent.get(done["vwn"]).record()
    assert record["account"] == "dteam001" and record["uid"] == int(uid)   # VO dteam -> pool .dteam
    assert record["limits"]["pids_max"] == 512 or "pids" in record["unconfined"]


def test_same_dn_keeps_its_account_others_get_another_and_leases_end(start_node, receiver):
    url, agent = start_node()
    for key, owner in [("a1", ALICE), ("a2", ALICE), ("b1", BOB)]:
        assert post(url, receiver, key, "sleep 30", owner=owner).status_code == 201
    for key in ("a1", "a2", "b1"):
        receiver.wait_event(key, "running")
    accounts = {v.request.key: v.jail.account.name for v in agent.active()}
    assert accounts["a1"] == accounts["a2"] != accounts["b1"]
    leases = agent.conf.accounts.leases()
    assert leases[f"{ALICE['dn']}:.dteam"] == accounts["a1"]
    for v in list(agent.active()):
        requests.delete(f"{url}/vwns/{v.vwn}", timeout=15)
    assert f"{ALICE['dn']}:.dteam" not in agent.conf.accounts.leases()


def test_a_root_mapping_refuses_to_start(tmp_path):
    map_file = tmp_path / "grid-mapfile"
    map_file.write_text('"/DC=org/DC=vgrid/CN=Evil" root\n')
    with pytest.raises(AccountError, match="jobs may not run as root"):
        create_app(NodeAgentConfig.from_dict({"node": "evil", "work_dir": str(tmp_path / "w"),
                                              "map_file": str(map_file)}))


def test_map_file_dn_and_fqan_lines(start_node, receiver, tmp_path):
    map_file = tmp_path / "grid-mapfile"
    map_file.write_text('# site map\n"/DC=org/DC=vgrid/OU=users/CN=Bob" .vgprod\n'
                        '"/dteam/*" .vgteam\n')
    url, agent = start_node(map_file=str(map_file), pool_size=2)
    assert run(url, receiver, "m1", "true", owner=BOB)["event"] == "done"
    assert run(url, receiver, "m2", "true", owner=ALICE)["event"] == "done"
    assert run(url, receiver, "m3", "true")["event"] == "done"          # no owner: default pool
    names = {v.request.key: v.record()["account"] for v in agent.vwns.values()}
    assert names == {"m1": "vgprod001", "m2": "vgteam001", "m3": "vgrid001"}


@pytest.mark.parametrize("field, value", [("std_output", "/tmp/host-file"), ("std_output", "../../../x"),
                                          ("std_input", "/etc/shadow"), ("std_error", "a/../../b"),
                                          ("output_sandbox", ["../x"])])
def test_paths_outside_the_work_directory_are_refused_by_the_node(start_node, receiver, field, value):
    url, agent = start_node()
    resp = post(url, receiver, "path", "true", **{field: value})
    assert resp.status_code == 400
    assert f"field '{field}" in resp.json()["error"]["message"]
    assert agent.vwns == {}


def test_paths_outside_the_work_directory_are_refused_at_submit(tmp_path):
    broker = build_broker(BrokerConfig(state_dir=str(tmp_path / "b"), ce_urls=[]))
    server = BackgroundServer(create_broker_app(broker))
    try:
        text = ('[\n  Executable = "/bin/sh";\n  StdOutput = "/some/host/file";\n'
                '  StdInput = "../../../etc/shadow";\n]\n')
        resp = requests.post(f"{server.url}/jobs", data={"jdl": text, "filename": "evil.jdl"}, timeout=10)
        assert resp.status_code == 400
        message = resp.json()["error"]["message"]
        assert "evil.jdl:3:15: StdOutput '/some/host/file' must be a path relative" in message
        assert "evil.jdl:4:14: StdInput '../../../etc/shadow' must not contain '..'" in message
    finally:
        server.close()


@pytest.fixture
def open_dir():
    """A directory under /tmp whose ancestors everyone may cross (as on a real worker node)."""
    d = Path("/tmp") / f"vgrid-confinement-{os.getpid()}-{next(_names)}"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_job_cannot_read_another_jobs_directory_or_the_node_state(start_node, receiver, open_dir):
    url, agent = start_node(work_dir=str(open_dir / "node"))
    assert agent.conf.jobs == open_dir / "node" / "jobs"          # reachable: the checks are real
    assert post(url, receiver, "victim", "echo secret > s; sleep 30", owner=ALICE).status_code == 201
    receiver.wait_event("victim", "running")
    victim = next(v for v in agent.active() if v.request.key == "victim")
    wait_until(lambda: (agent.job_dir(victim.vwn) / "s").exists(), what="the victim's file")
    spy = (f"cat {agent.job_dir(victim.vwn)}/s > o 2>&1; ls {agent.conf.jobs} >> o 2>&1; "
           f"ls {agent.work_dir} >> o 2>&1; cat {agent.work_dir}/vwns/{victim.vwn}/spec.json >> o 2>&1; "
           f"ls {agent.conf.accounts.dir} >> o 2>&1; true")
    done = run(url, receiver, "spy", spy, owner=BOB, output_sandbox=["o"])
    lines = receiver.outputs[("spy", "o")].decode().splitlines()
    assert len(lines) == 5 and all("Permission denied" in ln for ln in lines), lines
    assert done["event"] == "done"
    requests.delete(f"{url}/vwns/{victim.vwn}", timeout=15)


def test_a_job_cannot_read_the_brokers_database(start_node, receiver, open_dir):
    base = open_dir                              # the broker's parent is open: its own dir is not
    try:
        broker = build_broker(BrokerConfig(state_dir=str(base / "state"), ce_urls=[]))
        db = base / "state" / "jobs.db"
        assert db.exists() and (os.stat(base / "state").st_mode & 0o777) == 0o700
        url, _ = start_node()
        done = run(url, receiver, "db", f"cat {db} > o 2>&1; ls {base / 'state'} >> o 2>&1",
                   owner=BOB, output_sandbox=["o"])
        out = receiver.outputs[("db", "o")].decode()
        assert done["event"] == "done" and out.count("Permission denied") == 2, out
        broker.store.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _require(agent, controller: str):
    if controller == "disk":
        why = agent.conf.quota_reason
    else:
        why = agent.conf.limits.missing.get(controller)
    if why:
        pytest.skip(f"no {controller} limit on this machine: {why}")


def test_memory_over_the_limit_ends_aborted_memory_limit(start_node, receiver):
    url, agent = start_node()
    _require(agent, "memory")
    done = run(url, receiver, "oom", f"{JOB_PYTHON} -c \"x = b\\\"x\\\" * (2 << 30); print(len(x))\"",
               memory_mb=256, timeout_s=60)
    assert done["event"] == "aborted" and done["outcome"] == "memory-limit", done
    assert done["reason"].startswith("memory limit") and "256 MB" in done["reason"]


def test_fork_bomb_stops_at_the_pids_limit_and_the_node_stays_healthy(start_node, receiver):
    url, agent = start_node(pids_max=64)
    _require(agent, "pids")
    # the forking shell dies at its first refused fork; the VWN lives on in "exec sleep" (no fork)
    bomb = ("(i=0; while [ $i -lt 2000 ]; do sleep 20 & i=$((i+1)); echo $i > n; done) 2> err; "
            "exec sleep 30")
    assert post(url, receiver, "bomb", bomb, owner=ALICE).status_code == 201
    receiver.wait_event("bomb", "running")
    v = next(v for v in agent.active() if v.request.key == "bomb")
    refused = wait_until(lambda: agent.conf.limits.pids_refused(v.vwn), timeout_s=20,
                         what="a fork refused by pids.max")
    assert refused > 0
    tasks = (agent.conf.limits.dirs["pids"] / v.vwn / "cgroup.procs").read_text().split()
    assert len(tasks) <= 64
    assert int((agent.job_dir(v.vwn) / "n").read_text()) < 64       # stopped, not 2,000 forks
    requests.delete(f"{url}/vwns/{v.vwn}", timeout=15)
    assert requests.get(f"{url}/status", timeout=5).status_code == 200
    assert run(url, receiver, "after", "echo fine")["event"] == "done"


def test_disk_filler_fails_with_enospc_at_the_quota(start_node, receiver):
    url, agent = start_node(disk_quota_mb=32, keep_workdirs=True)
    _require(agent, "disk")
    done = run(url, receiver, "fill", "dd if=/dev/zero of=big bs=1M count=200 2> err; cat err; exit 1",
               std_output="so", timeout_s=60)
    assert done["event"] == "aborted" and done["outcome"] == "disk-quota", done
    assert done["reason"].startswith("disk quota") and "32 MB" in done["reason"]
    image = agent.work_dir / "vwns" / done["vwn"] / "disk.img"
    assert image.stat().st_blocks * 512 <= 34_000_000       # the host holds at most the quota
    assert not os.path.ismount(agent.job_dir(done["vwn"]))


def test_oversized_body_is_413_json(start_node):
    url, _ = start_node(max_body_mb=1.0)
    resp = requests.post(f"{url}/vwns", data=b"{" + b" " * 1_100_000 + b"}",
                         headers={"Content-Type": "application/json"}, timeout=10)
    assert resp.status_code == 413 and "error" in resp.json()


def test_deeply_nested_json_is_400_on_every_service(start_node, tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    headers = {"Content-Type": "application/json"}
    node_url, _ = start_node()
    ce = BackgroundServer(create_ce_app(CEAgentConfig.from_dict(
        {"ce_id": "h:1/vgrid-vwn-q", "host": "h", "site": "s", "queue": "q", "nodes": [],
         "scheduler": "fair-share"})))
    broker = build_broker(BrokerConfig(state_dir=str(tmp_path / "b"), ce_urls=[]))
    bserver = BackgroundServer(create_broker_app(broker))
    try:
        for url in (f"{node_url}/vwns", f"{ce.url}/jobs", f"{ce.url}/node-events", f"{bserver.url}/jobs"):
            resp = requests.post(url, data=deep, headers=headers, timeout=10)
            assert resp.status_code == 400, (url, resp.status_code, resp.text[:200])
            assert "error" in json.loads(resp.text)
    finally:
        ce.close()
        bserver.close()


def test_the_ce_agent_passes_the_owner_and_memory_to_the_node(start_node, receiver):
    url, agent = start_node()
    ce = BackgroundServer(create_ce_app(CEAgentConfig.from_dict(
        {"ce_id": "h:1/vgrid-vwn-q", "host": "h", "site": "s", "queue": "q", "nodes": [url],
         "scheduler": "fair-share", "retry_initial_s": 0.05})))
    try:
        jdl = 'Executable = "/bin/sh"; Arguments = "-c \'sleep 30\'"; VMMemory = 300;'
        body = {"job_id": f"{receiver.url}/jobs/own", "key": "own", "jdl": jdl,
                "callback_url": f"{receiver.url}/jobs/own/events", "owner": BOB}
        assert requests.post(f"{ce.url}/jobs", json=body, timeout=10).status_code == 202
        v = wait_until(lambda: next(iter(agent.active()), None), what="the job's VWN")
        assert Owner.from_json(v.request.owner).dn == BOB["dn"] and v.request.memory_mb == 300
        record = v.record()
        assert record["account"].startswith("dteam")
        if "memory" not in record["unconfined"]:
            assert record["limits"]["memory_mb"] == 300
            assert abs(agent.conf.limits.read_limits(v.vwn)["memory_bytes"] - 300_000_000) < 4096  # pages
        requests.post(f"{ce.url}/jobs/own/cancel", timeout=15)
    finally:
        ce.close()


def test_gridmapdir_leases_survive_a_restart_and_full_pools_say_so(tmp_path):
    amap = AccountMap.load(None, vo_pools=True, default_pool=".vgtest")
    gridmapdir = tmp_path / "gridmapdir"
    first = PoolAccounts(amap, gridmapdir, pool_size=2)
    first.prepare()
    alice, bob, carol = Owner(ALICE["dn"]), Owner(BOB["dn"]), Owner("/DC=org/CN=Carol")
    assert first.lease(alice, "1.a").name == "vgtest001"
    assert first.lease(bob, "1.b").name == "vgtest002"
    with pytest.raises(AccountError, match=r"no free account in pool .vgtest \(2 accounts"):
        first.lease(carol, "1.c")
    again = PoolAccounts(amap, gridmapdir, pool_size=2)          # a restarted agent, same directory
    assert again.lease(alice, "2.a").name == "vgtest001"
    again.release(alice, "1.a")
    assert again.leases()[f"{ALICE['dn']}:.vgtest"] == "vgtest001"   # 2.a still runs
    again.release(alice, "2.a")
    again.release(bob, "1.b")
    assert again.leases() == {} and again.lease(carol, "2.c").name == "vgtest001"


def test_map_file_errors_name_the_line(tmp_path):
    with pytest.raises(AccountError, match=r"grid-mapfile:2: expected"):
        parse_map_file('"/dteam/*" .dteam\n"/DC=org/CN=X"\n', "grid-mapfile")
    dns, fqans = parse_map_file('"/DC=org/CN=A B" .a # comment\n"/vo/Role=x/*" acct\n')
    assert dns == {"/DC=org/CN=A B": ".a"} and fqans == [("/vo/Role=x/*", "acct")]
    amap = AccountMap(dns, fqans, vo_pools=True, default_pool=".vgrid")
    assert amap.target_for(Owner("/DC=org/CN=A B")) == ".a"
    assert amap.target_for(Owner("", "vo", ("/vo/Role=x/Capability=NULL",))) == "acct"
    assert amap.target_for(Owner("", "atlas", ("/atlas",))) == ".atlas"
    assert amap.target_for(Owner("", "Bad VO!", ())) == ".vgrid"


def test_an_output_linked_to_a_host_file_is_refused_not_sent(start_node, receiver):
    url, _ = start_node()
    done = run(url, receiver, "link", "ln -s /etc/shadow o; mkfifo f", output_sandbox=["o"])
    assert done["event"] == "aborted" and done["outcome"] == "wrapper-error", done
    assert "symbolic link" in done["reason"] and done["reason"].endswith("(job exit code 0)")
    done = run(url, receiver, "fifo", "mkfifo f", output_sandbox=["f"])
    assert done["event"] == "aborted" and "not a regular file" in done["reason"]
    assert not [k for k in receiver.outputs if k[0] in ("link", "fifo")]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_limit_file_formats_on_a_stand_in_tree(tmp_path, version):
    """The files each cgroup version is written and read through (the kernel's own: above)."""
    from vwn_agents.limits import ResourceLimits
    limits = ResourceLimits(version, {"memory": tmp_path / "m", "pids": tmp_path / "p"}, {})
    limits.create("vwn-x-1", 256_000_000, 64)
    mem = tmp_path / "m" / "vwn-x-1" / ("memory.max" if version == "v2" else "memory.limit_in_bytes")
    assert mem.read_text() == "256000000"
    assert (tmp_path / "p" / "vwn-x-1" / "pids.max").read_text() == "64"
    assert limits.read_limits("vwn-x-1") == {"memory_bytes": 256_000_000, "pids_max": 64}
    assert not limits.oom_killed("vwn-x-1")
    events = "memory.events" if version == "v2" else "memory.oom_control"
    (tmp_path / "m" / "vwn-x-1" / events).write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert limits.oom_killed("vwn-x-1")
    (tmp_path / "p" / "vwn-x-1" / "pids.events").write_text("max 7\n")
    assert limits.pids_refused("vwn-x-1") == 7


def test_a_vwn_takes_a_spare_quota_file_system_and_one_is_made_again(start_node, receiver):
    """Issue 12: the quota file system is made and mounted ahead (``spare_disk_images``); a
    VWN's start moves it onto its work directory instead of running mkfs.ext4 and mount; the
    quota still holds; a new spare is made once one is taken; a spare is never used twice."""
    url, agent = start_node(disk_quota_mb=16, spare_disk_images=1)
    _require(agent, "disk")
    spares = agent.conf.spares
    first = wait_until(lambda: spares.ready(), timeout_s=30, what="a spare image")[0]
    done = run(url, receiver, "spare", "ls -A | wc -l > n; dd if=/dev/zero of=big bs=1M count=64 2> err; exit 1",
               std_output="so", timeout_s=60)
    assert spares.taken == 1 and not first.exists()
    assert done["event"] == "aborted" and done["outcome"] == "disk-quota" and "16 MB" in done["reason"], done
    again = wait_until(lambda: spares.ready(), timeout_s=30, what="a new spare image")
    assert again[0] != first
    assert not any(p.name.endswith(".mnt") and p.name.startswith(first.stem) for p in first.parent.iterdir())


def _fake_useradd(tmp_path: Path, monkeypatch, script: str) -> Path:
    """A ``useradd`` first on PATH running ``script`` (sh); returns its call counter file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "useradd").write_text(f'#!/bin/sh\necho x >> {calls}\nn=$(wc -l < {calls})\n{script}\n')
    (bin_dir / "useradd").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return calls


def test_useradd_is_retried_while_another_holds_the_passwd_lock(tmp_path, monkeypatch):
    """Several node agents (or test suites) creating accounts at once: useradd gives up at once
    on a held lock, so create_account retries it (the real useradd runs on the 4th call)."""
    from vwn_agents.pool_accounts import create_account
    real = shutil.which("useradd")
    calls = _fake_useradd(tmp_path, monkeypatch, 'if [ "$n" -le 3 ]; then echo "useradd: cannot lock '
                          '/etc/passwd; try again later." >&2; exit 1; fi\n'
                          f'exec {real} "$@"')
    subprocess.run(["userdel", "vgtlock001"], capture_output=True)     # left by an interrupted run
    try:
        account = create_account("vgtlock001")
        assert account.name == "vgtlock001" and account.uid != 0
        assert len(calls.read_text().split()) == 4
    finally:
        subprocess.run(["userdel", "vgtlock001"], capture_output=True)


def test_useradd_failing_for_another_reason_is_not_retried(tmp_path, monkeypatch):
    from vwn_agents.pool_accounts import create_account
    calls = _fake_useradd(tmp_path, monkeypatch, 'echo "useradd: invalid user name" >&2; exit 3')
    with pytest.raises(AccountError, match="cannot create pool account vgtbad001: useradd: invalid user name"):
        create_account("vgtbad001")
    assert len(calls.read_text().split()) == 1


def test_a_lock_held_longer_than_the_wait_fails_naming_it(tmp_path, monkeypatch):
    from vwn_agents.pool_accounts import create_account
    calls = _fake_useradd(tmp_path, monkeypatch, 'echo "useradd: cannot lock /etc/passwd; try again later." >&2; exit 1')
    with pytest.raises(AccountError, match="cannot lock /etc/passwd"):
        create_account("vgtlock002", lock_wait_s=0.3)
    assert len(calls.read_text().split()) >= 2
