"""A loopback HTTP receiver standing where the broker is: for tests of the agents and for trying a
node or CE agent alone.

``Receiver()`` serves (under cheroot, in a thread, on a free loopback port):

- ``POST /events`` and ``POST /jobs/<key>/events``: JSON events, kept in ``.events`` in arrival order;
  ``fail_events`` (int) makes the next n POSTs answer 503 (to exercise retries);
  ``fail_puts`` likewise for the next n output uploads, ``fail_gets`` for input downloads;
- ``POST /node-heartbeats`` and ``POST /heartbeats``: heartbeats, kept in ``.heartbeats``;
  the answer's ``unknown`` lists the heartbeat's VWN ids (``"vwn"``) and dispatch keys
  (``"key"``) found in the set ``.unknown``;
- ``PUT /jobs/<key>/output/<name>``: output sandbox files, kept in ``.outputs[(key, name)]``;
- ``GET /files/<name>``: files put in ``.inputs[name]`` (input sandbox downloads).
"""
from __future__ import annotations

import threading
import time

from flask import Flask, abort, jsonify, request

from vgrid_runtime.wsgi import BackgroundServer


class Receiver:
    """Records events and sandbox uploads; serves input sandbox files."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.outputs: dict[tuple[str, str], bytes] = {}
        self.inputs: dict[str, bytes] = {}
        self.fail_events = 0
        self.fail_puts = 0
        self.fail_gets = 0
        self.heartbeats: list[dict] = []
        self.unknown: set[str] = set()
        self._cond = threading.Condition()
        self.app = self._make_app()
        self.server = BackgroundServer(self.app)
        self.url = self.server.url

    def _make_app(self) -> Flask:
        app = Flask("vgrid-test-receiver")

        def record_event():
            with self._cond:
                if self.fail_events > 0:
                    self.fail_events -= 1
                    return jsonify({"error": {"message": "receiver told to fail"}}), 503
                self.events.append(request.get_json(force=True))
                self._cond.notify_all()
            return jsonify({"ok": True})

        app.add_url_rule("/events", "events", record_event, methods=["POST"])
        app.add_url_rule("/jobs/<key>/events", "job_events", lambda key: record_event(),
                         methods=["POST"])

        def record_heartbeat(entries: str, field: str):
            body = request.get_json(force=True)
            with self._cond:
                self.heartbeats.append(body)
                self._cond.notify_all()
                unknown = [e.get(field) for e in body.get(entries) or [] if e.get(field) in self.unknown]
            return jsonify({"unknown": unknown})

        app.add_url_rule("/node-heartbeats", "node_heartbeats",
                         lambda: record_heartbeat("vwns", "vwn"), methods=["POST"])
        app.add_url_rule("/heartbeats", "heartbeats", lambda: record_heartbeat("jobs", "key"),
                         methods=["POST"])

        @app.put("/jobs/<key>/output/<name>")
        def put_output(key, name):
            with self._cond:
                if self.fail_puts > 0:
                    self.fail_puts -= 1
                    return jsonify({"error": {"message": "receiver told to fail"}}), 503
                self.outputs[(key, name)] = request.get_data()
                self._cond.notify_all()
            return jsonify({"ok": True}), 201

        @app.get("/files/<name>")
        def get_file(name):
            with self._cond:
                if self.fail_gets > 0:
                    self.fail_gets -= 1
                    return jsonify({"error": {"message": "receiver told to fail"}}), 503
            if name not in self.inputs:
                abort(404)
            return self.inputs[name]

        return app

    def events_for(self, key: str, kind: str | None = None) -> list[dict]:
        """Events of job ``key`` (of ``kind`` if given) in arrival order."""
        with self._cond:
            return [e for e in self.events
                    if e.get("key") == key and (kind is None or e.get("event") == kind)]

    def wait_for(self, predicate, timeout_s: float = 30.0):
        """Wait until ``predicate(self)`` is truthy and return its value; AssertionError on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                value = predicate(self)
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout_s} s; events: {self.events}")
                self._cond.wait(min(left, 0.1))

    def wait_event(self, key: str, kind: str, timeout_s: float = 30.0) -> dict:
        """The first ``kind`` event of job ``key``, waiting for it."""
        return self.wait_for(lambda r: (r.events_for(key, kind) or [None])[0], timeout_s)

    def close(self) -> None:
        self.server.close()
