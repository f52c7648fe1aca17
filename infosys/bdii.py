"""A real BDII-like LDAP server: OpenLDAP ``slapd`` with the GLUE schemas, in a directory.

``start_bdii(dir)`` writes ``<dir>/slapd.conf`` (core/cosine/inetorgperson + the Debian
glue-schema files Glue-CORE, Glue-CE, Glue-CESEBind, Glue-SE, Glue-MDS and GLUE20), two mdb
databases with suffixes ``o=grid`` (GLUE 1.3) and ``o=glue`` (GLUE 2.0), starts slapd on a
loopback port (no systemd, the system's slapd configuration untouched), waits until it answers
and creates the suffix entries plus ``Mds-Vo-name=local,o=grid`` and ``GLUE2GroupID=grid,o=glue``.
``stop_bdii(dir)`` stops it by the PID in ``<dir>/slapd.pid``.

The databases skip fsync (``dbnosync``): a BDII's content is rebuilt from its providers at every
update cycle. As in a production BDII, reads are anonymous. Writes are accepted without a bind from
127.0.0.1 only (``allow update_anon`` + a peername ACL): the updater (``vgrid bdii update``) is the
only writer and the server listens on the loopback interface only.
Needs Debian packages: slapd ldap-utils glue-schema.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

SCHEMA_DIR = Path("/etc/ldap/schema")
GLUE_SCHEMAS = ("Glue-CORE", "Glue-CE", "Glue-CESEBind", "Glue-SE", "Glue-MDS", "GLUE20")
BASE_SCHEMAS = ("core", "cosine", "inetorgperson")
SUFFIXES = ("o=grid", "o=glue")
APT_HINT = "apt-get install -y slapd ldap-utils glue-schema"


class BdiiError(RuntimeError):
    """The BDII could not be started, reached or stopped; str() says why and what to do."""


@dataclass(frozen=True)
class BdiiServer:
    """A running BDII: ``url`` ``ldap://127.0.0.1:<port>``, slapd ``pid``, its ``dir``."""

    url: str
    port: int
    pid: int
    dir: str


def _slapd() -> str:
    for cand in (shutil.which("slapd"), "/usr/sbin/slapd"):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise BdiiError(f"slapd not found: {APT_HINT}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slapd_conf(dir_: Path, schema_dir: Path = SCHEMA_DIR) -> str:
    """The slapd.conf text of a BDII in ``dir_``. Raises BdiiError if a schema file is missing."""
    lines = []
    for name in BASE_SCHEMAS + GLUE_SCHEMAS:
        path = schema_dir / f"{name}.schema"
        if not path.exists():
            raise BdiiError(f"schema file {path} missing: {APT_HINT}")
        lines.append(f"include {path}")
    lines += [
        f"pidfile {dir_ / 'slapd.pid'}",
        f"argsfile {dir_ / 'slapd.args'}",
        "modulepath /usr/lib/ldap",
        "moduleload back_mdb",
        "sizelimit unlimited",
        "timelimit 60",
        "threads 4",
        "loglevel 0",
        "allow update_anon",
        'access to * by peername.ip="127.0.0.1" write by * read',
    ]
    for suffix in SUFFIXES:
        db = dir_ / ("db-" + suffix.split("=")[1])
        lines += [
            "", "database mdb", f'suffix "{suffix}"', f"directory {db}",
            "maxsize 4294967296", "dbnosync", "lastmod off", "index objectClass eq",
            "index GlueCEUniqueID,GlueClusterUniqueID,GlueSubClusterUniqueID eq"
            if suffix == "o=grid" else "index GLUE2ShareID,GLUE2EndpointID eq",
        ]
    return "\n".join(lines) + "\n"


def pid_alive(pid: int) -> bool:
    """True if process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True


def _read_pid(dir_: Path) -> int | None:
    try:
        return int((dir_ / "slapd.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _is_our_slapd(pid: int, dir_: Path) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(b"slapd" in c for c in cmd[:1]) and str(dir_ / "slapd.conf").encode() in cmd


def _wait_ready(url: str, port: int, pid_dir: Path, timeout_s: float) -> None:
    from infosys.ldapclient import LdapError, ping
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            ping(url, timeout_s=1.0)
            return
        except LdapError as e:
            last = str(e)
        time.sleep(0.05)
    raise BdiiError(f"slapd in {pid_dir} did not answer on port {port} within {timeout_s} s: {last}")


def start_bdii(dir_: str | Path, port: int = 0, timeout_s: float = 15.0,
               schema_dir: Path = SCHEMA_DIR) -> BdiiServer:
    """Start a BDII in ``dir_`` (created if needed) on 127.0.0.1:``port`` (0 = a free port).

    If one is already running there, returns it. The databases persist in ``dir_`` across a
    stop/start. Writes ``<dir>/bdii.json`` (url, port, pid, dir). Raises BdiiError.
    """
    dir_ = Path(dir_).resolve()
    dir_.mkdir(parents=True, exist_ok=True)
    running = bdii_status(dir_)
    if running is not None:
        return running
    for suffix in SUFFIXES:
        (dir_ / ("db-" + suffix.split("=")[1])).mkdir(exist_ok=True)
    (dir_ / "slapd.conf").write_text(slapd_conf(dir_, schema_dir))
    port = port or _free_port()
    url = f"ldap://127.0.0.1:{port}"
    proc = subprocess.run([_slapd(), "-f", str(dir_ / "slapd.conf"), "-h", url],
                          capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise BdiiError(f"slapd failed to start (exit {proc.returncode}): "
                        f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    deadline = time.monotonic() + timeout_s
    pid = _read_pid(dir_)
    while pid is None and time.monotonic() < deadline:
        time.sleep(0.02)
        pid = _read_pid(dir_)
    if pid is None:
        raise BdiiError(f"slapd started but wrote no pid file in {dir_}")
    server = BdiiServer(url=url, port=port, pid=pid, dir=str(dir_))
    (dir_ / "bdii.json").write_text(json.dumps(asdict(server)))
    try:
        _wait_ready(url, port, dir_, max(1.0, deadline - time.monotonic()))
        from infosys.bdii_update import ensure_base
        from infosys.ldapclient import LdapError
        try:
            ensure_base(url)
        except LdapError as e:
            raise BdiiError(f"slapd in {dir_} answers but refused the base entries: {e}") from None
    except BdiiError:
        stop_bdii(dir_)
        raise
    return server


def bdii_status(dir_: str | Path) -> BdiiServer | None:
    """The BDII running in ``dir_``, or None."""
    dir_ = Path(dir_).resolve()
    pid = _read_pid(dir_)
    if pid is None or not pid_alive(pid) or not _is_our_slapd(pid, dir_):
        return None
    try:
        info = json.loads((dir_ / "bdii.json").read_text())
    except (OSError, ValueError):
        return None
    return BdiiServer(url=info["url"], port=info["port"], pid=pid, dir=str(dir_))


def stop_bdii(dir_: str | Path, timeout_s: float = 10.0) -> bool:
    """Stop the slapd of ``dir_`` by its PID (SIGTERM, then SIGKILL after ``timeout_s``).

    Returns True if one was running. Only a slapd started with ``<dir>/slapd.conf`` is signalled.
    """
    dir_ = Path(dir_).resolve()
    pid = _read_pid(dir_)
    if pid is None or not pid_alive(pid) or not _is_our_slapd(pid, dir_):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        while pid_alive(pid) and time.monotonic() < deadline + 5:
            time.sleep(0.02)
    try:
        (dir_ / "slapd.pid").unlink()
    except OSError:
        pass
    return True
