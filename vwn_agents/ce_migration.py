"""Cold migration of a suspended lease's VMs, driven by the CE agent's lease engine (issue 14).

When the lease engine resumes a suspended lease on other nodes than the ones it was suspended
on (``migration = "yes"`` in the lease configuration and the CE agent's ``migrate_vwns``; the
engine plans a ``MIGRATE`` reservation of memory / ``migration-bandwidth`` seconds before the
resumption, seed 002 eq. (8)), ``NodeAgentEnactment.resume_vms`` calls ``LeaseMigration.migrate``
instead of deleting the VWNs. For every VM that changes node, from node agent A to B:

1. ``POST A/vwns/<vwn>/handover``: A saves the VM's memory image (if not yet) and answers the
   manifest (file names, sizes, SHA-256) and a one-time token (``node_migration``);
2. ``POST B/vwns/migrations``: B pulls the files from A over HTTPS (mutual TLS, B's host
   credential + the token), checks them, restores the VM and records a new VWN; its ``resumed``
   event carries ``migrated_from`` so the CE agent moves the job to it (history: the node
   changes);
3. ``POST A/vwns/<vwn>/handover/complete``: A ends its VWN (cancelled, "migrated to ...").

Failures: a node that does not answer (down, killed mid-copy: B answers 502 when A broke off, or
B itself is gone) -- steps 1-2 are retried ``attempts`` times ``backoff_s`` apart (A keeps the
VM suspended on its disk meanwhile; a restarted A adopts it as suspended); then
``MigrationFailed``: the enactment deletes the VWN on A and the job ends Aborted with
``Outcome.MIGRATION_FAILED`` and the last error (never a VM lost without a word). A refusal that
retrying cannot change (409: not a libvirt node, not suspended) raises ``MigrationRefused``: the
VWN is deleted and the job restarts in a new VWN as without migration (``Outcome.REQUEUED``).

Every migration is measured (``records``): the memory image's MB, the copy's wall time and
MB/s, the restore time, against the model's estimate memory / ``migration-bandwidth`` (the
lease's ``VMMemory``; seed 002 eq. (8)'s t_copy); the copy rate is also fed to
``rate_feedback.MeasuredRates`` (the engine's next plans use it).
"""
from __future__ import annotations

import logging
import threading
import time

from .leasing.model import MEM
from .node_client import NodeAgentClient, NodeAgentError

log = logging.getLogger(__name__)


class MigrationFailed(Exception):
    """The VM could not be moved after every attempt (the message says why, with the last error)."""


class MigrationRefused(Exception):
    """A node refused in a way retrying cannot change (e.g. not a libvirt node)."""


class LeaseMigration:
    """The CE side of cold migration (module doc). ``cfg``: the lease configuration (its
    ``migration-bandwidth``, MB/s, is the model); ``rates``: a ``MeasuredRates`` or None;
    ``attempts`` >= 1; ``backoff_s`` between attempts; ``timeout_s`` bounds each node call
    (the copy and the restore happen inside POST /vwns/migrations). ``sleep``/``monotonic``
    injectable (tests)."""

    def __init__(self, cfg, rates=None, attempts: int = 3, backoff_s: float = 1.0,
                 timeout_s: float = 600.0, sleep=time.sleep, monotonic=time.monotonic) -> None:
        self.cfg, self.rates = cfg, rates
        self.attempts, self.backoff_s, self.timeout_s = max(1, attempts), backoff_s, timeout_s
        self._sleep, self._monotonic = sleep, monotonic
        self.records: list[dict] = []
        self.failed: dict[int, str] = {}         # lease id -> why its migration failed
        self.planned: dict[int, float] = {}      # lease id -> its MIGRATE reservation's length (s)
        self._lock = threading.Lock()

    def migrate(self, enact, lease, held: list, mapping: tuple) -> list:
        """Move every VM of ``held`` ``[(node, vwn)]`` whose node differs from ``mapping`` and
        resume the others in place; the new ``[(node, vwn)]``. MigrationFailed, MigrationRefused."""
        out = []
        for (node, vwn), new in zip(held, mapping):
            if node == new:
                try:
                    enact.client(node).resume_vwn(vwn)
                except NodeAgentError as exc:
                    raise MigrationFailed(f"cannot resume {vwn} in place: {exc}") from None
                out.append((node, vwn))
            else:
                out.append((new, self.move(enact, lease, node, vwn, new)))
        return out

    def move(self, enact, lease, a: int, vwn: str, b: int) -> str:
        """One VM from site node ``a`` to ``b`` (module doc); B's new VWN id."""
        src, dst = enact.client(a), NodeAgentClient(enact.node_urls[b], session=enact.session,
                                                    timeout_s=self.timeout_s)
        last = None
        for attempt in range(1, self.attempts + 1):
            if attempt > 1:
                self._sleep(self.backoff_s)
            t0 = self._monotonic()
            try:
                h = src.handover(vwn, timeout_s=self.timeout_s)
            except NodeAgentError as exc:
                if exc.status in (404, 409):
                    raise MigrationRefused(f"node {enact.node_urls[a]} cannot hand over {vwn}: {exc}") from None
                last = f"handover on {enact.node_urls[a]} (attempt {attempt}): {exc}"
                log.warning("migration of %s: %s", vwn, last)
                continue
            t1 = self._monotonic()
            body = {"source_url": enact.node_urls[a], "source_vwn": vwn, "source_dir": h["dir"],
                    "source_node": h.get("node", ""), "token": h["token"], "files": h["files"],
                    "request": h["request"], "memory_mb": h.get("memory_mb")}
            try:
                ans = dst.migrate_in(body)
            except NodeAgentError as exc:
                if exc.status == 409:
                    raise MigrationRefused(f"node {enact.node_urls[b]} cannot take {vwn} over: {exc}") from None
                last = f"copy to {enact.node_urls[b]} (attempt {attempt}): {exc}"
                log.warning("migration of %s: %s", vwn, last)
                continue
            t2 = self._monotonic()
            try:
                src.complete_handover(vwn, ans.get("node", enact.node_urls[b]), ans["vwn"])
            except NodeAgentError as exc:         # A keeps a suspended record; its heartbeat sweeps it
                log.warning("migration of %s: node %s did not end its VWN: %s", vwn, enact.node_urls[a], exc)
            self._record(enact, lease, a, b, vwn, h, ans, t1 - t0, t2 - t1, attempt)
            return ans["vwn"]
        raise MigrationFailed(f"cold migration of VWN {vwn} from {enact.node_urls[a]} to "
                              f"{enact.node_urls[b]} failed after {self.attempts} attempts: {last}")

    def _record(self, enact, lease, a, b, vwn, h, ans, handover_s, call_s, attempt) -> None:
        memory_mb = float(lease.per_vm[MEM])
        bw = float(self.cfg.get("migration-bandwidth"))
        image = next((f["size"] for f in h["files"] if f["name"] == "memory.save"), 0) / 1e6
        rec = {"lease": lease.id, "from": enact.node_urls[a], "to": enact.node_urls[b], "vwn_from": vwn,
               "vwn_to": ans["vwn"], "attempt": attempt, "save": h.get("save"),
               "handover_s": round(handover_s, 3), "bytes": ans.get("bytes"), "image_mb": round(image, 1),
               "copy_s": ans.get("copy_s"), "copy_mb_s": ans.get("copy_mb_s"),
               "restore_s": ans.get("restore_s"), "restore_mb_s": ans.get("restore_mb_s"),
               "migrate_call_s": round(call_s, 3), "memory_mb": memory_mb, "bandwidth_mb_s": bw,
               "model_copy_s": round(memory_mb / bw, 3), "model_image_copy_s": round(image / bw, 3),
               "planned_s": self.planned.get(lease.id)}
        with self._lock:
            self.records.append(rec)
        if self.rates is not None and ans.get("copy_s"):
            self.rates.observe(enact.node_urls[b], "copy",
                               {"mb": (ans.get("bytes") or 0) / 1e6, "seconds": ans["copy_s"]})
            self.rates.observe(enact.node_urls[b], "restore",
                               {"mb": ans.get("mb"), "seconds": ans.get("restore_s")})
        log.info("lease %s: VWN %s migrated to %s as %s: %.1f MB copied in %s s (model %.2f s), "
                 "restored in %s s", lease.id, vwn, enact.node_urls[b], ans["vwn"], image,
                 ans.get("copy_s"), rec["model_image_copy_s"], ans.get("restore_s"))

    def view(self) -> dict:
        """For the CE's GET /status: ``{"records": [...], "failed": {lease id: reason}}``."""
        with self._lock:
            return {"records": list(self.records), "failed": {str(k): v for k, v in self.failed.items()}}
