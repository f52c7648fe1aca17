"""A real, throw-away PostgreSQL server on a loopback port for the database tests.

Uses the Debian ``postgresql`` package's binaries (installed by scripts/test.sh). The cluster lives
in a temporary directory owned by the ``postgres`` user (initdb refuses to run as root), listens on
127.0.0.1 only, and is stopped with ``pg_ctl stop -m immediate`` at the end.
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from contextlib import contextmanager


def _bin_dir() -> str | None:
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    return dirs[-1] if dirs else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unavailable_reason() -> str | None:
    """Why no server can be started here, or None."""
    if _bin_dir() is None:
        return "PostgreSQL binaries not installed (apt-get install postgresql; scripts/test.sh does)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser to drop to the postgres user"
    return None


@contextmanager
def postgres_server():
    """Yield a SQLAlchemy URL of a fresh database ``vgrid`` on a new server."""
    bindir = _bin_dir()
    base = tempfile.mkdtemp(prefix="vgrid-pg-")
    data = os.path.join(base, "data")
    os.chmod(base, 0o777)
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    port = _free_port()
    subprocess.run(as_pg + [f"{bindir}/initdb", "-D", data, "-U", "postgres", "-A", "trust",
                            "--no-sync"], check=True, capture_output=True)
    opts = f"-c listen_addresses=127.0.0.1 -p {port} -k {base} -c fsync=off"
    subprocess.run(as_pg + [f"{bindir}/pg_ctl", "-D", data, "-o", opts, "-l",
                            os.path.join(base, "log"), "-w", "start"], check=True, capture_output=True)
    try:
        subprocess.run(as_pg + [f"{bindir}/createdb", "-h", "127.0.0.1", "-p", str(port),
                                "-U", "postgres", "vgrid"], check=True, capture_output=True)
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/vgrid"
    finally:
        subprocess.run(as_pg + [f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(base, ignore_errors=True)

