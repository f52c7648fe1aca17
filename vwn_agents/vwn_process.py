"""The job wrapper's process as the node agent sees it: identity, output file, exit.

The wrapper's stdout is the file ``<vdir>/wrapper.out`` (opened by the agent as root, inherited as
descriptor 1: the pool account cannot write anywhere else in the VWN's private directory and the
job, whose own stdout the wrapper redirects, cannot forge it). The wrapper writes one JSON line
``{"event": "running", "pid": P}`` once the job started and one ``{"event": "result", ...}`` when
it ended (``wrapper``). Both survive the agent: a restarted agent reads them again.

A process is the VWN's wrapper when its pid exists, its start time (/proc/<pid>/stat field 22,
clock ticks since boot) is the one recorded, and (capped VWNs) it is in the VWN's cgroup: a
recycled pid is never taken for the wrapper.
"""
from __future__ import annotations

import json
import os
import select
import time
from pathlib import Path

from vgrid_runtime.outcomes import Outcome

from .sandbox import SandboxError

OUT_FILE = "wrapper.out"
#: How the node agent starts the wrapper, after the interpreter: ``-S``, no site (site-packages
#: and the editable-install finder cost ~20 ms a job); it needs only the stdlib and PYTHONPATH.
WRAPPER_ARGS = ("-S", "-m", "vwn_agents.wrapper", "-")


def compile_wrapper() -> None:
    """Write the wrapper's .pyc (the pool accounts cannot, and the wrapper runs with
    PYTHONDONTWRITEBYTECODE: compiling it would cost every job ~10 ms). Never raises (a
    read-only install keeps whatever .pyc it has)."""
    import py_compile
    from . import wrapper
    try:
        py_compile.compile(wrapper.__file__, doraise=True)
    except (OSError, py_compile.PyCompileError):
        pass


def write_spec(v) -> dict:
    """The job wrapper's spec of VWN ``v`` (``wrapper`` module doc), also written to
    ``<vdir>/spec.json``."""
    r = v.request
    spec = {"job_id": r.job_id, "workdir": str(v.jail.workdir), "executable": r.executable,
            "arguments": r.arguments, "environment": r.environment,
            "std_input": r.std_input, "std_output": r.std_output, "std_error": r.std_error}
    (v.jail.vdir / "spec.json").write_text(json.dumps(spec, indent=1))
    return spec


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks after boot); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    if fields[0] == "Z":                       # a zombie has ended
        return None
    return int(fields[19])                      # fields after "comm": state is field 3


def in_cgroup(pid: int, home: str, vwn: str) -> bool:
    """True when ``pid`` is in a cgroup ``.../<home>/<vwn>`` of some hierarchy."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return False
    return any(line.split(":", 2)[-1].endswith(f"/{home}/{vwn}") for line in lines)


def is_wrapper(pid: int | None, start: int | None, home: str | None, vwn: str) -> bool:
    """Is ``pid`` still the VWN's wrapper (see module doc)? ``home`` None: uncapped VWN."""
    if pid is None or start is None or start_time(pid) != start:
        return False
    return home is None or in_cgroup(pid, home, vwn)


def read_lines(path: Path, offset: int) -> tuple[list[dict], int]:
    """The complete JSON lines of ``path`` after byte ``offset`` and the new offset (a partly
    written last line is left for the next call; unparsable lines are skipped)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    out = []
    for line in data[:end].splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict):
            out.append(msg)
    return out, offset + end


def wait_gone(pid: int, start: int | None, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for a process that is not our child to end; True once it has
    (a pidfd when the kernel has them, else /proc polling)."""
    if start_time(pid) != start:
        return True
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        time.sleep(timeout_s)
        return start_time(pid) != start
    try:
        if start_time(pid) != start:           # the pid was reused between the checks
            return True
        ready, _, _ = select.select([fd], [], [], timeout_s)
        return bool(ready) or start_time(pid) != start
    finally:
        os.close(fd)


def stage_in_and_start(agent, v, start, hold_lock: bool = True) -> bool:
    """Stage VWN ``v``'s input sandbox into its jail, then -- unless it was cancelled or the
    agent is stopping meanwhile -- call ``start(v)``. Returns whether ``start`` was called; a
    sandbox or disk error fails ``v`` (``Outcome.WRAPPER_ERROR``) and returns False. Shared by
    the cgroup path (``NodeAgent._run``) and the VM paths (``drivers.vm_job.run``,
    ``drivers.voc_job.run``).

    ``hold_lock``: ``start`` runs under the agent's lock (a fork from the zygote: milliseconds).
    False for a VM boot (libvirt's ``createXML``: 0.4 s here, tens of seconds on a host whose
    libvirtd re-probes qemu, ``drivers.libvirtd``): the lock is taken only for the check, so
    ``POST /vwns``, heartbeats and readjustments never wait for a boot; a cancel that arrives
    during the boot is seen by the caller's watch loop (``v.cancelled``) and the domain is
    destroyed by ``NodeAgent._finish``."""
    try:
        agent.conf.prepare(v.jail, v.request.input_sandbox, lambda: v.cancelled or agent._stopping)
    except (SandboxError, OSError) as exc:
        v.fail(Outcome.WRAPPER_ERROR, str(exc))
        return False
    with agent._lock:
        if v.cancelled or agent._stopping:
            return False
        if hold_lock:
            start(v)
            return True
    start(v)
    return True
