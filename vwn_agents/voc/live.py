"""VOCs in the CE agent (``scheduler = "voc"``): the cgroup driver and the watchdog thread.

``VOCScheduling(agent)`` keeps the CE's per-VO pools (``pool.VOCPool``) on its VWN slots
(``len(nodes) x cpus_per_node``) and runs the same ``watchdog.Watchdog`` as the simulator every
``voc_interval_s`` on the agent's clock. The CE agent's fair-share placer asks it for a node
(``candidates``: an idle VOC node of the job's VO, claimed for the job) instead of a placement
policy, so a job only ever runs on a node of its own VO's cluster; the job's VWN runs as the VO's
pool account (the node agent maps VO ``v`` to pool ``.v``).

Fault tolerance (seed 003, Section 5.3): every interval each node agent holding VOC nodes that
has been silent (no heartbeat, event or answer) for longer than one of its heartbeat intervals
is probed (``GET /status``); a node agent that does not answer -- or that the CE's heartbeat
bookkeeping has declared lost -- takes all its VOC nodes out of the pool at once, and so does a
``POST /vwns`` that got no answer. A job is therefore never matched to a node that no longer
exists (Figure 12); a job that was running there ends ``node-lost`` through the CE's lost-node
rule (``ce_heartbeats``) and the broker's resubmission.
"""
from __future__ import annotations

import logging
import threading

from ..ce_jobs import ENDED, CEJobState
from ..node_client import NodeAgentClient, NodeAgentError
from ..placement import NodeLoad
from vgrid_runtime.outcomes import Outcome
from .policies import make_policy
from .pool import VOCNode, VOCNodeState, VOCPool
from .store import VOCStore
from .watchdog import Watchdog

log = logging.getLogger(__name__)


def job_vo(job) -> str:
    """The VO whose cluster runs ``job``: its owner's VO (from the proxy), else the JDL's
    ``VirtualOrganisation``, else ``vgrid`` (the node agents' default pool)."""
    vo = (job.request.owner or {}).get("vo") or job.desc.get("VirtualOrganisation")
    return str(vo) if vo else "vgrid"


class CgroupDriver:
    """VOC nodes as ready sandboxes on the CE's node agents (the cgroup VWN driver).

    A slot is ``<node agent URL>#<cpu>``; free slots are offered on the node agents that are not
    lost or unreachable, least used first, in configuration order. ``boot`` probes the node agent
    (``GET /status``) in a thread and reports the node ready when it answers -- the measured boot
    delay is that round trip; a node agent that does not answer makes the node lost.
    ``terminate`` has nothing to stop on the node: the slot is free again (a VM driver would
    destroy the domain here and report readiness on its node agent's first heartbeat).
    """

    def __init__(self, voc: "VOCScheduling") -> None:
        self.voc = voc
        agent = voc.agent
        self.slots = [f"{u}#{i}" for u in agent.nodes for i in range(agent.config.cpus_per_node)]

    def free_slots(self, busy: set[str]) -> list[str]:
        dead = self.voc.dead
        used = {}
        for s in busy:
            used[s.rsplit("#", 1)[0]] = used.get(s.rsplit("#", 1)[0], 0) + 1
        free = [s for s in self.slots if s not in busy and s.rsplit("#", 1)[0] not in dead]
        order = {s: i for i, s in enumerate(self.slots)}
        return sorted(free, key=lambda s: (used.get(s.rsplit("#", 1)[0], 0), order[s]))

    def boot(self, node: VOCNode) -> None:
        threading.Thread(target=self._boot, args=(node,), name=f"voc-boot-{node.id}", daemon=True).start()

    def _boot(self, node: VOCNode) -> None:
        agent, url = self.voc.agent, node.slot.rsplit("#", 1)[0]
        try:
            NodeAgentClient(url, agent.http, agent.config.node_timeout_s).status()
        except NodeAgentError as exc:
            if exc.status is None:
                self.voc.node_dead(url, f"boot of {node.id}: {exc.brief()}")
                return
        self.voc.ready(node.id)

    def terminate(self, node: VOCNode) -> None:
        pass

    def check(self) -> None:
        """Nothing to look at beyond the node agents (``VOCScheduling.check_nodes``)."""

    def vwn_fields(self, node: VOCNode | None) -> dict:
        return {}


class VOCScheduling:
    """The VOC side of one CE agent (see the module doc). Thread-safe: its own lock, taken after
    the agent's when both are held."""

    def __init__(self, agent) -> None:
        c = agent.config
        self.agent = agent
        self.lock = threading.RLock()
        self.dead: dict[str, str] = {}          # node agent URL -> why its VOC nodes left the pool
        options = {"growth_limit": c.voc_growth_limit, "keep_warm_s": c.voc_keep_warm_s,
                   "hysteresis": c.voc_hysteresis} if c.voc_policy == "damped" else {}
        if c.voc_driver == "libvirt":          # VOC nodes are VMs serving jobs (nodevms)
            from .nodevms import NodeVMDriver
            self.driver = NodeVMDriver(self, CgroupDriver(self))
        else:
            self.driver = CgroupDriver(self)
        self.pool = VOCPool(len(self.driver.slots), self.driver)
        self.watchdog = Watchdog(self.pool, make_policy(c.voc_policy, **options), c.voc_interval_s)
        self.store = VOCStore(agent.db)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="voc-watchdog", daemon=True)

    def start(self) -> None:
        """Adopt the stored pool (after a restart, ``voc.store``) and the running jobs no stored
        node holds, then start the watchdog. A stored node keeps its id, VO, slot and state: a
        busy node whose job ended meanwhile is idle; a booting node's boot (its thread died with
        the old process) is resumed, not counted again; a node on a slot no longer configured is
        dropped. No node is booted twice and a claimed node stays its job's."""
        now = self.agent.clock.now()
        stored, serial, boots = self.store.load()
        with self.agent._lock:
            active = {k for k, j in self.agent.jobs.items() if j.state not in ENDED}
            running = [j for j in self.agent.jobs.values() if j.state not in ENDED and j.node_url]
        resume = []
        with self.lock:
            keep = []
            for n in stored:
                if n.slot not in self.driver.slots and not n.slot.endswith("#adopted"):
                    log.warning("VOC: stored node %s is on %s, no longer a slot of this CE: dropped", n.id, n.slot)
                    continue
                if n.state is VOCNodeState.BUSY and n.job not in active:
                    n.state, n.job, n.idle_since = VOCNodeState.IDLE, None, now
                keep.append(n)
                if n.state is VOCNodeState.BOOTING:
                    resume.append(n)
            self.pool.restore(keep, serial, boots)
            held = {n.job for n in keep if n.job}
            for job in running:
                if job.request.key not in held:
                    self.pool.adopt(job_vo(job), self._slot_on(job.node_url), job.request.key, now)
            self.persist()
        if keep:
            log.info("VOC: %d stored nodes adopted (%d boots resumed)", len(keep), len(resume))
        for n in resume:
            self.driver.boot(n)
        self._thread.start()

    def persist(self) -> None:
        """Store the pool (``VOCStore.save``; call with ``self.lock`` held). A failing database
        is logged, never raised into the watchdog or the placer."""
        try:
            self.store.save(self.pool)
        except Exception:
            log.exception("VOC: storing the pool")

    def stop(self) -> None:
        self._stop.set()

    # -- the watchdog thread ------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.watchdog.interval_s):
            try:
                self.tick()
            except Exception:       # never let a bug stop the watchdog; it is logged
                log.exception("VOC watchdog")

    def tick(self):
        """One interval: drop dead node agents' VOC nodes, free the nodes of jobs that ended by
        another way (lost node, a broker's ``unknown``), then size every VO's cluster."""
        self.check_nodes()
        self.driver.check()                     # VOC VMs gone (libvirt driver, nodevms)
        with self.agent._lock:
            active = {k for k, j in self.agent.jobs.items() if j.state not in ENDED}
        with self.lock:
            for n in self.pool.live():
                if n.state is VOCNodeState.BUSY and n.job not in active:
                    self.pool.release(n.id, self.agent.clock.now())
        demand = self.demand()
        with self.lock:
            report = self.watchdog.tick(self.agent.clock.now(), demand)
            self.persist()
        if report.booted or report.terminated:
            log.info("VOC watchdog: booted %s, terminated %s", report.booted, report.terminated)
        return report

    def demand(self) -> dict[str, tuple[int, int]]:
        """{vo: (waiting jobs, jobs on a VOC node)} from the CE's jobs."""
        out: dict[str, list[int]] = {}
        with self.agent._lock:
            jobs = [j for j in self.agent.jobs.values() if j.state not in ENDED]
        with self.lock:
            for j in jobs:
                on_node = j.vwn is not None or self.pool.node_of(j.request.key) is not None
                out.setdefault(job_vo(j), [0, 0])[1 if on_node else 0] += 1
        return {vo: (w, r) for vo, (w, r) in out.items()}

    def check_nodes(self) -> None:
        """Section 5.3: node agents that hold VOC nodes and have been silent for more than one
        heartbeat interval are probed; those that do not answer (or are lost) leave the pool."""
        agent, beats = self.agent, self.agent.beats
        now = agent.clock.now()
        with self.lock:
            urls = {n.slot.rsplit("#", 1)[0] for n in self.pool.live()} | set(self.dead)
        for url in urls:
            if url in beats.lost:
                self.node_dead(url, "the CE declared its node agent lost")
                continue
            silence = now - beats.node_heard.get(url, beats.started)
            if url not in self.dead and silence <= beats.node_interval.get(url, self.watchdog.interval_s):
                continue
            try:
                NodeAgentClient(url, agent.http, min(2.0, agent.config.node_timeout_s)).status()
                answered = True
            except NodeAgentError as exc:
                answered = exc.status is not None
            if answered:
                beats.heard_node(url)
                with self.lock:
                    if self.dead.pop(url, None) is not None:
                        log.warning("VOC: node agent %s answers again; its slots are offered again", url)
            else:
                self.node_dead(url, f"node agent not heard of for {silence:.1f} s and not answering")

    # -- callbacks ---------------------------------------------------------------------------

    def ready(self, node_id: str) -> None:
        with self.lock:
            node = self.pool.ready(node_id, self.agent.clock.now())
            self.persist()
        if node is not None:
            self.agent._wake.set()              # a job of its VO may be waiting

    def node_lost(self, node_id: str, why: str) -> None:
        """VOC node ``node_id`` died uncleanly (its VM is gone, or never booted): it leaves the
        pool now (its job, if any, ends on its node agent: ``node-lost``)."""
        with self.lock:
            if node_id in self.pool.nodes:
                log.warning("VOC: node %s lost: %s", node_id, why)
                self.pool.lost(node_id, self.agent.clock.now(), why)
                self.persist()

    def node_dead(self, url: str, why: str) -> None:
        """Every VOC node on node agent ``url`` leaves the pool now (it died uncleanly)."""
        now = self.agent.clock.now()
        with self.lock:
            if url not in self.dead:
                log.warning("VOC: node agent %s is gone (%s): its VOC nodes leave the pool", url, why)
            self.dead[url] = why
            for n in [n for n in self.pool.live() if n.slot.rsplit("#", 1)[0] == url]:
                self.pool.lost(n.id, now, why)
            self.persist()

    # -- the placer's side -------------------------------------------------------------------

    def candidates(self, job) -> list[NodeLoad]:
        """The node of the idle VOC node of the job's VO now claimed for it; [] when none."""
        key = job.request.key
        with self.agent._lock, self.lock:      # a job cancelled meanwhile claims nothing
            if job.state is not CEJobState.SCHEDULED or job.vwn:
                return []
            node = self.pool.node_of(key) or self.pool.claim(job_vo(job), key, self.agent.clock.now())
            self.persist()          # the claim is stored before the VWN is created
        if node is None:
            return []
        url = node.slot.rsplit("#", 1)[0]
        return [NodeLoad(url, self.agent.nodes.index(url), 1)]

    def failed(self, job, url: str, exc: NodeAgentError) -> None:
        """POST /vwns of ``job`` on ``url`` failed: no answer -> the node agent is dead; 409
        from a node whose VOC VM is not ready (libvirt driver) -> that node is lost; another
        answer (a refusal) -> the VOC node is idle again and the job waits."""
        if exc.status is None:
            self.node_dead(url, f"POST /vwns got no answer: {exc.brief()}")
        elif exc.status == 409 and self.agent.config.voc_driver == "libvirt":
            with self.lock:
                node = self.pool.node_of(job.request.key)
            if node is not None:
                self.node_lost(node.id, f"its node agent refused a job: {exc.brief()}")
        self.release(job.request.key)

    def vwn_fields(self, job) -> dict:
        """What ``POST /vwns`` of ``job`` adds for its VOC node (the driver's ``vwn_fields``)."""
        with self.lock:
            return self.driver.vwn_fields(self.pool.node_of(job.request.key))

    def waits(self, job) -> bool:
        """Note why ``job`` is still Scheduled (no idle node of its VO); returns False."""
        with self.lock:
            view = self.pool.view(job_vo(job), 0, 0)
        with self.agent._lock:
            if job.state is CEJobState.SCHEDULED and not job.vwn:
                job.note(Outcome.NOT_PLACED, f"not placed yet: waiting for a node of VO {job_vo(job)}'s "
                                             f"cluster ({view.booting} booting, {view.busy} busy)")
        return False

    def release(self, key: str) -> None:
        """Job ``key`` ended (or was cancelled, or never started): its VOC node is idle again."""
        with self.lock:
            node = self.pool.node_of(key)
            if node is not None:
                self.pool.release(node.id, self.agent.clock.now())
                self.persist()
        self.agent._wake.set()

    def status(self) -> dict:
        """``{"policy","interval_s","slots","free","boots","nodes","gone","dead","last_tick"}``
        (boot_s of each node: its measured boot delay, s)."""
        with self.lock:
            last = self.watchdog.last.record() if self.watchdog.last else None
            return {"policy": self.watchdog.policy.name, "interval_s": self.watchdog.interval_s,
                    **self.pool.status(), "dead": dict(self.dead), "last_tick": last}

    def _slot_on(self, url: str) -> str:
        with self.lock:
            busy = {n.slot for n in self.pool.live()}
        free = [s for s in self.driver.slots if s.rsplit("#", 1)[0] == url and s not in busy]
        return free[0] if free else f"{url}#adopted"
