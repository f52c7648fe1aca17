"""The matcher's cheaper hot path of session 7 (issue 12): bulk dispatch POSTs over kept-alive
``http.client`` connections (``vgrid_runtime.keptalive``; plain and mutual TLS, typed errors,
a stale connection retried once, proxies and foreign sessions left to requests), several POSTs
in flight at once (``dispatch_senders``: the same records as one after another) and the claim
that returns only the matcher's columns (the same values as a full read)."""
from __future__ import annotations

import socket
import threading

import pytest

from broker.bulk_store import CLAIM_COLUMNS
from broker.db import JobStore
from vgrid_runtime.httpclient import ErrorKind, new_session
from vgrid_runtime.job_states import JobState
from vgrid_runtime.tls import TLSFiles
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.bulk_receiver import SimulatedCEs
from vwn_agents.ce_agent import CEAgentConfig, create_app
from vwn_agents.ce_client import CEAgentClient, CEAgentError

from .pki_site import site_pki, tls_fields
from .test_bulk_dispatch import body, broker_on
from .test_broker_api import ce_ad

JDL = '[ Executable = "/bin/true"; ]'
W, R, S = JobState.WAITING, JobState.READY, JobState.SCHEDULED


@pytest.fixture
def ces():
    ces = SimulatedCEs()
    server = BackgroundServer(ces.app)
    yield ces, server
    server.close()


def test_bulk_posts_reuse_one_kept_alive_connection(ces):
    sim, server = ces
    session = new_session()
    client = CEAgentClient(f"{server.url}/ce/a", session=session)
    for i in range(5):
        assert [r["accepted"] for r in client.submit_many([body(f"k{i}a"), body(f"k{i}b")])] == [True, True]
    pool = session.kept_alive(server.url)
    assert pool is not None and pool.opened == 1          # five POSTs, one connection
    assert sim.stats() == {"posts": 5, "jobs": 10, "duplicates": 0, "ces": 1}
    # a repeated POST answers the same keys again, creating nothing (contract 7)
    again = client.submit_many([body("k0a")])
    assert again[0]["accepted"] is True and again[0]["created"] is False
    session.close()


def test_a_connection_the_server_closed_is_replaced_once(ces):
    sim, server = ces
    session = new_session()
    client = CEAgentClient(f"{server.url}/ce/a", session=session)
    client.submit_many([body("s1")])
    port = int(server.url.rsplit(":", 1)[1])
    server.close()                                         # the kept-alive connection dies with it
    second = BackgroundServer(sim.app, port=port)          # same address, a new server
    try:
        assert client.submit_many([body("s2")])[0]["accepted"] is True
        assert session.kept_alive(server.url).opened == 2
        assert sim.stats()["duplicates"] == 0
    finally:
        second.close()
        session.close()


def test_no_answer_is_a_typed_error_like_requests_gives():
    with socket.socket() as free:                          # a port nobody listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    client = CEAgentClient(f"http://127.0.0.1:{port}", session=new_session(), timeout_s=2)
    with pytest.raises(CEAgentError) as err:
        client.submit_many([body("u1")])
    assert (err.value.kind, err.value.status, err.value.brief()) == (ErrorKind.UNREACHABLE, None, "ConnectionError")

    silent = socket.socket()                               # accepts (backlog), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    try:
        client = CEAgentClient(f"http://127.0.0.1:{silent.getsockname()[1]}", session=new_session(), timeout_s=0.5)
        with pytest.raises(CEAgentError) as err:
            client.submit_many([body("t1")])
        assert (err.value.kind, err.value.status, err.value.brief()) == (ErrorKind.TIMEOUT, None, "ReadTimeout")
    finally:
        silent.close()


def test_http_errors_and_bad_answers_are_typed(ces):
    _, server = ces
    client = CEAgentClient(server.url, session=new_session())
    with pytest.raises(CEAgentError) as err:               # no such route on the receiver
        client._post_json_lean("/nowhere", {"jobs": []})
    assert err.value.kind is ErrorKind.HTTP and err.value.status == 404
    with pytest.raises(CEAgentError) as err:               # 200 but not the promised object
        client._post_json_lean("/ce/x/jobs/bulk", {"jobs": [body("b1")]}, required=("nothing",))
    assert err.value.kind is ErrorKind.BAD_ANSWER and err.value.status == 200


def test_proxies_and_foreign_sessions_take_the_requests_path(ces, monkeypatch):
    _, server = ces
    session = new_session()
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")   # a proxy applies: requests must send it
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert session.kept_alive("http://ce.example.org:8443/jobs/bulk") is None
    plain = new_session()
    assert plain.kept_alive("https://ce.example.org:8443/jobs/bulk") is None   # no mutual-TLS context
    plain.auth = ("u", "p")
    assert plain.kept_alive("http://ce.example.org:8443/jobs/bulk") is None


def test_mutual_tls_dispatch_over_kept_alive_connections(tmp_path):
    """A real CE agent over mutual TLS: the broker's credential is presented and the CE's
    certificate checked (a wrong host name fails as SSLError, a stranger is refused 403)."""
    addr = {"broker": "127.0.18.1", "ce": "127.0.18.2", "other": "127.0.18.3"}
    _, _, dns, _ = site_pki(tmp_path, addr)
    cfg = CEAgentConfig(ce_id="ce.vgrid.local:8443/vgrid-vwn-long", host="ce.vgrid.local", site="S", queue="long",
                        nodes=[], vos=["dteam"], broker_dns=[dns["broker"]], state_dir=str(tmp_path / "ce"),
                        **tls_fields(tmp_path, "ce"))
    server = BackgroundServer(create_app(cfg), host=addr["ce"], tls=cfg.tls_files())
    # the same CE agent presenting another host's certificate (made for 127.0.18.3)
    cfg2 = CEAgentConfig(**{**cfg.__dict__, "state_dir": str(tmp_path / "ce2"), **tls_fields(tmp_path, "other")})
    impostor = BackgroundServer(create_app(cfg2), host=addr["ce"], tls=cfg2.tls_files())

    def files(name):
        return TLSFiles(cert=str(tmp_path / f"{name}.pem"), key=str(tmp_path / f"{name}.key"),
                        cert_dir=str(tmp_path / "certs"), voms_dir=str(tmp_path / "vomsdir"))
    try:
        session = new_session(files("broker"))
        client = CEAgentClient(server.url, session=session)
        for i in range(3):
            assert client.submit_many([body(f"m{i}")])[0]["accepted"] is True
        assert session.kept_alive(server.url).opened == 1
        port = int(server.url.rsplit(":", 1)[1])
        server.close()                                      # its TLS connection dies with it
        server = BackgroundServer(create_app(cfg), host=addr["ce"], port=port, tls=cfg.tls_files())
        assert client.submit_many([body("m0")])[0]["accepted"] is True   # stored: the same key again
        assert session.kept_alive(server.url).opened == 2
        other = CEAgentClient(server.url, session=new_session(files("other")))   # a host, not a broker
        with pytest.raises(CEAgentError) as err:
            other.submit_many([body("x1")])
        assert err.value.kind is ErrorKind.HTTP and err.value.status == 403
        with pytest.raises(CEAgentError) as err:                # its name is not the address called
            CEAgentClient(impostor.url, session=session, timeout_s=5).submit_many([body("x2")])
        assert (err.value.kind, err.value.brief()) == (ErrorKind.UNREACHABLE, "SSLError")
    finally:
        impostor.close()
        server.close()


def test_senders_record_what_one_sender_records(tmp_path):
    """Ten CEs, one of them unreachable: four senders in flight give every job the same end as
    one sender (Scheduled once at its CE, or back to Waiting with the typed reason)."""
    ends = {}
    for senders in (1, 4):
        sim = SimulatedCEs()
        server = BackgroundServer(sim.app)
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            dead = f"http://127.0.0.1:{free.getsockname()[1]}"
        ads = [{**ce_ad(f"ce-{i}:8443/vgrid-vwn-long", 4, 1000),
                "GlueCEInfoContactString": [dead if i == 0 else f"{server.url}/ce/{i}"]} for i in range(10)]
        work = tmp_path / f"s{senders}"
        work.mkdir()
        broker = broker_on(work, ads, dispatch_senders=senders)
        threads_before = threading.active_count()
        try:
            keys = [broker.store.create_many([{"jdl": f'[ Executable = "/bin/true"; Arguments = "{i}"; ]',
                                               "filename": "j.jdl", "key": f"j{i:03d}", "state": W}], 1000.0)[0].key
                    for i in range(200)]
            broker.match_pending()
            jobs = broker.store.list(keys=keys)
            ends[senders] = sorted((j.key, j.state.value, j.ce_id, j.dispatch_attempts, j.reason) for j in jobs)
            assert sim.stats()["duplicates"] == 0
            assert sim.stats()["jobs"] == sum(1 for j in jobs if j.state is S)
            assert all("unreachable: ConnectionError" in j.reason for j in jobs if j.state is W)
        finally:
            broker.dispatcher.close()
            server.close()
            broker.store.close()
        assert threading.active_count() <= threads_before     # the sender threads ended with close()
    assert ends[1] == ends[4]
    assert {e[1] for e in ends[4]} == {S.value, W.value}      # both outcomes happened


@pytest.mark.parametrize("tier", ["sqlite", "postgresql"])
def test_a_claimed_job_carries_the_matchers_columns_as_stored(tier, tmp_path, request):
    url = f"sqlite:///{tmp_path / 'j.db'}" if tier == "sqlite" else request.getfixturevalue("pg_url")
    store = JobStore(url)
    try:
        specs = [{"jdl": JDL, "filename": f"j{i}.jdl", "key": f"c{tier[0]}{i:03d}", "state": W,
                  "owner": {"dn": "/DC=org/CN=alice", "vo": "dteam", "fqans": ["/dteam", "/dteam/prod"]},
                  "match_class": f"class{i % 3}", "input_sandbox": ["a.txt"] if i % 2 else []}
                 for i in range(30)]
        created = store.create_many(specs, 1.0)
        first = store.claim(2.0, 10, owner="me")
        rest = store.claim(2.0, 100, after=(first[-1].submitted_at, first[-1].key), owner="me")
        claimed = first + rest
        assert [j.key for j in claimed] == sorted(j.key for j in created)[:len(claimed)] and len(claimed) == 30
        fields = [f for f in CLAIM_COLUMNS if f != "dispatch_key"] + ["dispatch_key"]
        for job in claimed:
            full = store.get(job.key)
            assert full.state is R
            assert {f: getattr(job, f) for f in fields} == {f: getattr(full, f) for f in fields}
    finally:
        store.close()


def test_tune_gc_freezes_the_startup_heap_once(monkeypatch):
    """``gc_threshold0`` > 0: the threshold is set and the objects alive at the first call are
    frozen once per process (later brokers in the process do not freeze again); 0: nothing."""
    import gc
    from types import SimpleNamespace

    from broker import matcher_worker

    frozen = []
    monkeypatch.setattr(matcher_worker.gc, "freeze", lambda: frozen.append(1))
    monkeypatch.setattr(matcher_worker, "_frozen", False)
    before = gc.get_threshold()
    try:
        matcher_worker.tune_gc(SimpleNamespace(gc_threshold0=0))
        assert frozen == [] and gc.get_threshold() == before
        matcher_worker.tune_gc(SimpleNamespace(gc_threshold0=12_345))
        matcher_worker.tune_gc(SimpleNamespace(gc_threshold0=12_345))
        assert frozen == [1] and gc.get_threshold()[0] == 12_345
    finally:
        gc.set_threshold(*before)


def test_idle_connections_stay_bounded_across_many_ces():
    """One kept-alive connection per CE host would hold thousands of file descriptors; beyond
    ``max_idle`` the least recently used idle connection is closed (and reopened when needed)."""
    from vgrid_runtime.keptalive import KeptAlive

    sims = [SimulatedCEs() for _ in range(4)]
    servers = [BackgroundServer(s.app) for s in sims]
    pool = KeptAlive(max_idle=2)
    try:
        for rnd in range(2):
            for i, server in enumerate(servers):
                status, data = pool.post_json(f"{server.url}/ce/x/jobs/bulk",
                                              f'{{"jobs": [{{"key": "r{rnd}s{i}", "jdl": "[]"}}]}}'.encode(), 10)
                assert status == 200 and b'"accepted":true' in data.replace(b" ", b"")
                assert pool.idle() <= 2
        assert pool.opened == 8                 # every host's connection was evicted before reuse
        status, _ = pool.post_json(f"{servers[3].url}/ce/x/jobs/bulk", b'{"jobs": []}', 10)
        assert status == 200 and pool.opened == 8   # the most recent one was kept
        assert [s.stats()["duplicates"] for s in sims] == [0, 0, 0, 0]
    finally:
        pool.close()
        for server in servers:
            server.close()
