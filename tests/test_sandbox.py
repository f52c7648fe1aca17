"""Sandbox staging by the node agent (vwn_agents.sandbox) against a real loopback receiver, around
the real wrapper process: downloads before the job, uploads after it, refusals."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vwn_agents.sandbox import SandboxClient, SandboxError, open_output, stage_in, stage_out

MB = 1_000_000


@pytest.fixture
def client():
    c = SandboxClient(timeout_s=10)
    yield c
    c.close()


def run_job(workdir: Path, **spec) -> dict:
    """The real wrapper on ``workdir`` (already staged); returns its result."""
    spec = {"job_id": "https://broker/jobs/k", "workdir": str(workdir), **spec}
    proc = subprocess.run([sys.executable, "-m", "vwn_agents.wrapper", "-"], input=json.dumps(spec),
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(ln) for ln in proc.stdout.splitlines() if '"result"' in ln][0]


def test_input_sandbox_executable_is_made_executable_and_outputs_uploaded(tmp_path, receiver, client):
    receiver.inputs["job.sh"] = b'#!/bin/sh\necho "$1" > result.dat\ncat data.in\n'
    receiver.inputs["data.in"] = b"payload\n"
    job = tmp_path / "job"
    job.mkdir()
    stage_in(client, [{"name": "job.sh", "url": f"{receiver.url}/files/job.sh"},
                      {"name": "data.in", "url": f"{receiver.url}/files/data.in"}],
             job, os.getuid(), os.getgid(), MB)
    assert oct((job / "data.in").stat().st_mode & 0o777) == "0o600"
    result = run_job(job, executable="job.sh", arguments="42", std_output="std.out")
    assert result["exit_code"] == 0, result
    uploaded, missing = stage_out(client, ["std.out", "result.dat", "never.made"], job,
                                  f"{receiver.url}/jobs/wk1/output", MB)
    assert uploaded == ["std.out", "result.dat"] and missing == ["never.made"]
    assert receiver.outputs[("wk1", "std.out")] == b"payload\n"
    assert receiver.outputs[("wk1", "result.dat")] == b"42\n"


def test_output_in_a_subdirectory_is_sent_under_its_file_name(tmp_path, receiver, client):
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "n.dat").write_text("7\n")
    uploaded, _ = stage_out(client, ["res/n.dat"], tmp_path, f"{receiver.url}/jobs/sub1/output", MB)
    assert uploaded == ["res/n.dat"]
    assert receiver.outputs[("sub1", "n.dat")] == b"7\n"


@pytest.mark.parametrize("name", ["../outside", "/etc/hostname", "a/../../b"])
def test_output_outside_the_work_directory_is_refused(tmp_path, receiver, client, name):
    (tmp_path / "job").mkdir()
    with pytest.raises(SandboxError) as err:
        stage_out(client, [name], tmp_path / "job", f"{receiver.url}/jobs/out2/output", MB)
    assert str(err.value).startswith(f"OutputSandbox file name {name!r}")
    assert not [k for k in receiver.outputs if k[0] == "out2"]


def test_symlinks_and_special_files_are_refused(tmp_path, receiver, client):
    """A job that links an output (or a directory on its path) to a host file gets nothing out."""
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    job = tmp_path / "job"
    job.mkdir()
    (job / "o").symlink_to(secret)
    (job / "d").symlink_to(tmp_path)
    os.mkfifo(job / "fifo")
    url = f"{receiver.url}/jobs/ln/output"
    for name, words in [("o", "symbolic link"), ("d/secret", "symbolic link"), ("fifo", "not a regular file")]:
        with pytest.raises(SandboxError, match=words):
            stage_out(client, [name], job, url, MB)
    assert not [k for k in receiver.outputs if k[0] == "ln"]
    assert open_output(job, "missing") is None


def test_output_sandbox_size_limit(tmp_path, receiver, client):
    (tmp_path / "a").write_bytes(b"x" * 600)
    (tmp_path / "b").write_bytes(b"y" * 600)
    with pytest.raises(SandboxError, match="more than the output sandbox limit"):
        stage_out(client, ["a", "b"], tmp_path, f"{receiver.url}/jobs/big/output", 1000)
    assert not [k for k in receiver.outputs if k[0] == "big"]


def test_input_sandbox_download_outlasts_a_restarting_broker(tmp_path, receiver, client):
    """Transient failures (here 503 twice, as a broker restarting answers) are retried from the
    file's start within the patience; a refusal (404) is not retried; patience run out names it."""
    receiver.inputs["in.dat"] = b"0123456789" * 100
    receiver.fail_gets = 2
    stage_in(client, [{"name": "in.dat", "url": f"{receiver.url}/files/in.dat"}], tmp_path, os.getuid(),
             os.getgid(), MB, patience_s=30)
    assert (tmp_path / "in.dat").read_bytes() == receiver.inputs["in.dat"] and receiver.fail_gets == 0
    receiver.fail_gets = 1000
    with pytest.raises(SandboxError) as err:
        stage_in(client, [{"name": "y.dat", "url": f"{receiver.url}/files/in.dat"}], tmp_path, os.getuid(),
                 os.getgid(), MB, patience_s=0.5)
    receiver.fail_gets = 0
    assert "HTTP 503" in str(err.value) and "retried for 0.5 s" in str(err.value)


def test_input_sandbox_download_failure_names_the_file(tmp_path, receiver, client):
    with pytest.raises(SandboxError) as err:
        stage_in(client, [{"name": "x.dat", "url": f"{receiver.url}/files/nope"}], tmp_path, 0, 0, MB)
    assert str(err.value).startswith("InputSandbox x.dat: download from ")
    assert "404" in str(err.value)


def test_input_sandbox_size_limit(tmp_path, receiver, client):
    receiver.inputs["big"] = b"z" * 5000
    with pytest.raises(SandboxError, match=r"InputSandbox big: larger than the sandbox limit"):
        stage_in(client, [{"name": "big", "url": f"{receiver.url}/files/big"}], tmp_path, 0, 0, 1000)


def test_upload_retried_while_receiver_fails_then_delivered(tmp_path, receiver, client):
    # A transient failure (HTTP 503, e.g. a broker restarting) is retried, not fatal.
    receiver.fail_puts = 2
    (tmp_path / "o").write_text("y\n")
    uploaded, _ = stage_out(client, ["o"], tmp_path, f"{receiver.url}/jobs/retry/output", MB,
                            patience_s=20.0)
    assert uploaded == ["o"]
    assert receiver.outputs[("retry", "o")] == b"y\n"


def test_upload_failure_is_an_error(tmp_path, client):
    (tmp_path / "o").write_text("x\n")
    with pytest.raises(SandboxError) as err:
        stage_out(client, ["o"], tmp_path, "http://127.0.0.1:9/nothing", MB, patience_s=1.0)
    assert str(err.value).startswith("OutputSandbox o: upload to http://127.0.0.1:9/nothing/o failed for 1 s")


def test_sandbox_names_must_stay_in_the_work_directory(tmp_path, receiver, client):
    (tmp_path / "job").mkdir()
    with pytest.raises(SandboxError) as err:
        stage_in(client, [{"name": "../evil", "url": f"{receiver.url}/files/x"}], tmp_path / "job", 0, 0, MB)
    assert str(err.value) == "InputSandbox file name '../evil' is not a plain file name"
    assert not (tmp_path / "evil").exists()
