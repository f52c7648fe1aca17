"""Serving the agents (``vgrid serve ce|node``) and starting services as child processes.

``ServiceGroup`` is what ``vgrid demo`` and the end-to-end tests use: each service is a separate
``vgrid serve`` process on a free loopback port, found through its ready file, and every process
it started is stopped on exit (SIGTERM, then SIGKILL after a grace period), also on Ctrl-C.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from vgrid_runtime.config import ConfigError

#: How long a started service may take to write its ready file before it counts as failed (s).
#: Only a bound for a service that hangs (one that exits is seen at once): a vgrid service
#: imports Flask, SQLAlchemy and cryptography, which takes 1-2 s on an idle machine and over
#: 30 s on a 2-core host at load 50-90, where a tighter bound failed healthy starts.
START_TIMEOUT_S = 120.0
#: How long a service may take to stop after SIGTERM before SIGKILL (s). A node agent's
#: shutdown kills its VWNs, joins their monitors and makes one last delivery of its outbox, all
#: bounded below this (``vwn_agents.node_stop``); SIGKILL in the middle leaves jobs running (a
#: node agent restart adopts them). A service that stops sooner ends the wait at once.
STOP_GRACE_S = 30.0
#: ``ServiceGroup.stop_all``'s order by kind (events flow node -> CE -> broker); other kinds last.
STOP_ORDER = {"node": 0, "ce": 1}


def serve_agent(kind: str, config_file: str | None, ready_file: str | None, port: int | None) -> None:
    """Run a node agent (``kind="node"``) or a CE agent (``"ce"``) in the foreground."""
    from vgrid_runtime.wsgi import serve
    if kind == "node":
        from vwn_agents.node_agent import NodeAgentConfig as Config, create_app
    else:
        from vwn_agents.ce_agent import CEAgentConfig as Config, create_app
    if not config_file:
        raise ConfigError(f"vgrid serve {kind} needs --config FILE (see docs/cli.md)")
    config = Config.from_toml(config_file)
    if port is not None:
        config.port = port
    if kind == "ce" and not config.state_dir and not config.db_url:
        # a served CE agent always remembers: the same command line after a kill finds its jobs
        config.state_dir = str(Path(config_file).resolve().with_suffix(".state"))
    try:
        app = create_app(config)
    except (RuntimeError, ValueError) as exc:   # e.g. pool_accounts.AccountError: jobs as root
        raise ConfigError(f"{config_file}: the {kind} agent refuses to start: {exc}") from None
    serve(app, host=config.bind, port=config.port, ready_file=ready_file,
          on_stop=app.config.get("VGRID_ON_STOP"), tls=config.tls_files(),
          limits=config.serve_limits())


class ServiceError(RuntimeError):
    """A service did not start; the message includes the tail of its log."""


@dataclass
class Service:
    """One service of a group: ``process`` is the child the group started; ``cmd`` its command
    line (also what a person uses to restart it by hand), ``ready`` its ready file."""

    name: str
    process: subprocess.Popen
    url: str
    log: Path
    kind: str = ""
    cmd: tuple[str, ...] = ()
    ready: Path | None = None

    def pids(self) -> list[int]:
        """Live processes running this service: the child, and a process restarted by hand
        from the same command line that wrote its pid into the ready file."""
        found = [self.process.pid] if self.process.poll() is None else []
        other = ready_pid(self.ready) if self.ready is not None else None
        if other and other not in found and runs_command(other, self.cmd):
            found.append(other)
        return found


def unmount_leftovers(root: Path) -> list[str]:
    """Unmount (lazily when busy) whatever is still mounted below ``root`` once every service
    has stopped: the quota and spare quota mounts of a node agent killed and never restarted
    (``vwn_agents.quota_spares``). Returns the mount points; never raises."""
    from vwn_agents import mounts
    return mounts.unmount_below(root)[0]


def ready_pid(ready: Path) -> int | None:
    """The pid a ``vgrid serve`` ready file names, or None (absent or unreadable)."""
    try:
        return int(json.loads(ready.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def runs_command(pid: int, cmd: tuple[str, ...]) -> bool:
    """Whether process ``pid`` is alive (not a zombie) with command line ``cmd``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")[:-1]
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rpartition(")")[2].split()[0] == "Z":
                return False
    except OSError:
        return False
    return [a.decode(errors="replace") for a in argv] == list(cmd)


class ServiceGroup:
    """Child ``vgrid serve`` processes under ``workdir``; a context manager that stops them all."""

    def __init__(self, workdir: Path, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.workdir = Path(workdir)
        self.start_timeout_s = start_timeout_s
        self.services: list[Service] = []
        self.killed: list[str] = []        # services SIGKILLed after their grace period
        self.stop_s: float | None = None   # how long stop_all took (s)

    def start(self, kind: str, name: str, config: str) -> Service:
        """Write ``config`` (TOML text), start ``vgrid serve KIND``, wait until it listens."""
        return self.start_many([(kind, name, config)])[0]

    def start_many(self, specs: list[tuple[str, str, str]]) -> list[Service]:
        """Start several services at once (kind, name, TOML text); wait until all listen.

        Raises ServiceError (with the tail of the failed service's log) if one does not start;
        the ones that did start stay in the group and are stopped with it.
        """
        launched = [self._launch(*spec) for spec in specs]
        return [self._wait_ready(*item) for item in launched]

    def _launch(self, kind: str, name: str, config: str):
        cfg = self.workdir / f"{name}.toml"
        cfg.write_text(config)
        ready = self.workdir / f"{name}.ready"
        log = self.workdir / f"{name}.log"
        ready.unlink(missing_ok=True)
        # -P: the working directory (which holds the services' state directories, e.g. a
        # "broker" directory) must not shadow vgrid's packages on sys.path.
        cmd = [sys.executable, "-P", "-m", "vgrid_cli", "serve", kind, "--config", str(cfg),
               "--ready-file", str(ready)]
        with log.open("ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self.workdir)
        return kind, name, proc, ready, log, time.monotonic() + self.start_timeout_s, tuple(cmd)

    def _wait_ready(self, kind, name, proc, ready: Path, log: Path, deadline: float,
                    cmd: tuple[str, ...]) -> Service:
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                tail = log.read_text(errors="replace")[-2000:]
                raise ServiceError(f"{name} ({kind}) did not start; its log ends with:\n{tail}")
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        svc = Service(name, proc, info["url"], log, kind, cmd, ready)
        self.services.append(svc)
        return svc

    def stop(self, svc: Service, sig: int = signal.SIGTERM, grace_s: float = STOP_GRACE_S) -> None:
        """Stop the service's child and a process restarted by hand from its command line
        (``sig``, then SIGKILL after ``grace_s``); the latter is not our child: polled, not waited."""
        self._stop_together([svc], sig, grace_s)

    def _stop_together(self, svcs: list[Service], sig: int, grace_s: float) -> None:
        """``sig`` to every service of ``svcs`` at once, then one shared grace period of
        ``grace_s`` seconds before SIGKILL: n services stop in one grace period, not n."""
        for svc in svcs:
            for pid in svc.pids():
                if pid != svc.process.pid:
                    _stop_foreign(pid, svc.cmd, sig, grace_s)
            if svc.process.poll() is None:
                try:
                    os.killpg(svc.process.pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace_s
        for svc in svcs:
            try:
                svc.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.killed.append(svc.name)
                try:
                    os.killpg(svc.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                svc.process.wait()
            if svc in self.services:
                self.services.remove(svc)

    def stop_all(self) -> None:
        """Stop every service, one kind at a time, in the direction events flow: node agents
        first (their VWNs' ``aborted`` events still reach live CE agents), then CE agents (theirs
        reach a live broker), then the other kinds (brokers, image repositories) in reverse
        start order; all services of one kind stop together, within ``STOP_GRACE_S``. Then
        whatever is still mounted below ``workdir`` is unmounted (``unmount_leftovers``).
        ``stop_s`` is then the time it took (s) and ``killed`` names the services SIGKILLed."""
        t0 = time.monotonic()
        tiers: dict[str, list[Service]] = {}              # kind -> services, reverse start order
        for svc in reversed(list(self.services)):
            tiers.setdefault(svc.kind, []).append(svc)
        for kind in sorted(tiers, key=lambda k: STOP_ORDER.get(k, len(STOP_ORDER))):   # stable
            self._stop_together(tiers[kind], signal.SIGTERM, STOP_GRACE_S)
        unmount_leftovers(self.workdir)
        self.stop_s = time.monotonic() - t0

    def __enter__(self) -> "ServiceGroup":
        return self

    def __exit__(self, *exc) -> None:
        # Ctrl-C during shutdown must not leave processes behind
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self.stop_all()
        finally:
            signal.signal(signal.SIGINT, old)


def _signal_group(pid: int, sig: int) -> None:
    """``sig`` to the process group ``pid`` leads (services run in their own session), else to
    ``pid`` alone."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _stop_foreign(pid: int, cmd: tuple[str, ...], sig: int, grace_s: float) -> None:
    """Stop a service process that is not our child (restarted by hand)."""
    _signal_group(pid, sig)
    deadline = time.monotonic() + grace_s
    while runs_command(pid, cmd) and time.monotonic() < deadline:
        time.sleep(0.05)
    if runs_command(pid, cmd):
        _signal_group(pid, signal.SIGKILL)
