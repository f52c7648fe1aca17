"""The OpenAPI registries (vgrid_runtime.openapi + each service's models): every JSON route of
each app is described, the document is what schemathesis accepts, the request-body models are
the ones the code validates with (a bad field is a 400 naming it), and the 5xx the fuzz run
found stay fixed. Plain-HTTP apps through Flask's test client (the TLS side:
test_openapi_fuzz.py)."""
from __future__ import annotations

import dataclasses
import json
import typing

import pytest
import schemathesis

from broker.api import create_app as broker_app
from broker.api_models import SPEC as BROKER_SPEC
from broker.config import BrokerConfig
from broker.metrics import install_broker_metrics
from broker.server import build_broker
from vgrid_runtime.openapi import flask_paths
from vwn_agents.api_models import CE_SPEC, NODE_SPEC
from vwn_agents.ce_agent import CEAgentConfig, create_app as ce_app
from vwn_agents.ce_jobs import JobRequest
from vwn_agents.images.repo_api import REPO_SPEC
from vwn_agents.images.repository import ImageRepositoryConfig, create_app as repo_app
from vwn_agents.node_agent import NodeAgentConfig, create_app as node_app
from vwn_agents.vwn_model import VWNRequest

#: routes a broker has only with federation peers configured (broker.federation.gateway)
FEDERATION = {("GET", "/federation/glue"), ("POST", "/federation/delegations"), ("POST", "/federation/jobs"),
              ("GET", "/federation/jobs/<key>"), ("POST", "/federation/jobs/<key>/cancel"),
              ("POST", "/delegations"), ("PUT", "/delegations/<did>")}


@pytest.fixture(scope="module")
def apps(tmp_path_factory):
    w = tmp_path_factory.mktemp("openapi-apps")
    broker = build_broker(BrokerConfig(state_dir=str(w / "broker"), ce_urls=[]))
    (w / "images").mkdir()
    node = node_app(NodeAgentConfig(node="oa1", cgroup="none", disk_quota_mb=0, work_dir=str(w / "node")))
    ce = ce_app(CEAgentConfig(ce_id="ce.vgrid.local:8443/vgrid-vwn-oa", host="ce.vgrid.local", site="S",
                              queue="oa", nodes=["http://127.0.0.1:9"], vos=["dteam"], state_dir=str(w / "ce")))
    bapp = broker_app(broker)
    install_broker_metrics(bapp, broker, [], [])
    out = {"broker": (bapp, BROKER_SPEC), "ce": (ce, CE_SPEC), "node": (node, NODE_SPEC),
           "repo": (repo_app(ImageRepositoryConfig(images_dir=str(w / "images"))), REPO_SPEC)}
    yield out
    for app, _ in out.values():
        stop = app.config.get("VGRID_ON_STOP")
        if stop:
            stop()
    broker.store.close()


@pytest.mark.parametrize("svc", ["broker", "ce", "node", "repo"])
def test_every_route_is_described_and_nothing_else(apps, svc):
    app, spec = apps[svc]
    routes = flask_paths(app, api_only=True)     # an HTML blueprint (dashboard) is not the API
    described = {(o.method, o.flask_rule) for o in spec.ops}
    assert routes - described == set(), f"{svc}: routes without a description"
    extra = described - routes - (FEDERATION if svc == "broker" else set())
    assert extra == set(), f"{svc}: described routes the app does not have"
    doc = app.test_client().get("/openapi.json").get_json()
    assert {(m.upper(), p) for p, ms in doc["paths"].items() for m in ms} == \
        {(m, spec.op(m, r).path) for m, r in routes}
    # schemathesis accepts it and finds one operation per route
    ops = [r.ok() for r in schemathesis.openapi.from_dict(doc).get_all_operations()]
    assert len(ops) == len(routes)


@pytest.mark.parametrize("cls,spec,name", [(JobRequest, CE_SPEC, "JobRequest"), (VWNRequest, NODE_SPEC, "VWNRequest")])
def test_a_dataclass_body_schema_is_the_class_config_load_checks(cls, spec, name):
    """Required fields and properties are exactly the dataclass's; unknown fields are refused
    (additionalProperties false) as config.load refuses them."""
    schema = spec.document()["components"]["schemas"][name]
    fields = dataclasses.fields(cls)
    assert set(schema["properties"]) == {f.name for f in fields}
    assert set(schema["required"]) == {f.name for f in fields if f.default is dataclasses.MISSING
                                       and f.default_factory is dataclasses.MISSING}
    assert schema["additionalProperties"] is False
    hints = typing.get_type_hints(cls)
    for f in fields:
        if hints[f.name] is int:
            assert schema["properties"][f.name]["type"] == "integer", f.name


def test_a_json_array_body_is_a_400_not_a_500(apps):
    """Found by schemathesis (negative data): POST /jobs and /list-match with a JSON array
    called .get on a list (500 AttributeError)."""
    c = apps["broker"][0].test_client()
    for path in ("/jobs", "/list-match"):
        r = c.post(path, json=[1, 2])
        assert r.status_code == 400, (path, r.get_data(as_text=True))
        assert r.get_json()["error"]["field"] == "jdl"


@pytest.mark.parametrize("svc,path,body,field", [
    ("broker", "/jobs", {"jdl": '[ Executable = "/bin/true"; ]', "filename": 7}, "filename"),
    ("broker", "/list-match", {"jdl": 3}, "jdl"),
    ("broker", "/heartbeats", {"ce": "c", "url": "http://a", "interval_s": 1,
                               "jobs": [{"key": "k", "silent_s": "soon"}]}, "jobs.0.silent_s"),
    ("broker", "/heartbeats", {"ce": "c", "url": "http://a", "interval_s": True}, "interval_s"),
    ("broker", "/jobs/nokey/events", {"event": "done", "exit_code": "0"}, "exit_code"),
    ("ce", "/node-heartbeats", {"node": "http://127.0.0.1:9", "vwns": [{"key": 5}]}, "vwns.0.key"),
    ("ce", "/node-events", {"key": "k", "event": "done", "cpu_caps": [["t", 1]]}, "cpu_caps.0.0"),
    ("ce", "/jobs/bulk", {"jobs": {"a": 1}}, "jobs"),
])
def test_a_bad_field_is_a_400_naming_it(apps, svc, path, body, field):
    r = apps[svc][0].test_client().post(path, json=body)
    assert r.status_code == 400, r.get_data(as_text=True)
    err = r.get_json()["error"]
    assert err["field"] == field and field.split(".")[0] in err["message"]


def test_a_dataclass_body_keeps_config_load_messages(apps):
    c = apps["node"][0].test_client()
    r = c.post("/vwns", json={"job_id": "j", "key": "k", "executable": "/bin/true", "memory_mb": "9"})
    assert r.status_code == 400 and "field 'memory_mb'" in r.get_json()["error"]["message"]
    r = c.post("/vwns", json={"job_id": "j", "key": "k", "executable": "/bin/true", "colour": "red"})
    assert r.status_code == 400 and "unknown field 'colour'" in r.get_json()["error"]["message"]



def test_html_blueprints_are_not_part_of_the_api():
    from flask import Blueprint, Flask
    app = Flask("t")
    app.add_url_rule("/jobs", "jobs", lambda: "", methods=["GET"])
    for name in ("dashboard", "federation"):
        bp = Blueprint(name, __name__)
        bp.add_url_rule(f"/{name}", "page", lambda: "")
        app.register_blueprint(bp)
    assert flask_paths(app, api_only=True) == {("GET", "/jobs"), ("GET", "/federation")}
    assert ("GET", "/dashboard") in flask_paths(app)
