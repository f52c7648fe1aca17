"""Starting a VWN's job wrapper and watching it: the zygote way or the exec way (issue 12).

``start(agent, v)`` starts the wrapper of VWN ``v`` inside its cgroups as its pool account:

* ``wrapper_start = "zygote"`` (default): the node agent's preforked ``zygote`` forks a child that
  joins the cgroups, drops to the account (no groups, no new privileges) and runs the already
  imported wrapper -- no ``exec``, no interpreter start per job;
* ``wrapper_start = "exec"``, or when the zygote cannot be started or has died (logged; a dead
  zygote is started again for the next job): ``/bin/sh`` joins the cgroups (``JOIN_AND_EXEC``),
  then ``setpriv`` execs ``python -S -m vwn_agents.wrapper -`` as the account, spec on stdin.

Either way the wrapper's stdout is ``<vdir>/wrapper.out`` and its stderr ``<vdir>/wrapper.log``
(``vwn_process``), it runs in its own session, and its pid and start time are recorded before
``start`` returns. ``watch(agent, v)`` follows ``wrapper.out`` until the wrapper has ended: our
child (exec way) is reaped; a zygote child or an adopted wrapper is followed through /proc and a
pidfd. A zygote child that ended without a ``result`` line gets its exit status from the
``exit`` line its zygote appends (``zygote``).

Timings (issue 12): ``v.marks`` gets clock times ``prepared`` (quota mounted, sandbox staged),
``spawned`` (wrapper started), ``running`` (its ``running`` line read) and ``exited``.
"""
from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from vgrid_runtime.outcomes import Outcome

from . import node_suspend
from .vwn_process import OUT_FILE, WRAPPER_ARGS, read_lines, start_time, wait_gone, write_spec
from .vwn_states import VWNState
from .zygote import Zygote, ZygoteError

log = logging.getLogger(__name__)

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
# Joins every cgroup.procs file given before "--", then execs the rest: the wrapper starts inside
# the VWN's cgroup(s), so the job and all its children inherit the CPU cap.
JOIN_AND_EXEC = ('for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 97; shift; '
                 'done; shift; exec "$@"')
JOIN_FAILED = 97
#: How long ``watch`` waits for a zygote child's ``exit`` line when it wrote no result (s).
EXIT_LINE_WAIT_S = 2.0
WRAPPER_STARTS = ("zygote", "exec")


def _python(agent) -> str:
    return agent.config.python or sys.executable


def open_zygote(agent) -> Zygote | None:
    """The agent's zygote (``wrapper_start = "zygote"``, cgroup driver), else None. A zygote
    that cannot be started is logged and the exec way is used."""
    if agent.config.wrapper_start != "zygote" or agent.driver.runs_jobs:
        return None
    try:
        return Zygote(_python(agent), PACKAGE_PARENT, agent.work_dir / "zygote.log")
    except ZygoteError as exc:
        log.warning("node %s: job wrappers start the exec way: %s", agent.config.node, exc)
        return None


def _zygote(agent) -> Zygote | None:
    """The live zygote, started again if it died (once per job at most); None: exec way."""
    z = agent.zygote
    if z is None or z.alive:
        return z
    log.warning("node %s: the zygote has exited (status %s); starting it again",
                agent.config.node, z.proc.poll())
    z.close()
    agent.zygote = open_zygote(agent)
    return agent.zygote


def start(agent, v) -> None:
    """Start ``v``'s wrapper (module doc); on failure ``v`` fails ``Outcome.WRAPPER_ERROR``."""
    v.marks["prepared"] = agent.clock.now()
    spec = write_spec(v)
    procs = (agent.cg.procs_files(v.vwn) if v.capped else []) + node_suspend.procs_files(agent, v)
    z = _zygote(agent)
    if z is not None:
        try:
            _start_zygote(agent, v, z, spec, procs)
            return
        except ZygoteError as exc:
            log.warning("%s: %s; starting the wrapper the exec way", v.vwn, exc)
    _start_exec(agent, v, spec, procs)


def _start_zygote(agent, v, z: Zygote, spec: dict, procs: list[str]) -> None:
    a = v.jail.account
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": os.environ.get("LANG", "C.UTF-8")}
    bell_r, bell_w = os.pipe2(os.O_CLOEXEC)     # the wrapper rings when the job runs
    try:
        with open(v.jail.vdir / "wrapper.log", "ab") as log_file, \
                open(v.jail.vdir / OUT_FILE, "ab") as out_file:
            pid, started = z.spawn(a.uid, a.gid, agent.conf.cgroup_procs(v.jail, procs), env,
                                   str(v.jail.workdir), spec, out_file.fileno(), log_file.fileno(),
                                   notify_fd=bell_w)
    except ZygoteError:
        os.close(bell_r)
        raise
    finally:
        os.close(bell_w)
    v.notify = bell_r
    v.proc, v.wrapper_pid, v.wrapper_start = None, pid, started
    v.marks["spawned"] = agent.clock.now()
    agent._save(v)


def _start_exec(agent, v, spec: dict, procs: list[str]) -> None:
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "LANG": os.environ.get("LANG", "C.UTF-8"), "PYTHONPATH": PACKAGE_PARENT,
           "PYTHONDONTWRITEBYTECODE": "1"}
    argv = ["/bin/sh", "-c", JOIN_AND_EXEC, "vwn-join",
            *agent.conf.command(v.jail, procs, [_python(agent), *WRAPPER_ARGS])]
    # stdout: a file, not a pipe, so the wrapper's lines outlive the agent (vwn_process);
    # its own session: a kill -9 of the agent does not reach it.
    with open(v.jail.vdir / "wrapper.log", "ab") as log_file, \
            open(v.jail.vdir / OUT_FILE, "ab") as out_file:
        try:
            v.proc = subprocess.Popen(argv, stdout=out_file, stderr=log_file,
                                      stdin=subprocess.PIPE, start_new_session=True,
                                      cwd=v.jail.workdir, env=env)
        except OSError as exc:
            v.fail(Outcome.WRAPPER_ERROR, f"cannot start the job wrapper: {exc}")
            return
    v.wrapper_pid, v.wrapper_start = v.proc.pid, start_time(v.proc.pid)
    v.marks["spawned"] = agent.clock.now()
    agent._save(v)
    try:
        v.proc.stdin.write(json.dumps(spec).encode())
        v.proc.stdin.close()
    except OSError:
        pass                                       # it died at once: its exit status says why


def watch(agent, v) -> None:
    """Lines of the wrapper's output file (``running``, ``result``, a zygote's ``exit``) until
    it exits; then collect (``agent._collect``) and stage out (``agent._stage_out``)."""
    try:
        _watch(agent, v)
    finally:
        _silence(v)


def _silence(v) -> None:
    if v.notify is not None:
        os.close(v.notify)
        v.notify = None


def _watch(agent, v) -> None:
    result, code, ended = None, None, False
    out = v.jail.vdir / OUT_FILE
    while result is None:
        wait_s = 0.01 if v.state is VWNState.STARTING else 1.0   # "running" seen within 10 ms
        if v.notify is not None and v.state is VWNState.STARTING:   # a zygote child's doorbell:
            ready, _, _ = select.select([v.notify], [], [], 1.0)    # rung, or closed at its exit
            if ready and not os.read(v.notify, 16):
                _silence(v)
            ended = start_time(v.wrapper_pid) != v.wrapper_start
        elif v.proc is not None:               # our child: a pidfd wait, then reap it
            if v.wrapper_start is not None:
                wait_gone(v.proc.pid, v.wrapper_start, wait_s)
            code = v.proc.poll()
            ended = code is not None
        else:
            ended = wait_gone(v.wrapper_pid, v.wrapper_start, wait_s)
        msgs, v.out_offset = read_lines(out, v.out_offset)
        result, code = _apply(agent, v, msgs, result, code)
        if ended:
            break
    if v.proc is not None:
        code = v.proc.wait()
    elif result is None and not v.adopted and not v.cancelled:   # a zygote child: its exit line follows
        deadline = time.monotonic() + EXIT_LINE_WAIT_S
        while code is None and result is None and time.monotonic() < deadline:
            time.sleep(0.01)
            msgs, v.out_offset = read_lines(out, v.out_offset)
            result, code = _apply(agent, v, msgs, result, code)
    v.marks["exited"] = agent.clock.now()
    agent._collect(v, code, result)
    if v.outcome in (None, Outcome.EXIT) and not v.cancelled and result \
            and result.get("exit_code") is not None:
        agent._stage_out(v)


def _apply(agent, v, msgs: list[dict], result: dict | None, code: int | None):
    """Apply the wrapper's lines; returns the (result, exit status) seen so far."""
    for msg in msgs:
        if msg.get("event") == "running" and v.state is VWNState.STARTING:
            with agent._lock:
                v.to(VWNState.RUNNING)
                v.pid = msg.get("pid")
                v.marks["running"] = agent.clock.now()
                agent._emit(v, "running")
                agent._save(v)
        elif msg.get("event") == "result":
            result = msg
        elif msg.get("event") == "exit" and isinstance(msg.get("status"), int):
            code = msg["status"]
    return result, code
