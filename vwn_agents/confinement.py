"""What confines a VWN besides its CPU cap: its pool account, limits, work directory and sandbox.

Layout of the node's state directory ``work_dir`` (root, mode 0711: pool accounts may cross it,
never list it): ``vwns/<vwn>/`` (0700 root: spec.json, wrapper.log, disk.img) and
``jobs/<vwn>/`` (the job's work directory, owned by the pool account, 0700, in ``jobs/`` 0711
root). When ``work_dir`` is below a directory the pool accounts cannot cross (e.g. a 0700
temporary directory), the work directories go to a fresh ``vgrid-<node>-jobs-*`` (0711) in the
temporary directory (``/tmp`` when ``TMPDIR`` cannot be crossed either), removed at shutdown. The gridmapdir (``pool_accounts``) is host-wide.

Per VWN (``Jail``): an account leased for its owner; memory and pids cgroups (``limits``); a
loop-mounted quota on the work directory (``quota``); the input sandbox staged in before the
wrapper starts and the output sandbox staged out after every process of the VWN ended
(``sandbox``). A facility this host lacks is named in ``Jail.unconfined`` (and the VWN record),
never skipped silently.
"""
from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from vgrid_runtime.httpclient import new_session
from vgrid_runtime.outcomes import Outcome

from . import quota
from .quota_spares import SpareImages
from .cgroups import CgroupError
from .limits import ResourceLimits, open_limits
from .pool_accounts import Account, AccountMap, Owner, PoolAccounts
from .sandbox import SandboxClient, stage_in, stage_out

log = logging.getLogger(__name__)
MB = 1_000_000


@dataclass
class Jail:
    """One VWN's confinement: ``account`` it runs as, its ``workdir`` and private ``vdir``,
    limits (``memory_mb``, ``pids_max``, ``disk_quota_mb``; None = not enforced) and
    ``unconfined`` ({facility: why it is not enforced})."""

    vwn: str
    owner: Owner
    account: Account
    workdir: Path
    vdir: Path
    memory_mb: int | None = None
    pids_max: int | None = None
    disk_quota_mb: int | None = None
    unconfined: dict[str, str] = field(default_factory=dict)

    def record(self) -> dict:
        return {"account": self.account.name, "uid": self.account.uid,
                "limits": {"memory_mb": self.memory_mb, "pids_max": self.pids_max,
                           "disk_quota_mb": self.disk_quota_mb},
                "unconfined": self.unconfined}


def _crossable(path: Path) -> bool:
    """True when every ancestor of ``path`` lets others search it (o+x)."""
    for d in [path.resolve(), *path.resolve().parents]:
        if d.exists() and not d.stat().st_mode & stat.S_IXOTH:
            return False
    return True


class Confinement:
    """The node's confinement machinery (config: ``NodeAgentConfig``; ``cpu_dir``: the CPU
    driver's node directory when it is cgroup v2). Raises ``pool_accounts.AccountError`` when
    the accounts cannot be prepared or one of them is root. ``adopted``: ``(owner, earlier agent
    pid, vwn, cgroup home)`` of the VWNs a restarted agent adopts: their account leases stay held
    and their limit cgroups are kept (see ``adopt``)."""

    def __init__(self, config, work_dir: Path, cpu_dir: Path | None,
                 adopted: list[tuple[Owner, int, str, str | None]] = ()) -> None:
        self.config = config
        os.chmod(work_dir, 0o711)
        self.private = work_dir / "vwns"
        self.private.mkdir(exist_ok=True)
        os.chmod(self.private, 0o700)
        self._own_jobs = False
        if config.jobs_dir:
            self.jobs = Path(config.jobs_dir)
        elif _crossable(work_dir):
            self.jobs = work_dir / "jobs"
        else:
            tmp = tempfile.gettempdir() if _crossable(Path(tempfile.gettempdir())) else "/tmp"
            self.jobs = Path(tempfile.mkdtemp(prefix=f"vgrid-{config.node}-jobs-", dir=tmp))
            self._own_jobs = True
        self.jobs.mkdir(parents=True, exist_ok=True)
        os.chmod(self.jobs, 0o711)
        if not _crossable(self.jobs):
            raise ValueError(f"jobs_dir {self.jobs}: an ancestor is not searchable by others (o+x); "
                             "pool accounts could not reach their work directories")
        amap = AccountMap.load(config.map_file, config.vo_pools, config.default_pool)
        self.accounts = PoolAccounts(amap, Path(config.gridmapdir), config.pool_size)
        self.accounts.prepare([(o, f"{pid}.{vwn}", self.holder(vwn)) for o, pid, vwn, _ in adopted])
        self.limits: ResourceLimits = open_limits(config.node, config.cgroup, config.cgroup_parent,
                                                  cpu_dir, keep=frozenset(
                                                      f"{h}/{v}" for _, _, v, h in adopted if h))
        self.quota_reason = quota.probe(self.private) if config.disk_quota_mb else None
        keep = config.spare_disk_images
        self.spares = (SpareImages(self.private / ".spares", config.disk_quota_mb, keep)
                       if config.disk_quota_mb and not self.quota_reason and keep > 0 else None)
        self.sandbox = SandboxClient(new_session(config.tls_files()))   # the node host certificate in TLS mode
        for ctrl, why in {**self.limits.missing, "disk": self.quota_reason}.items():
            if why:
                log.warning("node %s: no %s limit: %s", config.node, ctrl, why)

    def stop(self) -> None:
        """Stop making spare quota file systems and remove the ready ones (``quota_spares``)."""
        if self.spares is not None:
            self.spares.close()

    def describe(self) -> dict:
        return {"limits": self.limits.describe(),
                "disk": {"quota_mb": self.config.disk_quota_mb or None, "reason": self.quota_reason},
                "jobs_dir": str(self.jobs)}

    @staticmethod
    def holder(vwn: str) -> str:
        """This agent's gridmapdir holder name of ``vwn`` (``<agent pid>.<vwn>``)."""
        return f"{os.getpid()}.{vwn}"

    def adopt(self, jail: Jail, home: str | None) -> None:
        """Take over ``jail`` of an earlier agent: its limit cgroups are in node directory
        ``home`` (the lease was kept by the constructor's ``adopted``)."""
        if "cgroup" not in jail.unconfined:
            self.limits.adopt(jail.vwn, home)

    def open(self, vwn: str, owner: Owner, memory_mb: int | None) -> Jail:
        """Lease the account and make the VWN's limit cgroups (fast: under the agent's lock).
        AccountError when no account can be leased."""
        account = self.accounts.lease(owner, self.holder(vwn))
        jail = Jail(vwn, owner, account, self.jobs / vwn, self.private / vwn)
        mem = memory_mb or self.config.memory_per_vwn_mb or None
        pids = self.config.pids_max or None
        try:
            self.limits.create(vwn, mem * MB if mem else None, pids)
        except CgroupError as exc:
            jail.unconfined["cgroup"] = f"limits not applied: {exc}"
        jail.memory_mb = mem if "memory" in self.limits.dirs and "cgroup" not in jail.unconfined else None
        jail.pids_max = pids if "pids" in self.limits.dirs and "cgroup" not in jail.unconfined else None
        jail.unconfined.update(self.limits.missing)
        return jail

    def prepare(self, jail: Jail, input_sandbox: list[dict], stop=lambda: False) -> None:
        """Make the private dir and the work directory (quota mounted, owned by the account,
        0700) and stage the input sandbox in (transient failures retried for
        ``transfer_patience_s`` or until ``stop()``). SandboxError / OSError for the job's reason."""
        shutil.rmtree(jail.vdir, ignore_errors=True)        # left by an earlier agent
        jail.vdir.mkdir(mode=0o700)
        self._unmount(jail)
        shutil.rmtree(jail.workdir, ignore_errors=True)
        jail.workdir.mkdir(mode=0o700)
        if self.config.disk_quota_mb and not self.quota_reason:
            try:
                image = jail.vdir / "disk.img"
                if self.spares is None or not self.spares.take(image, jail.workdir):
                    quota.attach(image, jail.workdir, self.config.disk_quota_mb)
                jail.disk_quota_mb = self.config.disk_quota_mb
            except quota.QuotaUnavailable as exc:
                jail.unconfined["disk"] = f"no loop-mounted disk quota: {exc}"
        elif self.quota_reason:
            jail.unconfined["disk"] = self.quota_reason
        os.chown(jail.workdir, jail.account.uid, jail.account.gid)
        os.chmod(jail.workdir, 0o700)
        stage_in(self.sandbox, input_sandbox, jail.workdir, jail.account.uid, jail.account.gid,
                 int(self.config.max_sandbox_mb * MB), self.config.transfer_patience_s, stop)

    def cgroup_procs(self, jail: Jail, cpu_procs: list[str]) -> list[str]:
        """The cgroup.procs files the wrapper joins: the CPU driver's ``cpu_procs`` and the
        limits' (memory, pids), each once."""
        return list(dict.fromkeys([*cpu_procs, *(self.limits.procs_files(jail.vwn)
                                                 if "cgroup" not in jail.unconfined else [])]))

    def command(self, jail: Jail, cpu_procs: list[str], argv: list[str]) -> list[str]:
        """The cgroup.procs files to join (``cgroup_procs``) and ``argv`` run as the account
        with no supplementary groups and no new privileges, for ``JOIN_AND_EXEC``."""
        procs = self.cgroup_procs(jail, cpu_procs)
        a = jail.account
        return [*procs, "--", "setpriv", f"--reuid={a.uid}", f"--regid={a.gid}", "--clear-groups",
                "--no-new-privs", "--", *argv]

    def verdict(self, jail: Jail, exit_code: int | None) -> tuple[Outcome, str] | None:
        """Why the VWN ended aborted because of a limit (read before ``close``), else None."""
        if self.limits.oom_killed(jail.vwn):
            return Outcome.MEMORY_LIMIT, (f"memory limit: the job used more than its "
                                          f"{jail.memory_mb} MB and was killed by the kernel")
        if exit_code and jail.disk_quota_mb and quota.is_full(jail.workdir):
            return Outcome.DISK_QUOTA, (f"disk quota: the work directory's {jail.disk_quota_mb} "
                                        f"MB are full (job exit code {exit_code})")
        return None

    def stage_out(self, jail: Jail, names: list[str], url: str | None, stop) -> tuple[list, list]:
        """``sandbox.stage_out`` from the VWN's work directory (its processes all ended)."""
        return stage_out(self.sandbox, names, jail.workdir, url, int(self.config.max_sandbox_mb * MB),
                         self.config.transfer_patience_s, stop)

    def kill(self, jail: Jail) -> None:
        self.limits.kill(jail.vwn)

    def close(self, jail: Jail, keep: bool) -> None:
        """Remove the limit cgroups, unmount the quota, remove the directories (unless
        ``keep``: the image stays in ``vdir``), release the account. Never raises."""
        try:
            self.limits.remove(jail.vwn)
        except (CgroupError, OSError) as exc:
            log.warning("%s: %s", jail.vwn, exc)
        self._unmount(jail, keep)
        if not keep:
            shutil.rmtree(jail.workdir, ignore_errors=True)
            shutil.rmtree(jail.vdir, ignore_errors=True)
        try:
            self.accounts.release(jail.owner, self.holder(jail.vwn))
        except OSError as exc:
            log.warning("%s: releasing account %s: %s", jail.vwn, jail.account.name, exc)

    def _unmount(self, jail: Jail, keep: bool = False) -> None:
        image = jail.vdir / "disk.img"
        if os.path.ismount(jail.workdir) or image.exists():
            quota.detach(image if not keep else jail.vdir / ".kept", jail.workdir)

    def shutdown(self) -> None:
        try:
            self.limits.close()
        except (CgroupError, OSError) as exc:
            log.warning("node %s: %s", self.config.node, exc)
        self.sandbox.close()
        if self._own_jobs:
            shutil.rmtree(self.jobs, ignore_errors=True)
