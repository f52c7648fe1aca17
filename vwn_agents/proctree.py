"""Process trees from /proc: find and kill a process and all its descendants.

Used for VWNs without a cgroup (where cgroup.procs is the authoritative list, this is a second
net). A descendant that was re-parented away (double fork) is only found through the cgroup.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live process."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        out[int(d.name)] = int(fields[1])
    return out


def descendants(pid: int) -> list[int]:
    """Pids of every live descendant of ``pid`` (not ``pid`` itself), parents first."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def is_running(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def kill_tree(pid: int, wait_s: float = 5.0) -> list[int]:
    """SIGKILL ``pid`` and all its descendants; returns the pids signalled.

    The tree is frozen first (SIGSTOP, repeated until no new descendant appears) so that nothing
    can fork away while it is being killed; then waits up to ``wait_s`` until every signalled
    process has died (is gone or a zombie).
    """
    seen: list[int] = []
    for _ in range(50):
        new = [p for p in [pid, *descendants(pid)] if p not in seen and is_running(p)]
        if not new:
            break
        for p in new:
            _signal(p, signal.SIGSTOP)
        seen += new
    for p in seen:
        _signal(p, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while any(is_running(p) for p in seen) and time.monotonic() < deadline:
        time.sleep(0.01)
    return seen


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
