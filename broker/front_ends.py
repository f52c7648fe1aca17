"""Several broker processes serving one port over one database (issue 12, "Reads that scale").

One broker process tops out near one core: every request runs TLS records, cheroot, Flask and
the route under one interpreter lock (docs/benchmarks.md, "session 6: reads"). With
``front_ends = N`` (N > 1) the broker started by ``vgrid serve broker`` binds its port with
SO_REUSEPORT and, once bound, starts N - 1 *front ends*: processes running the same
configuration with ``matcher = false`` that bind the same address with SO_REUSEPORT; the
kernel spreads new connections over the N listening sockets (a kept-alive connection stays
with the process that accepted it). Each process has its own database connections, caches
and worker threads; all share the database and the state directory (sandboxes, the sandbox
capability key), so any of them answers any request with the same result.

The rule for two processes handling one job at once (e.g. two events of one job arriving at
two processes, or a cancel beside an event): the database row is the truth. Every state
change is a conditional ``UPDATE ... WHERE state = <the state read>`` (:meth:`broker.db.
JobStore.transition`), so of two processes acting on the same state exactly one changes the
job; the other gets :class:`broker.db.StaleState` and nothing of its change is stored. A CE
agent's event that loses this race is answered 503 ``{"error": {"reason": "retry"}}``
(:mod:`broker.api`); the agent's outbox posts it again and the retry is judged against
the new row (an event of an ended job is ignored, one of a past attempt refused). In-process
locks (``Broker._lock``) still order what one process does; nothing relies on them across
processes. Reads need no rule: ``GET /jobs/<key>`` revalidates its cached record against the
row on every request (:mod:`broker.records`). Only the first process runs the matcher, the
Stalled scans and restart recovery (claims are atomic anyway).

The front ends (``python -m broker.server <broker pid>``) are the broker's children in its
process group: stopping the broker (SIGTERM to the group, as ``vgrid demo`` and the tests do)
stops them; each also asks the kernel to send it SIGTERM when its parent dies
(``PR_SET_PDEATHSIG``), so a broker killed with -9 leaves no front end behind. Not combined
with federation peers (validation refuses it).
"""
from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys

log = logging.getLogger("vgrid.broker.front_ends")

_PR_SET_PDEATHSIG = 1


def front_end_config(config, port: int):
    """The configuration of a front end of the broker ``config`` bound to ``port``: the same,
    with ``matcher = false`` and one process (it starts no front ends itself)."""
    return dataclasses.replace(config, port=port, matcher=False, front_ends=1)


def spawn(config, port: int) -> list[subprocess.Popen]:
    """Start ``config.front_ends - 1`` front ends of the broker ``config`` on ``port`` (the
    port the broker bound with SO_REUSEPORT); returns their processes. The configuration goes
    to each child on its standard input as JSON."""
    text = json.dumps(dataclasses.asdict(front_end_config(config, port)))
    procs = []
    for i in range(1, config.front_ends):
        p = subprocess.Popen([sys.executable, "-m", "broker.server", str(os.getpid())],
                             stdin=subprocess.PIPE, close_fds=True)
        p.stdin.write(text.encode())
        p.stdin.close()
        log.info("front end %d of %d: pid %d on port %d", i + 1, config.front_ends, p.pid, port)
        procs.append(p)
    return procs


def stop(procs: list[subprocess.Popen], grace_s: float = 10.0) -> None:
    """SIGTERM to each front end, then SIGKILL to those still running after ``grace_s``."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def die_with_parent(parent: int) -> None:
    """SIGTERM to this process when its parent dies (Linux prctl; ignored elsewhere); exit at
    once if the parent ``parent`` died before this was set."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        sys.exit(0)
