"""The broker's logic behind its HTTP API: submission, matching, dispatch, events, sandboxes.

No Flask or click here: :mod:`broker.api` and :mod:`broker.cli` are thin adapters over
:class:`Broker`. The path of one job (seed 004 Section 3.2 and 4.2):

Submitted -> Waiting (stored; input sandbox saved) -> Ready (claimed by the matcher with an atomic
conditional UPDATE, a CE chosen, that CE's feedback counter incremented) -> Scheduled (the CE agent
accepted it) -> Running -> Done | Aborted, driven by events from the CE agent.
"""
from __future__ import annotations

import logging
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

import jdl as jdlmod

from .db import Job, JobStore, StaleState, UnknownJob
from .matchmaker import CE_ID, MatchResult, Matchmaker
from .states import AT_CE, ENDED, IllegalTransition, JobState

log = logging.getLogger("vgrid.broker")

_SAFE_NAME = re.compile(r"^[A-Za-z0-9._+@=,-][A-Za-z0-9._+@=, -]*$")
NO_MATCH = "no compatible resources"


class BrokerError(Exception):
    """An error a client caused; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.details = details


def safe_name(name: str) -> str:
    """A sandbox file name without directories; BrokerError for anything else."""
    base = name.rsplit("/", 1)[-1]
    if not base or base in {".", ".."} or not _SAFE_NAME.match(base):
        raise BrokerError(f"invalid sandbox file name {name!r}")
    return base


@dataclass
class BrokerSettings:
    """Tunables of the broker logic (seconds)."""

    base_url: str = "http://127.0.0.1:0"
    match_interval_s: float = 0.5
    match_expiry_s: float = 30.0
    max_dispatch_attempts: int = 5
    dispatch_timeout_s: float = 10.0
    stdout_head_bytes: int = 4096


class Broker:
    """The WMS logic. Thread-safe; ``start()`` runs the matcher loop in a thread.

    ``ism`` is an infosys ISM (``snapshot().ads``, ``feedback``); ``clock`` has ``now()``;
    ``sandbox_dir`` holds ``<key>/input`` and ``<key>/output``.
    """

    def __init__(self, store: JobStore, ism, matchmaker: Matchmaker, clock, sandbox_dir: Path,
                 settings: BrokerSettings, http: requests.Session | None = None) -> None:
        self.store, self.ism, self.matchmaker, self.clock = store, ism, matchmaker, clock
        self.sandbox_dir = Path(sandbox_dir)
        self.settings = settings
        self.http = http or requests.Session()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- identifiers -----------------------------------------------------------------------------
    def job_id(self, key: str) -> str:
        """The gLite-style job id: ``<broker URL>/jobs/<key>``."""
        return f"{self.settings.base_url}/jobs/{key}"

    @staticmethod
    def key_of(job_id: str) -> str:
        return job_id.rstrip("/").rsplit("/", 1)[-1]

    # -- submission ------------------------------------------------------------------------------
    def submit(self, text: str, filename: str, input_files: dict[str, bytes]) -> Job:
        """Validate the JDL, store the job and its input sandbox, and queue it (Waiting).

        Raises ``jdl.JDLError`` (syntax or validation, with file:line:column) before anything is
        stored, and BrokerError when a relative InputSandbox file was not uploaded.
        """
        job_desc = jdlmod.parse_jdl(text, filename)
        if job_desc.type != "job" or job_desc.job_type == "parametric":
            kind = job_desc.type if job_desc.type != "job" else "parametric job"
            raise BrokerError(f"{filename}: this broker runs plain jobs only; a {kind} must be "
                              f"expanded first (`vgrid jdl expand {filename}`)", field="Type")
        needed = [n for n in job_desc.input_sandbox if "://" not in n]
        uploaded = {safe_name(n): data for n, data in input_files.items()}
        missing = [n for n in needed if safe_name(n) not in uploaded]
        if missing:
            raise BrokerError(f"{filename}: InputSandbox file(s) not uploaded: {', '.join(missing)}",
                              field="InputSandbox")
        now = self.clock.now()
        job = self.store.create(text, filename, now)
        if uploaded:
            d = self.sandbox_dir / job.key / "input"
            d.mkdir(parents=True, exist_ok=True)
            for name, data in uploaded.items():
                (d / name).write_bytes(data)
        job = self.store.transition(job.key, JobState.WAITING, now, expect=JobState.SUBMITTED)
        self._wake.set()
        return job

    # -- matching and dispatch -------------------------------------------------------------------
    def list_match(self, text: str, filename: str) -> MatchResult:
        """Candidates for a JDL without submitting it (``vgrid list-match``)."""
        job_desc = jdlmod.parse_jdl(text, filename)
        return self.matchmaker.match(job_desc, self.ism.candidates())

    def match_pending(self) -> int:
        """One FCFS pass over Waiting jobs; returns how many were dispatched or ended."""
        if self.ism.last_refresh is None:
            return 0  # the ISM has never been filled: wait rather than abort everything
        done = 0
        for job in self.store.list(states=[JobState.WAITING]):
            if self._stop.is_set():
                break
            if self._match_one(job):
                done += 1
        return done

    def _match_one(self, job: Job) -> bool:
        now = self.clock.now()
        try:
            job = self.store.transition(job.key, JobState.READY, now, expect=JobState.WAITING)
        except StaleState:
            return False  # cancelled or claimed meanwhile
        desc = jdlmod.parse_jdl(job.jdl, job.filename)
        result = self.matchmaker.match(desc, self.ism.candidates())
        chosen = self.matchmaker.select(result)
        if chosen is None:
            if now - job.submitted_at >= self.settings.match_expiry_s:
                self.store.transition(job.key, JobState.ABORTED, now, reason=NO_MATCH, expect=JobState.READY)
                return True
            self.store.transition(job.key, JobState.WAITING, now, expect=JobState.READY,
                                  reason=f"{NO_MATCH} yet; retrying")
            return False
        self.ism.feedback.increment(chosen.ce_id)
        url = self._ce_url(chosen.ad)
        return self._dispatch(job, desc, str(chosen.ad.get(CE_ID, chosen.ce_id)), url)

    @staticmethod
    def _ce_url(ad) -> str | None:
        for k, v in ad.items():
            if k.lower() == "glueceinfocontactstring":  # multi-valued in the GLUE 1.3 schema
                for value in ([v] if isinstance(v, str) else v or []):
                    if isinstance(value, str) and value.startswith(("http://", "https://")):
                        return value.rstrip("/")
        return None

    def _dispatch(self, job: Job, desc, ce_id: str, url: str | None) -> bool:
        now = self.clock.now()
        attempts = job.dispatch_attempts + 1
        error = None
        if url is None:
            error = f"CE {ce_id} publishes no HTTP GlueCEInfoContactString"
        else:
            body = {"job_id": self.job_id(job.key), "key": job.key, "jdl": job.jdl,
                    "filename": job.filename,
                    "callback_url": f"{self.settings.base_url}/jobs/{job.key}/events",
                    "input_sandbox": self._input_urls(job.key, desc),
                    "output_upload_url": f"{self.settings.base_url}/jobs/{job.key}/output"}
            try:
                r = self.http.post(f"{url}/jobs", json=body, timeout=self.settings.dispatch_timeout_s)
                if r.status_code >= 300:
                    error = f"CE {ce_id} refused the job: HTTP {r.status_code} {r.text[:200]}"
            except requests.RequestException as exc:
                error = f"CE {ce_id} unreachable: {exc.__class__.__name__}"
        if error is None:
            try:
                self.store.transition(job.key, JobState.SCHEDULED, now, expect=JobState.READY,
                                      ce_id=ce_id, ce_url=url, dispatch_attempts=attempts)
            except StaleState:
                return False
            return True
        log.warning("dispatch of %s failed: %s", job.key, error)
        if attempts >= self.settings.max_dispatch_attempts:
            self.store.transition(job.key, JobState.ABORTED, now, reason=f"dispatch failed: {error}",
                                  expect=JobState.READY, dispatch_attempts=attempts)
            return True
        self.store.transition(job.key, JobState.WAITING, now, reason=error, expect=JobState.READY,
                              dispatch_attempts=attempts)
        return False

    def _input_urls(self, key: str, desc) -> list[dict[str, str]]:
        out = []
        for name in desc.input_sandbox:
            if "://" in name:
                out.append({"name": name.rsplit("/", 1)[-1], "url": name})
            else:
                out.append({"name": safe_name(name),
                            "url": f"{self.settings.base_url}/jobs/{key}/input/{safe_name(name)}"})
        return out

    # -- events from CE agents -------------------------------------------------------------------
    def handle_event(self, key: str, event: dict[str, Any]) -> Job:
        """Apply one CE-agent event: running / caps / done / aborted (see docs/architecture.md).

        Events for a job that already ended are ignored (returned unchanged); an event that asks
        for an illegal transition raises IllegalTransition; UnknownJob for an unknown key.
        """
        with self._lock:
            job = self.store.get(key)
            kind = event.get("event")
            now = self.clock.now()
            fields: dict[str, Any] = {}
            for name in ("node", "vwn", "cap_reason"):
                if event.get(name) is not None:
                    fields[name] = event[name]
            if event.get("cpu_caps") is not None:
                fields["cpu_caps"] = event["cpu_caps"]
            if event.get("capped") is not None:
                fields["cpu_capped"] = bool(event["capped"])
            if job.ended:
                return job
            if kind == "caps" or (kind == "running" and job.state is JobState.RUNNING):
                return self.store.update_fields(key, now, **fields) if fields else job
            if kind == "running":
                return self.store.transition(key, JobState.RUNNING, now, expect=job.state, **fields)
            if kind == "done":
                fields["exit_code"] = int(event.get("exit_code") if event.get("exit_code") is not None else -1)
                fields["stdout_head"] = self._stdout_head(job)
                return self.store.transition(key, JobState.DONE, now, expect=job.state, **fields)
            if kind == "aborted":
                reason = str(event.get("reason") or "aborted by the CE")
                return self.store.transition(key, JobState.ABORTED, now, reason=reason,
                                             expect=job.state, **fields)
            raise BrokerError(f"unknown event {kind!r}", field="event")

    def _stdout_head(self, job: Job) -> str | None:
        try:
            name = jdlmod.parse_jdl(job.jdl, job.filename).std_output
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

    def list_jobs(self, keys: list[str] | None = None) -> list[Job]:
        return self.store.list(keys=keys)

    def cancel(self, key: str) -> Job:
        """Cancel a job that has not ended; BrokerError(409) if it has."""
        job = self.store.get(key)
        if job.ended:
            raise BrokerError(f"job {key} is already {job.state.value}", status=409)
        if job.state in AT_CE and job.ce_url:
            try:
                self.http.post(f"{job.ce_url}/jobs/{key}/cancel", timeout=self.settings.dispatch_timeout_s)
            except requests.RequestException as exc:
                log.warning("cancel of %s at %s failed: %s", key, job.ce_url, exc)
        try:
            return self.store.transition(key, JobState.CANCELLED, self.clock.now(),
                                         reason="cancelled by the user", expect=job.state)
        except (StaleState, IllegalTransition):
            job = self.store.get(key)
            if job.ended:
                raise BrokerError(f"job {key} is already {job.state.value}", status=409) from None
            raise

    def output_dir(self, key: str) -> Path:
        self.store.get(key)
        return self.sandbox_dir / key / "output"

    def output_files(self, key: str) -> list[str]:
        d = self.output_dir(key)
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []

    def store_output(self, key: str, name: str, data: bytes) -> None:
        """Save one OutputSandbox file uploaded by the job wrapper."""
        job = self.store.get(key)
        if job.state in {JobState.CLEARED, JobState.CANCELLED}:
            raise BrokerError(f"job {key} is {job.state.value}; output not accepted", status=409)
        d = self.output_dir(key)
        d.mkdir(parents=True, exist_ok=True)
        (d / safe_name(name)).write_bytes(data)

    def input_path(self, key: str, name: str) -> Path:
        self.store.get(key)
        p = self.sandbox_dir / key / "input" / safe_name(name)
        if not p.is_file():
            raise BrokerError(f"no input sandbox file {name!r} for job {key}", status=404)
        return p

    def clear(self, key: str) -> Job:
        """Output retrieved: Done/Aborted/Cancelled -> Cleared, sandbox removed."""
        job = self.store.get(key)
        job = self.store.transition(key, JobState.CLEARED, self.clock.now(), expect=job.state,
                                    reason="output retrieved")
        shutil.rmtree(self.sandbox_dir / key, ignore_errors=True)
        return job

    # -- recovery and the loop -------------------------------------------------------------------
    def recover(self) -> None:
        """After a restart: requeue jobs whose dispatch was not confirmed; resync jobs at CEs."""
        now = self.clock.now()
        for job in self.store.list(states=[JobState.SUBMITTED]):
            self.store.transition(job.key, JobState.WAITING, now, expect=JobState.SUBMITTED,
                                  reason="recovered after a broker restart")
        for job in self.store.list(states=[JobState.READY]):
            self.store.transition(job.key, JobState.WAITING, now, expect=JobState.READY,
                                  reason="dispatch not confirmed before a broker restart")
        for job in self.store.list(states=AT_CE):
            self.resync(job)

    def resync(self, job: Job) -> None:
        """Ask the job's CE agent for its state and apply what was missed."""
        if not job.ce_url:
            return
        try:
            r = self.http.get(f"{job.ce_url}/jobs/{job.key}", timeout=self.settings.dispatch_timeout_s)
            if r.status_code == 404:
                self.store.transition(job.key, JobState.WAITING, self.clock.now(), expect=job.state,
                                      reason="the CE no longer knows the job; resubmitting")
                return
            r.raise_for_status()
            info = r.json()
        except (requests.RequestException, ValueError) as exc:
            log.warning("resync of %s failed: %s", job.key, exc)
            return
        state = str(info.get("state", "")).lower()
        events = {"running": ["running"], "done": ["running", "done"], "aborted": ["aborted"]}
        for kind in events.get(state, []):
            try:
                self.handle_event(job.key, {**info, "event": kind})
            except IllegalTransition:
                pass

    def start(self) -> None:
        self.recover()
        self._thread = threading.Thread(target=self._loop, name="vgrid-matcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.match_pending()
            except Exception:  # keep matching whatever one job did
                log.exception("matcher pass failed")
            self._wake.wait(self.settings.match_interval_s)
            self._wake.clear()

