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


def test_the_wrapper_starts_lean_stdlib_only_without_site():
    """Issue 12: the node agent starts ``python -S -m vwn_agents.wrapper``; importing it must
    not pull in site-packages (requests, Flask, SQLAlchemy) nor the heavier stdlib modules the
    wrapper does without (subprocess, shutil, pathlib)."""
    import os
    from vwn_agents.node_agent import PACKAGE_PARENT
    from vwn_agents.vwn_process import WRAPPER_ARGS
    assert WRAPPER_ARGS[:3] == ("-S", "-m", "vwn_agents.wrapper")
    code = "import sys, json; import vwn_agents.wrapper; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=30,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": PACKAGE_PARENT})
    assert out.returncode == 0, out.stderr
    loaded = set(json.loads(out.stdout))
    for heavy in ("requests", "flask", "sqlalchemy", "werkzeug", "urllib3", "site",
                  "subprocess", "shutil", "pathlib", "vgrid_runtime"):
        assert heavy not in loaded, f"{heavy} is imported by the wrapper"


def test_a_script_without_interpreter_line_is_an_exec_error(tmp_path):
    (tmp_path / "job").mkdir()
    script = tmp_path / "job" / "noshebang.bin"
    script.write_bytes(b"\x7fELF-not-really")
    result, lines = run_wrapper(tmp_path, executable="noshebang.bin")
    assert result["exit_code"] is None and "noshebang.bin" in result["error"] and not lines


def test_the_node_agent_compiles_the_wrappers_bytecode():
    """The pool account cannot write __pycache__ and the wrapper runs with
    PYTHONDONTWRITEBYTECODE: the node agent writes the .pyc when it starts."""
    import importlib.util
    import os
    from vwn_agents.vwn_process import compile_wrapper
    pyc = importlib.util.cache_from_source(wrapper.__file__)
    if os.path.exists(pyc):
        os.unlink(pyc)
    compile_wrapper()
    assert os.path.getsize(pyc) > 0 and os.path.getmtime(pyc) >= os.path.getmtime(wrapper.__file__)


def _busy_executable(tmp_path: Path) -> tuple[Path, int]:
    """A script and a write descriptor held open on it: exec of it fails with ETXTBSY (as while
    a child forked by another thread of the node agent still holds the sandbox file open)."""
    import os
    script = tmp_path / "busy.sh"
    script.write_text("#!/bin/sh\nexit 7\n")
    script.chmod(0o755)
    return script, os.open(script, os.O_WRONLY)


def test_spawn_retries_an_executable_that_is_busy_until_it_is_closed(tmp_path):
    import os
    import threading
    script, fd = _busy_executable(tmp_path)
    with pytest.raises(OSError) as busy:                       # the condition is real here
        wrapper.spawn([str(script)], {}, [], busy_wait_s=0)
    assert busy.value.errno == __import__("errno").ETXTBSY
    closer = threading.Timer(0.3, os.close, (fd,))
    closer.start()
    pid = wrapper.spawn([str(script)], {}, [], busy_wait_s=60)
    closer.join()
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7


def test_spawn_gives_up_on_a_busy_executable_after_the_wait(tmp_path):
    import os
    import time
    script, fd = _busy_executable(tmp_path)
    try:
        start = time.monotonic()
        with pytest.raises(OSError, match="Text file busy"):
            wrapper.spawn([str(script)], {}, [], busy_wait_s=0.5)
        assert time.monotonic() - start >= 0.5                 # retried for the whole wait
    finally:
        os.close(fd)
