"""Pool accounts, the LCMAPS way: a job owner's DN/FQAN mapped to a local Unix account.

The map file is grid-mapfile style, one mapping a line (``#`` starts a comment)::

    "/DC=org/DC=vgrid/OU=users/CN=Alice" .dteam     # a DN -> pool dteam (dteam001..dteam050)
    "/dteam/Role=production/*" .dteamprd             # an FQAN pattern (fnmatch) -> a pool
    "/dteam/*" .dteam
    "/DC=org/DC=vgrid/OU=users/CN=Bob" bob           # a DN -> one existing plain account

Resolution (``AccountMap.pool_for``): the DN lines first (exact match), then the owner's FQANs
in their order (the first is the primary one) against the FQAN lines in file order, then the
VO ``v`` -> pool ``.v`` (``vo_pools``), then ``default_pool``. A VWN without owner gets the
default pool.

Leases live in a *gridmapdir* (``PoolAccounts``, host-wide like LCMAPS'): one empty file per pool
account, and a lease is a hard link to it named by the URL-quoted ``<DN>:<pool>``; an account
whose file has more than one link is taken. Two VWNs of one DN share one account, and the
directory survives a node agent restart (the same DN gets the same account back while the lease
lasts). A lease is released when the owner's last VWN ends; when a pool is full, leases of
owners with no running VWN (e.g. left by a crashed agent) are reclaimed.

No account may be root (uid 0 or gid 0): ``AccountError`` at start (``PoolAccounts.prepare``) and
again at every lease.
"""
from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import os
import pwd
import re
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

POOL_RE = re.compile(r"[a-z][a-z0-9_-]{0,23}")
ACCOUNT_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


class AccountError(RuntimeError):
    """A map file, pool or account problem; the message is for the operator or the job."""


@dataclass(frozen=True)
class Account:
    """A local account a VWN runs as: ``name``, ``uid``, ``gid`` (never 0)."""

    name: str
    uid: int
    gid: int


@dataclass(frozen=True)
class Owner:
    """Who a job belongs to: ``dn`` (subject DN, may be ""), ``vo`` and ``fqans`` (first = primary)."""

    dn: str = ""
    vo: str | None = None
    fqans: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: dict | None) -> "Owner":
        """From the ``owner`` object of POST /vwns (None: no owner); ValueError naming the key."""
        if d is None:
            return cls()
        if not isinstance(d, dict):
            raise ValueError("field 'owner': expected an object {\"dn\", \"vo\", \"fqans\"}")
        dn, vo, fqans = d.get("dn", ""), d.get("vo"), d.get("fqans", [])
        unknown = set(d) - {"dn", "vo", "fqans"}
        if unknown:
            raise ValueError(f"field 'owner': unknown key {sorted(unknown)[0]!r}")
        if not isinstance(dn, str) or (vo is not None and not isinstance(vo, str)):
            raise ValueError("field 'owner': 'dn' and 'vo' must be strings")
        if not isinstance(fqans, list) or not all(isinstance(f, str) for f in fqans):
            raise ValueError("field 'owner.fqans': expected a list of strings")
        return cls(dn, vo, tuple(fqans))


def parse_map_file(text: str, source: str = "map file") -> tuple[dict[str, str], list[tuple[str, str]]]:
    """``(dn -> target, [(fqan pattern, target)])`` of a grid-mapfile text; a target is
    ``.pool`` or an account name. AccountError naming ``source:line`` for a malformed line."""
    dns: dict[str, str] = {}
    fqans: list[tuple[str, str]] = []
    for no, line in enumerate(text.splitlines(), 1):
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise AccountError(f"{source}:{no}: {exc}") from None
        if not words:
            continue
        if len(words) != 2:
            raise AccountError(f"{source}:{no}: expected '\"<DN or FQAN>\" <.pool or account>'")
        subject, target = words
        name = target[1:] if target.startswith(".") else target
        if not (POOL_RE if target.startswith(".") else ACCOUNT_RE).fullmatch(name):
            raise AccountError(f"{source}:{no}: {target!r} is not a pool (.name) or account name")
        if target in ("root", ".root"):
            raise AccountError(f"{source}:{no}: jobs may not run as root")
        if subject.startswith("/") and "=" in subject.split("/")[1]:
            dns[subject] = target
        elif subject.startswith("/"):
            fqans.append((subject, target))
        else:
            raise AccountError(f"{source}:{no}: {subject!r} is neither a DN nor an FQAN")
    return dns, fqans


class AccountMap:
    """Owner -> pool (``.name``) or account, from a map file plus the default rules."""

    def __init__(self, dns: dict[str, str], fqans: list[tuple[str, str]], vo_pools: bool,
                 default_pool: str) -> None:
        self.dns, self.fqans, self.vo_pools = dns, fqans, vo_pools
        self.default_pool = default_pool

    @classmethod
    def load(cls, map_file: str | None, vo_pools: bool = True,
             default_pool: str = ".vgrid") -> "AccountMap":
        """Read ``map_file`` (None: no file, only the default rules); AccountError."""
        dns, fqans = {}, []
        if map_file:
            try:
                text = Path(map_file).read_text()
            except OSError as exc:
                raise AccountError(f"cannot read the map file {map_file}: {exc.strerror}") from None
            dns, fqans = parse_map_file(text, map_file)
        if not default_pool.startswith(".") or not POOL_RE.fullmatch(default_pool[1:]):
            raise AccountError(f"default pool {default_pool!r} must be '.name' (lower case)")
        return cls(dns, fqans, vo_pools, default_pool)

    def pools(self) -> list[str]:
        """Every pool named by the map file and the default pool (``.name``), sorted."""
        return sorted({t for t in [*self.dns.values(), *(t for _, t in self.fqans),
                                   self.default_pool] if t.startswith(".")})

    def accounts(self) -> list[str]:
        """Every plain account named by the map file."""
        return sorted({t for t in [*self.dns.values(), *(t for _, t in self.fqans)]
                       if not t.startswith(".")})

    def target_for(self, owner: Owner) -> str:
        """The pool (``.name``) or account for ``owner`` (see the module doc for the order)."""
        if owner.dn and owner.dn in self.dns:
            return self.dns[owner.dn]
        for fqan in owner.fqans:
            for pattern, target in self.fqans:
                if fnmatch.fnmatchcase(fqan, pattern) or fnmatch.fnmatchcase(fqan + "/", pattern):
                    return target
        if self.vo_pools and owner.vo and POOL_RE.fullmatch(owner.vo):
            return "." + owner.vo
        return self.default_pool


def lookup(name: str) -> Account | None:
    """The local account ``name``, None if it does not exist."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return None
    return Account(pw.pw_name, pw.pw_uid, pw.pw_gid)


#: How long ``create_account`` retries a useradd that found /etc/passwd or /etc/group locked (s).
USERADD_LOCK_WAIT_S = 30.0


def create_account(name: str, lock_wait_s: float = USERADD_LOCK_WAIT_S) -> Account:
    """``useradd`` a pool account: own group, no home, no login shell; AccountError.

    useradd gives up at once while another useradd (another node agent, or a package's
    postinst) holds the passwd/group lock; on a loaded host that holder may be descheduled for
    seconds, so a locked attempt is retried for up to ``lock_wait_s`` seconds."""
    deadline = time.monotonic() + lock_wait_s
    while True:
        proc = subprocess.run(["useradd", "--no-create-home", "--home-dir", "/nonexistent",
                               "--shell", "/usr/sbin/nologin", "--user-group",
                               "--comment", "vgrid pool account", name],
                              capture_output=True, text=True)
        account = lookup(name)
        locked = proc.returncode in (1, 10) and "lock" in proc.stderr   # "cannot lock /etc/passwd"
        if account is not None or not locked or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if account is None:
        said = proc.stderr.strip().removeprefix("useradd: ")     # it names itself
        raise AccountError(f"cannot create pool account {name}: useradd: "
                           f"{said or f'exit status {proc.returncode}'}")
    return account


def check_not_root(account: Account) -> Account:
    """``account`` itself; AccountError if it is root (uid 0 or gid 0)."""
    if account.uid == 0 or account.gid == 0:
        raise AccountError(f"account {account.name} has uid {account.uid} gid {account.gid}: "
                           "jobs may not run as root")
    return account


class PoolAccounts:
    """Leases of pool accounts per owner, in the host-wide gridmapdir ``directory``.

    Files: ``<account>`` (one per pool account), ``<quoted DN:pool>`` (a lease: a hard link to
    its account's file) and ``.holders/<agent pid>.<vwn>`` (one hard link per running VWN). An
    account file with one link is free; every change happens under ``flock(.lock)``, so node
    agents sharing a host share the leases. ``pool_size``: accounts per pool
    (``<pool>001`` ... ``<pool><pool_size>``).
    """

    def __init__(self, amap: AccountMap, directory: Path, pool_size: int = 50) -> None:
        self.map, self.dir, self.pool_size = amap, Path(directory), pool_size
        self.holders = self.dir / ".holders"
        self._lock = threading.Lock()

    def prepare(self, readopt: list[tuple[Owner, str, str]] = ()) -> None:
        """Create the gridmapdir (0700 root), every missing account of the configured pools and
        their gridmapdir files; AccountError (e.g. a mapped account that is root or missing).

        ``readopt``: ``(owner, old holder, new holder)`` of VWNs a restarted agent adopts: their
        holders (named by the dead agent's pid) are renamed before stale holders are swept, so
        the leases stay held (a holder already swept is linked again to the owner's lease)."""
        self.holders.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        for name in self.map.accounts():
            check_not_root(lookup(name) or _missing(name))
        with self._locked():
            for owner, old, new in readopt:
                self._readopt(owner, old, new)
            self._sweep_holders()
            for pool in self.map.pools():
                for i in range(1, self.pool_size + 1):
                    self._ensure(f"{pool[1:]}{i:03d}")

    def lease(self, owner: Owner, holder: str) -> Account:
        """The account of ``owner``'s VWN ``holder`` (unique per VWN on this host): the owner's
        current lease, else a free pool account. AccountError when the pool is full or an
        account is root. Pair with ``release(owner, holder)``."""
        target = self.map.target_for(owner)
        if not target.startswith("."):
            return check_not_root(lookup(target) or _missing(target))
        link = self._link(owner, target)
        with self._locked():
            account = self._held(link) or self._take(link, target[1:])
            os.link(link, self.holders / holder)
            return check_not_root(account)

    def _readopt(self, owner: Owner, old: str, new: str) -> None:
        target = self.map.target_for(owner)
        if not target.startswith(".") or old == new:
            return
        try:
            os.replace(self.holders / old, self.holders / new)
            return
        except FileNotFoundError:
            pass
        try:
            os.link(self._link(owner, target), self.holders / new)
        except FileExistsError:
            pass
        except FileNotFoundError:                # the lease itself is gone: nothing to hold
            pass

    def release(self, owner: Owner, holder: str) -> None:
        """VWN ``holder`` of ``owner`` ended; the lease goes with the owner's last VWN."""
        target = self.map.target_for(owner)
        if not target.startswith("."):
            return
        link = self._link(owner, target)
        with self._locked():
            (self.holders / holder).unlink(missing_ok=True)
            try:
                if link.stat().st_nlink <= 2:        # the account file and this lease only
                    link.unlink()
            except FileNotFoundError:
                pass

    def leases(self) -> dict[str, str]:
        """Lease (DN:pool, unquoted) -> account name, from the gridmapdir."""
        accounts = {p.stat().st_ino: p.name for p in self._files() if "%" not in p.name}
        return {unquote(p.name): accounts.get(p.stat().st_ino, "?") for p in self._files()
                if "%" in p.name}

    def _link(self, owner: Owner, target: str) -> Path:
        return self.dir / quote(f"{owner.dn or '<no owner>'}:{target}", safe="")

    def _files(self) -> list[Path]:
        return [p for p in self.dir.iterdir() if not p.name.startswith(".")]

    @contextlib.contextmanager
    def _locked(self):
        with self._lock, open(self.dir / ".lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def _ensure(self, name: str) -> Account:
        account = check_not_root(lookup(name) or create_account(name))
        (self.dir / name).touch(exist_ok=True)
        return account

    def _held(self, link: Path) -> Account | None:
        try:
            ino = link.stat().st_ino
        except FileNotFoundError:
            return None
        for p in self._files():
            if "%" not in p.name and p.stat().st_ino == ino:
                return lookup(p.name) or _missing(p.name)
        link.unlink(missing_ok=True)             # its account file is gone: lease again
        return None

    def _take(self, link: Path, pool: str) -> Account:
        for attempt in range(2):
            for i in range(1, self.pool_size + 1):
                name = f"{pool}{i:03d}"
                account = self._ensure(name)
                if (self.dir / name).stat().st_nlink > 1:
                    continue
                os.link(self.dir / name, link)
                return account
            if attempt == 0:
                self._sweep_holders()
                for p in self._files():          # leases without a running VWN
                    if "%" in p.name and p.stat().st_nlink <= 2:
                        p.unlink()
        raise AccountError(f"no free account in pool .{pool} ({self.pool_size} accounts, all leased)")

    def _sweep_holders(self) -> None:
        """Drop holders of node agents that are gone (left by a crash) and their idle leases."""
        for h in self.holders.iterdir():
            pid = h.name.split(".", 1)[0]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                h.unlink(missing_ok=True)


def _missing(name: str) -> Account:
    raise AccountError(f"account {name} does not exist")
