"""A bounded random fuzzer against the broker, a CE agent and a node agent over mutual TLS.

Callers hold valid credentials for the API they fuzz (the user's proxy for the broker, the
broker's host certificate for the CE agent, the CE agent's for the node agent), so requests get
past authentication and reach the routes. Whatever the request, the answer is never a 5xx and
never shows a traceback. ``VGRID_FUZZ_REQUESTS`` sets the number per service (default 600; the
issue's bound is 20,000). Deterministic: the generator is seeded.
"""
from __future__ import annotations

import json
import os
import random

import pytest

from tests.test_security_mtls import ADDR, pki, site, tls, user  # noqa: F401  (fixtures)
from vgrid_runtime.httpclient import new_session

N = min(20_000, int(os.environ.get("VGRID_FUZZ_REQUESTS", "600")))
WORDS = ["", "a", "..", "../../etc/passwd", "%2e%2e", "x" * 300, "0", "-1", "null", "é", "\u202e",
         "jobs", "vwns", "cancel", "output", "input", "events", "glue", "status", "list-match"]
VALUES = [None, True, 0, -1, 2**63, 1.5e308, "", "x" * 5000, [], {}, [1, "a"], {"a": {"b": []}},
          "/bin/true", "/nonexistent", "Aborted", "done", "running", "caps"]
FIELDS = ["jdl", "filename", "key", "job_id", "executable", "arguments", "event", "exit_code",
          "vwn", "node", "reason", "outcome", "cpu_caps", "time", "std_output", "std_input",
          "input_sandbox", "output_sandbox", "callback_url", "owner", "environment"]
JDLS = ['[ Executable = "/bin/true"; ]', "[", '[ Executable = 1; ]', '[ Requirements = (; ]',
        '[ Executable = "/bin/true"; VirtualOrganisation = "atlas"; ]', "",
        '[ Type = "dag"; Nodes = [ a = [ file = "/etc/passwd"; ]; ]; ]',
        '[ Executable = "x"; InputSandbox = {"../../secret"}; ]']


def random_path(rng: random.Random, roots: list[str]) -> str:
    parts = [rng.choice(roots)] + [rng.choice(WORDS) for _ in range(rng.randint(0, 3))]
    return "/" + "/".join(p.strip("/") for p in parts)


def random_body(rng: random.Random):
    kind = rng.random()
    if kind < 0.15:
        return {"data": rng.choice([b"", b"{", b"\xff\xfe", b"[]" * 1000, os.urandom(64)])}
    if kind < 0.3:
        return {"data": {"jdl": rng.choice(JDLS), "filename": rng.choice(WORDS)}}
    body = {f: rng.choice(VALUES) for f in rng.sample(FIELDS, rng.randint(0, 8))}
    if rng.random() < 0.3:
        body["jdl"] = rng.choice(JDLS)
    return {"data": json.dumps(body), "headers": {"Content-Type": "application/json"}}


@pytest.mark.parametrize("service, credential, roots", [
    ("broker", "alice.proxy", ["jobs", "list-match", "ism", "health"]),
    ("ce", "broker", ["jobs", "node-events", "glue", "glue2", "status"]),
    ("node", "ce", ["vwns", "status"]),
])
def test_no_5xx_and_no_traceback(pki, site, service, credential, roots):  # noqa: F811
    d, _ = pki
    session = user(d, credential) if credential.endswith(".proxy") else new_session(tls(d, credential))
    rng = random.Random(f"fuzz-{service}")
    bad = []
    for i in range(N):
        method = rng.choice(["GET", "POST", "PUT", "DELETE", "PATCH"])
        kw = random_body(rng) if method in ("POST", "PUT", "PATCH") else {}
        r = session.request(method, site[service] + random_path(rng, roots), timeout=30, **kw)
        if r.status_code >= 500 or "Traceback" in r.text:
            bad.append((method, r.url, r.status_code, r.text[:200]))
    assert bad == [], f"{len(bad)} of {N} requests failed: {bad[:5]}"


@pytest.mark.parametrize("service, credential, path", [
    ("broker", "alice.proxy", "/jobs"), ("broker", "alice.proxy", "/list-match"),
    ("ce", "broker", "/jobs"), ("ce", "node", "/node-events"), ("node", "ce", "/vwns"),
])
def test_json_nested_100000_deep_is_a_400(pki, site, service, credential, path):  # noqa: F811
    d, _ = pki
    session = user(d, credential) if credential.endswith(".proxy") else new_session(tls(d, credential))
    deep = "[" * 100_000 + "]" * 100_000
    r = session.post(site[service] + path, data=deep, headers={"Content-Type": "application/json"},
                     timeout=30)
    assert r.status_code == 400 and "Traceback" not in r.text, r.text[:200]
