"""Assembling and serving the broker process (``vgrid serve broker``).

Builds the job store, the ISM (CE agents' GLUE LDIF, or a BDII), the feedback counters, the
matchmaker and the Flask app, then serves it (cheroot, HTTPS when TLS is configured). The matcher loop starts once the
socket is bound, because job ids and sandbox URLs contain the broker's own URL.
"""
from __future__ import annotations

import logging
import os
import random
from pathlib import Path

from vgrid_runtime.clock import WallClock
from vgrid_runtime.httpclient import new_session

from .config import BrokerConfig
from .db import JobStore
from .matchmaker import Matchmaker
from .resubmission import RetryLimits
from .service import Broker, BrokerSettings

log = logging.getLogger("vgrid.broker")


def build_ism(config: BrokerConfig, clock):
    """The ISM over the configured sources; its FeedbackCounters are ``ism.feedback``."""
    from infosys.feedback import FeedbackCounters
    from infosys.ism import ISM, HttpLdifSource

    if config.bdii:
        from infosys.ism import BdiiSource  # provided with the real BDII (issue 4)
        sources = [BdiiSource(config.bdii, timeout_s=config.ism_timeout_s)]
    else:
        session = new_session(config.tls_files())
        sources = [HttpLdifSource(f"{u.rstrip('/')}/glue", timeout_s=config.ism_timeout_s,
                                  session=session) for u in config.ce_urls]
    if config.peers:   # each peer's aggregate, a CE-like ad (broker.federation.glue)
        from .federation import peer_glue_url
        session = new_session(config.tls_files())
        sources += [HttpLdifSource(peer_glue_url(p), timeout_s=config.ism_timeout_s, session=session)
                    for p in config.peers]
    return ISM(sources, refresh_s=config.ism_refresh_s, clock=clock,
               feedback=FeedbackCounters(), timeout_s=config.ism_timeout_s)


def build_broker(config: BrokerConfig, clock=None) -> Broker:
    """A ready-to-start :class:`Broker` for ``config`` (nothing is started)."""
    clock = clock or WallClock()
    state = Path(config.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o700)                       # the database and sandboxes: root only
    url = config.database_url or f"sqlite:///{(state / 'jobs.db').resolve()}"
    store = JobStore(url, config.db_pool())
    ism = build_ism(config, clock)
    rng = random.Random(None if config.seed < 0 else config.seed)
    matchmaker = Matchmaker(ism.feedback, default_policy=config.selection,
                            fuzzy_factor=config.fuzzy_factor, rng=rng)
    settings = BrokerSettings(match_interval_s=config.match_interval_s,
                              match_expiry_s=config.match_expiry_s,
                              max_dispatch_attempts=config.max_dispatch_attempts,
                              blacklist_s=config.blacklist_s,
                              limits=RetryLimits(config.max_retry_count, config.max_shallow_retry_count,
                                                 config.default_retry_count,
                                                 config.default_shallow_retry_count),
                              stalled_resubmit_s=config.stalled_resubmit_s,
                              default_ce_interval_s=config.default_ce_interval_s,
                              matcher_workers=config.matcher_workers, match_batch=config.match_batch,
                              claim_lease_s=config.claim_lease_s, gc_threshold0=config.gc_threshold0,
                              dispatch_senders=config.dispatch_senders)
    broker = Broker(store, ism, matchmaker, clock, state / "sandboxes", settings,
                    http=new_session(config.tls_files()))
    if config.peers:
        from .federation import attach
        attach(broker, config.peers, state, config.tls_files(), threshold_s=config.forward_wait_threshold_s,
               max_hops=config.federation_max_hops, relay_s=config.federation_relay_s,
               delegation_lifetime_s=config.delegation_lifetime_s, max_input_mb=config.max_body_mb,
               note_give_up_s=config.federation_note_give_up_s)
    return broker


def build_app(broker: Broker, config: BrokerConfig):
    """The broker's Flask app for ``config`` (with the gateway routes when it has peers)."""
    from .api import create_app

    app = create_app(broker, tls=config.tls_files(), admins=config.admins,
                     records_size=config.record_cache_size)
    app.config["MAX_CONTENT_LENGTH"] = int(config.max_body_mb * 1_000_000)
    if broker.federation is not None:
        broker.federation.install(app)
    from .metrics import install_broker_metrics
    install_broker_metrics(app, broker, config.metrics_dns, config.admins)   # GET /metrics
    if config.lean_reads:                        # GET /jobs/<key> in front of Flask
        from .read_path import install as install_lean_reads
        install_lean_reads(app, broker, config.admins)
    return app


def serve_broker(config: BrokerConfig, ready_file: str | None = None, reuse_port: bool = False) -> None:
    """Run the broker in the foreground until SIGTERM/SIGINT; with ``front_ends`` > 1 its
    front ends beside it on the same port (:mod:`broker.front_ends`; ``reuse_port``: bind
    with SO_REUSEPORT, as they do)."""
    from vgrid_runtime.wsgi import serve

    from . import front_ends
    broker = build_broker(config)
    app = build_app(broker, config)
    children: list = []

    def on_bound(url: str) -> None:
        broker.settings.base_url = url
        if config.front_ends > 1:
            children.extend(front_ends.spawn(config, int(url.rsplit(":", 1)[1])))
        if config.matcher:
            broker.ism.start()
            broker.start()
        if broker.federation is not None:
            broker.federation.start()

    def on_stop() -> None:
        front_ends.stop(children)
        if broker.federation is not None:
            broker.federation.stop()
        broker.stop()
        broker.ism.stop()
        broker.store.close()

    app.config["VGRID_ON_BOUND"] = on_bound
    serve(app, host=config.bind, port=config.port, ready_file=ready_file, on_stop=on_stop,
          tls=config.tls_files(), limits=config.serve_limits(),
          reuse_port=reuse_port or config.front_ends > 1)


def front_end_main() -> None:
    """A front end (:mod:`broker.front_ends`; argument: the broker's pid): the JSON
    configuration on standard input, served with SO_REUSEPORT."""
    import json
    import sys

    from . import front_ends
    front_ends.die_with_parent(int(sys.argv[1]))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    serve_broker(BrokerConfig.from_dict(json.loads(sys.stdin.read()), "front end"), reuse_port=True)


if __name__ == "__main__":
    front_end_main()
