"""Serving a Flask app with a production WSGI server (waitress) on a loopback port.

Used by ``vgrid serve broker|ce|node`` and therefore by ``vgrid demo``.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

from waitress.server import create_server


class ServeError(OSError):
    """The service cannot listen (address in use, permission denied); str() says where and why."""


def serve(app, host: str = "127.0.0.1", port: int = 0, ready_file: str | None = None,
          threads: int = 8, on_stop=None) -> None:
    """Serve ``app`` until SIGTERM/SIGINT.

    ``port=0`` takes a free port. Once the socket is bound, ``ready_file`` (if given) is written
    atomically with ``{"url": "http://host:port", "pid": pid}`` so a parent process can find the
    service. ``on_stop`` (callable, no arguments) runs before the process exits; when not given,
    ``app.config["VGRID_ON_STOP"]`` is used (the node and CE agents set it to their shutdown).
    """
    if on_stop is None:
        on_stop = app.config.get("VGRID_ON_STOP")
    try:
        server = create_server(app, host=host, port=port, threads=threads, ident="vgrid")
    except OSError as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    url = f"http://{host}:{server.effective_port}"
    app.config["VGRID_URL"] = url
    on_bound = app.config.get("VGRID_ON_BOUND")
    if on_bound:
        on_bound(url)
    if ready_file:
        tmp = Path(ready_file).with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": url, "pid": os.getpid()}))
        os.replace(tmp, ready_file)

    def _stop(signum, frame):  # noqa: ARG001 - signal handler signature
        try:
            if on_stop:
                on_stop()
        finally:
            server.close()
            sys.exit(0)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(f"serving on {url}", flush=True)
    server.run()


class BackgroundServer:
    """``app`` served by waitress in a daemon thread (tests, embedded use); ``.url``, ``.close()``.

    Sets ``app.config["VGRID_URL"]`` (and calls ``VGRID_ON_BOUND``) like ``serve`` does.
    ``close()`` stops the server and then calls ``app.config["VGRID_ON_STOP"]`` if set.
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, threads: int = 8) -> None:
        self.app = app
        self.server = create_server(app, host=host, port=port, threads=threads, ident="vgrid")
        self.url = f"http://{host}:{self.server.effective_port}"
        app.config["VGRID_URL"] = self.url
        if app.config.get("VGRID_ON_BOUND"):
            app.config["VGRID_ON_BOUND"](self.url)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"waitress {self.url}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        # The event loop runs here in short slices so that the sockets are closed by this same
        # thread (closing them from another thread while it polls breaks the poll).
        server = self.server
        try:
            while not self._stop.is_set():
                server.asyncore.loop(timeout=0.05, map=server._map, count=1)
        finally:
            server.task_dispatcher.shutdown(cancel_pending=True, timeout=5)
            for channel in list(server._map.values()):
                if channel is not server:
                    channel.close()
            server.close()

    def close(self, stop_app: bool = True) -> None:
        """Stop serving; then run the app's ``VGRID_ON_STOP`` (unless ``stop_app`` is False)."""
        self._stop.set()
        self.thread.join(timeout=10)
        if stop_app and self.app.config.get("VGRID_ON_STOP"):
            self.app.config["VGRID_ON_STOP"]()

    def __enter__(self) -> "BackgroundServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
