"""``vgrid demo --serve``: a personal grid that stays up (HTCondor users know it as a personal
condor).

Starts the demo's site (:func:`vgrid_cli.demo.start_site`: broker, CE agents, node agents, demo
CA and user proxy in TLS mode) in a site directory, submits nothing, and runs until
SIGTERM/SIGINT/SIGHUP, then stops every service of the site. Each service gets a FIXED port (a
free one found at start and written into its config file) and a state directory under the
site directory, so a service killed (even with SIGKILL) and restarted by hand with the same
command line (``/proc/PID/cmdline``, also written to ``<dir>/<name>.cmd``) comes back at the
same URL with its state and rejoins the site.

A site directory given with ``--dir`` is kept; ``vgrid demo --serve --dir D`` on a directory
that holds a site made by an earlier run starts that site again from its config files (same
ports, URLs, state and identities; ``site.json`` says how many CEs and whether TLS).

Policy: the demo never kills or restarts a service on its own after one dies; it reports the
death (and a restart by hand) on stderr and keeps the ready file's pids current.

Ready file (written atomically once every service answers)::

    {"broker": {"url", "pid"},
     "ces": [{"id", "url", "pid", "nodes": [{"url", "pid"}]}],
     "env": {"VGRID_BROKER_URL", and in TLS mode "X509_USER_PROXY", "X509_CERT_DIR",
             "X509_VOMS_DIR"}}
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from broker.client import BrokerClient, ClientError

from .demo import ce_layout, merge_toml, site_pki, start_site
from .demo_pki import BROWSER_PASSWORD, DemoPKI
from .services import Service, ServiceError, ServiceGroup
from .stop_signals import raise_on_stop_signals

#: The file in the site directory that says what the site is: ``{"ces": N, "tls": bool}``.
SITE_FILE = "site.json"

#: Seconds the site may take until every service answers and the broker's ISM lists every CE.
START_TIMEOUT_S = 90.0


class PortPicker:
    """Free TCP ports, one per service, each reserved until :meth:`release` by a socket bound to
    it with SO_REUSEADDR (not listening: the service, which sets SO_REUSEADDR too, can still
    bind and listen there), so no other program and no other service of the site takes it."""

    def __init__(self) -> None:
        self._held: list[socket.socket] = []

    def __call__(self, name: str, address: str) -> int:  # noqa: ARG002 - name: for callers' logs
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((address, 0))
        self._held.append(s)
        return s.getsockname()[1]

    def release(self) -> None:
        for s in self._held:
            s.close()
        self._held.clear()


def parse_options(items: tuple[str, ...] | list[str]) -> dict[str, dict]:
    """``--set KIND.KEY=VALUE`` items (KIND broker, ce or node; VALUE TOML-ish: a number,
    true/false, or else a string) as ``{kind: {key: value}}``. ValueError naming the item."""
    out: dict[str, dict] = {}
    for item in items:
        target, sep, raw = item.partition("=")
        kind, dot, key = target.strip().partition(".")
        if not sep or not dot or kind not in ("broker", "ce", "node") or not key.strip():
            raise ValueError(f"--set {item!r}: expected KIND.KEY=VALUE with KIND broker, ce or node")
        out.setdefault(kind, {})[key.strip()] = _value(raw.strip())
    return out


def _value(raw: str):
    if raw in ("true", "false"):
        return raw == "true"
    for conv in (int, float):
        try:
            return conv(raw)
        except ValueError:
            pass
    return raw


def site_document(group: ServiceGroup, n_ces: int, env: dict[str, str]) -> dict:
    """The ready file's document from the group's services (current pids, see module doc)."""
    by_name = {s.name: s for s in group.services}

    def entry(name: str) -> dict:
        svc = by_name[name]
        pids = svc.pids()
        return {"url": svc.url, "pid": pids[-1] if pids else None}

    ces = []
    for ce in ce_layout(n_ces):
        ces.append({"id": ce_id_of(ce["name"]), **entry(ce["name"]),
                    "nodes": [entry(n) for n in ce["nodes"]]})
    return {"broker": entry("broker"), "ces": ces, "env": env}


def ce_id_of(name: str) -> str:
    """The GlueCEUniqueID :func:`vgrid_cli.demo.start_site` gives CE ``name``."""
    return f"{name}.vgrid.local:8443/vgrid-vwn-long"


def write_atomically(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)


def wait_until_answering(group: ServiceGroup, client: BrokerClient, ce_ids: list[str],
                         timeout_s: float = START_TIMEOUT_S) -> None:
    """Every service accepts connections and the broker answers with every CE in its ISM;
    ServiceError naming what is missing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    missing: list[str] = []
    while time.monotonic() < deadline:
        missing = [s.name for s in group.services if not _accepts(s.url)]
        if not missing:
            try:
                listed = {c["id"] for c in client.ism().get("ces", [])}
                missing = [f"CE {c} in the broker's ISM" for c in ce_ids if c not in listed]
            except ClientError as exc:
                missing = [f"the broker ({exc})"]
        if not missing:
            return
        time.sleep(0.2)
    raise ServiceError(f"the site did not answer within {timeout_s:.0f} s: " + ", ".join(missing))


def _accepts(url: str) -> bool:
    host_port = url.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = host_port.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2.0):
            return True
    except OSError:
        return False


class Watcher:
    """Reports deaths and restarts by hand of the group's services (never acts on them)."""

    def __init__(self, group: ServiceGroup, console: Console) -> None:
        self.group = group
        self.console = console
        self.last: dict[str, tuple[int, ...]] = {s.name: tuple(s.pids()) for s in group.services}

    def check(self) -> bool:
        """Report changes since the last call; True when some service's pids changed."""
        changed = False
        for svc in self.group.services:
            now = tuple(svc.pids())
            if now == self.last[svc.name]:
                continue
            changed = True
            if not now:
                code = svc.process.poll()
                how = (f"exited with status {code}" if code is not None and code >= 0
                       else f"was killed by signal {-code}" if code is not None else "is gone")
                self.console.print(f"{svc.name} ({svc.kind}) {how}; not restarted (restart it by "
                                   f"hand: {_cmd_file(svc)})", highlight=False, markup=False,
                                   soft_wrap=True)
            else:
                self.console.print(f"{svc.name} ({svc.kind}) runs as pid {now[-1]}",
                                   highlight=False, markup=False, soft_wrap=True)
            self.last[svc.name] = now
        return changed


@dataclass(frozen=True)
class ProcessImage:
    """What restarting a process by hand needs: its command line, working directory and
    environment, read from ``/proc/<pid>/{cmdline,cwd,environ}`` while it runs."""

    argv: tuple[str, ...]
    cwd: str
    env: dict[str, str]

    @classmethod
    def of(cls, pid: int) -> "ProcessImage":
        """The image of running process ``pid``; OSError when it is gone or unreadable."""
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = tuple(a.decode() for a in f.read().split(b"\0")[:-1])
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(e.decode(errors="replace").partition("=")[::2]
                       for e in f.read().split(b"\0") if b"=" in e)
        return cls(argv, os.readlink(f"/proc/{pid}/cwd"), env)

    def start(self, log: Path | None = None) -> subprocess.Popen:
        """Start the same command again in its own session (as ``setsid CMD &`` would), its
        output appended to ``log`` (default: discarded). The caller reaps it."""
        out = open(log, "ab") if log else subprocess.DEVNULL
        try:
            return subprocess.Popen(list(self.argv), cwd=self.cwd, env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        finally:
            if log:
                out.close()


def restart_site(group: ServiceGroup, root: Path, n_ces: int, options: dict) -> str:
    """Start again, from their config files in ``root`` (same ports, state and identities),
    the services of a site made by an earlier run: node agents, CE agents, then the broker;
    ``options`` (``--set``) are applied to the configs first. The broker URL."""
    def spec(kind: str, name: str) -> tuple[str, str, str]:
        return kind, name, merge_toml((root / f"{name}.toml").read_text(), options.get(kind, {}))

    layout = ce_layout(n_ces)
    group.start_many([spec("node", n) for ce in layout for n in ce["nodes"]])
    group.start_many([spec("ce", ce["name"]) for ce in layout])
    return group.start(*spec("broker", "broker")).url


def _cmd_file(svc: Service) -> Path:
    return svc.log.with_suffix(".cmd")


def run_personal_grid(n_ces: int = 2, site_dir: str | None = None, ready_file: str | None = None,
                      tls: bool = True, ism_refresh_s: float = 10.0, match_expiry_s: float = 60.0,
                      options: dict[str, dict] | None = None, poll_s: float = 1.0) -> int:
    """Run the personal grid until a signal; the exit status (0 after a clean stop, 1 when the
    site did not start). ``site_dir``: where the site lives (configs, logs, ready files, state
    directories, PKI); a directory holding a site of an earlier run starts that site again
    (its ``site.json`` wins over ``n_ces`` and ``tls``); default a new temporary directory,
    removed at the end. ``options``: config keys per service kind (:func:`parse_options`)."""
    err = Console(stderr=True)

    raise_on_stop_signals()   # one stop: a second signal must not cut it short
    temporary = site_dir is None
    root = Path(tempfile.mkdtemp(prefix="vgrid-site-") if temporary else site_dir).resolve()
    layout = None
    if not temporary:
        root.mkdir(parents=True, exist_ok=True)
        if any(root.glob("*.toml")):
            try:
                layout = json.loads((root / SITE_FILE).read_text())
                n_ces, tls = int(layout["ces"]), bool(layout["tls"])
            except (OSError, ValueError, KeyError, TypeError):
                err.print(f"vgrid demo --serve: {root} holds service configs but no readable "
                          f"{SITE_FILE} (not a site this command made, or one that never started "
                          "completely): remove it or use another --dir",
                          highlight=False, markup=False, soft_wrap=True)
                return 2
    ok = 1
    try:
        with ServiceGroup(root) as group:
            try:
                ok = _serve(group, root, n_ces, ready_file, tls, ism_refresh_s, match_expiry_s,
                            options or {}, poll_s, err, again=layout is not None)
            except KeyboardInterrupt:
                err.print("stopping the personal grid")
                ok = 0
            except (ServiceError, ClientError, OSError) as exc:
                err.print(f"vgrid demo --serve: {exc}", highlight=False, markup=False, soft_wrap=True)
                ok = 1
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    return ok


def _serve(group: ServiceGroup, root: Path, n_ces: int, ready_file: str | None, tls: bool,
           ism_refresh_s: float, match_expiry_s: float, options: dict, poll_s: float,
           err: Console, again: bool = False) -> int:
    err.print(f"{'restarting' if again else 'starting'} a personal grid in {root}: {n_ces} CE "
              f"agent(s), {2 * n_ces} node agents and the broker ...", highlight=False, soft_wrap=True)
    if again:
        pki = DemoPKI(root / "pki", user_dn="") if tls else None   # paths only: env, credentials
        url = restart_site(group, root, n_ces, options)
    else:
        pki = site_pki(root / "pki", n_ces) if tls else None
        ports = PortPicker()
        try:
            url = start_site(group, n_ces, ism_refresh_s, root, match_expiry_s=match_expiry_s, pki=pki,
                             port=ports, options=options)
        finally:
            ports.release()
        write_atomically(root / SITE_FILE, {"ces": n_ces, "tls": tls})
    for svc in group.services:
        _cmd_file(svc).write_text(shlex.join(svc.cmd) + "\n")
    env = {"VGRID_BROKER_URL": url, **(pki.env() if pki else {})}
    client = BrokerClient(url, credentials=pki.user_credentials() if pki else None)
    wait_until_answering(group, client, [ce_id_of(ce["name"]) for ce in ce_layout(n_ces)])
    if ready_file:
        write_atomically(Path(ready_file), site_document(group, n_ces, env))
    err.print(f"personal grid up: broker {url}; in a client shell:", highlight=False, soft_wrap=True)
    err.print(f"dashboard: {url}/dashboard/" + (f" (a browser imports {pki.browser_p12}, password "
              f"{BROWSER_PASSWORD!r}, and trusts {pki.cert_dir})" if pki else ""),
              highlight=False, markup=False, soft_wrap=True)
    for k, v in env.items():
        err.print(f"  export {k}={shlex.quote(v)}", highlight=False, markup=False, soft_wrap=True)
    watcher = Watcher(group, err)
    while True:
        time.sleep(poll_s)
        if watcher.check() and ready_file:
            write_atomically(Path(ready_file), site_document(group, n_ces, env))

