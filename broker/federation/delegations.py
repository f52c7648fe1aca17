"""Delegated proxies held by a broker: users' (to forward their jobs) and forwarded jobs'.

A user delegates to their broker (``POST /delegations`` then ``PUT /delegations/<id>``,
:mod:`vgrid_runtime.delegation`); the broker keeps the latest proxy per DN and signs from it a
short proxy for each peer a job of that user is forwarded to. A peer receiving a forwarded job
keeps the job's delegated proxy under the job key, and signs from it if it forwards the job
further (RFC 3820 path length permitting). Files under ``<state_dir>/delegations`` (0600,
written atomically): ``pending/<id>.json`` (the request's key and who may complete it),
``users/<sha256(dn)>.pem``, ``jobs/<key>.pem``; a restart loses nothing.
"""
from __future__ import annotations

import hashlib
import json
import secrets
import threading
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from vgrid_runtime.delegation import accept, key_pem, load_chain, new_request, store_pem
from vgrid_runtime.pki import Credential, write_private
from vgrid_runtime.proxy import Identity


class UnknownDelegation(LookupError):
    """No pending delegation request with that id for that requester."""


class DelegationStore:
    """Delegations under ``root`` (a directory, created 0700)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        for sub in ("pending", "users", "jobs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()

    def request(self, requester: str) -> tuple[str, bytes]:
        """A new request ``(id, PEM CSR)`` that only ``requester`` (a DN, or ``peer:<name>``)
        may complete."""
        key, csr = new_request()
        did = secrets.token_urlsafe(16)
        write_private(self.root / "pending" / f"{did}.json",
                      json.dumps({"requester": requester, "key": key_pem(key).decode()}).encode())
        return did, csr

    def complete(self, did: str, requester: str, chain_pem: bytes, trusted, now: float,
                 vomsdir=None) -> tuple[Credential, Identity]:
        """Verify the signed chain of request ``did`` (:func:`vgrid_runtime.delegation.accept`)
        and forget the request. UnknownDelegation if there is no such request of ``requester``;
        DelegationError / CredentialError if the chain is refused."""
        path = self.root / "pending" / f"{did}.json"
        if not did.replace("-", "").replace("_", "").isalnum() or not path.is_file():
            raise UnknownDelegation(did)
        rec = json.loads(path.read_text())
        if rec["requester"] != requester:
            raise UnknownDelegation(did)
        key = serialization.load_pem_private_key(rec["key"].encode(), password=None)
        cred, ident = accept(key, chain_pem, trusted, now, vomsdir)
        path.unlink(missing_ok=True)
        return cred, ident

    @staticmethod
    def _dn_file(dn: str) -> str:
        return hashlib.sha256(dn.encode()).hexdigest()[:32] + ".pem"

    def save_user(self, dn: str, cred: Credential) -> None:
        """Keep ``cred`` as ``dn``'s delegated proxy unless the one held lives longer."""
        with self._lock:
            old = self.user(dn, None)
            if old is None or old.cert.not_valid_after_utc <= cred.cert.not_valid_after_utc:
                write_private(self.root / "users" / self._dn_file(dn), store_pem(cred))

    def user(self, dn: str | None, now: float | None) -> Credential | None:
        """``dn``'s delegated proxy still valid at ``now`` (None: any), or None."""
        return self._load(self.root / "users" / self._dn_file(dn), now) if dn else None

    def save_job(self, key: str, cred: Credential) -> None:
        write_private(self.root / "jobs" / f"{key}.pem", store_pem(cred))

    def job(self, key: str, now: float | None) -> Credential | None:
        """The delegated proxy a forwarded job ``key`` arrived with (valid at ``now``), or None."""
        return self._load(self.root / "jobs" / f"{key}.pem", now)

    @staticmethod
    def _load(path: Path, now: float | None) -> Credential | None:
        if not path.is_file():
            return None
        cred = load_chain(path.read_bytes())
        if now is not None and cred.cert.not_valid_after_utc.timestamp() <= now:
            return None
        return cred
