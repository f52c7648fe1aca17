"""The broker's logic behind its HTTP API: submission, matching, dispatch, events, sandboxes.

No Flask or click here: :mod:`broker.api` and :mod:`vgrid_cli.main` are thin adapters over
:class:`Broker`. The path of one job (seed 004 Section 3.2 and 4.2):

Submitted -> Waiting (stored; input sandbox saved) -> Ready (claimed by the matcher with an atomic
conditional UPDATE, a CE chosen, that CE's feedback counter incremented) -> Scheduled (the CE agent
accepted it) -> Running -> Done | Aborted, driven by events from the CE agent.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jdl as jdlmod
from vgrid_runtime.httpclient import new_session
from vwn_agents.ce_client import CEAgentClient, CEAgentError

from vgrid_runtime.authn import Caller

from . import compound, heartbeats, matcher_worker, recovery, resubmission, submission
from .claims import ClaimSweeper
from .bulk_dispatch import BulkDispatcher
from .db import Job, JobStore, StaleState
from .sandbox_store import SandboxStore
from .transfers import BrokerError, safe_name, transfer_secret
from .matchmaker import MatchResult, Matchmaker
from .taskqueues import TaskQueues
from .selection import ad_value
from vgrid_runtime.job_states import AT_CE, IllegalTransition, JobState
from vgrid_runtime.outcomes import Outcome
from vgrid_runtime.storage import log_failure

log = logging.getLogger("vgrid.broker")

NO_MATCH = matcher_worker.NO_MATCH


@dataclass
class BrokerSettings:
    """Tunables of the broker logic (seconds)."""

    base_url: str = "http://127.0.0.1:0"
    match_interval_s: float = 0.5
    match_expiry_s: float = 30.0
    max_dispatch_attempts: int = 5
    dispatch_timeout_s: float = 10.0
    blacklist_s: float = 0.0   # a CE that fails a dispatch is not matched for this long; 0: off
    stdout_head_bytes: int = 4096
    limits: resubmission.RetryLimits = resubmission.RetryLimits()   # Max(Shallow)RetryCount
    stalled_resubmit_s: float = 60.0      # Stalled this long -> resubmitted or Aborted
    default_ce_interval_s: float = 0.0    # heartbeat interval assumed for a CE never heard; 0: none
    stall_check_s: float = 1.0            # seconds of the clock between Stalled scans
    matcher_workers: int = 1              # matcher threads, each with its own DB connection
    match_batch: int = 5000               # Waiting jobs claimed at once (broker.matcher_worker)
    claim_lease_s: float = 600.0          # a Ready claim older than this is requeued (broker.claims)
    gc_threshold0: int = 50_000           # Python's cyclic GC, youngest generation (matcher_worker.tune_gc)
    dispatch_senders: int = 4             # bulk POSTs in flight at once (BulkDispatcher.dispatch_all)


class Broker:
    """The WMS logic. Thread-safe; ``start()`` runs the matcher loop in a thread.

    ``ism`` is an infosys ISM (``snapshot().ads``, ``feedback``); ``clock`` has ``now()``;
    ``sandbox_dir`` holds ``<key>/input`` and ``<key>/output``; ``http``: the ``requests.Session`` its
    CE agent clients share (``vwn_agents.ce_client``; default a new one).
    """

    def __init__(self, store: JobStore, ism, matchmaker: Matchmaker, clock, sandbox_dir: Path,
                 settings: BrokerSettings, http=None) -> None:
        self.store, self.ism, self.matchmaker, self.clock = store, ism, matchmaker, clock
        self.sandbox_dir = Path(sandbox_dir)
        self.sandboxes = SandboxStore(self.sandbox_dir)   # input stored with its job, atomically
        self.settings = settings
        self.queues = TaskQueues(matchmaker)   # Waiting jobs' classes, matched once per snapshot
        self.http = http or new_session()   # shared by its CEAgentClients
        self._secret = transfer_secret(self.sandbox_dir.parent / "transfer.key")
        self._stop = threading.Event()
        self._wake = matcher_worker.Wakeup()   # a submission wakes the loop and every matcher worker
        self.dispatcher = BulkDispatcher(self)  # one POST per CE per batch (broker.bulk_dispatch)
        self.workers: list[matcher_worker.MatcherWorker] = []
        self._thread: threading.Thread | None = None
        self._lock = self.lock = threading.RLock()   # one job change at a time (events, scans)
        self._last_scan: float | None = None
        self.started_at: float | None = None
        self._scan_lock = threading.Lock()
        self.federation = None   # broker.federation.attach: peers are dispatched to as CEs
        self.claims = ClaimSweeper(self, settings.claim_lease_s)

    @property
    def instance(self) -> str:
        """This broker's name in the ``claimed_by`` column of the jobs its matcher claims: an
        HMAC of its base URL (brokers sharing one database differ by URL)."""
        return hmac.new(self._secret, self.settings.base_url.encode(), hashlib.sha256).hexdigest()[:16]

    def ce_client(self, url: str) -> CEAgentClient:
        """The client of the CE agent at ``url`` (sharing the broker's session; timeout
        ``dispatch_timeout_s``); a peer's gateway URL: its forwarder (broker.federation)."""
        forwarder = self.federation.client(url) if self.federation is not None else None
        return forwarder or CEAgentClient(url, session=self.http, timeout_s=self.settings.dispatch_timeout_s)

    # -- identifiers -----------------------------------------------------------------------------
    def job_id(self, key: str) -> str:
        """The gLite-style job id: ``<broker URL>/jobs/<key>``."""
        return f"{self.settings.base_url}/jobs/{key}"

    @staticmethod
    def key_of(job_id: str) -> str:
        return job_id.rstrip("/").rsplit("/", 1)[-1]

    # -- submission ------------------------------------------------------------------------------
    def submit(self, text: str, filename: str, input_files: dict[str, bytes],
               who: Caller | None = None, idempotency_key: str | None = None) -> Job:
        """Validate the JDL, store the job and its input sandbox, and queue it (Waiting).

        ``who``: the verified submitter; the job (and every node of a compound request) belongs
        to its DN, VO and FQANs (:func:`broker.authz.submitter`). Raises ``jdl.JDLError``
        (syntax or validation, with file:line:column) before anything is stored,
        ``authz.NotAllowed`` when the submitter may not submit it, and BrokerError when a
        relative InputSandbox file was not uploaded. ``idempotency_key``: see :meth:`submit_once`.
        """
        return self.submit_once(text, filename, input_files, who, idempotency_key)[0]

    def submit_once(self, text: str, filename: str, input_files: dict[str, bytes],
                    who: Caller | None = None, idempotency_key: str | None = None) -> tuple[Job, bool]:
        """:meth:`submit` answering ``(job, created)``. With ``idempotency_key`` (the client's
        ``Idempotency-Key``, :mod:`broker.idempotency`) a repeat of an earlier request of the same
        owner returns its job and False, storing nothing (race-safe); IdempotencyError 400 for a
        malformed key, 409 when the earlier request's JDL text differs."""
        return submission.submit_once(self, text, filename, input_files, who, idempotency_key)

    def _transition(self, job: Job, new: JobState, now: float, reason: str | None = None,
                    **fields) -> Job:
        """``store.transition`` expecting ``job.state``, then keep the compound parent in step."""
        done = self.store.transition(job.key, new, now, reason=reason, expect=job.state, **fields)
        if done.parent_key:
            self._refresh_parent(done.parent_key, now)
            if done.ended:
                self._wake.set()  # DAG nodes may be released
        return done

    move = _transition   # the public name (broker.heartbeats, broker.resubmission)

    def _refresh_parent(self, parent_key: str, now: float) -> None:
        with self._lock:
            parent = self.store.get(parent_key)
            if parent.ended:
                return
            target, reason = compound.parent_target(self.store.list(parent=parent_key, history=False))
            for step in compound.path_to(parent.state, target) if target else []:
                parent = self.store.transition(parent_key, step, now, expect=parent.state,
                                               reason=reason if step == target else None)

    move_parent = _refresh_parent   # the public name (broker.submission)

    def release_dag_nodes(self) -> int:
        """Move DAG nodes whose parents are all Done to Waiting; abort those whose parents
        failed. Returns how many changed."""
        changed = 0
        for parent in self.store.list(states=[JobState.WAITING, JobState.RUNNING], kinds=["dag"], history=False):
            nodes = self.store.list(parent=parent.key, history=False)
            blocked = [n for n in nodes if n.state is JobState.SUBMITTED and n.depends_on]
            if not blocked:
                continue
            # read the clock after the nodes: a parent's Done recorded by an event thread
            # between an earlier reading and this list would otherwise postdate the release
            now = self.clock.now()
            ready, doomed = compound.nodes_to_release(blocked, {n.key: n for n in nodes})
            for node in ready:
                self._transition(node, JobState.WAITING, now, reason="DAG dependencies Done")
            for node, why in doomed:
                self._transition(node, JobState.ABORTED, now, reason=why, outcome=Outcome.DEPENDENCY_FAILED)
            changed += len(ready) + len(doomed)
        return changed

    # -- matching and dispatch -------------------------------------------------------------------
    def list_match(self, text: str, filename: str) -> MatchResult:
        """Candidates for a JDL without submitting it (``vgrid list-match``)."""
        job_desc = jdlmod.parse_jdl(text, filename, local_files=False)
        return self.matchmaker.match(job_desc, self.ism.candidates(), now=self.clock.now())

    def match_pending(self) -> int:
        """One FCFS pass over Waiting jobs in this thread (:func:`broker.matcher_worker.match_pass`
        on the broker's store; the workers of :meth:`start` run the same); returns how many
        were dispatched or ended."""
        if self.ism.last_refresh is None:
            return 0  # the ISM has never been filled: wait rather than abort everything
        return self.release_dag_nodes() + matcher_worker.match_pass(self, self.store, self._stop)

    @staticmethod
    def _ce_url(ad) -> str | None:
        v = ad_value(ad, "GlueCEInfoContactString")  # multi-valued in the GLUE 1.3 schema
        for value in ([v] if isinstance(v, str) else v or []):
            if isinstance(value, str) and value.startswith(("http://", "https://")):
                return value.rstrip("/")
        return None

    def _input_urls(self, job: Job, desc) -> list[dict[str, str]]:
        out = []
        for name in desc.input_sandbox:
            if "://" in name:
                out.append({"name": name.rsplit("/", 1)[-1], "url": name})
            else:
                out.append({"name": safe_name(name),
                            "url": f"{self._sandbox_url(job)}/input/{safe_name(name)}"})
        return out

    def sandbox_token(self, dispatch_key: str) -> str:
        """The capability in the sandbox URLs of one attempt: HMAC-SHA256 of its dispatch key
        (the job key for attempt 0) with the broker's secret (``<state_dir>/transfer.key``, made
        at first start, 0600). Only the CE agent the attempt is dispatched to (and its node
        agent) learn it; a past attempt's token no longer opens the sandbox."""
        return hmac.new(self._secret, dispatch_key.encode(), hashlib.sha256).hexdigest()[:32]

    def valid_token(self, key: str, token: str) -> bool:
        """Whether ``token`` is the sandbox capability of job ``key``'s current attempt."""
        return hmac.compare_digest(self.sandbox_token(self.store.get(key).dispatch_key), token)

    def _sandbox_url(self, job: Job) -> str:
        return f"{self.settings.base_url}/jobs/{job.key}/sandbox/{self.sandbox_token(job.dispatch_key)}"

    # -- events from CE agents -------------------------------------------------------------------
    def handle_event(self, key: str, event: dict[str, Any]) -> Job:
        """Apply one CE-agent event: running / caps / done / aborted, or suspended / resumed /
        requeued (a history note of the Running job, no state change; see docs/architecture.md).

        Events of an ended job are ignored (the job is returned unchanged), those of a past
        attempt raise ``resubmission.PastAttempt`` (nothing applied); a Stalled job first goes
        back to the state it came from; an ``aborted`` event may resubmit the job
        (:meth:`resubmit_or_abort`). IllegalTransition for an event that asks for an illegal
        transition; UnknownJob for an unknown key."""
        with self._lock:
            job = self.store.get(key)
            kind = event.get("event")
            now = self.clock.now()
            if self.past_attempt(job, event):
                log.info("ignoring %s event of past attempt %s of job %s", kind, event.get("key"), key)
                raise resubmission.PastAttempt(event["key"], job.dispatch_key)
            fields: dict[str, Any] = {"last_heard": now}
            for name in ("node", "vwn", "cap_reason", "node_url"):
                if event.get(name) is not None:
                    fields[name] = event[name]
            if event.get("cpu_caps") is not None:
                fields["cpu_caps"] = event["cpu_caps"]
            if event.get("capped") is not None:
                fields["cpu_capped"] = bool(event["capped"])
            if job.ended:
                return job
            if job.state not in AT_CE:  # stale: the job was requeued since; ignore the CE's word
                log.warning("ignoring %s event for job %s in state %s", kind, key, job.state.value)
                return job
            started = job.state is JobState.RUNNING or job.stalled_from == JobState.RUNNING.value
            if job.state is JobState.STALLED:
                job = heartbeats.recover(self, job, now, f"heard again: {kind} event")
                if job.state not in AT_CE or job.state is JobState.STALLED:
                    return job          # resubmitted meanwhile: this attempt is over
            if kind in ("suspended", "resumed", "requeued"):
                what = f"VWN {event.get('vwn')} on node {event.get('node')}" if kind != "requeued" else event.get("reason")
                mark = f" [note {event['note_id']}]" if event.get("note_id") else ""   # federation.notes
                return self.store.note(key, now, f"{kind}: {what}{mark}", **fields)
            if kind == "caps" or (kind == "running" and job.state is JobState.RUNNING):
                return self.store.update_fields(key, now, **fields) if fields else job
            if kind == "running":
                return self._transition(job, JobState.RUNNING, now, **fields)
            if kind in ("done", "aborted") and isinstance(event.get("time"), (int, float)):
                fields["vwn_ended_at"] = float(event["time"])
            if kind == "done":
                fields["exit_code"] = int(event.get("exit_code") if event.get("exit_code") is not None else -1)
                fields["stdout_head"] = self._stdout_head(job)
                fields["outcome"] = Outcome.parse(event.get("outcome")) or Outcome.EXIT
                return self._transition(job, JobState.DONE, now, **fields)
            if kind == "aborted":
                reason = str(event.get("reason") or "aborted by the CE")
                return self.resubmit_or_abort(job, event.get("outcome"), reason, now, started, **fields)
            raise BrokerError(f"unknown event {kind!r}", field="event")

    past_attempt = staticmethod(resubmission.past_attempt)

    def resubmit_or_abort(self, job: Job, outcome, reason: str, now: float, started: bool,
                          **fields) -> Job:
        """End ``job``'s failed attempt: resubmitted or Aborted (:func:`broker.resubmission.apply`)."""
        return resubmission.apply(self, job, outcome, reason, now, started, fields)

    def cancel_at_ce(self, job: Job) -> None:
        """Ask the CE agent of ``job``'s current attempt to cancel it (best effort: logged)."""
        if job.ce_url:
            try:
                self.ce_client(job.ce_url).cancel(job.dispatch_key)
            except CEAgentError as exc:
                log.warning("cancel of %s at %s failed: %s", job.dispatch_key, job.ce_url, exc)

    def _stdout_head(self, job: Job) -> str | None:
        try:
            name = jdlmod.parse_jdl(job.jdl, job.filename, local_files=False).std_output
        except jdlmod.JDLError:
            return None
        if not name:
            return None
        path = self.sandbox_dir / job.key / "output" / safe_name(name)
        if not path.is_file():
            return None
        with path.open("rb") as f:
            head = f.read(self.settings.stdout_head_bytes).decode("utf-8", "replace")
        return head.splitlines()[0] if head else ""

    # -- user operations -------------------------------------------------------------------------
    def get(self, key: str) -> Job:
        return self.store.get(key)

    def jobs_page(self, **query: Any) -> tuple[list[Job], tuple[float, str] | None]:
        """One page of ``GET /jobs``: :meth:`broker.db.JobStore.page` (filters, keyset cursor)."""
        return self.store.page(**query)

    def cancel(self, key: str) -> Job:
        """Cancel a job that has not ended (for a compound request: every node that has not
        ended, then the parent); BrokerError(409) if it has ended."""
        with self._lock:
            job = self.store.get(key)
            if job.ended:
                raise BrokerError(f"job {key} is already {job.state.value}", status=409)
            if job.compound:
                for node in self.store.list(parent=key):
                    if not node.ended:
                        self._cancel_one(node)
                job = self.store.get(key)
                if job.ended:  # the nodes' ends already ended the parent
                    return job
            return self._cancel_one(job)

    def _cancel_one(self, job: Job) -> Job:
        if job.state in AT_CE:
            self.cancel_at_ce(job)
        try:
            return self._transition(job, JobState.CANCELLED, self.clock.now(),
                                    reason="cancelled by the user", outcome=Outcome.CANCELLED)
        except (StaleState, IllegalTransition):
            job = self.store.get(job.key)
            if job.ended:
                raise BrokerError(f"job {job.key} is already {job.state.value}", status=409) from None
            raise

    def discard_output(self, key: str) -> None:
        """Remove what a failed attempt uploaded of job ``key``'s output (before a resubmission)."""
        shutil.rmtree(self.sandbox_dir / key / "output", ignore_errors=True)

    def wake(self) -> None:  # run a matcher pass soon (a job became Waiting)
        self._wake.set()

    def output_dir(self, key: str) -> Path:
        self.store.get(key)
        return self.sandbox_dir / key / "output"

    def output_files(self, key: str) -> list[str]:
        d = self.output_dir(key)
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []

    def store_output(self, key: str, name: str, data: bytes) -> None:
        """Save one OutputSandbox file. Write-once: a repeat with the same bytes (a retried
        upload) is accepted, different bytes are BrokerError 409; so is a Cleared or Cancelled
        job."""
        job = self.store.get(key)
        if job.state in {JobState.CLEARED, JobState.CANCELLED}:
            raise BrokerError(f"job {key} is {job.state.value}; output not accepted", status=409)
        self.sandboxes.save_output(key, name, data)   # StorageError 507 on a full disk

    def input_path(self, key: str, name: str) -> Path:
        """An InputSandbox file of job ``key``; nodes of a compound request use the parent's."""
        job = self.store.get(key)
        owner = job.parent_key or key
        p = self.sandbox_dir / owner / "input" / safe_name(name)
        if not p.is_file():
            raise BrokerError(f"no input sandbox file {name!r} for job {key}", status=404)
        return p

    def clear(self, key: str) -> Job:
        """Output retrieved: Done/Aborted/Cancelled -> Cleared, sandbox removed."""
        job = self.store.get(key)
        job = self._transition(job, JobState.CLEARED, self.clock.now(), reason="output retrieved")
        shutil.rmtree(self.sandbox_dir / key, ignore_errors=True)
        return job

    # -- recovery and the loop -------------------------------------------------------------------
    def recover(self) -> None:
        """After a restart (:func:`broker.recovery.recover`)."""
        recovery.recover(self)

    def resync(self, job: Job) -> None:
        """Ask the job's CE agent for its current attempt (:func:`broker.recovery.resync`)."""
        recovery.resync(self, job)

    def start(self) -> None:
        self.started_at = self.clock.now()   # silence while the broker was down is not the CE's
        self.recover()
        self.workers = matcher_worker.start_workers(self)
        self._thread = threading.Thread(target=self._loop, name="vgrid-broker-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=10)
        matcher_worker.stop_workers(self.workers)

    def check_stalled(self, force: bool = False) -> int:
        """A Stalled scan (:func:`broker.heartbeats.scan`, one at a time) if ``force`` or
        ``stall_check_s`` of the clock passed since the last one; how many jobs changed state."""
        with self._scan_lock:
            now, last = self.clock.now(), self._last_scan
            if force or last is None or not 0 <= now - last < self.settings.stall_check_s:
                self._last_scan = now
                return heartbeats.scan(self, now)
            return 0

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.release_dag_nodes()   # matching: the workers (broker.matcher_worker)
            except Exception as exc:
                log_failure(log, "DAG release failed", exc)   # one line a minute when disk full
            try:
                self.check_stalled()
                self.claims.maybe(self.clock.now())   # orphaned Ready claims (broker.claims)
            except Exception as exc:
                log_failure(log, "Stalled scan failed", exc)
            self._wake.wait(self.settings.match_interval_s)
            self._wake.clear()

