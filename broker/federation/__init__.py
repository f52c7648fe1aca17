"""Federation of brokers through peering gateways (seed 002 Section 4.1, InterGrid; issue 15).

A broker with ``[[peers]]`` in its configuration is a gateway: it publishes an aggregate of its
CEs to each peer (:mod:`.glue`), sees each peer as one CE-like ad in its ISM, forwards a job to a
peer by the forwarding policy (:mod:`.policy`) through the CE agent contract (:mod:`.forwarding`,
the one hook in :meth:`broker.service.Broker.ce_client`), with a delegated proxy of the owner
(:mod:`.delegations`, :mod:`vgrid_runtime.delegation`), and receives peers' jobs as external
requests (:mod:`.gateway`, :mod:`.received`), reporting them back (:mod:`.relay`).
docs/federation.md describes the whole.

:func:`attach` wires a federation into a built broker; :meth:`Federation.install` adds the
gateway routes to its Flask app; ``start``/``stop`` run the relay loop.
"""
from __future__ import annotations

from pathlib import Path

from .delegations import DelegationStore
from .forwarding import Forwarder
from .notes import NoteRelay
from .peers import PeerConfig, Peers
from .policy import FederatedChooser
from .received import ReceivedStore
from .relay import Relay

__all__ = ["Federation", "PeerConfig", "Peers", "attach"]


class Federation:
    """The gateway role of ``broker``. ``peers``: :class:`Peers`; ``state_dir``: where delegated
    proxies are kept; ``tls``: the broker's ``TLSFiles`` (None: plain-HTTP test mode, no
    delegation); knobs in seconds: ``threshold_s`` (forward_wait_threshold_s), ``relay_s``,
    ``delegation_lifetime_s``, ``note_give_up_s`` (a note to an origin is retried this long; its
    retries start at min(1, relay_s) and back off to 4 x relay_s); ``max_hops``;
    ``max_input_mb`` bounds a fetched input sandbox."""

    def __init__(self, broker, peers: Peers, state_dir: Path, tls=None, threshold_s: float = 600.0,
                 max_hops: int = 2, relay_s: float = 5.0, delegation_lifetime_s: float = 3600.0,
                 max_input_mb: float = 100.0, timeout_s: float = 10.0, note_give_up_s: float = 604800.0) -> None:
        self.broker, self.peers, self.tls = broker, peers, tls
        self.note_retry_initial_s, self.note_retry_max_s = min(1.0, relay_s), 4 * relay_s
        self.note_give_up_s = note_give_up_s
        self.notes: NoteRelay | None = None
        self.threshold_s, self.max_hops, self.relay_s = threshold_s, max_hops, relay_s
        self.delegation_lifetime_s, self.timeout_s = delegation_lifetime_s, timeout_s
        self.max_input_bytes = int(max_input_mb * 1_000_000)
        self.delegations = DelegationStore(Path(state_dir) / "delegations")
        self.received = ReceivedStore(broker.store.engine)
        self.relay = Relay(self)
        self.vomsdir = Path(tls.voms_dir) if tls is not None and tls.voms_dir else None

    def client(self, url: str | None) -> Forwarder | None:
        """The forwarder to the peer whose gateway is ``url``; None for a CE agent's URL."""
        peer = self.peers.by_gateway(url)
        if peer is None:
            return None
        return Forwarder(peer.gateway_url, self.broker.http, self.broker.settings.dispatch_timeout_s,
                         self.broker, self, peer)

    def install(self, app) -> None:
        """Add the gateway routes (:mod:`.gateway`) to the broker's Flask app."""
        from .gateway import blueprint
        app.register_blueprint(blueprint(self))

    def start(self) -> None:
        self.relay.start()

    def stop(self) -> None:
        self.relay.stop()
        if self.notes is not None:
            self.notes.close()


def attach(broker, peers: list[PeerConfig], state_dir: Path, tls=None, **knobs) -> Federation:
    """Make ``broker`` a gateway to ``peers``: its dispatch reaches peers through forwarders and
    its chooser applies the forwarding policy. Returns the :class:`Federation` (its routes still
    to be installed on the app, its relay to be started once the broker's URL is known)."""
    fed = Federation(broker, Peers(peers), state_dir, tls, **knobs)
    broker.federation = fed
    fed.notes = NoteRelay(fed)   # suspended / resumed / requeued notes go to their origins, durably
    broker.queues = FederatedChooser(broker.queues, fed.peers, lambda: broker.settings.base_url,
                                     fed.threshold_s, fed.max_hops)
    return fed


def peer_glue_url(peer: PeerConfig) -> str:
    """Where this broker's ISM reads ``peer``'s aggregate: ``<peer>/federation/glue``."""
    return peer.gateway_url + "/glue"

