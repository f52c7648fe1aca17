"""The broker's sandbox directory: an input sandbox exists complete with its job, or not at all.

Layout under ``root`` (``<state_dir>/sandboxes``): ``<key>/input/<name>`` (InputSandbox, written
at submission), ``<key>/output/<name>`` (OutputSandbox, uploaded by the node agent, write-once),
``.staging/<random>/`` (an input sandbox being written).

A submission (:meth:`broker.service.Broker.submit_once`) stores in this order:

1. :meth:`SandboxStore.stage`: every file is written under ``.staging/<random>/`` and fsynced,
   then the directory;
2. :meth:`SandboxStore.install`: ``.staging/<random>`` is renamed to ``<key>/input`` (the key is
   chosen before the database sees it) and both parents are fsynced: the complete sandbox is in
   place under the job's key, atomically;
3. the job rows are committed, in one transaction;
4. when 1-3 fail (a full disk, a full database, a duplicate idempotency key, anything),
   :meth:`SandboxStore.discard` removes what 1-2 wrote.

So a committed job row always has its complete input sandbox. A crash between 2 and 3 leaves a
``<key>/`` directory without a job row, and one during 1 a ``.staging`` entry: at start,
:meth:`SandboxStore.remove_orphans` deletes both (``Broker.recover``, before any request is
served). This order was chosen over "commit the row, then write the files, delete the row on
failure" because that rollback needs a database write at the moment the disk is full, and a
crash between the commit and the files left a stored job with a truncated sandbox that was later
dispatched. A job that nevertheless lacks a file (a database from an older version, files
deleted by hand) is found by :meth:`SandboxStore.lost_inputs` at start and ends Aborted
(outcome ``sandbox-lost``) instead of being dispatched.

Every write failure is raised as :class:`vgrid_runtime.storage.StorageError` (507 when the
disk is full, else 500 naming the operation) after the partial files are removed.
"""
from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Callable, Iterable

import jdl as jdlmod
from vgrid_runtime.storage import storing

from .transfers import BrokerError, safe_name

log = logging.getLogger("vgrid.broker.sandboxes")

SERVICE = "broker"
STAGING = ".staging"
_JOB_KEY = re.compile(r"^[A-Za-z0-9_-]{22}$")   # broker.db.new_key: 22 URL-safe characters


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: Path, data: bytes) -> None:
    """Create ``path`` (must not exist) with ``data`` and fsync it; remove it on failure."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)


class SandboxStore:
    """Input and output sandboxes of the broker's jobs under ``root`` (see the module doc).
    ``state_dir`` (default ``root``'s parent) is what a full-disk answer names."""

    def __init__(self, root: Path, state_dir: Path | None = None) -> None:
        self.root = Path(root)
        self.state_dir = Path(state_dir) if state_dir is not None else self.root.parent

    # -- input: stage, install, discard ------------------------------------------------------------
    def stage(self, files: dict[str, bytes]) -> Path | None:
        """Write ``files`` ({safe name: bytes}) to a new staging directory, every file and the
        directory fsynced; returns it (None when ``files`` is empty). StorageError (507 when the
        disk is full) with nothing left behind."""
        if not files:
            return None
        staged = self.root / STAGING / secrets.token_hex(8)
        with storing(SERVICE, self.state_dir, "storing the input sandbox"):
            try:
                staged.mkdir(parents=True, mode=0o700)
                for name, data in files.items():
                    _write_synced(staged / name, data)
                _fsync_dir(staged)
            except BaseException:
                shutil.rmtree(staged, ignore_errors=True)
                raise
        return staged

    def install(self, staged: Path | None, key: str) -> None:
        """Move a staged sandbox to ``<key>/input`` atomically (rename), fsync the parents.
        StorageError on failure (the staged files are removed)."""
        if staged is None:
            return
        d = self.root / key
        with storing(SERVICE, self.state_dir, "storing the input sandbox"):
            try:
                d.mkdir(mode=0o700)
                os.rename(staged, d / "input")
                _fsync_dir(d)
                _fsync_dir(self.root)
            except BaseException:
                shutil.rmtree(staged, ignore_errors=True)
                shutil.rmtree(d, ignore_errors=True)
                raise

    def discard(self, key: str) -> None:
        """Remove job ``key``'s sandbox directory (a submission that was not stored)."""
        shutil.rmtree(self.root / key, ignore_errors=True)

    def input_file(self, key: str, name: str) -> Path:
        return self.root / key / "input" / safe_name(name)

    # -- output: write-once -----------------------------------------------------------------------
    def output_dir(self, key: str) -> Path:
        return self.root / key / "output"

    def save_output(self, key: str, name: str, data: bytes) -> None:
        """Store one OutputSandbox file of job ``key`` durably (temporary name, fsync, rename,
        fsync of the directory). Write-once: the same bytes again (a retried upload) are
        accepted, different bytes are BrokerError 409. StorageError (507 when the disk is full)
        with no partial file left; the job's earlier outputs are untouched."""
        d = self.output_dir(key)
        path = d / safe_name(name)
        if path.exists():
            if path.read_bytes() == data:
                return
            raise BrokerError(f"output file {name!r} of job {key} exists already (write-once)",
                              status=409)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
        with storing(SERVICE, self.state_dir, f"storing output file {path.name!r}"):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            _write_synced(tmp, data)
            try:
                os.replace(tmp, path)
                _fsync_dir(d)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise

    # -- after a restart --------------------------------------------------------------------------
    def remove_orphans(self, existing: Callable[[list[str]], set[str]]) -> list[str]:
        """Delete the staging area and every ``<key>/`` whose job does not exist (only names
        shaped like a job key, ``broker.db.new_key``: anything else is left alone); ``existing``
        maps a list of keys to the set of those that have a job row. Returns the keys removed.
        Run before requests are served (a submission in flight would look orphaned)."""
        shutil.rmtree(self.root / STAGING, ignore_errors=True)
        if not self.root.is_dir():
            return []
        keys = [p.name for p in self.root.iterdir() if p.is_dir() and _JOB_KEY.match(p.name)]
        removed = []
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            known = existing(chunk)
            for key in chunk:
                if key not in known:
                    self.discard(key)
                    removed.append(key)
        if removed:
            log.warning("removed %d sandbox(es) of submissions not stored before a restart: %s",
                        len(removed), ", ".join(removed[:10]))
        return removed

    def lost_inputs(self, jobs: Iterable) -> list[tuple[object, list[str]]]:
        """``[(job, missing names)]`` for the jobs (plain jobs and compound nodes, not yet
        dispatched) whose relative InputSandbox files are not all in place (a node reads its
        parent's sandbox)."""
        out = []
        for job in jobs:
            if job.kind not in ("job", "node") or "inputsandbox" not in job.jdl.lower():
                continue
            try:
                names = jdlmod.parse_jdl(job.jdl, job.filename, local_files=False).input_sandbox
            except jdlmod.JDLError:
                continue
            owner = job.parent_key or job.key
            missing = [n for n in names if "://" not in n
                       and not self.input_file(owner, n).is_file()]
            if missing:
                out.append((job, missing))
        return out
