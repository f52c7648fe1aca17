"""Stop signals for the CLI's long-running commands (``vgrid demo``, ``vgrid demo --serve``).

SIGINT (Ctrl-C), SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, once: the first
one starts the stop and the others are ignored from then on, so a second Ctrl-C cannot cut the
stop short and leave processes behind. SIGINT is set explicitly because a process started as
a background job of a non-interactive shell (``cmd &`` in a script, CI) inherits SIGINT
*ignored*, and Python then never installs its default Ctrl-C handler: such a demo ran on
until its jobs ended (session 7's "slow stop", docs/operations.md).
"""
from __future__ import annotations

import signal

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _stop(signum, frame):  # noqa: ARG001 - signal handler signature
    for again in STOP_SIGNALS:
        signal.signal(again, signal.SIG_IGN)
    raise KeyboardInterrupt


def raise_on_stop_signals() -> None:
    """Install the handler for :data:`STOP_SIGNALS` (main thread only: ValueError elsewhere)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stop)
