"""Federation parts without services: the forwarding policy (a property test against its
definition), proxy delegation (RFC 3820 path length), the aggregate GLUE and the peers config."""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings, strategies as st

import jdl as jdlmod
from broker.config import BrokerConfig, ConfigError
from broker.federation.glue import aggregate
from broker.federation.peers import PeerConfig, Peers
from broker.federation.policy import FederatedChooser, estimated_wait
from broker.matchmaker import Matchmaker
from broker.taskqueues import TaskQueues
from infosys.feedback import FeedbackCounters
from vgrid_runtime.delegation import DelegationError, accept, can_delegate, new_request, sign_request
from vgrid_runtime.pki import CredentialError, create_ca, issue_user
from vgrid_runtime.proxy import create_proxy

OWN = "https://own.example:1"
PEERS = [PeerConfig(name="p1", url="https://p1.example:1", send_vos=["dteam"], priority=0),
         PeerConfig(name="p2", url="https://p2.example:1", send_vos=["dteam"], priority=1)]


def ad(ce: str, ert: int, contact: str | None = None, vos=("dteam",), free: int = 4) -> dict:
    return {"GlueCEUniqueID": ce, "GlueCEStateStatus": "Production", "GlueCEInfoTotalCPUs": 4,
            "GlueCEStateFreeCPUs": free, "GlueCEStateEstimatedResponseTime": ert,
            "GlueCEStateRunningJobs": 0, "GlueCEStateWaitingJobs": 0, "GlueHostBenchmarkSI00": 1000,
            "GlueCEAccessControlBaseRule": [f"VO:{v}" for v in vos],
            "GlueCEInfoContactString": [contact or f"https://{ce.split('/')[0]}"]}


def chooser(threshold: float, max_hops: int = 2) -> FederatedChooser:
    mm = Matchmaker(FeedbackCounters(), rng=random.Random(1))
    return FederatedChooser(TaskQueues(mm), Peers(PEERS), lambda: OWN, threshold, max_hops)


def job(gateways=(), hops=0, extra="") -> jdlmod.JobDescription:
    gw = ", ".join(f'"{g}"' for g in gateways)
    return jdlmod.parse_jdl(f'[ Executable = "/bin/true"; VgridGateways = {{ {gw} }}; VgridHops = {hops}; {extra} ]')


@settings(max_examples=60, deadline=None)
@given(local=st.lists(st.integers(0, 2000), max_size=3), p1=st.one_of(st.none(), st.integers(0, 2000)),
       p2=st.one_of(st.none(), st.integers(0, 2000)), threshold=st.sampled_from([-1.0, 0.0, 300.0, 600.0]),
       passed=st.sets(st.sampled_from(["p1", "p2"])), hops=st.integers(0, 3))
def test_forwarding_policy_follows_its_definition(local, p1, p2, threshold, passed, hops):
    ads = [ad(f"l{i}.example:8443/vgrid-vwn-q", e) for i, e in enumerate(local)]
    peer_ert = {"p1": p1, "p2": p2}
    for p in PEERS:
        if peer_ert[p.name] is not None:
            ads.append(ad(f"{p.name}.example:1/vgrid-gateway-federation", peer_ert[p.name], p.gateway_url))
    ads = tuple(ads)
    c = chooser(threshold)
    chosen = c.choose(job([p.base for p in PEERS if p.name in passed], hops), ads, now=0.0, vo="dteam")
    # the local choice is the selection code's (a fresh chooser, same seed: the same choice);
    # the policy only decides whether it stands
    local_choice = chooser(threshold).inner.choose(job(), tuple(a for a in ads if "gateway" not in a["GlueCEUniqueID"]),
                                  now=0.0, vo="dteam")
    wait = estimated_wait(local_choice.ad) if local_choice else math.inf
    may_leave = hops < 2 and (local_choice is None or (threshold >= 0 and wait > threshold))
    offered = [(p.priority, p.name) for p in PEERS
               if peer_ert[p.name] is not None and p.name not in passed]
    expected = None
    if may_leave:
        for _, name in sorted(offered):    # one peer per priority level here
            if local_choice is None or peer_ert[name] < wait:
                expected = name
                break
    if expected is None:
        assert (chosen is None) == (local_choice is None)
        if chosen is not None:
            assert "gateway" not in chosen.ce_id
    else:
        assert chosen is not None and chosen.ce_id.startswith(expected), (chosen, expected)
    assert (local_choice is None) == (not local)


def test_a_vo_not_sent_to_a_peer_stays_local():
    ads = (ad("l.example:8443/vgrid-vwn-q", 5000, vos=("atlas",)),
           ad("p1.example:1/vgrid-gateway-federation", 1, PEERS[0].gateway_url, vos=("atlas",)))
    chosen = chooser(10).choose(job(), ads, now=0.0, vo="atlas")
    assert chosen.ce_id.startswith("l.")


@pytest.fixture(scope="module")
def user():
    ca = create_ca(now=1_000_000)
    return ca, issue_user(ca, "Alice", now=1_000_000)


def test_delegation_signs_a_proxy_for_the_requesters_key_only(user):
    ca, cred = user
    proxy = create_proxy(cred, 1_000_000, 3600)
    key, csr = new_request()
    chain = sign_request(proxy, csr, 1_000_100, 600)
    delegated, ident = accept(key, chain, [ca.cert], 1_000_200)
    assert ident.dn == cred.dn and ident.proxy_depth == 2
    assert delegated.cert.not_valid_after_utc.timestamp() == pytest.approx(1_000_700, abs=1)
    other, _ = new_request()
    with pytest.raises(DelegationError) as err:
        accept(other, chain, [ca.cert], 1_000_200)
    assert err.value.reason == "wrong-key"
    with pytest.raises(CredentialError):
        accept(key, chain, [ca.cert], 1_000_800)       # expired
    with pytest.raises(DelegationError) as err:
        sign_request(proxy, b"not a request", 1_000_100, 600)
    assert err.value.reason == "bad-request"


@pytest.mark.parametrize("plen, levels, allowed", [(None, 1, True), (0, 1, False), (1, 1, True),
                                                   (1, 2, False), (2, 2, True)])
def test_path_length_decides_whether_a_further_proxy_may_be_signed(user, plen, levels, allowed):
    ca, cred = user
    proxy = create_proxy(cred, 1_000_000, 3600, path_len=plen)
    for _ in range(levels - 1):          # proxies already delegated below the constrained one
        key, csr = new_request()
        proxy, _ = accept(key, sign_request(proxy, csr, 1_000_000, 600), [ca.cert], 1_000_000)
    assert can_delegate(proxy) is allowed
    key, csr = new_request()
    if allowed:
        accept(key, sign_request(proxy, csr, 1_000_000, 600), [ca.cert], 1_000_000)
    else:
        with pytest.raises(DelegationError) as err:
            sign_request(proxy, csr, 1_000_000, 600)
        assert err.value.reason == "path-length"


def test_aggregate_caps_by_the_share_and_drains_when_it_is_used():
    peers = Peers([PeerConfig(name="p", url="https://p.example:1", accept_vos=["dteam"], share_cpus=3)])
    ads = [ad("l1.example:8443/vgrid-vwn-q", 100, free=4), ad("l2.example:8443/vgrid-vwn-q", 40, free=2),
           ad("x.example:1/vgrid-gateway-federation", 1, "https://p.example:1/federation")]
    state = aggregate(ads, peers, peers.list[0], "https://me.example:9", used_cpus=1)
    assert (state.total_cpus, state.free_cpus, state.ert_s, state.vos) == (3, 2, 40, ["dteam"])
    assert state.contact_string == "https://me.example:9/federation" and state.status == "Production"
    assert aggregate(ads, peers, peers.list[0], "https://me.example:9", used_cpus=3).status == "Draining"


def test_peers_config_tables_are_checked():
    cfg = BrokerConfig.from_dict({"peers": [{"name": "b", "url": "https://b:1", "share_cpus": 2}]})
    assert cfg.peers[0].share_cpus == 2 and isinstance(cfg.peers[0], PeerConfig)
    for bad, word in (({"name": "b", "url": "ftp://b"}, "url"), ({"name": "b", "url": "https://b:1", "shares": 1}, "shares"),
                      ({"url": "https://b:1"}, "name")):
        with pytest.raises(ConfigError, match=word):
            BrokerConfig.from_dict({"peers": [bad]})
    with pytest.raises(ConfigError, match="unique"):
        BrokerConfig.from_dict({"peers": [{"name": "b", "url": "https://b:1"}, {"name": "b", "url": "https://c:1"}]})


def test_a_peer_whose_share_is_used_since_the_refresh_is_passed_over():
    full = ad("p1.example:1/vgrid-gateway-federation", 1, PEERS[0].gateway_url, free=1)
    full["VGridDispatchedSinceRefresh"] = 1        # the feedback counter: one sent since
    other = ad("p2.example:1/vgrid-gateway-federation", 1, PEERS[1].gateway_url, free=1)
    chosen = chooser(-1).choose(job(), (full, other), now=0.0, vo="dteam")
    assert chosen.ce_id.startswith("p2"), "priority 0 is full: the next level is offered"
    assert chooser(-1).choose(job(), (full,), now=0.0, vo="dteam") is None


def test_note_ids_name_the_event_not_the_delivery():
    """broker.federation.notes: the same CE event gives the same note id (a repeat is recorded
    once at the origin); another event, time, job or gateway gives another."""
    from broker.federation.notes import note_id, note_mark
    ev = {"event": "suspended", "key": "k-1", "vwn": "vwn-n-1", "time": 12.5}
    one = note_id("https://b:1", "job-1", ev)
    assert one == note_id("https://b:1", "job-1", dict(ev)) and len(one) == 24
    others = {note_id("https://b:1", "job-1", {**ev, "event": "resumed"}),
              note_id("https://b:1", "job-1", {**ev, "time": 13.0}),
              note_id("https://b:1", "job-2", ev), note_id("https://c:1", "job-1", ev)}
    assert one not in others and len(others) == 4
    assert note_mark(one) == f"[note {one}]"
