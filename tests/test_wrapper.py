"""The job wrapper (``python -m vwn_agents.wrapper SPEC.json``) against a real loopback receiver."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from vwn_agents import wrapper


def run_wrapper(tmp_path: Path, **spec) -> tuple[dict, list[dict]]:
    """Run the real wrapper process; returns (result JSON, control lines)."""
    spec = {"job_id": "https://broker/jobs/k", "workdir": str(tmp_path / "job"),
            "result_file": str(tmp_path / "result.json"), **spec}
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, "-m", "vwn_agents.wrapper", str(spec_file)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(ln) for ln in proc.stdout.splitlines()]
    return json.loads((tmp_path / "result.json").read_text()), lines


def test_runs_executable_with_arguments_environment_and_std_files(tmp_path):
    script = 'printf "%s|" "$@"; echo "$GREETING $HOME"; cat; echo oops >&2; exit 3'
    (tmp_path / "stdin.txt").write_text("from stdin\n")
    result, lines = run_wrapper(
        tmp_path, executable="/bin/sh",
        arguments=f"-c {shlex.quote(script)} sh 'a b' \"c d\" e",
        environment=["GREETING=hello", "WHERE=$HOME/x"],
        std_input=str(tmp_path / "stdin.txt"), std_output="out.txt", std_error="err.txt")
    job = tmp_path / "job"
    assert result["exit_code"] == 3 and result["error"] is None
    assert (job / "out.txt").read_text() == f"a b|c d|e|hello {job}\nfrom stdin\n"
    assert (job / "err.txt").read_text() == "oops\n"
    assert lines[0]["event"] == "running" and lines[0]["pid"] > 0


def test_same_file_for_stdout_and_stderr(tmp_path):
    result, _ = run_wrapper(tmp_path, executable="/bin/sh", arguments="-c 'echo 1; echo 2 >&2'",
                            std_output="all.log", std_error="all.log")
    assert result["exit_code"] == 0
    assert sorted((tmp_path / "job" / "all.log").read_text().split()) == ["1", "2"]


def test_missing_executable_is_an_error_not_a_run(tmp_path):
    result, lines = run_wrapper(tmp_path, executable="/nonexistent/foo")
    assert result["error"] == "Executable /nonexistent/foo not found"
    assert result["exit_code"] is None and lines == []


def test_non_executable_file_is_permission_denied(tmp_path):
    target = tmp_path / "data.txt"
    target.write_text("not a program")
    result, _ = run_wrapper(tmp_path, executable=str(target))
    assert result["error"] == f"Executable {target}: Permission denied"


def test_input_sandbox_executable_is_made_executable_and_outputs_uploaded(tmp_path, receiver):
    receiver.inputs["job.sh"] = b'#!/bin/sh\necho "$1" > result.dat\ncat data.in\n'
    receiver.inputs["data.in"] = b"payload\n"
    result, _ = run_wrapper(
        tmp_path, executable="job.sh", arguments="42", std_output="std.out",
        input_sandbox=[{"name": "job.sh", "url": f"{receiver.url}/files/job.sh"},
                       {"name": "data.in", "url": f"{receiver.url}/files/data.in"}],
        output_sandbox=["std.out", "result.dat", "never.made"],
        output_upload_url=f"{receiver.url}/jobs/wk1/output")
    assert result["exit_code"] == 0, result
    assert result["uploaded"] == ["std.out", "result.dat"]
    assert result["missing_outputs"] == ["never.made"]
    assert receiver.outputs[("wk1", "std.out")] == b"payload\n"
    assert receiver.outputs[("wk1", "result.dat")] == b"42\n"


def test_output_in_a_subdirectory_is_sent_under_its_file_name(tmp_path, receiver):
    result, _ = run_wrapper(tmp_path, executable="/bin/sh",
                            arguments="-c 'mkdir res && echo 7 > res/n.dat'",
                            output_sandbox=["res/n.dat"],
                            output_upload_url=f"{receiver.url}/jobs/sub1/output")
    assert result["error"] is None and result["uploaded"] == ["res/n.dat"]
    assert receiver.outputs[("sub1", "n.dat")] == b"7\n"


@pytest.mark.parametrize("name", ["../outside", "/etc/hostname", "a/../../b"])
def test_output_outside_the_work_directory_is_refused(tmp_path, receiver, name):
    result, _ = run_wrapper(tmp_path, executable="/bin/true", output_sandbox=[name],
                            output_upload_url=f"{receiver.url}/jobs/out2/output")
    assert result["error"].startswith(f"OutputSandbox file name {name!r}")
    assert not [k for k in receiver.outputs if k[0] == "out2"]


def test_input_sandbox_download_failure_names_the_file(tmp_path, receiver):
    result, _ = run_wrapper(tmp_path, executable="/bin/true",
                            input_sandbox=[{"name": "x.dat", "url": f"{receiver.url}/files/nope"}])
    assert result["error"].startswith("InputSandbox x.dat: download from ")
    assert "404" in result["error"]


def test_upload_retried_while_receiver_fails_then_delivered(tmp_path, receiver):
    # A transient failure (HTTP 503, e.g. a broker restarting) is retried, not fatal.
    receiver.fail_puts = 2
    result, _ = run_wrapper(tmp_path, executable="/bin/sh", arguments="-c 'echo y > o'",
                            output_sandbox=["o"], output_upload_url=f"{receiver.url}/jobs/retry/output",
                            transfer_patience_s=20.0)
    assert result["error"] is None and result["uploaded"] == ["o"]
    assert receiver.outputs[("retry", "o")] == b"y\n"


def test_upload_failure_is_an_error(tmp_path):
    result, _ = run_wrapper(tmp_path, executable="/bin/sh", arguments="-c 'echo x > o'",
                            output_sandbox=["o"], output_upload_url="http://127.0.0.1:9/nothing",
                            transfer_patience_s=1.0)
    assert result["error"].startswith("OutputSandbox o: upload to http://127.0.0.1:9/nothing/o failed for 1 s")
    assert "job exit code 0" in result["error"]


def test_killed_job_reports_signal(tmp_path):
    result, _ = run_wrapper(tmp_path, executable="/bin/sh", arguments="-c 'kill -9 $$'")
    assert result["signal"] == 9 and result["exit_code"] == 137


def test_bad_environment_entry(tmp_path):
    result, _ = run_wrapper(tmp_path, executable="/bin/true", environment=["NOEQUALS"])
    assert result["error"] == "Environment entry 'NOEQUALS' is not of the form NAME=value"


def test_sandbox_names_must_stay_in_the_work_directory(tmp_path, receiver):
    result, _ = run_wrapper(tmp_path, executable="/bin/true",
                            input_sandbox=[{"name": "../evil", "url": f"{receiver.url}/files/x"}])
    assert result["error"] == "InputSandbox file name '../evil' is not a plain file name"
    assert not (tmp_path / "evil").exists()


def test_unreadable_spec_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "vwn_agents.wrapper", str(tmp_path / "no.json")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "cannot read" in proc.stderr and "Traceback" not in proc.stderr


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                                blacklist_characters="\x00"), max_size=8),
                max_size=6))
def test_arguments_split_like_a_shell(words):
    assert wrapper.split_arguments(shlex.join(words)) == words


def test_unbalanced_quotes_in_arguments():
    with pytest.raises(wrapper.WrapperError, match="No closing quotation"):
        wrapper.split_arguments("'abc")


def test_environment_expansion(tmp_path):
    env = wrapper.job_environment(["A=1", "B=${A}2:$PATH", "C=$UNSET."], tmp_path, "id")
    assert env["B"] == "12:" + wrapper.DEFAULT_PATH and env["C"] == "."
    assert env["HOME"] == str(tmp_path) and env["GLITE_WMS_JOBID"] == "id"
    assert "PYTHONPATH" not in env       # a clean environment, not the agent's
