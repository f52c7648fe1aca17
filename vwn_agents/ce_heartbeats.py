"""The CE agent's heartbeats: node heartbeats in, lost nodes, CE heartbeats out (docs/vwn.md).

``CEHeartbeats(agent)`` keeps, under the agent's lock, when each node agent and each job's VWN
was last heard of (clock seconds) and runs one daemon thread that, every ``TICK_S``:

- **lost nodes** (contract 6): a node agent not heard of -- no heartbeat (``node_heartbeat``),
  no event, no answer to a lease-engine probe or to this thread's own ``GET /status`` probe
  (made while it is silent for half its limit, and always just before it would be lost) --
  for ``node_lost_s`` (CE option; 0 = 3 x the node's heartbeat ``interval_s``, or 30 s while it
  has sent none) is *lost*: its active jobs end Aborted, ``Outcome.NODE_LOST``, with a reason
  naming the node URL and the silence; their events go to the broker as usual; the lease engine
  marks the node down (``LeaseEngine.mark_down``) and cancels their leases. A lost node that is
  heard again is no longer lost; the VWNs it still lists are ``unknown`` and it kills them.
- **CE heartbeats out** (contract 5): every ``heartbeat_s`` (0 = off), ``POST`` to every
  broker ``heartbeat_url`` the CE's jobs came with ``{"ce","url","interval_s","time","jobs":
  [{"key","state","node","vwn","silent_s"}]}`` (the non-terminal jobs that came with that URL;
  ``silent_s`` = seconds since the job's VWN was last heard of from its node, null without a
  VWN). The answer ``{"unknown": [keys]}`` cancels those jobs at the CE (VWN killed, outcome
  ``cancelled``, no event), except jobs accepted less than ``heartbeat_s`` ago (a dispatch the
  broker has not recorded yet). Failures are logged at most once a minute per URL.

``node_heartbeat(body)`` answers a node agent's ``POST /node-heartbeats`` (contract 4):
``{"unknown": [VWN ids]}`` = listed VWNs the CE does not consider active on that node.
"""
from __future__ import annotations

import logging
import threading
import time

from vgrid_runtime.httpjson import ApiError
from vgrid_runtime.throttle import Throttle
from vgrid_runtime.outcomes import Outcome

from .ce_jobs import ENDED, CEJobState
from .heartbeats import HeartbeatClient, HeartbeatError
from .node_client import NodeAgentClient, NodeAgentError

log = logging.getLogger(__name__)

#: How often the heartbeat thread looks at the nodes and the broker targets (s).
TICK_S = 0.2
#: The node lost limit while a node has never sent a heartbeat (s).
NEVER_HEARD_LOST_S = 30.0
#: At most one log line per failing heartbeat URL per this many seconds (monotonic).
LOG_EVERY_S = 60.0


class CEHeartbeats:
    """Heartbeat bookkeeping and thread of one ``CEAgent`` (see module doc)."""

    def __init__(self, agent) -> None:
        self.agent = agent
        self.started = agent.clock.now()
        self.node_heard: dict[str, float] = {}       # node URL -> clock s last heard of
        self.node_interval: dict[str, float] = {}    # node URL -> its heartbeat interval_s
        self.lost: dict[str, dict] = {}              # node URL -> {"since", "silence_s", "limit_s"}
        self.vwn_heard: dict[str, float] = {}        # job key -> clock s its VWN was last heard of
        self.targets: dict[str, dict] = {}           # heartbeat URL -> {"last_success","last_error",...}
        self._last_sent: float | None = None
        self._logged = Throttle(LOG_EVERY_S)
        self._probed: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ce-heartbeats", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.agent.config.node_timeout_s + 1)

    # -- hearing -------------------------------------------------------------------------------

    def heard_node(self, url: str | None, t: float | None = None) -> None:
        """Node agent ``url`` was heard of at ``t`` (default now); it is no longer lost."""
        if url not in self.agent.nodes:
            return
        t = self.agent.clock.now() if t is None else t
        with self.agent._lock:
            self.node_heard[url] = max(t, self.node_heard.get(url, t))
            if self.lost.pop(url, None) is not None:
                log.warning("node agent %s is heard of again", url)

    def heard_job(self, job) -> None:
        """A VWN event of ``job`` arrived: its VWN and its node are heard of now."""
        now = self.agent.clock.now()
        with self.agent._lock:
            self.vwn_heard[job.request.key] = now
        self.heard_node(job.node_url, now)

    def limit_s(self, url: str) -> float:
        """How long node ``url`` may stay silent before it is lost (s)."""
        if self.agent.config.node_lost_s > 0:
            return self.agent.config.node_lost_s
        interval = self.node_interval.get(url)
        return 3 * interval if interval else NEVER_HEARD_LOST_S

    # -- node heartbeats in --------------------------------------------------------------------

    def node_heartbeat(self, body: dict) -> dict:
        """Apply a node agent's heartbeat ``{"node","interval_s","time","vwns":[{"key","vwn",
        "state"}]}``; returns ``{"unknown": [VWN ids]}``. ApiError 400 for a malformed body,
        403 for a node URL that is not one of this CE's."""
        node, vwns, interval = body.get("node"), body.get("vwns"), body.get("interval_s")
        if not isinstance(node, str) or not isinstance(vwns, list) \
                or not all(isinstance(v, dict) for v in vwns):
            raise ApiError(400, "a node heartbeat is {\"node\": url, \"interval_s\": s, \"vwns\": [{\"key\", "
                           "\"vwn\", \"state\"}]}", field="node" if not isinstance(node, str) else "vwns")
        node = node.rstrip("/")
        if node not in self.agent.nodes:
            raise ApiError(403, f"{node} is not a node agent of CE {self.agent.config.ce_id}", field="node")
        if isinstance(interval, (int, float)) and not isinstance(interval, bool) and interval > 0:
            self.node_interval[node] = float(interval)
        self.heard_node(node)
        now, unknown = self.agent.clock.now(), []
        for entry in vwns:
            job = self._active_job(str(entry.get("key", "")), entry.get("vwn"), node)
            if job is None:
                unknown.append(entry.get("vwn"))
            else:
                with self.agent._lock:
                    self.vwn_heard[job.request.key] = now
        return {"unknown": [v for v in unknown if v is not None]}

    def _active_job(self, vwn_key: str, vwn, node: str):
        """The job whose active VWN on ``node`` is (``vwn_key``, ``vwn``), else None."""
        agent = self.agent
        owner = agent.leases.job_of(vwn_key) if agent.leases else None
        if owner is not None:
            key, current = owner
            if not current:
                return None
        else:
            key = vwn_key
        with agent._lock:
            job = agent.jobs.get(key)
            if job is None or job.state in ENDED:
                return None
            if (job.vwn and vwn != job.vwn) or (job.node_url and job.node_url != node):
                return None
            return job

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.check_nodes()
                self.send_heartbeats()
            except Exception:   # never let a bug stop the heartbeats; it is logged
                log.exception("CE heartbeat thread")

    def check_nodes(self) -> list[str]:
        """Probe silent nodes, then end the jobs of the nodes silent for their limit; returns
        the keys of the jobs ended (Aborted, node-lost)."""
        agent = self.agent
        if agent.leases and agent.leases.engine is not None:
            enact = agent.leases.engine.enactment
            for i, url in enumerate(enact.node_urls):
                if i in enact.last_answer:
                    self.heard_node(url, enact.last_answer[i])
        now = agent.clock.now()
        for url in agent.nodes:         # a node that answers is not lost: ask before deciding
            silence, limit = now - self.node_heard.get(url, self.started), self.limit_s(url)
            if url not in self.lost and silence >= limit / 2 and (
                    silence >= limit or time.monotonic() - self._probed.get(url, -1e9) >= min(1.0, limit / 4)):
                self._probed[url] = time.monotonic()
                try:
                    NodeAgentClient(url, agent.http, min(2.0, agent.config.node_timeout_s)).status()
                    self.heard_node(url)
                except NodeAgentError as exc:
                    if exc.answered:
                        self.heard_node(url)
        newly, ended = [], []
        now = agent.clock.now()
        with agent._lock:
            for url in agent.nodes:
                silence, limit = now - self.node_heard.get(url, self.started), self.limit_s(url)
                if url in self.lost or silence < limit:
                    continue
                self.lost[url] = {"since": now, "silence_s": silence, "limit_s": limit}
                newly.append(url)
                reason = (f"node lost: node agent {url} not heard of for {silence:.1f} s "
                          f"(no heartbeat, event or answer; limit {limit:g} s)")
                log.warning("%s", reason)
                for job in agent.jobs.values():
                    if job.state not in ENDED and job.node_url == url:
                        job.to(CEJobState.ABORTED)
                        job.note(Outcome.NODE_LOST, reason)
                        agent._save(job)
                        agent._forward(job, "aborted", now)
                        ended.append(job.request.key)
        engine = agent.leases.engine if agent.leases else None
        for url in newly if engine is not None else ():
            engine.mark_down(url)
        for key in ended if engine is not None else ():
            agent._cancel_lease(key)
        return ended

    def send_heartbeats(self) -> None:
        """POST the CE heartbeat to every target once every ``heartbeat_s``."""
        agent, every = self.agent, self.agent.config.heartbeat_s
        if every <= 0 or not agent.url:
            return
        now = agent.clock.now()
        if self._last_sent is not None and now - self._last_sent < every:
            return
        self._last_sent = now
        with agent._lock:
            per_target: dict[str, list] = {}
            for job in agent.jobs.values():
                url = job.request.heartbeat_url
                if not url:
                    continue
                entries = per_target.setdefault(url, [])
                if job.state not in ENDED:
                    entries.append(self._entry(job, now))
        for url, jobs in per_target.items():
            body = {"ce": agent.config.ce_id, "url": agent.url, "interval_s": every, "time": now, "jobs": jobs}
            target = self.targets.setdefault(url, {"url": url, "last_success": None, "last_error": None,
                                                   "last_attempt": None})
            target["last_attempt"] = now
            try:
                unknown = HeartbeatClient(url, agent.http, agent.config.node_timeout_s).beat(body)
            except HeartbeatError as exc:
                target["last_error"] = exc.brief()
                if self._logged.due(url):
                    log.warning("heartbeat to %s failed: %s (logged at most once a minute)", url, exc)
                continue
            target["last_success"], target["last_error"] = agent.clock.now(), None
            self._cancel_unknown(url, unknown, every)

    def _entry(self, job, now: float) -> dict:
        key = job.request.key
        silent = None
        if job.vwn:
            silent = now - self.vwn_heard.setdefault(key, now)
        return {"key": key, "state": job.state.value, "node": job.node_url, "vwn": job.vwn,
                "silent_s": silent}

    def _cancel_unknown(self, url: str, keys: list, grace_s: float) -> None:
        now = self.agent.clock.now()
        for key in keys:
            with self.agent._lock:
                job = self.agent.jobs.get(str(key))
                if job is None or job.state in ENDED or job.request.heartbeat_url != url \
                        or now - (job.accepted or now) < grace_s:
                    continue
            log.warning("%s: the broker at %s no longer knows this job: cancelled", key, url)
            try:
                self.agent.cancel(str(key), reason=f"cancelled: the broker ({url}) no longer knows this job")
            except ApiError:        # it ended meanwhile
                pass

    # -- status --------------------------------------------------------------------------------

    def status(self) -> dict:
        """``{"heartbeats": {"interval_s", "targets": [{"url","last_success","last_error",
        "last_attempt"}]}, "node_heard": {url: {"heard_age_s", "lost", "limit_s"}},
        "lost_nodes": [{"url","since","silence_s","limit_s"}]}`` (times: clock s)."""
        now = self.agent.clock.now()
        with self.agent._lock:
            nodes = {u: {"heard_age_s": round(now - self.node_heard[u], 3) if u in self.node_heard else None,
                         "lost": u in self.lost, "limit_s": round(self.limit_s(u), 3)} for u in self.agent.nodes}
            return {"heartbeats": {"interval_s": self.agent.config.heartbeat_s,
                                   "targets": [dict(t) for t in self.targets.values()]},
                    "node_heard": nodes,
                    "lost_nodes": [{"url": u, **info} for u, info in self.lost.items()]}


def loopback(addr: str | None) -> bool:
    """Whether the peer address ``addr`` is a loopback address (plain-HTTP callers)."""
    import ipaddress
    try:
        return ipaddress.ip_address(addr or "").is_loopback
    except ValueError:
        return False
