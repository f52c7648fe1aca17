"""In-process node agents on loopback sockets: the ``start_node`` fixtures of the node tests."""
from __future__ import annotations

import itertools
from contextlib import contextmanager
from pathlib import Path

from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.node_agent import NodeAgentConfig, create_app
from vwn_agents.node_cleanup import cleanup

_names = itertools.count(1)


@contextmanager
def node_starter(prefix: str, defaults):
    """Yields ``start(clock=None, **config) -> (url, NodeAgent)``; the node is named
    ``<prefix><n>`` and configured with ``defaults(n)`` updated by ``config``; every node is
    shut down on exit, and what it left mounted below its work_dir is unmounted
    (``vwn_agents.node_cleanup``, as ``vgrid node-cleanup``).

    Unless the test names one, the gridmapdir is ``gridmapdir`` beside the node's work_dir (the
    test's own): the default one is host-wide, and the suites of other checkouts running at the
    same time would lease the same pool accounts, so a test could not say which account a DN
    gets, nor that a lease ended."""
    started = []

    def start(clock=None, **overrides):
        n = next(_names)
        cfg = {"node": f"{prefix}{n}", **defaults(n), **overrides}
        if "work_dir" in cfg:
            cfg.setdefault("gridmapdir", str(Path(cfg["work_dir"]).parent / "gridmapdir"))
        app = create_app(NodeAgentConfig.from_dict(cfg), clock=clock)
        server = BackgroundServer(app)
        started.append((server, cfg))
        return server.url, app.config["VGRID_AGENT"]

    try:
        yield start
    finally:
        for server, cfg in started:
            server.close()
        for _, cfg in started:          # what a node agent stopped uncleanly left mounted
            if cfg.get("work_dir") and Path(cfg["work_dir"]).is_dir():
                try:
                    cleanup(Path(cfg["work_dir"]), cfg["node"])
                except RuntimeError:    # the same node restarted on the directory: still runs
                    pass
