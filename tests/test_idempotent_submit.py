"""Idempotent submission (issue 11) over a real loopback broker: the ``Idempotency-Key`` header,
its 200/409 answers, a race of one key, an older database, and the client's retry after a
connection the network dropped once the broker had stored the job.
"""
import socket
import sqlite3
import threading
import uuid

import pytest
import requests

from broker.client import BrokerClient, ClientError
from broker.db import JobStore

from .test_broker_api import site  # noqa: F401  (the loopback broker fixture)

JDL = '[ Executable = "/bin/true"; ]'


def post(url, key, jdl=JDL):
    return requests.post(f"{url}/jobs", data={"jdl": jdl, "filename": "j.jdl"},
                         headers={"Idempotency-Key": key}, timeout=10)


def test_a_repeat_answers_the_first_job_and_stores_nothing(site):
    url, broker = site
    key = str(uuid.uuid4())
    first = post(url, key)
    assert first.status_code == 201, first.text
    again = post(url, key)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"] and again.json()["key"] == first.json()["key"]
    assert set(again.json()) == set(first.json()) == {"id", "key", "state"}
    assert len(broker.store.list()) == 1
    other = post(url, str(uuid.uuid4()))     # another key is another job
    assert other.status_code == 201 and other.json()["key"] != first.json()["key"]
    plain = requests.post(f"{url}/jobs", data={"jdl": JDL}, timeout=10)   # no key: as before
    assert plain.status_code == 201
    assert len(broker.store.list()) == 3


def test_the_same_key_for_another_jdl_is_409_naming_the_key(site):
    url, broker = site
    key = str(uuid.uuid4())
    assert post(url, key).status_code == 201
    r = post(url, key, jdl='[ Executable = "/bin/false"; ]')
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["idempotency_key"] == key and key in err["message"]
    assert len(broker.store.list()) == 1


@pytest.mark.parametrize("bad", ["", "a b", "x" * 129, "é"])
def test_a_malformed_key_is_400(site, bad):
    url, broker = site
    r = requests.post(f"{url}/jobs", data={"jdl": JDL},
                      headers={"Idempotency-Key": bad.encode("utf-8")}, timeout=10)
    assert r.status_code == 400, r.text
    assert broker.store.list() == []


def test_eight_racing_requests_with_one_key_store_one_job(site):
    url, broker = site
    key, barrier, answers = str(uuid.uuid4()), threading.Barrier(8), []

    def one():
        barrier.wait()
        r = post(url, key)
        answers.append((r.status_code, r.json().get("key")))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(answers) == 8
    assert sorted(s for s, _ in answers) == [200] * 7 + [201], answers
    assert len({k for _, k in answers}) == 1
    assert [j.key for j in broker.store.list()] == [answers[0][1]]


class DropOnce:
    """A TCP proxy on loopback to ``upstream``: the first connection's request reaches the
    broker, but the client's connection is closed as soon as the answer starts, never relayed;
    later connections are relayed both ways."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.split("://", 1)[1].rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(client, self.connections == 1), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _serve(self, client, drop):
        server = socket.create_connection(self.upstream)
        threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
        if drop:
            server.recv(1)          # the broker answers: the job is stored; the answer is lost
            client.shutdown(socket.SHUT_RDWR)
            client.close()
            server.close()
        else:
            self._pump(server, client)

    def close(self):
        self.listener.close()


def test_the_client_retries_a_dropped_submission_and_gets_the_same_job(site, tmp_path):
    url, broker = site
    proxy = DropOnce(url)
    try:
        jdl = tmp_path / "j.jdl"
        jdl.write_text(JDL)
        res = BrokerClient(proxy.url, retry_backoff_s=0.05).submit_file(jdl)
    finally:
        proxy.close()
    assert proxy.connections == 2
    jobs = broker.store.list()
    assert [j.key for j in jobs] == [res["key"]]
    assert res["id"] == broker.job_id(res["key"])


def test_the_client_gives_up_after_its_attempts(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))   # accepts, never answers
    try:
        client = BrokerClient(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.2,
                              submit_attempts=2, retry_backoff_s=0.01)
        with pytest.raises(ClientError) as err:
            client.submit_text(JDL)
        assert err.value.kind.value == "timeout"
    finally:
        listener.close()


def test_an_older_database_gets_the_key_columns_and_their_unique_index(tmp_path):
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE jobs (key VARCHAR(32) PRIMARY KEY, jdl TEXT, filename VARCHAR(1024), "
                "state VARCHAR(16), submitted_at FLOAT, updated_at FLOAT, ce_id VARCHAR(512), "
                "ce_url VARCHAR(512), node VARCHAR(256), vwn VARCHAR(256), cpu_caps TEXT, "
                "cpu_capped BOOLEAN, cap_reason TEXT, vwn_ended_at FLOAT, exit_code INTEGER, "
                "reason TEXT, stdout_head TEXT, dispatch_attempts INTEGER, kind VARCHAR(16), "
                "parent_key VARCHAR(32), node_name VARCHAR(256), depends_on TEXT)")
    con.commit()
    con.close()
    store = JobStore(f"sqlite:///{db}")
    try:
        store.create_many([{"jdl": JDL, "filename": "a", "idempotency": ("", "k")}], 1.0)
        from broker.db import DuplicateSubmission
        with pytest.raises(DuplicateSubmission):
            store.create_many([{"jdl": JDL, "filename": "b", "idempotency": ("", "k")}], 2.0)
        store.create_many([{"jdl": JDL, "filename": "c", "idempotency": ("/CN=Bob", "k")}], 3.0)
        assert [j.filename for j in store.list()] == ["a", "c"]
        assert store.find_idempotent("", "k").filename == "a"
    finally:
        store.close()


def test_the_loser_of_a_race_past_the_lookup_gets_the_winners_job(site, monkeypatch):
    """A request that finds no earlier job, then loses the insert to one (the unique index's
    IntegrityError), answers the winner's job: the race the lookup alone cannot close."""
    url, broker = site
    from broker import idempotency
    real, calls = idempotency.earlier, []

    def blind_once(*args):
        calls.append(args)
        return None if len(calls) == 2 else real(*args)   # the repeat's lookup misses

    monkeypatch.setattr(idempotency, "earlier", blind_once)
    key = str(uuid.uuid4())
    first, again = post(url, key), post(url, key)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["key"] == first.json()["key"] and len(calls) == 3
    assert len(broker.store.list()) == 1


def test_vgrid_submit_retries_a_dropped_submission(site, tmp_path):
    from click.testing import CliRunner
    from vgrid_cli.main import main
    url, broker = site
    proxy = DropOnce(url)
    jdl = tmp_path / "j.jdl"
    jdl.write_text(JDL)
    try:
        res = CliRunner().invoke(main, ["submit", str(jdl), "--broker", proxy.url, "--attempts", "2"])
    finally:
        proxy.close()
    assert res.exit_code == 0, res.output
    assert [broker.job_id(j.key) for j in broker.store.list()] == [res.output.strip()]
