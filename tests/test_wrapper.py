"""The job wrapper (``python -m vwn_agents.wrapper SPEC.json``) as a real process (the sandbox
staging it used to do is the node agent's now: tests/test_sandbox.py)."""
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
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "stdin.txt").write_text("from stdin\n")
    result, lines = run_wrapper(
        tmp_path, executable="/bin/sh",
        arguments=f"-c {shlex.quote(script)} sh 'a b' \"c d\" e",
        environment=["GREETING=hello", "WHERE=$HOME/x"],
        std_input="stdin.txt", std_output="out.txt", std_error="err.txt")
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


JDL_NAMES = {"std_input": "StdInput", "std_output": "StdOutput", "std_error": "StdError"}


@pytest.mark.parametrize("field, name", [("std_output", "/tmp/host-file"), ("std_input", "/etc/shadow"),
                                         ("std_error", "../../x"), ("std_output", "a/../../b")])
def test_std_files_outside_the_work_directory_are_refused(tmp_path, field, name):
    result, lines = run_wrapper(tmp_path, executable="/bin/true", **{field: name})
    assert result["error"].startswith(f"{JDL_NAMES[field]} file name {name!r}")
    assert result["exit_code"] is None and lines == []
    assert not (tmp_path / "x").exists() and not (tmp_path / "b").exists()


def test_killed_job_reports_signal(tmp_path):
    result, _ = run_wrapper(tmp_path, executable="/bin/sh", arguments="-c 'kill -9 $$'")
    assert result["signal"] == 9 and result["exit_code"] == 137


def test_bad_environment_entry(tmp_path):
    result, _ = run_wrapper(tmp_path, executable="/bin/true", environment=["NOEQUALS"])
    assert result["error"] == "Environment entry 'NOEQUALS' is not of the form NAME=value"


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
