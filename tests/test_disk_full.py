"""A full state directory: the broker answers 507, stores nothing half, and recovers once space
is back (issue 11, "Disk full and other I/O errors").

The broker's state directory is a real 2 MB tmpfs (``mount -t tmpfs -o size=2m``) filled with a
file until ENOSPC; the broker is the real app on a loopback socket (tests/broker_site.py). The
tests skip, naming the facility, only where tmpfs cannot be mounted.
"""
from __future__ import annotations

import errno
import logging
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests
from flask import Flask
from sqlalchemy.exc import OperationalError

from broker.service import BrokerSettings
from vgrid_runtime.clock import WallClock
from vgrid_runtime.httpjson import install_error_handlers
from vgrid_runtime.job_states import JobState
from vgrid_runtime.outcomes import Outcome
from vgrid_runtime.storage import log_failure
from vgrid_runtime.wsgi import BackgroundServer
from vgrid_cli.services import ServiceGroup
from vwn_agents.sandbox import SandboxClient, stage_out

from .broker_site import start_broker
from .waiting import wait_until

JDL = 'Executable = "run.sh"; InputSandbox = {"run.sh", "data.bin"}; OutputSandbox = {"a.txt", "b.bin"};'
DATA = os.urandom(300_000)


class SmallDisk:
    """A 2 MB tmpfs at ``path``; ``fill()`` takes every free byte, ``free()`` gives it back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(path)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs (mount -t tmpfs): {proc.stderr.strip()}")
        self._fd: int | None = None

    def fill(self) -> None:
        self._fd = os.open(self.path / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        for size in (1 << 16, 1 << 12, 1 << 9, 1):
            try:
                while True:
                    os.write(self._fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        self.full = True

    def free(self) -> None:
        os.close(self._fd)
        os.unlink(self.path / "filler")

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)


@pytest.fixture
def disk(tmp_path):
    d = SmallDisk(tmp_path / "state")
    yield d
    d.unmount()


_SERVERS: dict = {}


def site_server(broker):
    return _SERVERS[id(broker)]


@pytest.fixture
def site(disk):
    # no CE: jobs stay Waiting, nothing is dispatched
    server, broker = start_broker(disk.path, [], WallClock(),
                                  BrokerSettings(match_interval_s=0.05, match_expiry_s=3600))
    _SERVERS[id(broker)] = server
    yield server.url, broker
    _SERVERS.pop(id(broker))
    broker.stop()
    server.close()
    broker.store.close()


def submit(url, jdl=JDL, files=None):
    files = {"run.sh": b"#!/bin/sh\necho hi\n", "data.bin": DATA} if files is None else files
    return requests.post(f"{url}/jobs", data={"jdl": jdl, "filename": "j.jdl"},
                         files=[("isb", (n, d)) for n, d in files.items()], timeout=30)


def sandbox_entries(broker) -> list[str]:
    root = broker.sandbox_dir
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def test_submission_on_a_full_disk_is_507_and_nothing_is_stored(site, disk):
    url, broker = site
    disk.fill()
    r = submit(url)
    assert r.status_code == 507, r.text
    err = r.json()["error"]
    assert err["message"] == "broker state directory is full"
    assert err["path"].startswith(str(disk.path)) and err["cause"] == "ENOSPC"
    assert err["operation"] == "storing the input sandbox"
    assert requests.get(f"{url}/jobs", timeout=5).json()["jobs"] == []
    assert [e for e in sandbox_entries(broker) if e != ".staging"] == []
    # space back: the same service takes the same submission, sandbox complete
    disk.free()
    r = submit(url)
    assert r.status_code == 201, r.text
    key = r.json()["key"]
    # queued: Waiting, or Ready for the instant a matcher pass holds it (no CE matches)
    assert requests.get(f"{url}/jobs/{key}", timeout=5).json()["state"] in ("Waiting", "Ready")
    got = requests.get(f"{url}/jobs/{key}/input/data.bin", timeout=5)
    assert got.status_code == 200 and got.content == DATA


def test_a_full_database_is_507_and_the_job_is_not_stored(site, disk):
    # no sandbox to write: the first write that fails is the database's (SQLITE_FULL)
    url, broker = site
    big = 'Executable = "/bin/true"; Arguments = "%s";' % ("x" * 400_000)
    disk.fill()
    r = requests.post(f"{url}/jobs", data={"jdl": big, "filename": "big.jdl"}, timeout=30)
    assert r.status_code == 507, r.text
    err = r.json()["error"]
    assert err["message"] == "broker state directory is full" and err["cause"] == "SQLITE_FULL"
    assert requests.get(f"{url}/jobs", timeout=5).json()["jobs"] == []
    assert sandbox_entries(broker) in ([], [".staging"])
    disk.free()
    r = requests.post(f"{url}/jobs", data={"jdl": big, "filename": "big.jdl"}, timeout=30)
    assert r.status_code == 201, r.text
    assert len(requests.get(f"{url}/jobs", timeout=5).json()["jobs"]) == 1


def test_output_upload_on_a_full_disk_is_507_and_earlier_outputs_are_intact(site, disk):
    url, broker = site
    r = submit(url)
    assert r.status_code == 201, r.text
    key = r.json()["key"]
    put = f"{url}/jobs/{key}/output"
    assert requests.put(f"{put}/a.txt", data=b"first output\n", timeout=10).status_code == 201
    disk.fill()
    r = requests.put(f"{put}/b.bin", data=DATA, timeout=10)
    assert r.status_code == 507, r.text
    assert r.json()["error"]["message"] == "broker state directory is full"
    assert requests.get(f"{put}", timeout=5).json()["files"] == ["a.txt"]
    assert requests.get(f"{put}/a.txt", timeout=5).content == b"first output\n"
    assert not [e for e in sandbox_entries(broker) if e.endswith(".part")]
    disk.free()
    assert requests.put(f"{put}/b.bin", data=DATA, timeout=10).status_code == 201
    assert requests.get(f"{put}/b.bin", timeout=5).content == DATA


def test_the_node_agent_retries_an_upload_answered_507_until_space_is_back(site, disk, tmp_path):
    url, broker = site
    answered_507 = threading.Event()

    @site_server(broker).app.after_request
    def _seen(resp):
        if resp.status_code == 507:
            answered_507.set()
        return resp

    r = submit(url)
    key = r.json()["key"]
    work = tmp_path / "work"
    work.mkdir()
    (work / "b.bin").write_bytes(DATA)
    disk.fill()
    result = {}

    def upload():
        client = SandboxClient(timeout_s=10)
        try:
            result["uploaded"] = stage_out(client, ["b.bin"], work, f"{url}/jobs/{key}/output",
                                           10_000_000, patience_s=60.0)
        finally:
            client.close()

    t = threading.Thread(target=upload)
    t.start()
    wait_until(answered_507.is_set, "the broker answering the upload 507")
    disk.free()
    t.join(timeout=60)
    assert result.get("uploaded") == (["b.bin"], [])
    assert requests.get(f"{url}/jobs/{key}/output/b.bin", timeout=5).content == DATA


def test_another_io_error_is_500_naming_the_operation(site):
    url, broker = site
    broker.sandbox_dir.mkdir(parents=True, exist_ok=True)
    (broker.sandbox_dir / ".staging").write_text("not a directory")
    r = submit(url)
    assert r.status_code == 500, r.text
    err = r.json()["error"]
    assert err["operation"] == "storing the input sandbox"
    assert err["message"].startswith("storing the input sandbox failed: ")
    assert "Traceback" not in r.text
    assert requests.get(f"{url}/jobs", timeout=5).json()["jobs"] == []
    (broker.sandbox_dir / ".staging").unlink()
    assert submit(url).status_code == 201


def test_recover_removes_orphans_and_aborts_a_job_whose_sandbox_is_missing(site):
    url, broker = site
    broker.stop()
    r = submit(url)
    assert r.status_code == 201
    key = r.json()["key"]
    # a crash between installing a sandbox and committing its row, and one while staging
    (broker.sandbox_dir / "orphanKey0000000000000" / "input").mkdir(parents=True)
    (broker.sandbox_dir / "orphanKey0000000000000" / "input" / "run.sh").write_text("x")
    (broker.sandbox_dir / ".staging" / "abc").mkdir(parents=True)
    (broker.sandbox_dir / "not-a-job-key").mkdir()            # not ours to judge: left alone
    # a job stored by an older version whose sandbox file is gone
    (broker.sandbox_dir / key / "input" / "data.bin").unlink()
    broker.recover()
    assert sorted(p.name for p in broker.sandbox_dir.iterdir()) == sorted([key, "not-a-job-key"])
    job = broker.get(key)
    assert job.state is JobState.ABORTED and job.outcome is Outcome.SANDBOX_LOST
    assert "data.bin" in job.reason and job.ce_id is None


def test_agents_answer_storage_failures_as_507_503_500():
    app = Flask("vgrid-node-n1")
    app.config["VGRID_STATE_DIR"] = "/var/lib/vgrid/node"
    install_error_handlers(app)

    def db_error(code, name, text):
        orig = sqlite3.OperationalError(text)
        orig.sqlite_errorcode, orig.sqlite_errorname = code, name
        return OperationalError("INSERT ...", {}, orig)

    errors = {"enospc": OSError(errno.ENOSPC, "No space left on device", "/var/lib/vgrid/node/x"),
              "edquot": OSError(errno.EDQUOT, "Disk quota exceeded"),
              "sqlfull": db_error(13, "SQLITE_FULL", "database or disk is full"),
              "locked": db_error(5, "SQLITE_BUSY", "database is locked"),
              "eacces": PermissionError(errno.EACCES, "Permission denied", "/var/lib/vgrid/node/y")}
    for name, exc in errors.items():
        app.add_url_rule(f"/{name}", name, lambda exc=exc: (_ for _ in ()).throw(exc), methods=["POST"])
    with BackgroundServer(app) as srv:
        got = {n: requests.post(f"{srv.url}/{n}", timeout=5) for n in errors}
    assert {n: r.status_code for n, r in got.items()} == {
        "enospc": 507, "edquot": 507, "sqlfull": 507, "locked": 503, "eacces": 500}
    assert got["enospc"].json()["error"] == {
        "message": "node agent state directory is full", "path": "/var/lib/vgrid/node/x",
        "operation": "POST /enospc", "cause": "ENOSPC"}
    assert got["sqlfull"].json()["error"]["path"] == "/var/lib/vgrid/node"
    assert got["locked"].json()["error"]["message"] == "node agent database unavailable: database is locked"
    assert got["eacces"].json()["error"]["message"] == "POST /eacces failed: Permission denied"


def test_a_real_broker_process_on_a_full_disk_answers_vgrid_submit_and_recovers(disk, tmp_path):
    # the real `vgrid serve broker` process and the real `vgrid submit`; no CE configured
    jdl_dir = tmp_path / "job"
    jdl_dir.mkdir()
    (jdl_dir / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (jdl_dir / "data.bin").write_bytes(DATA)
    (jdl_dir / "j.jdl").write_text('Executable = "run.sh"; InputSandbox = {"run.sh", "data.bin"};\n')

    def vgrid_submit(url):
        return subprocess.run([sys.executable, "-P", "-m", "vgrid_cli", "submit", "--broker", url,
                               "--attempts", "1", str(jdl_dir / "j.jdl")],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)

    (tmp_path / "services").mkdir()
    with ServiceGroup(tmp_path / "services") as group:
        broker = group.start("broker", "broker", f'port = 0\nstate_dir = "{disk.path}"\n'
                                                 'match_expiry_s = 3600.0\n')
        disk.fill()
        proc = vgrid_submit(broker.url)
        assert proc.returncode != 0
        assert "broker state directory is full" in proc.stderr and "Traceback" not in proc.stderr
        assert requests.get(f"{broker.url}/jobs", timeout=5).json()["jobs"] == []
        assert not [p for p in (disk.path / "sandboxes").glob("*") if p.name != ".staging"]
        disk.free()
        proc = vgrid_submit(broker.url)
        assert proc.returncode == 0, proc.stderr
        key = proc.stdout.strip().rsplit("/", 1)[-1]
        assert requests.get(f"{broker.url}/jobs/{key}/input/data.bin", timeout=5).content == DATA


def test_a_background_loop_on_a_full_disk_logs_one_line_not_a_traceback_per_pass(caplog):
    log = logging.getLogger("vgrid.test.loop")
    full = OSError(errno.ENOSPC, "No space left on device")
    with caplog.at_level(logging.ERROR, logger="vgrid.test.loop"):
        for _ in range(20):
            log_failure(log, "test pass failed", full)
        log_failure(log, "test pass failed", ValueError("a bug"))
    records = [r for r in caplog.records if r.name == "vgrid.test.loop"]
    assert len(records) == 2
    assert "full (ENOSPC)" in records[0].getMessage() and records[0].exc_info is None
    assert records[1].exc_info is not None                 # anything else keeps its traceback
