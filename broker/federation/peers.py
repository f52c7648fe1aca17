"""Peering arrangements of a broker acting as an InterGrid Gateway (seed 002 Section 4.1).

Each ``[[peers]]`` table of the broker configuration is a :class:`PeerConfig`: the peer's broker
URL and host DN (mutual TLS), the VOs we forward to it and those we accept from it, its share of
our CPUs and its priority. :class:`Peers` answers the questions the gateway asks: which peer is
at a URL, which peer is the caller, which ads of the ISM are peers (their
``GlueCEInfoContactString`` is ``<peer url>/federation``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

from vgrid_runtime.authn import Caller

from ..selection import ad_value

#: Path of the gateway API under a broker's URL; a peer's CE-like ad publishes it as contact string.
GATEWAY_PATH = "/federation"
#: GlueCEInfoLRMSType of a peer's aggregate ad.
PEER_LRMS = "vgrid-gateway"


def _opt(default: Any, doc: str):
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": doc})
    return field(default=default, metadata={"help": doc})


@dataclass
class PeerConfig:
    """One peering arrangement (a ``[[peers]]`` table of the broker configuration)."""

    name: str = _opt("", "short name of the peer (history rows, metrics)")
    url: str = _opt("", "the peer broker's base URL (https://host:port), as its host certificate serves it")
    dn: str = _opt("", "the peer's host certificate DN; when set, a caller claiming to be the peer "
                   "must present exactly this DN (besides serving the URL's host)")
    send_vos: list[str] = _opt([], "VOs whose jobs we may forward to this peer (it accepts them "
                                   "from us); empty: none")
    accept_vos: list[str] = _opt([], "VOs whose jobs we accept from this peer; empty: none")
    share_cpus: int = _opt(0, "the most CPUs this peer's forwarded jobs may use here at once "
                              "(our aggregate ad to it publishes no more free CPUs)")
    priority: int = _opt(0, "peers are tried in ascending priority; among equals the selection "
                            "policy chooses")

    def validate(self) -> str | None:
        if not self.name:
            return "a peer needs a 'name'"
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return f"peer {self.name!r}: 'url' must be http(s)://host:port, got {self.url!r}"
        if self.share_cpus < 0:
            return f"peer {self.name!r}: 'share_cpus' must be >= 0"
        return None

    @property
    def base(self) -> str:
        return self.url.rstrip("/")

    @property
    def gateway_url(self) -> str:
        """The URL its aggregate ad publishes as GlueCEInfoContactString."""
        return self.base + GATEWAY_PATH

    def sends(self, vo: str | None) -> bool:
        """Whether a job of ``vo`` may be forwarded to this peer (no VO: plain-HTTP mode, any)."""
        return vo is None or vo.lower() in {v.lower() for v in self.send_vos}

    def accepts(self, vo: str | None) -> bool:
        """Whether a job of ``vo`` forwarded by this peer is accepted here."""
        return vo is not None and vo.lower() in {v.lower() for v in self.accept_vos}


class Peers:
    """The configured peers, looked up by URL, ad and caller. ``own_url``: this broker's base
    URL (its gateway identity in a job's list of gateways passed)."""

    def __init__(self, peers: Iterable[PeerConfig]) -> None:
        self.list = sorted(peers, key=lambda p: (p.priority, p.name))
        self._by_gateway = {p.gateway_url: p for p in self.list}
        names = [p.name for p in self.list]
        if len(set(names)) != len(names):
            raise ValueError(f"peer names must be unique, got {names}")

    def __bool__(self) -> bool:
        return bool(self.list)

    def by_gateway(self, url: str | None) -> PeerConfig | None:
        """The peer whose gateway URL is ``url`` (a job's ``ce_url`` or an ad's contact string)."""
        return self._by_gateway.get((url or "").rstrip("/"))

    def by_name(self, name: str) -> PeerConfig | None:
        return next((p for p in self.list if p.name == name), None)

    def of_ad(self, ad: Mapping[str, Any]) -> PeerConfig | None:
        """The peer an ISM ad stands for (its contact string is a peer's gateway URL), or None."""
        v = ad_value(ad, "GlueCEInfoContactString")
        for value in ([v] if isinstance(v, str) else v or []):
            peer = self.by_gateway(value) if isinstance(value, str) else None
            if peer is not None:
                return peer
        return None

    def calling(self, who: Caller) -> PeerConfig | None:
        """The peer the authenticated caller is (its certificate serves the peer's URL and, if
        configured, has the peer's DN); None for anyone else, and in plain-HTTP mode (no
        identity: a test mode where the peer is named by the ``origin`` field instead)."""
        if who.identity is None:
            return None
        for p in self.list:
            if who.serves(p.url) and (not p.dn or who.dn == p.dn):
                return p
        return None
