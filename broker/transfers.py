"""Sandbox file names and the secret behind the sandbox capabilities of dispatch URLs.

``safe_name`` keeps sandbox files inside a job's sandbox directory; ``transfer_secret`` is the
broker's key for the HMAC tokens in the URLs handed to the CE agent at dispatch
(:meth:`broker.service.Broker.sandbox_token`, docs/security.md). ``BrokerError`` is the error a
client caused, raised by the broker's logic and answered with its ``status``.
"""
from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Any

_SAFE_NAME = re.compile(r"^[A-Za-z0-9._+@=,-][A-Za-z0-9._+@=, -]*$")


class BrokerError(Exception):
    """An error a client caused; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.details = details


def safe_name(name: str) -> str:
    """A sandbox file name without directories; BrokerError for anything else."""
    base = name.rsplit("/", 1)[-1]
    if not base or base in {".", ".."} or not _SAFE_NAME.match(base):
        raise BrokerError(f"invalid sandbox file name {name!r}")
    return base


def transfer_secret(path: Path) -> bytes:
    """The broker's secret for sandbox capabilities: read, or created once (0600)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
        return path.read_bytes()
