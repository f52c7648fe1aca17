"""The job wrapper: runs one gLite job inside its VWN, as the VWN's pool account.

``python -m vwn_agents.wrapper SPEC.json`` (or ``-``: the spec on stdin). The node agent starts
it inside the VWN's cgroups and already under the pool account (never root), in a work directory
it has prepared (input sandbox downloaded; the wrapper never talks to the network: the node agent
moves both sandboxes, ``vwn_agents.sandbox``). Steps (as the gLite job wrapper does them):

1. use the work directory ``workdir`` (created if missing);
2. resolve ``executable``: absolute, or relative = a file of the work directory (made executable;
   a bare name not in the sandbox is searched on PATH);
3. run it with ``arguments`` split like a shell does (``shlex``), ``environment`` ("K=V", ``$VAR``
   expanded) added to a clean environment, ``std_input``/``std_output``/``std_error`` files of the
   work directory (relative paths without ``..``) as stdin/stdout/stderr; the job runs in its own
   process group;
4. report ``{"exit_code", "error", "signal", "wall_s", "cpu_s"}``: written to ``result_file`` when
   the spec names one, else printed as the line ``{"event": "result", ...}``. ``error`` is set
   (and ``exit_code`` is None) when the job could not be run, e.g.
   ``"Executable /nonexistent/foo not found"``.

On its own stdout the wrapper writes one JSON line ``{"event": "running", "pid": P}`` once the
executable has started (and, when the spec has ``notify_fd``, writes one byte to that descriptor
right after: the node agent's doorbell, so it need not poll; the job never inherits it); the node agent turns that and the result into events. The node agent makes
that stdout a file of the VWN's private directory (``vwn_process``), so both lines outlive the
agent and a restarted agent reads them.
SIGTERM is forwarded to the job's process group.
"""
from __future__ import annotations

import errno
import json
import os
import re
import resource
import shlex
import signal
import sys
import time

from .jobpaths import PathError, check_relative

# Start cost (issue 12, "a lean job wrapper"): the node agent runs ``python -S -m
# vwn_agents.wrapper -`` (no site, so no site-packages, no editable-install finder); this module
# imports only the stdlib modules above -- no subprocess (the job is started with
# ``os.posix_spawn``), no shutil, no pathlib, nothing from site-packages (requests, Flask,
# SQLAlchemy): tests/test_wrapper.py checks ``sys.modules`` after the import.

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


class WrapperError(Exception):
    """The job cannot be run; the message is the Aborted reason."""


def expand_vars(value: str, env: dict[str, str]) -> str:
    """Expand ``$NAME`` and ``${NAME}`` from ``env`` (unknown names become ""), like the shell."""
    return re.sub(r"\$(?:\{(\w+)\}|(\w+))",
                  lambda m: env.get(m.group(1) or m.group(2), ""), value)


def job_environment(entries: list[str], workdir, job_id: str) -> dict[str, str]:
    """The job's environment: a clean base plus the JDL ``Environment`` entries ("K=V")."""
    env = {"PATH": DEFAULT_PATH, "HOME": str(workdir), "PWD": str(workdir),
           "TMPDIR": str(workdir), "LANG": os.environ.get("LANG", "C.UTF-8"),
           "GLITE_WMS_JOBID": job_id or ""}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_]\w*", key):
            raise WrapperError(f"Environment entry {entry!r} is not of the form NAME=value")
        env[key] = expand_vars(value, env)
    return env


def split_arguments(arguments: str) -> list[str]:
    """Arguments split as the gLite job wrapper's shell does; raises WrapperError."""
    try:
        return shlex.split(arguments or "")
    except ValueError as exc:
        raise WrapperError(f"Arguments {arguments!r}: {exc}") from None


def _which(name: str, path: str) -> str | None:
    """The first executable file ``name`` in the directories of ``path`` (like ``shutil.which``)."""
    for d in path.split(os.pathsep):
        cand = os.path.join(d or ".", name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def resolve_executable(executable: str, workdir, env: dict[str, str]) -> str:
    """Absolute path of the program to run; raises WrapperError naming the Executable."""
    if not executable:
        raise WrapperError("Executable is empty")
    if os.path.isabs(executable):
        path = executable
    else:
        path = os.path.join(str(workdir), executable)
        if os.path.isfile(path):
            os.chmod(path, os.stat(path).st_mode | 0o100)     # a sandbox file, made executable
        elif "/" not in executable and _which(executable, env["PATH"]):
            return _which(executable, env["PATH"])
    try:
        if not os.path.exists(path):
            raise WrapperError(f"Executable {executable} not found")
        executable_file = not os.path.isdir(path) and os.access(path, os.X_OK)
    except PermissionError:                              # a directory the account cannot cross
        executable_file = False
    if not executable_file:
        raise WrapperError(f"Executable {executable}: Permission denied")
    return path


def _open_std(workdir, name: str | None, flags: int, what: str) -> int:
    """A file descriptor for the job's stdin/stdout/stderr (``/dev/null`` without a name)."""
    if not name:
        return os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        path = os.path.join(str(workdir), check_relative(name, what))
    except PathError as exc:
        raise WrapperError(str(exc)) from None
    if not flags & os.O_WRONLY and not os.path.isfile(path):
        raise WrapperError(f"{what} {name} not found in the work directory")
    try:
        return os.open(path, flags | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise WrapperError(f"{what} {name}: {exc.strerror}") from None


_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND


def run_job(spec: dict, workdir) -> dict:
    """Steps 2-3: run the executable; returns ``{"exit_code", "signal", "wall_s", "cpu_s"}``."""
    env = job_environment(spec.get("environment") or [], workdir, spec.get("job_id", ""))
    argv = [resolve_executable(spec.get("executable", ""), workdir, env)]
    argv += split_arguments(spec.get("arguments", ""))
    fds: list[int] = []
    try:
        fds.append(_open_std(workdir, spec.get("std_input"), os.O_RDONLY, "StdInput"))
        fds.append(_open_std(workdir, spec.get("std_output"), _APPEND, "StdOutput"))
        same = spec.get("std_error") and spec.get("std_error") == spec.get("std_output")
        fds.append(fds[1] if same else _open_std(workdir, spec.get("std_error"), _APPEND, "StdError"))
        start = time.monotonic()
        os.chdir(str(workdir))    # the wrapper's own directory too: posix_spawn has no cwd
        try:
            pid = spawn(argv, env, fds)
        except OSError as exc:
            raise WrapperError(f"Executable {spec.get('executable')}: {exc.strerror}") from None
    finally:
        for fd in set(fds):
            os.close(fd)
    _forward_sigterm(pid)
    print(json.dumps({"event": "running", "pid": pid}), flush=True)
    if spec.get("notify_fd") is not None:
        try:
            os.write(spec["notify_fd"], b"r")
        except OSError:
            pass                  # the agent stopped listening: it reads the file anyway
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    sig = -code if code < 0 else None
    return {"exit_code": 128 + sig if sig else code, "signal": sig,
            "wall_s": round(time.monotonic() - start, 3),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)}


#: How long ``spawn`` retries an executable that is busy being written (ETXTBSY), in seconds.
TEXT_BUSY_WAIT_S = 10.0


def spawn(argv: list[str], env: dict[str, str], fds: list[int],
          busy_wait_s: float = TEXT_BUSY_WAIT_S) -> int:
    """``posix_spawn`` the job in its own session (process group) with ``fds`` as its stdin,
    stdout and stderr and SIGPIPE/SIGXFSZ at their defaults; its pid. OSError from the spawn.

    ETXTBSY ("Text file busy") is retried for up to ``busy_wait_s`` seconds: a sandbox
    executable the node agent has just written is still open for writing in any child that a
    thread of the agent forked meanwhile, until that child's exec closes it (O_CLOEXEC) -- a
    window of microseconds on an idle host, but seconds on a loaded one, where it aborted jobs
    (benchmarks/faults.py at load ~40: "Executable faults_job.sh: Text file busy")."""
    deadline, delay = time.monotonic() + busy_wait_s, 0.02
    while True:
        try:
            return os.posix_spawn(argv[0], argv, env, setsid=True,
                                  setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
                                  file_actions=[(os.POSIX_SPAWN_DUP2, fd, n) for n, fd in enumerate(fds)])
        except OSError as exc:
            if exc.errno != errno.ETXTBSY or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _forward_sigterm(pid: int) -> None:
    def handler(signum, frame):  # noqa: ARG001 - signal handler signature
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    signal.signal(signal.SIGTERM, handler)


def run(spec: dict) -> dict:
    """Steps 1-4 for one job; never raises for a job problem (it goes into ``error``)."""
    result = {"exit_code": None, "error": None, "signal": None, "wall_s": None, "cpu_s": None}
    workdir = spec["workdir"]
    try:
        os.makedirs(workdir, exist_ok=True)
        result.update(run_job(spec, workdir))
    except WrapperError as exc:
        result["error"] = str(exc)
    except OSError as exc:
        result["error"] = f"work directory {workdir}: {exc.strerror}"
    return result


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m vwn_agents.wrapper SPEC.json|-``; exit 0 once the result is out."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m vwn_agents.wrapper SPEC.json|-", file=sys.stderr)
        return 2
    try:
        if argv[0] == "-":
            spec = json.loads(sys.stdin.read())
        else:
            with open(argv[0]) as f:
                spec = json.loads(f.read())
    except (OSError, ValueError) as exc:
        print(f"vwn_agents.wrapper: cannot read {argv[0]}: {exc}", file=sys.stderr)
        return 2
    report(spec, run(spec))
    return 0


def report(spec: dict, result: dict) -> None:
    """Step 4: write ``result`` to the spec's ``result_file`` (atomically), else print it as the
    line ``{"event": "result", ...}`` (also used by the zygote's children, ``zygote``)."""
    if not spec.get("result_file"):
        print(json.dumps({"event": "result", **result}), flush=True)
        return
    out = spec["result_file"]
    tmp = os.path.splitext(out)[0] + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(result))
    os.replace(tmp, out)


if __name__ == "__main__":
    sys.exit(main())
