"""An in-process broker on a loopback socket over a static ISM: the fixture of the broker tests."""
from __future__ import annotations

import random
from pathlib import Path

from broker.api import create_app
from broker.db import JobStore
from broker.matchmaker import Matchmaker
from broker.service import Broker, BrokerSettings
from infosys.feedback import FeedbackCounters
from infosys.ism import ISM
from infosys.sources import StaticSource
from vgrid_runtime.wsgi import BackgroundServer


def start_broker(tmp_path: Path, ads: list[dict], clock, settings: BrokerSettings,
                 store: JobStore | None = None):
    """``(server, broker)``: a broker whose ISM holds ``ads`` (refreshed once), its ``store``
    (default SQLite in ``tmp_path``), its matcher started once the socket is bound. The caller
    stops the broker, then closes the server and the store."""
    ism = ISM([StaticSource(ads)], refresh_s=3600, clock=clock, feedback=FeedbackCounters())
    ism.refresh()
    store = store or JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    broker = Broker(store, ism, Matchmaker(ism.feedback, rng=random.Random(1)), clock,
                    tmp_path / "sandboxes", settings)
    app = create_app(broker)

    def on_bound(url):
        broker.settings.base_url = url
        broker.start()

    app.config["VGRID_ON_BOUND"] = on_bound
    return BackgroundServer(app), broker
