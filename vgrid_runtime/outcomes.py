"""Why a job or VWN is where it is: a typed code carried next to the human ``reason``.

Every event node agent -> CE agent -> broker carries ``"outcome"`` (the value of an
:class:`Outcome`, or null) next to ``"reason"`` (prose for people); VWN, CE job and broker job
records carry both. Code branches on the outcome only, never on the wording of the reason, so
rewording a message changes no behaviour (docs/architecture.md, "events").
"""
from __future__ import annotations

import enum


class Outcome(enum.StrEnum):
    """The outcome code; the value is what the JSON carries."""

    #: The job ran to its end; ``exit_code`` says how (event ``done``, state Done).
    EXIT = "exit"
    #: The job wrapper failed: it reported an error (sandbox transfer, executable), could not be
    #: started, could not join the VWN's cgroup or ended without a result (event ``aborted``).
    WRAPPER_ERROR = "wrapper-error"
    #: The kernel OOM-killed a process of the VWN at its memory limit (node agent, Aborted).
    MEMORY_LIMIT = "memory-limit"
    #: The job failed (exit code != 0) with its work directory's disk quota full (node agent,
    #: Aborted).
    DISK_QUOTA = "disk-quota"
    #: The node agent shut down while the VWN ran (event ``aborted``).
    NODE_SHUTDOWN = "node-shutdown"
    #: The job's lease reached its wall-clock limit (LeaseDuration or the CE's max_wallclock_s)
    #: and its VWN was deleted (CE agent, Aborted).
    WALLCLOCK_LIMIT = "wallclock-limit"
    #: A cancellable job's lease was preempted by an advance reservation (CE agent, Aborted).
    PREEMPTED = "preempted"
    #: A suspendable/migratable job's lease was preempted: the job is Scheduled again and
    #: restarts in a new VWN when its lease starts again (CE agent, not an end).
    REQUEUED = "requeued"
    #: The lease engine rejected the job's lease (immediate: cannot start now; advance
    #: reservation: no room at the requested time; any: larger than the site) (CE agent, Aborted).
    LEASE_REJECTED = "lease-rejected"
    #: Cancelled by the user (CE agent and broker, Cancelled; node agent: VWN deleted).
    CANCELLED = "cancelled"
    #: Not placed yet (scheduler = fair-share): no node agent took the VWN; retried (Scheduled).
    NOT_PLACED = "not-placed"
    #: Not started yet (scheduler = leases): no node agents, or the lease's node agent did not
    #: take the VWN; retried every lease tick (Scheduled).
    NOT_STARTED = "not-started"
    #: CE agent: the cold migration of a suspended VM to another node failed after its retries
    #: (a node down or killed mid-copy, a checksum mismatch); its VWN was deleted (Aborted).
    MIGRATION_FAILED = "migration-failed"
    #: Broker: no compatible CE within match_expiry_s (Aborted).
    NO_RESOURCES = "no-resources"
    #: Broker: the CE refused or could not be reached max_dispatch_attempts times (Aborted).
    DISPATCH_FAILED = "dispatch-failed"
    #: Broker: a DAG node whose dependency did not succeed (Aborted).
    DEPENDENCY_FAILED = "dependency-failed"
    #: CE agent: the job's node agent was not heard of for node_lost_s (Aborted; the broker
    #: resubmits it when its RetryCount/ShallowRetryCount allow).
    NODE_LOST = "node-lost"
    #: Broker: the job was Stalled (its CE did not report it for 3 heartbeat intervals) for
    #: stalled_resubmit_s and could not be resubmitted (Aborted), or was resubmitted (history).
    STALLED = "stalled"
    #: Broker: the job's input sandbox was found incomplete after a restart (a database from an
    #: older version, files removed by hand); never dispatched (Aborted).
    SANDBOX_LOST = "sandbox-lost"
    #: CE agent: one job of a bulk dispatch was refused (malformed request, bad JDL): the
    #: job's fault, not the CE's; the broker retries it (no blacklist) until
    #: max_dispatch_attempts, then Aborts it with ``dispatch-failed`` (contract of POST /jobs/bulk).
    REFUSED = "refused"

    @classmethod
    def parse(cls, value) -> "Outcome | None":
        """The Outcome named by ``value`` (an Outcome, its value string, or None); None for
        None and for a value this version does not know (a newer sender), never an error."""
        if value is None or isinstance(value, cls):
            return value
        try:
            return cls(str(value))
        except ValueError:
            return None


#: Conditions of a job that has not started yet (cleared when its VWN reports running).
PENDING: frozenset[Outcome] = frozenset({Outcome.NOT_PLACED, Outcome.NOT_STARTED})
