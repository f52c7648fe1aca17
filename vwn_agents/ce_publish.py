"""What a CE agent publishes: job records, counts, GLUE numbers and ``GET /status``.

``CEPublishing`` is a mixin of ``ce_agent.CEAgent`` (it reads the agent's ``jobs``, ``_lock``,
``leases``, ``config``, ``beats``, ``ready``); kept apart to keep the agent's logic short.
"""
from __future__ import annotations

from .ce_jobs import CEJob, CEJobState


class CEPublishing:
    """Read-only views of a CE agent's state (see module doc)."""

    def record(self, job: CEJob) -> dict:
        """The job's record (docs/architecture.md) plus, with scheduler = leases, ``"lease"``:
        the request (type, cpu, memory_mb, duration_s, requested_start_s, preemptible, image)
        and the engine's lease (id, state, start_s, end_s, nodes, reason); else None."""
        with self._lock:
            rec = job.record()
        lease = None
        if job.lease_req is not None:
            lease = {**job.lease_req.to_json(), **(self.leases.view(job.request.key) or {"state": "Pending"})}
        return {**rec, "lease": lease}

    def records(self) -> list[dict]:
        """Every job record, in arrival order."""
        with self._lock:
            jobs = list(self.jobs.values())
        return [self.record(j) for j in jobs]

    def counts(self) -> dict[str, int]:
        with self._lock:
            out: dict[str, int] = {}
            for j in self.jobs.values():
                out[j.state.value] = out.get(j.state.value, 0) + 1
            return out

    def free_and_ert(self) -> tuple[int, int]:
        """(GlueCEStateFreeCPUs, GlueCEStateEstimatedResponseTime in s).

        fair-share: max(0, TotalCPUs - running) and 0 (every job gets its own VWN at once, seed
        004 Section 5.1). leases: the VWN slots a new best-effort job could take now, and the
        engine's earliest start of such a job behind the queue, in seconds from now (its
        reservations last the jobs' wall-clock limits, so this is an upper bound)."""
        if self.leases:
            return self.leases.glue_numbers()
        total = len(self.nodes) * self.config.cpus_per_node
        return max(0, total - self.counts().get(CEJobState.RUNNING.value, 0)), 0

    def ce_state(self):
        """The ``infosys.gip.CEState`` this CE publishes: RunningJobs = jobs with a running VWN,
        WaitingJobs = accepted jobs without one (queued or reserved leases), TotalJobs = both;
        FreeCPUs and EstimatedResponseTime from ``free_and_ert``."""
        from infosys.gip import CEState
        c, counts = self.config, self.counts()
        total = self.total_cpus()
        running = counts.get(CEJobState.RUNNING.value, 0)
        free, ert = self.free_and_ert()
        return CEState(ce_id=c.ce_id, host=c.host, site=c.site, queue=c.queue, status=c.status,
                       lrms_type=c.lrms_type, total_cpus=total, free_cpus=free,
                       running=running, waiting=counts.get(CEJobState.SCHEDULED.value, 0), ert_s=ert,
                       max_wallclock_s=c.max_wallclock_s, si00=c.si00, ram_mb=c.ram_mb,
                       vos=list(c.vos), contact_string=self.url)

    def total_cpus(self) -> int:
        """GlueCEInfoTotalCPUs: the CPUs of the nodes that are up (scheduler = leases: a node
        marked down by the lease engine is not counted; fair-share: every node)."""
        up = self.leases.nodes_up() if self.leases else {}
        return sum(self.config.cpus_per_node for u in self.nodes if up.get(u, True))

    def status(self) -> dict:
        """``{"ce_id","url","scheduler","capacity","nodes","jobs","heartbeats","lost_nodes","ready",
        "suspension"}`` (suspension: ``LeaseScheduling.suspension``, which nodes freeze VWNs and why not);
        each node is ``{"url","vwns","up","heard_age_s","lost","limit_s"}`` (up: False while the
        lease engine has it marked down; heartbeats, lost: ``CEHeartbeats.status``)."""
        counts = self.counts()
        free, ert = self.free_and_ert()
        up = self.leases.nodes_up() if self.leases else {}
        beats = self.beats.status()
        return {"ce_id": self.config.ce_id, "url": self.url, "scheduler": self.config.scheduler,
                "capacity": {"total_cpus": self.total_cpus(), "free_cpus": free, "ert_s": ert},
                "nodes": [{"url": n.url, "vwns": n.vwns, "up": up.get(n.url, True), **beats["node_heard"][n.url]}
                          for n in self.loads()],
                "jobs": counts, "heartbeats": beats["heartbeats"], "lost_nodes": beats["lost_nodes"],
                "ready": self.ready.is_set(),
                "suspension": self.leases.suspension() if self.leases else
                {"suspend_vwns": False, "nodes": {}, "reason": "scheduler = fair-share: no lease engine"},
                **({"voc": self.voc.status()} if getattr(self, "voc", None) else {})}
