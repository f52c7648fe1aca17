"""Sandbox staging by the node agent (root): the one client of the broker's sandbox URLs.

The job wrapper runs as a pool account with no credential and never talks to the network: before
it starts, ``stage_in`` downloads every InputSandbox file ``{"name", "url"}`` into the fresh work
directory (created ``O_EXCL | O_NOFOLLOW``, then given to the account); after the job ended (and
every process of its VWN was killed), ``stage_out`` PUTs every OutputSandbox file to
``{output_upload_url}/{file name}``. Output files are opened component by component with
``O_NOFOLLOW`` below the work directory: a symbolic link anywhere in the path, a file that is not
regular, and a total above ``max_bytes`` are refused. Transfers go through ``SandboxClient``
(a ``ServiceClient``: its session is where TLS applies).

Names are checked with ``jobpaths`` (relative, no ``..``; InputSandbox names plain).
"""
from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path
from typing import Callable
from urllib.parse import quote

import requests

from .jobpaths import PathError, check_plain, check_relative
from vgrid_runtime.httpclient import ErrorKind, ServiceClient, ServiceError

#: Default of ``transfer_patience_s``: how long (s) an upload failing for a transient reason
#: (connection refused, timeout, HTTP 5xx) is retried, e.g. while the broker restarts or while
#: its state directory is full (507 Insufficient Storage, :mod:`vgrid_runtime.storage`).
TRANSFER_PATIENCE_S = 300.0
CHUNK = 1 << 16


class SandboxError(PathError):
    """A sandbox file cannot be moved or is refused; the message is the job's Aborted reason."""


class SandboxClient(ServiceClient):
    """Streams sandbox files from and to the broker's sandbox URLs (absolute URLs)."""

    def __init__(self, session: requests.Session | None = None, timeout_s: float = 30.0) -> None:
        super().__init__("", session, timeout_s)

    def download(self, url: str, fd: int, max_bytes: int) -> int:
        """Write the body of GET ``url`` to ``fd``; returns its size in bytes. ServiceError on
        a transport failure or HTTP status >= 300; SandboxError above ``max_bytes``."""
        total = 0
        try:
            with self.session.get(url, stream=True, timeout=self.timeout_s) as resp:
                if resp.status_code >= 300:
                    raise ServiceError(ErrorKind.HTTP, f"HTTP {resp.status_code} {resp.text[:200]}", url,
                                       resp.status_code)
                for chunk in resp.iter_content(CHUNK):
                    total += len(chunk)
                    if total > max_bytes:
                        raise SandboxError(f"larger than the sandbox limit ({_mb(max_bytes)} MB)")
                    os.write(fd, chunk)
        except requests.RequestException as exc:
            raise ServiceError(ErrorKind.UNREACHABLE, f"{type(exc).__name__}: {exc}", url,
                               cause=type(exc).__name__) from exc
        return total

    def upload(self, url: str, fd: int) -> int:
        """PUT the file open at ``fd`` (from its start) to ``url``; returns the HTTP status.
        ServiceError when there is no answer."""
        os.lseek(fd, 0, os.SEEK_SET)
        try:
            with os.fdopen(os.dup(fd), "rb") as fh:
                resp = self.session.put(url, data=fh, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise ServiceError(ErrorKind.UNREACHABLE, f"{type(exc).__name__}: {exc}", url,
                               cause=type(exc).__name__) from exc
        resp.close()
        return resp.status_code


def stage_in(client: SandboxClient, items: list[dict], workdir: Path, uid: int, gid: int,
             max_bytes: int, patience_s: float = TRANSFER_PATIENCE_S, stop=lambda: False) -> None:
    """Download every InputSandbox ``{"name", "url"}`` into ``workdir``, files owned by
    ``uid``:``gid``, mode 0600; at most ``max_bytes`` in all. A transient failure (no answer,
    timeout, HTTP 5xx, 408, 429: e.g. the broker restarting) is retried with backoff for
    ``patience_s`` s or until ``stop()``, each retry from the file's start. SandboxError, e.g.
    ``InputSandbox x.dat: download from <url> failed: HTTP 404 ...``."""
    left = max_bytes
    for item in items:
        try:
            name = check_plain(item.get("name"), "InputSandbox")
        except PathError as exc:
            raise SandboxError(str(exc)) from None
        url = item.get("url")
        try:
            fd = os.open(workdir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise SandboxError(f"InputSandbox {name}: {exc.strerror}") from None
        try:
            os.fchown(fd, uid, gid)
            left -= _get_patiently(client, url, fd, left, patience_s, stop)
        except (ServiceError, OSError) as exc:
            raise SandboxError(f"InputSandbox {name}: download from {url} failed: {exc}") from None
        except SandboxError as exc:
            raise SandboxError(f"InputSandbox {name}: {exc}") from None
        finally:
            os.close(fd)


def _transient(exc: ServiceError) -> bool:
    """Worth retrying: no answer, or an answer saying "later" (5xx, 408, 429)."""
    return exc.status is None or exc.status >= 500 or exc.status in (408, 429)


def _get_patiently(client: SandboxClient, url: str, fd: int, max_bytes: int, patience_s: float,
                   stop) -> int:
    deadline = time.monotonic() + patience_s
    delay = 0.2
    while True:
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        try:
            return client.download(url, fd, max_bytes)
        except ServiceError as exc:
            if not _transient(exc) or time.monotonic() + delay > deadline or stop():
                if _transient(exc):
                    raise ServiceError(exc.kind, f"{exc} (retried for {patience_s:g} s)", url,
                                       exc.status) from None
                raise
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def open_output(workdir: Path, name: str) -> int | None:
    """A read-only fd of OutputSandbox entry ``name`` below ``workdir``, opened without following
    any symbolic link; None when it does not exist; SandboxError when it is refused."""
    try:
        check_relative(name, "OutputSandbox")
    except PathError as exc:
        raise SandboxError(str(exc)) from None
    parts = [p for p in Path(name).parts if p not in ("", ".")]
    dirfd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                fd = os.open(part, flags, dir_fd=dirfd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise SandboxError(f"OutputSandbox {name}: {'/'.join(parts[:i + 1])} is a "
                                       "symbolic link or not a directory, refused") from None
                raise SandboxError(f"OutputSandbox {name}: {exc.strerror}") from None
            os.close(dirfd)
            dirfd = fd
        if not stat.S_ISREG(os.fstat(dirfd).st_mode):
            raise SandboxError(f"OutputSandbox {name}: not a regular file, refused")
        fd, dirfd = dirfd, -1
        return fd
    finally:
        if dirfd >= 0:
            os.close(dirfd)


def stage_out(client: SandboxClient, names: list[str], workdir: Path, base_url: str | None,
              max_bytes: int, patience_s: float = TRANSFER_PATIENCE_S,
              stop: Callable[[], bool] = lambda: False) -> tuple[list[str], list[str]]:
    """PUT each existing OutputSandbox file to ``{base_url}/{file name}`` (``res/n.dat`` is sent
    as ``n.dat``); returns (uploaded, missing). At most ``max_bytes`` in all (sizes when opened;
    every process of the job must have ended). A transient failure is retried with backoff for ``patience_s`` s or
    until ``stop()``; SandboxError on a refusal (HTTP 4xx), a refused file, or patience run out."""
    opened, missing, total = [], [], 0
    try:
        for name in names:
            fd = open_output(workdir, name)
            if fd is None:
                missing.append(name)
                continue
            size = os.fstat(fd).st_size
            opened.append((name, fd, size))
            total += size
            if total > max_bytes:
                raise SandboxError(f"OutputSandbox: {_mb(total)} MB is more than the output "
                                   f"sandbox limit ({_mb(max_bytes)} MB)")
        if opened and not base_url:
            raise SandboxError("OutputSandbox given but no output_upload_url")
        uploaded = []
        for name, fd, size in opened:
            url = f"{base_url.rstrip('/')}/{quote(Path(name).name, safe='')}"
            _put_patiently(client, name, url, fd, patience_s, stop)
            uploaded.append(name)
        return uploaded, missing
    finally:
        for _, fd, _ in opened:
            os.close(fd)


def _put_patiently(client, name, url, fd, patience_s, stop) -> None:
    deadline = time.monotonic() + patience_s
    delay, last = 0.2, None
    while True:
        try:
            status = client.upload(url, fd)
            if status < 300:
                return
            last = f"HTTP {status}"
            if status < 500:
                raise SandboxError(f"OutputSandbox {name}: upload to {url} refused: {last}")
        except ServiceError as exc:
            last = str(exc)
        if time.monotonic() + delay > deadline or stop():
            raise SandboxError(f"OutputSandbox {name}: upload to {url} failed for "
                               f"{patience_s:g} s: {last}")
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def _mb(n: int) -> str:
    return f"{n / 1e6:g}"
