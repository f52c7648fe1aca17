"""Fault injection against a personal grid: submit N jobs while killing services with SIGKILL,
then count every job (issue 11, "a harness that breaks it").

Starts ``vgrid demo --serve --ready-file`` (TLS by default), submits N short CPU jobs (JDL
``RetryCount = 3; ShallowRetryCount = 3;``) with the broker client, and meanwhile, at random
moments of the fault window, kills with SIGKILL the broker, one CE agent and one node agent,
each restarted from its ``/proc/PID/cmdline`` (working directory and environment too) after a
random delay, plus one other node agent that never comes back. The RNG is seeded (``--seed``).
It then waits until every acknowledged job is terminal or the deadline passes, stops the site,
and prints one JSON document (docs/benchmarks.md, "faults"):

    acknowledged, not_acknowledged, states, done, aborted {outcome: {count, reasons}}, lost,
    stuck, duplicated, resubmissions, dispatch_retries, runs, done_without_run, faults,
    leftover_mounts, wall_s, cpu_s

How runs are counted (works when jobs run as pool accounts): the harness makes a marker
directory under /tmp (mode 1777, so any account can create files in it) and every job gets a
unique tag in its Arguments; each run of the payload creates ``<tag>.<random token>.start`` at
its start and ``.end`` at its end. Runs of a job = its ``.start`` files, counted after the site
is stopped (so no VWN can still add one). The broker's history gives its attempts that could
run: one per dispatch a CE accepted (entry into Scheduled). A job is **duplicated** when it ran
more often than that: a run the broker did not ask for (e.g. a VWN that kept running after
its job was resubmitted elsewhere, or a reused dispatch key that started the job again).

Exit status 0 only if lost == stuck == duplicated == 0.

    .venv/bin/python benchmarks/faults.py [--jobs 1000] [--seed 1] [--deadline 1800]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.client import BrokerClient, ClientError  # noqa: E402
from vgrid_cli.personal import ProcessImage  # noqa: E402
from vgrid_runtime.httpclient import ErrorKind  # noqa: E402
from vgrid_runtime.tls import TLSFiles  # noqa: E402
from vwn_agents import mounts  # noqa: E402

TERMINAL = {"Done", "Aborted", "Cancelled", "Cleared"}

JOB_SCRIPT = """#!/bin/sh
# vgrid benchmarks/faults.py job: marks each run in a shared directory, burns CPU, prints its token
dir=$1 tag=$2 n=$3
token=$(cat /proc/sys/kernel/random/uuid)
: > "$dir/$tag.$token.start"
awk -v n="$n" 'BEGIN { s = 0; for (i = 0; i < n; i++) s += i % 7; print s }' > /dev/null
: > "$dir/$tag.$token.end"
echo "$tag $token"
"""

JDL = """Executable = "faults_job.sh";
Arguments = "{markers} {tag} {iterations}";
InputSandbox = {{"faults_job.sh"}};
StdOutput = "std.out";
StdError = "std.err";
OutputSandbox = {{"std.out", "std.err"}};
RetryCount = 3;
ShallowRetryCount = 3;
"""


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000, help="N jobs to submit")
    ap.add_argument("--seed", type=int, default=1, help="seed of the fault plan")
    ap.add_argument("--deadline", type=float, default=1800.0,
                    help="seconds from the first submission until unfinished jobs count as stuck")
    ap.add_argument("--iterations", type=int, default=2_000_000,
                    help="awk loop iterations per job (about 17 million per CPU-second)")
    ap.add_argument("--fault-window", type=float, nargs=2, default=(2.0, 60.0), metavar=("FROM", "TO"),
                    help="kills happen at uniform random moments this many seconds after the first submission")
    ap.add_argument("--restart-delay", type=float, nargs=2, default=(1.0, 10.0), metavar=("MIN", "MAX"),
                    help="seconds between a kill and the restart (uniform)")
    ap.add_argument("--ces", type=int, default=2, help="CE agents of the site (2 node agents each; >= 2)")
    ap.add_argument("--heartbeat", type=float, default=2.0,
                    help="heartbeat_s of CE and node agents (when their configs have it)")
    ap.add_argument("--workers", type=int, default=4, help="parallel submitting threads")
    ap.add_argument("--submit-patience", type=float, default=120.0,
                    help="seconds one submission is retried (same Idempotency-Key) while the broker is down")
    ap.add_argument("--plain-http", action="store_true", help="run the site without TLS")
    ap.add_argument("--set", dest="settings", action="append", default=[], metavar="KIND.KEY=VALUE",
                    help="extra service option passed to vgrid demo --serve --set (repeatable)")
    ap.add_argument("--keep", metavar="DIR", help="keep the site, logs and markers in DIR")
    args = ap.parse_args(argv)
    if args.keep and Path(args.keep).exists() and any(Path(args.keep).iterdir()):
        ap.error(f"--keep {args.keep}: not empty")
    if args.ces < 2:
        ap.error("--ces must be >= 2 (one node is lost for good, one is restarted)")
    return args


def site_settings(args) -> list[str]:
    """``--set`` items for the demo: faster heartbeats and failure detection, only for options
    the services' config schemas have (so the harness runs before and after they exist)."""
    from broker.config import BrokerConfig
    from vwn_agents.ce_config import CEAgentConfig
    from vwn_agents.node_config import NodeAgentConfig
    have = {kind: {f.name for f in fields(cls)} for kind, cls in
            (("broker", BrokerConfig), ("ce", CEAgentConfig), ("node", NodeAgentConfig))}
    wanted = [("node", "heartbeat_s", args.heartbeat), ("ce", "heartbeat_s", args.heartbeat),
              ("ce", "node_down_after_s", 3 * args.heartbeat),
              ("broker", "stalled_resubmit_s", 5 * args.heartbeat),
              ("broker", "match_expiry_s", args.deadline), ("broker", "blacklist_s", 10.0)]
    out = [f"{k}.{o}={v}" for k, o, v in wanted if o in have[k]]
    return out + list(args.settings)


class Site:
    """The ``vgrid demo --serve`` process and the services the harness restarted."""

    def __init__(self, root: Path, args) -> None:
        self.root = root
        self.ready = root / "site.json"
        cmd = [sys.executable, "-m", "vgrid_cli", "demo", "--serve", "--ready-file", str(self.ready),
               "--dir", str(root / "site"), "--ces", str(args.ces), "--ism-refresh", "2"]
        cmd += ["--plain-http"] if args.plain_http else []
        for item in site_settings(args):
            cmd += ["--set", item]
        self.log = open(root / "demo.log", "ab")
        self.demo = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.restarted: list[subprocess.Popen] = []
        deadline = time.monotonic() + 180
        try:
            while not self.ready.exists():
                if self.demo.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("vgrid demo --serve did not start: see " + str(root / "demo.log"))
                time.sleep(0.2)
            self.doc = json.loads(self.ready.read_text())
        except BaseException:          # also an interrupt: never leave the site running
            self.stop()
            raise

    def pid_of(self, path: tuple) -> int | None:
        """Current pid of the service at ``path`` (("broker",) / ("ce", i) / ("node", i, j))."""
        doc = json.loads(self.ready.read_text())
        if path[0] == "broker":
            return doc["broker"]["pid"]
        ce = doc["ces"][path[1]]
        return ce["pid"] if path[0] == "ce" else ce["nodes"][path[2]]["pid"]

    def stop(self) -> None:
        if self.demo.poll() is None:
            self.demo.send_signal(signal.SIGTERM)
            try:
                self.demo.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.demo.pid, signal.SIGKILL)
                self.demo.wait()
        for p in self.restarted:   # the demo stops them (SIGTERM); they are our children: reap
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.log.close()


def fault_plan(site: Site, rng: random.Random, window, delay) -> list[dict]:
    """Broker, one CE agent, one node agent (restarted), one other node agent (never back)."""
    nodes = [(i, j) for i, ce in enumerate(site.doc["ces"]) for j in range(len(ce["nodes"]))]
    back, gone = rng.sample(nodes, 2)
    plan = [{"service": "broker", "path": ("broker",)},
            {"service": "ce", "path": ("ce", rng.randrange(len(site.doc["ces"])))},
            {"service": "node", "path": ("node", *back)},
            {"service": "node (never back)", "path": ("node", *gone), "never_back": True}]
    for f in plan:
        f["kill_at"] = round(rng.uniform(*window), 3)
        f["restart_after"] = None if f.get("never_back") else round(rng.uniform(*delay), 3)
    return sorted(plan, key=lambda f: f["kill_at"])


def run_faults(site: Site, plan: list[dict], t0: float, stop: threading.Event) -> None:
    """Carry out ``plan`` (times relative to ``t0``, monotonic); fills in what happened."""
    pending = []   # (restart time, fault, image)
    todo = list(plan)
    while (todo or pending) and not stop.is_set():
        now = time.monotonic() - t0
        if todo and todo[0]["kill_at"] <= now:
            f = todo.pop(0)
            pid = site.pid_of(f["path"])
            try:
                image = ProcessImage.of(pid)
                os.kill(pid, signal.SIGKILL)
                f.update(pid=pid, killed_at=round(now, 3), image=image)
                if f["restart_after"] is not None:
                    pending.append((now + f["restart_after"], f, image))
            except (OSError, TypeError) as exc:
                f.update(error=f"could not kill pid {pid}: {exc}")
        for item in [p for p in pending if p[0] <= now]:
            pending.remove(item)
            _, f, image = item
            p = image.start(site.root / "site" / "restarted.log")
            site.restarted.append(p)
            f.update(restarted_at=round(time.monotonic() - t0, 3), new_pid=p.pid)
        stop.wait(0.05)


def revive_for_cleanup(site: Site, plan: list[dict]) -> None:
    """After the count: start each never-restarted service once more and stop it (SIGTERM), so
    its start-up and shutdown clean what it left (VWN processes, cgroups, quota mounts)."""
    for f in plan:
        image = f.get("image")
        if not f.get("never_back") or image is None:
            continue
        ready = Path(image.argv[image.argv.index("--ready-file") + 1])
        p = image.start(site.root / "site" / "revived.log")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and p.poll() is None:
            try:
                if json.loads(ready.read_text())["pid"] == p.pid:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.1)
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def submit_all(url: str, creds, jobs: list[tuple[str, Path]], workers: int, patience_s: float,
               progress) -> tuple[dict, list[dict]]:
    """Submit every (tag, jdl file); {tag: key} of the acknowledged ones and the refusals."""
    local = threading.local()
    acked: dict[str, str] = {}
    refused: list[dict] = []

    def one(item):
        tag, path = item
        if not hasattr(local, "client"):
            local.client = BrokerClient(url, credentials=creds, submit_attempts=1, timeout_s=20)
        key, deadline, delay = str(uuid.uuid4()), time.monotonic() + patience_s, 0.5
        while True:
            try:
                acked[tag] = local.client.submit_file(path, idempotency_key=key)["key"]
                break
            except ClientError as exc:
                retry = exc.kind in (ErrorKind.UNREACHABLE, ErrorKind.TIMEOUT) or exc.status in (502, 503)
                if not retry or time.monotonic() > deadline:
                    refused.append({"tag": tag, "status": exc.status, "error": str(exc)[:200]})
                    break
            time.sleep(delay)
            delay = min(2 * delay, 4.0)
        progress("submitted")

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, jobs))
    return acked, refused


def poll(client: BrokerClient) -> dict[str, dict] | None:
    """Every job of the broker by key, None when the broker does not answer."""
    try:
        return {j["key"]: j for j in client.jobs()}
    except ClientError:
        return None


def count_runs(markers: Path) -> tuple[dict, dict]:
    """({tag: runs started}, {tag: runs ended}) from the marker files."""
    starts: dict[str, int] = {}
    ends: dict[str, int] = {}
    for f in markers.iterdir():
        tag, _, rest = f.name.partition(".")
        target = starts if rest.endswith(".start") else ends if rest.endswith(".end") else None
        if target is not None:
            target[tag] = target.get(tag, 0) + 1
    return starts, ends


def attempts(job: dict) -> int:
    """The broker's attempts of a job that could run: dispatches a CE accepted, i.e. entries
    into Scheduled in its history (at least 1)."""
    return max(1, sum(h.get("state") == "Scheduled" for h in job.get("history") or []))


def returns_to_waiting(job: dict) -> tuple[int, int]:
    """(resubmissions, dispatch retries) of a job from its history: entries into Waiting from a
    state where a CE held it (Scheduled, Running, Stalled: the job was sent back, deep or
    shallow), and from Ready (the dispatch itself failed or found no CE)."""
    resub = retries = 0
    states = [h.get("state") for h in job.get("history") or []]
    for before, now in zip(states, states[1:]):
        if now == "Waiting":
            resub += before in ("Scheduled", "Running", "Stalled")
            retries += before == "Ready"
    return resub, retries


def summarise(acked: dict, refused: list, final: dict, starts: dict, ends: dict) -> dict:
    states: dict[str, int] = {}
    aborted: dict[str, dict] = {}
    lost, stuck, duplicated, done_without_run = [], [], [], []
    resubmissions = dispatch_retries = 0
    for tag, key in acked.items():
        job = final.get(key)
        if job is None:
            lost.append(key)
            continue
        states[job["state"]] = states.get(job["state"], 0) + 1
        resub, retries = returns_to_waiting(job)
        resubmissions += resub
        dispatch_retries += retries
        if job["state"] not in TERMINAL:
            stuck.append({"key": key, "state": job["state"], "reason": job.get("reason")})
        if job["state"] == "Aborted":
            a = aborted.setdefault(str(job.get("outcome")), {"count": 0, "reasons": []})
            a["count"] += 1
            if len(a["reasons"]) < 3 and job.get("reason") not in a["reasons"]:
                a["reasons"].append(job.get("reason"))
        if starts.get(tag, 0) > attempts(job):
            duplicated.append({"key": key, "runs": starts[tag], "attempts": attempts(job)})
        if job["state"] == "Done" and not starts.get(tag):
            done_without_run.append(key)
    return {"acknowledged": len(acked), "not_acknowledged": len(refused), "refusals": refused[:5],
            "states": states, "done": states.get("Done", 0), "aborted": aborted,
            "lost": len(lost), "lost_keys": lost[:10], "stuck": len(stuck), "stuck_jobs": stuck[:10],
            "duplicated": len(duplicated), "duplicated_jobs": duplicated[:10],
            "resubmissions": resubmissions, "dispatch_retries": dispatch_retries, "runs": {"started": sum(starts.get(t, 0) for t in acked),
                                                     "ended": sum(ends.get(t, 0) for t in acked)},
            "done_without_run": len(done_without_run)}


class Progress:
    """A rich progress bar on a TTY (stderr), nothing otherwise."""

    def __init__(self, total: int) -> None:
        self.bar = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar
            self.bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), console=Console(stderr=True))
            self.sub = self.bar.add_task("submitted", total=total)
            self.end = self.bar.add_task("terminal ", total=total)
            self.bar.start()
        self.lock = threading.Lock()

    def __call__(self, what: str, n: int | None = None) -> None:
        if self.bar is None:
            return
        with self.lock:
            if what == "submitted":
                self.bar.advance(self.sub)
            else:
                self.bar.update(self.end, completed=n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _interrupted(signum, frame):  # noqa: ARG001 - signal handler signature
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)      # the site is being stopped: once is enough
    raise KeyboardInterrupt


def main(argv=None) -> int:
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):     # stop the site (its own session) on the way out
        signal.signal(sig, _interrupted)
    root = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="vgrid-faults-"))
    root.mkdir(parents=True, exist_ok=True)
    markers = Path(tempfile.mkdtemp(prefix="vgrid-faults-markers-", dir="/tmp"))
    os.chmod(markers, 0o1777)       # jobs run as pool accounts: any account may add a marker
    try:
        return run(args, root, markers)
    finally:                        # also after an interrupt or a site that did not start
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(markers, ignore_errors=True)


def run(args, root: Path, markers: Path) -> int:
    """The run of :func:`main` in ``root`` with marker directory ``markers``; the exit status."""
    rng = random.Random(args.seed)
    jdl_dir = root / "jdl"
    jdl_dir.mkdir(exist_ok=True)
    (jdl_dir / "faults_job.sh").write_text(JOB_SCRIPT)
    jobs = []
    for i in range(args.jobs):
        tag = f"j{i:06d}x{rng.getrandbits(32):08x}"
        path = jdl_dir / f"{tag}.jdl"
        path.write_text(JDL.format(markers=markers, tag=tag, iterations=args.iterations))
        jobs.append((tag, path))
    wall0 = time.monotonic()
    site = Site(root, args)
    stop = threading.Event()
    plan: list[dict] = []
    progress = Progress(args.jobs)
    result: dict = {}
    try:
        env = site.doc["env"]
        creds = None if args.plain_http else TLSFiles(
            cert=env["X509_USER_PROXY"], key=None, cert_dir=env["X509_CERT_DIR"],
            voms_dir=env["X509_VOMS_DIR"])
        url = env["VGRID_BROKER_URL"]
        plan = fault_plan(site, rng, args.fault_window, args.restart_delay)
        t0 = time.monotonic()
        faulter = threading.Thread(target=run_faults, args=(site, plan, t0, stop), daemon=True)
        faulter.start()
        acked, refused = submit_all(url, creds, jobs, args.workers, args.submit_patience, progress)
        client = BrokerClient(url, credentials=creds, timeout_s=30)
        final: dict | None = None
        while time.monotonic() - t0 < args.deadline:
            snap = poll(client)
            if snap is not None:
                final = snap
                done = sum(final.get(k, {}).get("state") in TERMINAL for k in acked.values())
                progress("terminal", done)
                if done == len(acked) and not faulter.is_alive():
                    break
            time.sleep(max(2.0, len(acked) / 200))     # a poll lists every job with its history
        stop.set()
        faulter.join(timeout=30)
        for _ in range(30):                       # the last word: the broker may just restart
            snap = poll(client)
            if snap is not None:
                final = snap
                break
            time.sleep(1.0)
        broker_answered = snap is not None
    finally:
        progress.close()
        stop.set()
        site.stop()
        revive_for_cleanup(site, plan)
        leftovers = mounts.unmount_below(root)[0]   # VWN quotas of agents never restarted
    starts, ends = count_runs(markers)
    result = summarise(acked, refused, final or {}, starts, ends)
    usage_self = resource.getrusage(resource.RUSAGE_SELF)
    usage_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    result.update({
        "jobs": args.jobs, "seed": args.seed, "deadline_s": args.deadline,
        "broker_answered_at_end": broker_answered,
        "faults": [{k: v for k, v in f.items() if k not in ("path", "image")} | {"target": list(f["path"])}
                   for f in plan],
        "leftover_mounts": len(leftovers),
        "wall_s": round(time.monotonic() - wall0, 1),
        "cpu_s": {"harness": round(usage_self.ru_utime + usage_self.ru_stime, 1),
                  "site": round(usage_children.ru_utime + usage_children.ru_stime, 1)},
        "site_settings": site_settings(args)})
    if not broker_answered:
        result["lost"] = None   # unknown: nothing to compare with
    print(json.dumps(result, indent=2))
    ok = broker_answered and result["lost"] == 0 and result["stuck"] == 0 and result["duplicated"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("faults.py: interrupted; the site was stopped", file=sys.stderr)
        sys.exit(130)
