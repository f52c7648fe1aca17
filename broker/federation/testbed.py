"""Several federated Grids in one process, for the federation benchmark (docs/experiments/federation.md).

Each Grid is a broker, one CE agent and one node agent, all real services on their own loopback
address (``<prefix>.1..``) over mutual TLS, with credentials made by a throw-away CA in
``work_dir`` (a host certificate per service, user proxies with VOMS attributes). With
``peering`` every broker has every other as a peer (priority = position); without, they are
independent Grids. Nothing here is a fake: it is the assembly of ``vgrid serve`` in threads.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path

from vgrid_runtime.clock import WallClock
from vgrid_runtime.pki import create_ca, issue_host, issue_user
from vgrid_runtime.proxy import create_proxy, write_proxy
from vgrid_runtime.tls import TLSFiles
from vgrid_runtime.voms import issue_ac
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.ce_agent import CEAgentConfig, create_app as ce_app
from vwn_agents.node_agent import NodeAgentConfig, create_app as node_app

from ..client import BrokerClient
from ..config import BrokerConfig
from ..server import build_app, build_broker


@dataclass
class GridSpec:
    """One Grid: its name, the VOs its CE admits, its VWN slots (one node, K slots)."""

    name: str
    vos: list[str]
    slots: int = 2


@dataclass
class Testbed:
    work: Path
    grids: list[GridSpec]
    peering: bool
    prefix: str = "127.0.16"
    broker_options: dict = field(default_factory=dict)
    users: dict = field(default_factory=lambda: {"alice": "dteam", "carol": "atlas"})

    def __post_init__(self) -> None:
        self.work = Path(self.work)
        self.urls: dict[str, str] = {}
        self.brokers: dict = {}
        self._servers: list = []

    def _ip(self, i: int) -> str:
        return f"{self.prefix}.{i}"

    def _pki(self) -> None:
        d = self.work / "pki"
        (d / "certs").mkdir(parents=True, exist_ok=True)
        now = WallClock().now()
        ca = create_ca(now=now)
        (d / "certs" / "ca.pem").write_bytes(ca.cert_pem())
        voms = issue_host(ca, "voms.vgrid.local", now=now)
        for vo in set(self.users.values()):
            (d / "vomsdir" / vo).mkdir(parents=True, exist_ok=True)
            (d / "vomsdir" / vo / "voms.pem").write_bytes(voms.cert_pem())
        self.dns = {}
        for i, g in enumerate(self.grids):
            for j, role in enumerate(("broker", "ce", "node")):
                name = f"{role}-{g.name}"
                cred = issue_host(ca, f"{name}.vgrid.local", [self._ip(3 * i + j + 1)], now=now)
                cred.save(d / f"{name}.pem", d / f"{name}.key")
                self.dns[name] = cred.dn
        for user, vo in self.users.items():
            cred = issue_user(ca, user.capitalize(), now=now)
            acs = [issue_ac(voms, vo, [f"/{vo}"], cred.cert, now, 3 * 3600)]
            write_proxy(d / f"{user}.proxy", create_proxy(cred, now, 3 * 3600, acs=acs))
        self.pki = d

    def _tls(self, name: str) -> dict:
        d = self.pki
        return {"tls_cert": str(d / f"{name}.pem"), "tls_key": str(d / f"{name}.key"),
                "cert_dir": str(d / "certs"), "voms_dir": str(d / "vomsdir")}

    def start(self) -> "Testbed":
        self._pki()
        for i, g in enumerate(self.grids):
            ip = self._ip(3 * i + 1)
            with socket.socket() as s:
                s.bind((ip, 0))
                self.urls[g.name] = f"https://{ip}:{s.getsockname()[1]}"
        for i, g in enumerate(self.grids):
            node_cfg = NodeAgentConfig(node=f"n-{g.name}", cgroup="none", work_dir=str(self.work / f"node-{g.name}"),
                                       ce_dns=[self.dns[f"ce-{g.name}"]], **self._tls(f"node-{g.name}"))
            node = BackgroundServer(node_app(node_cfg), host=self._ip(3 * i + 3), tls=node_cfg.tls_files())
            self._servers.append((node, None))
            ce_cfg = CEAgentConfig(ce_id=f"ce-{g.name}.vgrid.local:8443/vgrid-vwn-long",
                                   host=f"ce-{g.name}.vgrid.local", site=g.name, queue="long",
                                   nodes=[node.url], vos=g.vos, vwns_per_node=g.slots,
                                   broker_dns=[self.dns[f"broker-{g.name}"]], **self._tls(f"ce-{g.name}"))
            ce = BackgroundServer(ce_app(ce_cfg), host=self._ip(3 * i + 2), tls=ce_cfg.tls_files())
            self._servers.append((ce, None))
            vos = sorted(set(self.users.values()))
            peers = [{"name": o.name, "url": self.urls[o.name], "dn": self.dns[f"broker-{o.name}"],
                      "send_vos": vos, "accept_vos": vos, "share_cpus": o.slots, "priority": k}
                     for k, o in enumerate(self.grids) if o is not g] if self.peering else []
            cfg = BrokerConfig.from_dict({
                "state_dir": str(self.work / f"broker-{g.name}"), "ce_urls": [ce.url], "peers": peers,
                "bind": self._ip(3 * i + 1), **self._tls(f"broker-{g.name}"), **self.broker_options})
            broker = build_broker(cfg)
            srv = BackgroundServer(build_app(broker, cfg), host=self._ip(3 * i + 1),
                                   port=int(self.urls[g.name].rsplit(":", 1)[1]), tls=cfg.tls_files())
            self._servers.append((srv, broker))
            broker.settings.base_url = srv.url
            broker.ism.start()
            broker.start()
            if broker.federation is not None:
                broker.federation.start()
            self.brokers[g.name] = broker
        return self

    def client(self, user: str, grid: str) -> BrokerClient:
        d = self.pki
        return BrokerClient(self.urls[grid], credentials=TLSFiles(
            cert=str(d / f"{user}.proxy"), key=None, cert_dir=str(d / "certs"), voms_dir=str(d / "vomsdir")))

    def delegate_all(self) -> None:
        """Every user delegates to every broker (what ``vgrid delegate`` does)."""
        for user in self.users:
            for g in self.grids:
                self.client(user, g.name).delegate(self.pki / f"{user}.proxy", WallClock().now(), 3600)

    def stop(self) -> None:
        for srv, broker in reversed(self._servers):
            if broker is not None:
                if broker.federation is not None:
                    broker.federation.stop()
                broker.stop()
                broker.ism.stop()
            srv.close()
            if broker is not None:
                broker.store.close()
        self._servers.clear()
