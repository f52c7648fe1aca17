"""The service clients (node agent, CE agent) against real agents on loopback sockets: every
method, and every error kind -- unreachable port, timeout, 404, 409, 400, 5xx, bad answer."""
from __future__ import annotations

import itertools
import socket

import pytest
from flask import Flask

from vgrid_runtime.httpclient import ErrorKind, new_session
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.ce_agent import CEAgentConfig, create_app as create_ce_app
from vwn_agents.ce_client import CEAgentClient, CEAgentError
from vwn_agents.leasing.enactment import Enactment, SimulatedNodes
from vwn_agents.node_agent import NodeAgentConfig, create_app as create_node_app
from vwn_agents.node_client import NodeAgentClient, NodeAgentError
from vwn_agents.node_enactment import NodeAgentEnactment
from vwn_agents.testing import Receiver

from .paths import JOB_PYTHON

_names = itertools.count(1)


@pytest.fixture
def servers():
    started = []

    def serve(app):
        started.append(BackgroundServer(app))
        return started[-1].url

    yield serve
    for server in reversed(started):   # CE agents first, then node agents
        server.close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def node_app(tmp_path):
    return create_node_app(NodeAgentConfig.from_dict(
        {"node": f"cl{next(_names)}", "work_dir": str(tmp_path / f"w{next(_names)}"),
         "retry_initial_s": 0.05, "cgroup": "none"}))


def dead_url() -> str:
    with socket.socket() as s:  # a loopback port with nothing listening
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def stand_in(status: int, text: str) -> Flask:
    """A stand-in service answering every request with ``status`` and ``text``."""
    app = Flask(f"stand-in-{status}")

    @app.route("/", defaults={"path": ""}, methods=["GET", "POST", "DELETE"])
    @app.route("/<path:path>", methods=["GET", "POST", "DELETE"])
    def any_path(path):
        return text, status, {"Content-Type": "text/plain"}

    return app


def vwn_body(receiver, key, seconds=30):
    return {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "executable": JOB_PYTHON,
            "arguments": f"-c 'import time; time.sleep({seconds})'", "callback_url": f"{receiver.url}/events",
            "output_upload_url": f"{receiver.url}/jobs/{key}/output"}


# -- node agent --------------------------------------------------------------------------------

def test_node_client_methods(servers, receiver, tmp_path):
    node = NodeAgentClient(servers(node_app(tmp_path)) + "/", timeout_s=10)
    created = node.create_vwn(vwn_body(receiver, "c1"))
    assert created["vwn"].startswith("vwn-") and created["state"] in ("starting", "running")
    assert node.create_vwn(vwn_body(receiver, "c1"))["vwn"] == created["vwn"]   # idempotent on key
    assert [v["vwn"] for v in node.vwns()] == [created["vwn"]]
    assert node.vwn(created["vwn"])["key"] == "c1"
    status = node.status(timeout_s=5)
    assert status["node"].startswith("cl") and status["vwns"] == 1
    assert node.delete_vwn(created["vwn"])["state"] == "cancelled"
    assert node.vwn(created["vwn"])["state"] == "cancelled"
    node.close()


def test_node_client_http_errors_carry_status_and_body(servers, tmp_path):
    node = NodeAgentClient(servers(node_app(tmp_path)))
    with pytest.raises(NodeAgentError) as err:
        node.vwn("vwn-nope-1")
    e = err.value
    assert (e.kind, e.status, e.answered) == (ErrorKind.HTTP, 404, True)
    assert e.body["error"]["message"] and e.url.endswith("/vwns/vwn-nope-1")
    assert str(e).startswith("HTTP 404 ") and e.brief() == str(e)
    with pytest.raises(NodeAgentError) as err:
        node.create_vwn({"key": "k"})              # no job_id, no executable
    assert (err.value.kind, err.value.status) == (ErrorKind.HTTP, 400)


def test_node_client_unreachable_and_timeout():
    url = dead_url()
    with pytest.raises(NodeAgentError) as err:
        NodeAgentClient(url, timeout_s=2).status()
    e = err.value
    assert (e.kind, e.status, e.answered, e.cause) == (ErrorKind.UNREACHABLE, None, False, "ConnectionError")
    assert e.brief() == "ConnectionError" and str(e).startswith("ConnectionError: ")
    with socket.socket() as silent:                 # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        with pytest.raises(NodeAgentError) as err:
            NodeAgentClient(f"http://127.0.0.1:{port}", timeout_s=0.3).vwns()
    assert (err.value.kind, err.value.status, err.value.answered) == (ErrorKind.TIMEOUT, None, False)


def test_node_client_5xx_and_bad_answers(servers):
    down = NodeAgentClient(servers(stand_in(503, "restarting")))
    with pytest.raises(NodeAgentError) as err:
        down.status()
    e = err.value
    assert (e.kind, e.status, e.answered, e.body) == (ErrorKind.HTTP, 503, False, {})
    assert str(e) == "HTTP 503 restarting"
    garbled = NodeAgentClient(servers(stand_in(200, "not json")))
    with pytest.raises(NodeAgentError) as err:
        garbled.vwns()
    assert (err.value.kind, err.value.status, err.value.answered) == (ErrorKind.BAD_ANSWER, 200, True)
    wrong = NodeAgentClient(servers(stand_in(201, "{}")))
    with pytest.raises(NodeAgentError) as err:
        wrong.create_vwn({})                          # an answer without "vwn"
    assert err.value.kind is ErrorKind.BAD_ANSWER and "vwn" in str(err.value)


def test_clients_share_a_session(servers, tmp_path):
    session = new_session()
    url = servers(node_app(tmp_path))
    a, b = NodeAgentClient(url, session=session), NodeAgentClient(url, session=session)
    assert a.session is b.session and a.status() == b.status()
    a.close()                                        # not its session: stays usable
    assert b.status()["vwns"] == 0
    session.close()


def test_both_enactments_implement_the_lease_engine_interface():
    assert isinstance(SimulatedNodes([]), Enactment)
    assert isinstance(NodeAgentEnactment([dead_url()], payload=lambda lease, vm: {}), Enactment)


def test_node_enactment_probe(servers, tmp_path):
    enactment = NodeAgentEnactment([dead_url(), servers(node_app(tmp_path)), servers(stand_in(500, "x")),
                                    servers(stand_in(404, "x"))], payload=lambda lease, vm: {})
    assert [enactment.probe(i, 2.0) for i in range(4)] == [False, True, False, True]


# -- CE agent ----------------------------------------------------------------------------------

def ce_app(node_urls, **overrides):
    return create_ce_app(CEAgentConfig.from_dict(
        {"ce_id": "ce9.vgrid.local:8443/vgrid-vwn-long", "host": "ce9.vgrid.local", "site": "VGRID-TEST",
         "queue": "long", "nodes": node_urls, "retry_s": 0.2, "retry_initial_s": 0.05,
         "max_wallclock_s": 3600, **overrides}))


def job_body(receiver, key, jdl='[ Executable = "/bin/sleep"; Arguments = "30"; ]', filename="j.jdl"):
    return {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "jdl": jdl, "filename": filename,
            "callback_url": f"{receiver.url}/jobs/{key}/events",
            "output_upload_url": f"{receiver.url}/jobs/{key}/output"}


@pytest.mark.parametrize("scheduler", ["leases", "fair-share"])
def test_ce_client_methods(servers, receiver, tmp_path, scheduler):
    ce = CEAgentClient(servers(ce_app([servers(node_app(tmp_path))], scheduler=scheduler)), timeout_s=15)
    accepted = ce.submit(job_body(receiver, "k1"))
    assert accepted == {"state": "Scheduled", "key": "k1"}
    assert ce.submit(job_body(receiver, "k1"))["key"] == "k1"        # idempotent on key
    receiver.wait_event("k1", "running")
    assert ce.job("k1")["state"] == "Running"
    assert [j["key"] for j in ce.jobs()] == ["k1"]
    status = ce.status()
    assert status["ce_id"] == "ce9.vgrid.local:8443/vgrid-vwn-long" and status["jobs"] == {"Running": 1}
    assert ce.cancel("k1")["state"] == "Cancelled"
    with pytest.raises(CEAgentError) as err:
        ce.cancel("k1")
    e = err.value
    assert (e.kind, e.status, e.answered) == (ErrorKind.HTTP, 409, True)
    assert e.body["error"]["state"] == "Cancelled"


def test_ce_client_errors(servers, receiver):
    ce = CEAgentClient(servers(ce_app([])))
    with pytest.raises(CEAgentError) as err:
        ce.job("nope")
    assert (err.value.kind, err.value.status) == (ErrorKind.HTTP, 404)
    with pytest.raises(CEAgentError) as err:
        ce.submit(job_body(receiver, "bad", jdl='Executable = "/bin/true"\nArguments = ;\n', filename="bad.jdl"))
    e = err.value
    assert (e.kind, e.status) == (ErrorKind.HTTP, 400) and e.body["error"]["file"] == "bad.jdl"
    with pytest.raises(CEAgentError) as err:
        CEAgentClient(dead_url()).submit(job_body(receiver, "x"))
    assert (err.value.kind, err.value.status, err.value.brief()) == (ErrorKind.UNREACHABLE, None, "ConnectionError")
    with pytest.raises(CEAgentError) as err:
        CEAgentClient(servers(stand_in(502, "bad gateway"))).status()
    assert (err.value.kind, err.value.status, err.value.answered) == (ErrorKind.HTTP, 502, False)
