"""Waiting in tests without fixed sleeps (issue 9: tests that hold under load).

A test never sleeps a fixed time and then asserts; it waits for a condition with a deadline
(``wait_until``), and a test that must show that something did *not* happen waits for evidence
that the code had its chance (``EngineTicks.wait``: complete scheduling passes of a CE agent),
so a slow machine can neither pass it by accident nor fail it by being slow. Deadlines only
bound how long a failing test takes: a passing one returns as soon as its condition holds.
"""
from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import threading
import time
from pathlib import Path

#: Every deadline in the tests is multiplied by this (``VGRID_TEST_SLACK``; 1 by default).
SLACK = float(os.environ.get("VGRID_TEST_SLACK", "1"))


def wait_until(predicate, what: str, timeout_s: float = 30.0, interval_s: float = 0.05):
    """Call ``predicate()`` until it returns something truthy and return that; after
    ``timeout_s`` (times SLACK) raise AssertionError naming ``what`` was awaited and the last value."""
    deadline = time.monotonic() + timeout_s * SLACK
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s * SLACK:g} s waiting for {what} "
                                 f"(last value: {value!r})")
        time.sleep(interval_s)


class EngineTicks:
    """Counts the completed ticks of a CE agent's lease engine (``ce.leases.engine.tick``, which
    its placer loop calls once per pass between submitting new leases and reconciling jobs)."""

    def __init__(self, ce) -> None:
        engine = ce.leases.engine
        self._count = 0
        self._cond = threading.Condition()
        tick = engine.tick

        def counted_tick():
            try:
                tick()
            finally:
                with self._cond:
                    self._count += 1
                    self._cond.notify_all()

        engine.tick = counted_tick

    @property
    def count(self) -> int:
        with self._cond:
            return self._count

    def wait(self, n: int = 3, timeout_s: float = 30.0) -> None:
        """Wait for ``n`` more completed ticks. With n >= 3, at least one whole placer pass
        (submit new leases, tick, reconcile) began and ended after this call."""
        deadline = time.monotonic() + timeout_s * SLACK
        with self._cond:
            target = self._count + n
            while self._count < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout_s * SLACK:g} s waiting for {n} "
                                         f"lease engine ticks (saw {n - (target - self._count)})")
                self._cond.wait(left)


def gate_dir(tmp_path: Path) -> Path:
    """A directory for ``tmp_path``'s gates that a job's pool account can reach (pytest's own
    temporary directories are 0700 root): under a 0755 directory in the system temp dir."""
    d = Path(tempfile.gettempdir()) / "vgrid-test-gates" / hashlib.sha1(str(tmp_path).encode()).hexdigest()[:16]
    d.mkdir(parents=True, exist_ok=True)
    for p in (d.parent, d):
        p.chmod(0o755)
    return d


def gate_script(tmp_path: Path) -> Path:
    """An executable that runs until the file named by its argument exists: a job that ends
    when the test says so (``release(path)``), not after a wall-clock time a loaded machine
    may overrun. It lives where pool accounts can run it (:func:`gate_dir`)."""
    script = gate_dir(tmp_path) / "gate.sh"
    if not script.exists():
        script.write_text('#!/bin/sh\nwhile [ ! -e "$1" ]; do sleep 0.05; done\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def gate_file(tmp_path: Path, name: str) -> Path:
    """The gate file of job ``name`` (created by ``release``), where pool accounts can see it."""
    return gate_dir(tmp_path) / f"gate-{name}"


def gated_jdl(tmp_path: Path, name: str, extra: str = "") -> tuple[str, Path]:
    """``(jdl, gate file)``: a job that runs until ``gate file`` is created (``release``)."""
    gate = gate_file(tmp_path, name)
    return f'[ Executable = "{gate_script(tmp_path)}"; Arguments = "{gate}"; {extra}]', gate


def release(gate: Path) -> None:
    gate.touch()
