"""SimulatedCEs: one loopback HTTP server standing where many CE agents are (issue 12).

Thousands of CE agents cannot run on one machine; the broker's matcher benchmark and tests
need them only as dispatch endpoints. Every CE's GlueCEInfoContactString is
``<url>/ce/<name>``; the server accepts ``POST /ce/<name>/jobs/bulk`` (the CE agent's bulk
contract, ``vwn_agents.ce_bulk``: one result per job, idempotent on the key) and
``POST /ce/<name>/jobs`` (the single-job contract) and ``GET /ce/<name>/jobs/<key>`` (every
accepted job stays Scheduled), and answers ``GET /stats`` with
``{"posts", "jobs", "duplicates", "ces"}``: requests, distinct keys accepted, keys posted
again, CEs that received jobs. A key posted again is accepted with ``created: false``, as a
CE agent does, and counted in ``duplicates`` -- the figure the tests of two matcher workers
assert to be 0. ``refuse`` (a set of keys) makes those entries refused (outcome ``refused``).

``python -m vwn_agents.bulk_receiver --ready-file F [--port P]`` serves it in its own process
(the benchmark, so that its CPU is not counted as the broker's), writing ``{"url", "pid"}``
to F when bound (``vgrid_runtime.wsgi.serve``).
"""
from __future__ import annotations

import argparse
import threading

from flask import Flask, jsonify, request

from vgrid_runtime.outcomes import Outcome


class SimulatedCEs:
    """The receiver's state and Flask ``app`` (see the module doc)."""

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}       # dispatch key -> CE name
        self.posts = 0
        self.duplicates = 0
        self.refuse: set[str] = set()
        self._lock = threading.Lock()
        self.app = self._make_app()

    def accept(self, ce: str, body) -> dict:
        key = body.get("key") if isinstance(body, dict) else None
        if not isinstance(key, str) or not body.get("jdl") or key in self.refuse:
            return {"key": key, "accepted": False, "outcome": Outcome.REFUSED.value, "status": 400,
                    "error": {"message": "refused by the receiver"}}
        created = key not in self.keys
        if created:
            self.keys[key] = ce
        else:
            self.duplicates += 1
        return {"key": key, "accepted": True, "created": created, "state": "Scheduled"}

    def stats(self) -> dict:
        with self._lock:
            return {"posts": self.posts, "jobs": len(self.keys), "duplicates": self.duplicates,
                    "ces": len(set(self.keys.values()))}

    def _make_app(self) -> Flask:
        app = Flask("vgrid-simulated-ces")

        @app.post("/ce/<ce>/jobs/bulk")
        def bulk(ce):
            entries = (request.get_json(force=True) or {}).get("jobs") or []
            with self._lock:
                self.posts += 1
                return jsonify({"results": [self.accept(ce, e) for e in entries]})

        @app.post("/ce/<ce>/jobs")
        def single(ce):
            with self._lock:
                self.posts += 1
                r = self.accept(ce, request.get_json(force=True))
            if not r["accepted"]:
                return jsonify({"error": r["error"]}), 400
            return jsonify({"key": r["key"], "state": r["state"]}), 202

        @app.get("/ce/<ce>/jobs/<key>")
        def job(ce, key):          # what a restarted broker's resync asks (contract 7)
            with self._lock:
                if self.keys.get(key) != ce:
                    return jsonify({"error": {"message": f"no job {key}"}}), 404
            return jsonify({"key": key, "state": "Scheduled"})

        @app.get("/stats")
        def stats():
            return jsonify(self.stats())

        return app


def main(argv: list[str] | None = None) -> None:
    from vgrid_runtime.wsgi import serve
    ap = argparse.ArgumentParser(description="SimulatedCEs: a loopback bulk-dispatch receiver")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ready-file", required=True)
    ap.add_argument("--threads", type=int, default=8)
    a = ap.parse_args(argv)
    serve(SimulatedCEs().app, port=a.port, ready_file=a.ready_file, threads=a.threads)


if __name__ == "__main__":
    main()
