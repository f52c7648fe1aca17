"""The node agent's database on a real PostgreSQL server (``db_url``): VWNs, counter, outbox."""
from __future__ import annotations

import socket

import requests

from vgrid_runtime.sqldb import open_engine
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.node_agent import NodeAgentConfig, create_app
from vwn_agents.outbox import Outbox



def test_a_node_agent_on_postgres_remembers_its_vwns(pg_url, tmp_path, receiver):
    cfg = NodeAgentConfig.from_dict({"node": "pgn1", "work_dir": str(tmp_path / "w"), "db_url": pg_url,
                                     "disk_quota_mb": 0, "heartbeat_s": 0})
    server = BackgroundServer(create_app(cfg))
    body = {"job_id": "j", "key": "pg-1", "executable": "/bin/sh", "arguments": "-c 'exit 4'",
            "callback_url": f"{receiver.url}/events"}
    first = requests.post(f"{server.url}/vwns", json=body, timeout=10).json()
    assert receiver.wait_event("pg-1", "done")["exit_code"] == 4
    server.close()
    server = BackgroundServer(create_app(cfg))
    try:
        record = requests.get(f"{server.url}/vwns/{first['vwn']}", timeout=5).json()
        assert (record["state"], record["exit_code"], record["outcome"]) == ("done", 4, "exit")
        second = requests.post(f"{server.url}/vwns", json={**body, "key": "pg-2"}, timeout=10).json()
        assert second["vwn"] != first["vwn"]
        receiver.wait_event("pg-2", "done")
    finally:
        server.close()


def test_the_outbox_on_postgres_keeps_undelivered_events(pg_url):
    engine = open_engine(pg_url)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/events"
    box = Outbox(retry_initial_s=1, name="pg-box", engine=engine)
    for i in range(3):
        box.post(dead, {"key": "pgo", "n": i}, "pgo")
    box.close()
    again = Outbox(retry_initial_s=1, name="pg-box", engine=engine)
    assert [p["payload"]["n"] for p in again.pending()] == [0, 1, 2]
    again.close()
