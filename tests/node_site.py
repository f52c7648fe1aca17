"""In-process node agents on loopback sockets: the ``start_node`` fixtures of the node tests."""
from __future__ import annotations

import itertools
from contextlib import contextmanager

from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.node_agent import NodeAgentConfig, create_app

_names = itertools.count(1)


@contextmanager
def node_starter(prefix: str, defaults):
    """Yields ``start(clock=None, **config) -> (url, NodeAgent)``; the node is named
    ``<prefix><n>`` and configured with ``defaults(n)`` updated by ``config``; every node is
    shut down on exit."""
    started = []

    def start(clock=None, **overrides):
        n = next(_names)
        cfg = {"node": f"{prefix}{n}", **defaults(n), **overrides}
        app = create_app(NodeAgentConfig.from_dict(cfg), clock=clock)
        server = BackgroundServer(app)
        started.append(server)
        return server.url, app.config["VGRID_AGENT"]

    try:
        yield start
    finally:
        for server in started:
            server.close()
