"""The job wrapper: runs one gLite job inside its VWN.

``python -m vwn_agents.wrapper SPEC.json``. The node agent starts it inside the VWN's cgroup, so
the job and all its children inherit the CPU cap. Steps (as the gLite job wrapper does them):

1. create the fresh work directory ``workdir``;
2. download every InputSandbox file ``{"name", "url"}`` into it;
3. resolve ``executable``: absolute, or relative = a file of the work directory (made executable;
   a bare name not in the sandbox is searched on PATH);
4. run it with ``arguments`` split like a shell does (``shlex``), ``environment`` ("K=V", ``$VAR``
   expanded) added to a clean environment, ``std_input``/``std_output``/``std_error`` files of the
   work directory as stdin/stdout/stderr; the job runs in its own process group;
5. PUT every OutputSandbox file that exists to ``{output_upload_url}/{name}``;
6. write ``result_file``: ``{"exit_code", "error", "signal", "uploaded", "missing_outputs",
   "wall_s", "cpu_s"}``. ``error`` is set (and ``exit_code`` is None) when the job could not be
   run or its output could not be sent, e.g. ``"Executable /nonexistent/foo not found"``.

On its own stdout the wrapper writes one JSON line ``{"event": "running", "pid": P}`` once the
executable has started; the node agent turns that and the result into events.
SIGTERM is forwarded to the job's process group.
"""
from __future__ import annotations

import json
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import requests

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
HTTP_TIMEOUT_S = 30
#: Default of the spec's ``transfer_patience_s``: how long (s) an output upload that fails for a
#: transient reason (connection refused, timeout, HTTP 5xx) is retried, e.g. while the broker
#: restarts; HTTP 4xx fails at once.
TRANSFER_PATIENCE_S = 300.0


class WrapperError(Exception):
    """The job cannot be run or its sandbox cannot be moved; the message is the Aborted reason."""


def check_sandbox_name(name: str, what: str) -> str:
    """A sandbox file name must be a plain file name of the work directory; raises WrapperError."""
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise WrapperError(f"{what} file name {name!r} is not a plain file name")
    return name


def expand_vars(value: str, env: dict[str, str]) -> str:
    """Expand ``$NAME`` and ``${NAME}`` from ``env`` (unknown names become ""), like the shell."""
    return re.sub(r"\$(?:\{(\w+)\}|(\w+))",
                  lambda m: env.get(m.group(1) or m.group(2), ""), value)


def job_environment(entries: list[str], workdir: Path, job_id: str) -> dict[str, str]:
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


def resolve_executable(executable: str, workdir: Path, env: dict[str, str]) -> str:
    """Absolute path of the program to run; raises WrapperError naming the Executable."""
    if not executable:
        raise WrapperError("Executable is empty")
    if os.path.isabs(executable):
        path = Path(executable)
    else:
        path = workdir / executable
        if path.is_file():
            path.chmod(path.stat().st_mode | 0o100)     # a sandbox file, made executable
        elif "/" not in executable and shutil.which(executable, path=env["PATH"]):
            return shutil.which(executable, path=env["PATH"])
    if not path.exists():
        raise WrapperError(f"Executable {executable} not found")
    if path.is_dir() or not os.access(path, os.X_OK):
        raise WrapperError(f"Executable {executable}: Permission denied")
    return str(path)


def download_inputs(items: list[dict], workdir: Path) -> None:
    """Fetch every InputSandbox ``{"name", "url"}`` into ``workdir``; raises WrapperError."""
    for item in items:
        name = check_sandbox_name(item.get("name"), "InputSandbox")
        url = item.get("url")
        try:
            with requests.get(url, stream=True, timeout=HTTP_TIMEOUT_S) as resp:
                resp.raise_for_status()
                with open(workdir / name, "wb") as fh:
                    for chunk in resp.iter_content(1 << 16):
                        fh.write(chunk)
        except (requests.RequestException, OSError) as exc:
            raise WrapperError(f"InputSandbox {name}: download from {url} failed: {exc}") from None


def output_path(name: str, workdir: Path) -> Path:
    """The file of OutputSandbox entry ``name``: a path relative to the work directory, which it
    must not leave (``results/out.dat`` is fine, ``../x`` and ``/etc/x`` are not); raises
    WrapperError."""
    if not isinstance(name, str) or not name or os.path.isabs(name):
        raise WrapperError(f"OutputSandbox file name {name!r} is not relative to the work directory")
    path = (workdir / name).resolve()
    if not path.is_relative_to(workdir.resolve()):
        raise WrapperError(f"OutputSandbox file name {name!r} leaves the work directory")
    return path


def upload_outputs(names: list[str], workdir: Path, base_url: str | None,
                   patience_s: float = TRANSFER_PATIENCE_S) -> tuple[list, list]:
    """PUT each existing OutputSandbox file to ``{base_url}/{file name}`` (a file in a
    subdirectory is sent under its own name, as gLite retrieves it).

    Returns (uploaded, missing) name lists. A transient failure (connection, timeout, HTTP 5xx)
    is retried with backoff for ``patience_s`` seconds (the broker may be restarting);
    raises WrapperError on HTTP 4xx or when that patience runs out.
    """
    uploaded, missing = [], []
    for name in names:
        path = output_path(name, workdir)
        if not path.is_file():
            missing.append(name)
            continue
        if not base_url:
            raise WrapperError("OutputSandbox given but no output_upload_url")
        url = f"{base_url.rstrip('/')}/{quote(path.name, safe='')}"
        deadline = time.monotonic() + patience_s
        delay, last = 0.2, None
        while True:
            try:
                with open(path, "rb") as fh:
                    resp = requests.put(url, data=fh, timeout=HTTP_TIMEOUT_S)
                if resp.status_code < 300:
                    uploaded.append(name)
                    break
                last = f"HTTP {resp.status_code}"
                if resp.status_code < 500:
                    raise WrapperError(f"OutputSandbox {name}: upload to {url} refused: {last}")
            except requests.RequestException as exc:
                last = str(exc)
            if time.monotonic() + delay > deadline:
                raise WrapperError(f"OutputSandbox {name}: upload to {url} failed for "
                                   f"{patience_s:g} s: {last}")
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
    return uploaded, missing


def _open_std(workdir: Path, name: str | None, mode: str, what: str):
    if not name:
        return subprocess.DEVNULL
    path = workdir / name if not os.path.isabs(name) else Path(name)
    if mode == "rb" and not path.is_file():
        raise WrapperError(f"{what} {name} not found in the work directory")
    try:
        return open(path, mode)
    except OSError as exc:
        raise WrapperError(f"{what} {name}: {exc.strerror}") from None


def run_job(spec: dict, workdir: Path) -> dict:
    """Steps 3-4: run the executable; returns ``{"exit_code", "signal", "wall_s", "cpu_s"}``."""
    env = job_environment(spec.get("environment") or [], workdir, spec.get("job_id", ""))
    argv = [resolve_executable(spec.get("executable", ""), workdir, env)]
    argv += split_arguments(spec.get("arguments", ""))
    stdin = _open_std(workdir, spec.get("std_input"), "rb", "StdInput")
    stdout = _open_std(workdir, spec.get("std_output"), "ab", "StdOutput")
    same = spec.get("std_error") and spec.get("std_error") == spec.get("std_output")
    stderr = stdout if same else _open_std(workdir, spec.get("std_error"), "ab", "StdError")
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=stdin, stdout=stdout,
                                stderr=stderr, start_new_session=True)
    except OSError as exc:
        raise WrapperError(f"Executable {spec.get('executable')}: {exc.strerror}") from None
    finally:
        for fh in {id(f): f for f in (stdin, stdout, stderr)}.values():
            if hasattr(fh, "close"):
                fh.close()
    _forward_sigterm(proc)
    print(json.dumps({"event": "running", "pid": proc.pid}), flush=True)
    code = proc.wait()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    sig = -code if code < 0 else None
    return {"exit_code": 128 + sig if sig else code, "signal": sig,
            "wall_s": round(time.monotonic() - start, 3),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)}


def _forward_sigterm(proc: subprocess.Popen) -> None:
    def handler(signum, frame):  # noqa: ARG001 - signal handler signature
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    signal.signal(signal.SIGTERM, handler)


def run(spec: dict) -> dict:
    """Steps 1-6 for one job; never raises for a job problem (it goes into ``error``)."""
    result = {"exit_code": None, "error": None, "signal": None, "uploaded": [],
              "missing_outputs": [], "wall_s": None, "cpu_s": None}
    workdir = Path(spec["workdir"])
    try:
        workdir.mkdir(parents=True, exist_ok=False)
        download_inputs(spec.get("input_sandbox") or [], workdir)
        result.update(run_job(spec, workdir))
        result["uploaded"], result["missing_outputs"] = upload_outputs(
            spec.get("output_sandbox") or [], workdir, spec.get("output_upload_url"),
            float(spec.get("transfer_patience_s", TRANSFER_PATIENCE_S)))
    except WrapperError as exc:
        result["error"] = str(exc)
        if result["exit_code"] is not None:
            result["error"] += f" (job exit code {result['exit_code']})"
            result["exit_code"] = None
    except FileExistsError:
        result["error"] = f"work directory {workdir} already exists"
    return result


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m vwn_agents.wrapper SPEC.json``; exit 0 once the result is written."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m vwn_agents.wrapper SPEC.json", file=sys.stderr)
        return 2
    try:
        spec = json.loads(Path(argv[0]).read_text())
    except (OSError, ValueError) as exc:
        print(f"vwn_agents.wrapper: cannot read {argv[0]}: {exc}", file=sys.stderr)
        return 2
    result = run(spec)
    out = Path(spec["result_file"])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
