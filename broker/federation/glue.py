"""The aggregate a gateway publishes to one peer: all its local CEs as one GLUE 1.3 CE.

A peer's ISM reads it (``GET /federation/glue``, peers only) like any CE's GIP, so the peer's
matchmaker sees this Grid as one candidate CE (issue 15). The aggregate of the local ads
(never of ads of other peers: a gateway does not re-advertise what it cannot serve itself):

* GlueCEInfoTotalCPUs: the CPUs of the Production CEs, at most the peer's ``share_cpus``;
* GlueCEStateFreeCPUs: free CPUs, at most the share left (share minus the CPUs of the peer's
  forwarded jobs not yet ended here); Status ``Draining`` when the share is used up;
* GlueCEStateRunningJobs / WaitingJobs: sums; GlueCEStateEstimatedResponseTime: the lowest
  of the Production CEs (the wait of a job sent here and matched to the best CE);
* GlueHostBenchmarkSI00: CPU-weighted mean; host attributes (OS, software, memory) of the
  CE with the most CPUs; GlueCEAccessControlBaseRule: the VOs we accept from that peer that
  some local CE admits; GlueCEInfoContactString: ``<our URL>/federation``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit

from infosys.gip import CEState, ce_state_from_ad, render_glue13

from .peers import GATEWAY_PATH, PEER_LRMS, PeerConfig, Peers


def gateway_ce_id(base_url: str) -> str:
    """The GlueCEUniqueID of a gateway's aggregate: ``host:port/vgrid-gateway-federation``."""
    return f"{urlsplit(base_url).netloc}/{PEER_LRMS}-federation"


def aggregate(ads: Sequence[Mapping[str, Any]], peers: Peers, peer: PeerConfig, base_url: str,
              used_cpus: int) -> CEState:
    """The CEState published to ``peer`` from the ISM ``ads`` (see the module doc);
    ``used_cpus``: CPUs of ``peer``'s forwarded jobs not yet ended here."""
    states = []
    for ad in ads:
        if peers.of_ad(ad) is not None or not ad.get("GlueCEUniqueID"):
            continue
        try:
            states.append(ce_state_from_ad(dict(ad)))
        except (KeyError, TypeError, ValueError):
            continue
    prod = [s for s in states if s.status == "Production"]
    share_left = max(0, peer.share_cpus - used_cpus)
    total = sum(s.total_cpus for s in prod)
    vos = sorted({v for s in prod for v in s.vos if peer.accepts(v)})
    biggest = max(prod, key=lambda s: s.total_cpus, default=None)
    host = urlsplit(base_url).hostname or "gateway"
    return CEState(
        ce_id=gateway_ce_id(base_url), host=host, site=f"gateway-{host}", queue="federation",
        status="Production" if prod and share_left > 0 and vos else "Draining",
        lrms_type=PEER_LRMS, total_cpus=max(1, min(total, peer.share_cpus)),
        free_cpus=min(sum(s.free_cpus for s in prod), share_left),
        running=sum(s.running for s in states), waiting=sum(s.waiting for s in states),
        ert_s=min((s.ert_s for s in prod), default=0),
        si00=round(sum(s.si00 * s.total_cpus for s in prod) / total) if total else 1000,
        ram_mb=biggest.ram_mb if biggest else 1024, vos=vos,
        os_name=biggest.os_name if biggest else None,
        os_release=biggest.os_release if biggest else None,
        arch=biggest.arch if biggest else None,
        software=sorted({sw for s in prod for sw in s.software}),
        max_wallclock_s=max((s.max_wallclock_s for s in prod), default=0),
        contact_string=base_url.rstrip("/") + GATEWAY_PATH)


def render(ads, peers: Peers, peer: PeerConfig, base_url: str, used_cpus: int) -> str:
    """The GLUE 1.3 LDIF of :func:`aggregate`."""
    return render_glue13(aggregate(ads, peers, peer, base_url, used_cpus))
