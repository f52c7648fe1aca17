"""The origin's side of forwarding: the peer is dispatched to like a CE agent.

The broker dispatches a job whose chosen candidate is a peer's aggregate ad through
``Broker.ce_client(url)``, which answers a :class:`Forwarder` for a peer's gateway URL (the one
call site of federation in :mod:`broker.service`). The Forwarder speaks the CE agent's job API
(``POST /jobs``, ``GET /jobs/<key>``, ``POST /jobs/<key>/cancel``) at ``<peer>/federation``, so
dispatch, cancel, restart resync, heartbeats, Stalled and resubmission work unchanged. To
``submit`` it adds what a peer needs:

* **delegation**: it asks the peer for a delegation request (``POST /federation/delegations``)
  and signs it with the owner's delegated proxy (the one the user delegated to this broker, or
  the one a forwarded job arrived with), a short proxy of the user's proxy (RFC 3820 path
  length permitting); without one the job is not forwarded (CEAgentError, status 403, body
  reason ``no-delegation`` / ``path-length``: a refusal of the job, the peer is not blacklisted,
  but joins the job's ``failed_ces``, so the job is not offered to it again);
* **loop prevention**: ``gateways``, the gateways passed (this broker appended) and ``hops``;
* a history row on the origin job: through which gateway, to which peer, under which id there.
"""
from __future__ import annotations

import logging

from vgrid_runtime.delegation import DelegationError, sign_request
from vgrid_runtime.httpclient import ErrorKind
from vwn_agents.ce_client import CEAgentClient, CEAgentError

import jdl as jdlmod

from .glue import gateway_ce_id
from .policy import job_gateways, job_hops

log = logging.getLogger("vgrid.broker.federation")


class Forwarder(CEAgentClient):
    """CE-agent client of one peer's gateway (``base_url`` = ``<peer url>/federation``) for the
    broker ``broker`` of federation ``fed`` (:class:`broker.federation.Federation`)."""

    def __init__(self, base_url: str, session, timeout_s: float, broker, fed, peer) -> None:
        super().__init__(base_url, session=session, timeout_s=timeout_s)
        self.broker, self.fed, self.peer = broker, fed, peer

    def _refuse(self, message: str, reason: str, job=None) -> CEAgentError:
        """The error of a forward refused here; the peer joins the job's ``failed_ces`` so the
        next choice offers it no more (the job waits locally or goes to another peer)."""
        if job is not None:
            now = self.broker.clock.now()
            try:
                self.broker.store.note(job.key, now, f"not forwarded to peer {self.peer.name}: {message}",
                                       failed_ces=[*job.failed_ces, gateway_ce_id(self.peer.base)])
            except Exception as exc:   # the refusal stands either way
                log.warning("could not exclude peer %s for job %s: %s", self.peer.name, job.key, exc)
        return CEAgentError(ErrorKind.HTTP, f"HTTP 403 {message}", self.base_url, 403,
                            {"error": {"message": message, "reason": reason}})

    def submit(self, body: dict) -> dict:
        """Forward one dispatch (the CE agent contract's body) to the peer; the peer's answer
        ``{"key","state","id"}``. Raises CEAgentError."""
        key = self.broker.key_of(body["job_id"])
        job = self.broker.store.get(key)
        desc = jdlmod.parse_jdl(job.jdl, job.filename, local_files=False)
        own = self.broker.settings.base_url.rstrip("/")
        out = {**body, "origin": own, "gateways": [*job_gateways(desc), own], "hops": job_hops(desc) + 1}
        now = self.broker.clock.now()
        if self.fed.tls is not None:
            cred = self.fed.delegations.job(key, now) or self.fed.delegations.user(job.owner_dn, now)
            if cred is None:
                raise self._refuse(f"no delegated proxy of {job.owner_dn} at {own} "
                                   "(vgrid delegate), job not forwarded", "no-delegation", job)
            req = self._call("POST", "/delegations", json={}, required=("id", "csr"))
            try:
                chain = sign_request(cred, req["csr"].encode(), now, self.fed.delegation_lifetime_s)
            except DelegationError as exc:
                raise self._refuse(f"cannot delegate to {self.peer.name}: {exc}", exc.reason, job) from None
            out.update(delegation_id=req["id"], proxy=chain.decode())
        answer = self._call("POST", "/jobs", json=out, required=("key",))
        try:
            self.broker.store.note(key, now, f"forwarded through gateway {own} to peer {self.peer.name} "
                                   f"({self.peer.base}) as {answer.get('id')}; gateways passed: "
                                   f"{', '.join(out['gateways'])}")
        except Exception as exc:   # the forward stands; the note is for people
            log.warning("history note of forwarded job %s failed: %s", key, exc)
        return answer
