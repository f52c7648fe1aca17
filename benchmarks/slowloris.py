"""Slowloris: does a service still answer while N connections stall in the middle of a request?

Serves a small JSON app with vgrid's own server (:mod:`vgrid_runtime.wsgi`, in this process, 8
worker threads as every service), opens ``--connections`` attacking connections, then times
``--requests`` requests of a real client, each on a fresh connection, while the attack holds.
Attacks (``--attacks``):

- ``plain-headers``: plain HTTP, a request line and part of the headers, then one more header
  byte every ``--trickle-s`` seconds (never the blank line that ends the headers);
- ``tls-headers``: the same after a completed TLS handshake (client certificate presented);
- ``tls-handshake``: a TCP connection to the TLS port that never sends its ClientHello;
- ``plain-none``, ``tls-none``: no attack (the reference latency).

Prints one JSON document: per attack, the client's answers (ok/failed), latency p50/max
(seconds), the wall time and the process CPU time of the measurement (client, attackers and
server share the process), and how many attacking connections the server had closed by the end
(``--hold-s``: keep the attack that long after measuring). Credentials are made at run time.
Usage:

    .venv/bin/python benchmarks/slowloris.py [--connections 150] [--requests 10] [--hold-s 0] [--json]
"""
from __future__ import annotations

import argparse
import json
import logging
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flask import Flask, jsonify  # noqa: E402

from vgrid_cli.demo_pki import make_demo_pki  # noqa: E402
from vgrid_runtime.clock import WallClock  # noqa: E402
from vgrid_runtime.httpclient import new_session  # noqa: E402
from vgrid_runtime.tls import client_context  # noqa: E402
from vgrid_runtime.wsgi import BackgroundServer  # noqa: E402

logging.getLogger("vgrid.wsgi").setLevel(logging.CRITICAL)   # the attack makes cheroot log a lot

ATTACKS = ("plain-none", "plain-headers", "tls-none", "tls-headers", "tls-handshake")


def app() -> Flask:
    a = Flask("slowloris-bench")

    @a.get("/ping")
    def ping():
        return jsonify({"ok": True})

    return a


class Attack:
    """``n`` stalled connections to ``host:port``; a thread trickles a header byte into each
    every ``trickle_s`` (headers attacks) and counts the connections the server closed."""

    def __init__(self, kind: str, host: str, port: int, n: int, trickle_s: float, ctx) -> None:
        self.kind, self.trickle_s = kind, trickle_s
        self.closed = 0

        def open_one(_):
            try:
                s = socket.create_connection((host, port), timeout=10)
                if kind == "tls-headers":
                    s = ctx.wrap_socket(s, server_hostname=host)
                if kind != "tls-handshake":
                    s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                return s
            except OSError:
                return None

        with ThreadPoolExecutor(max_workers=50) as pool:   # a stuck server must not serialise us
            opened = list(pool.map(open_one, range(n)))
        self.socks: list[socket.socket] = [s for s in opened if s is not None]
        self.failed_to_open = n - len(self.socks)
        self.opened = len(self.socks)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()

    def _trickle(self) -> None:
        while not self._stop.wait(self.trickle_s):
            if self.kind == "tls-handshake":
                continue
            for s in list(self.socks):
                try:
                    s.sendall(b"a")
                except OSError:
                    self.socks.remove(s)
                    self.closed += 1

    def close(self) -> int:
        """Stop; returns how many attacking connections the server had closed (EOF seen)."""
        self._stop.set()
        self._thread.join()
        for s in self.socks:
            try:
                s.setblocking(False)
                if s.recv(1) == b"":
                    self.closed += 1
            except ssl.SSLWantReadError:
                pass
            except BlockingIOError:
                pass
            except OSError:
                self.closed += 1
            s.close()
        return self.closed


def measure(url: str, session_factory, requests_n: int, timeout_s: float) -> dict:
    lat, failed = [], []
    for _ in range(requests_n):
        s = session_factory()
        t0 = time.perf_counter()
        try:
            r = s.get(f"{url}/ping", timeout=timeout_s, headers={"Connection": "close"})
            if r.status_code == 200:
                lat.append(time.perf_counter() - t0)
            else:
                failed.append(f"HTTP {r.status_code}")
        except Exception as exc:  # noqa: BLE001 - any failure is a data point
            failed.append(type(exc).__name__)
        finally:
            s.close()
    return {"ok": len(lat), "failed": len(failed), "failures": sorted(set(failed)),
            "p50_s": round(statistics.median(lat), 3) if lat else None,
            "max_s": round(max(lat), 3) if lat else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--connections", type=int, default=150)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--trickle-s", type=float, default=5.0)
    ap.add_argument("--client-timeout-s", type=float, default=30.0)
    ap.add_argument("--attacks", default=",".join(ATTACKS))
    ap.add_argument("--hold-s", type=float, default=0.0,
                    help="keep the attack this long after measuring, then count what the server closed")
    ap.add_argument("--json", action="store_true", help="print only the JSON document")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="vgrid-slowloris-") as tmp:
        pki = make_demo_pki(Path(tmp) / "pki", ["svc"], WallClock().now())
        for kind in args.attacks.split(","):
            tls = pki.host_credentials("svc") if kind.startswith("tls") else None
            host = pki.address("svc") if tls else "127.0.0.1"
            srv = BackgroundServer(app(), host=host, tls=tls)
            factory = (lambda: new_session(pki.user_credentials())) if tls else new_session
            ctx = client_context(pki.user_credentials()) if tls else None
            try:
                cpu0, t0 = time.process_time(), time.perf_counter()
                attack = Attack(kind, host, int(srv.url.rsplit(":", 1)[1]),
                                0 if kind.endswith("-none") else args.connections, args.trickle_s, ctx)
                opened = time.perf_counter() - t0
                row = measure(srv.url, factory, args.requests, args.client_timeout_s)
                time.sleep(args.hold_s)       # let the server's header deadline pass, if any
                closed = attack.close()
                row.update(connections=attack.opened + attack.failed_to_open, opened=attack.opened,
                           open_s=round(opened, 2), attacker_conns_closed_by_server=closed,
                           wall_s=round(time.perf_counter() - t0, 2),
                           cpu_s=round(time.process_time() - cpu0, 2))
                results[kind] = row
            finally:
                srv.close()
            if not args.json:
                print(f"{kind:14} ok {row['ok']}/{args.requests}  p50 {row['p50_s']} s  "
                      f"max {row['max_s']} s  wall {row['wall_s']} s  CPU {row['cpu_s']} s",
                      file=sys.stderr)
    print(json.dumps({"benchmark": "slowloris", "connections": args.connections,
                      "requests": args.requests, "trickle_s": args.trickle_s,
                      "client_timeout_s": args.client_timeout_s, "results": results}))


if __name__ == "__main__":
    main()
