"""Who may do what at the broker: job ownership and the services a job was handed to.

Plain functions over the verified caller (:class:`vgrid_runtime.authn.Caller`) and the job; the
HTTP layer (:mod:`broker.api`) calls them and answers 403 when a rule says no. The rules
(docs/security.md):

* a user (a proxy with VOMS attributes, not limited) submits; the job belongs to the proxy's
  DN, VO and FQANs, and the JDL's ``VirtualOrganisation``, when given, must agree;
* a user reads, cancels, retrieves and clears only their own jobs, unless the DN is one of the
  broker's ``admins``;
* a CE agent posts heartbeats (``POST /heartbeats``) only for the URL its host certificate
  serves, and a heartbeat's job entries apply only to jobs dispatched to that URL;
* only the CE agent the job was dispatched to posts its events (the caller's host certificate
  is valid for the job's CE URL), and only the job's CE agent or node agent fetches its input
  sandbox and uploads its output sandbox (the job's CE/node URL, or a service presenting the
  sandbox capability of the dispatch URLs, :meth:`broker.service.Broker.sandbox_token`).
"""
from __future__ import annotations

from dataclasses import dataclass

from vgrid_runtime.authn import Caller

from .db import Job


@dataclass(frozen=True)
class Owner:
    """The owner of a job: DN, VO and FQANs (primary first) from the submitter's proxy."""

    dn: str
    vo: str | None
    fqans: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"dn": self.dn, "vo": self.vo, "fqans": list(self.fqans)}


class NotAllowed(Exception):
    """A rule refuses the caller (``str()``: what they may not do and why)."""


def submitter(who: Caller, jdl_vo: str | None) -> Owner | None:
    """The owner of a job ``who`` submits, or NotAllowed. None in plain-HTTP mode (no identity).

    Refused: a limited proxy, a credential without VO attributes, and a JDL
    ``VirtualOrganisation`` (``jdl_vo``) different from the proxy's VO."""
    ident = who.identity
    if ident is None:
        return None
    if ident.limited:
        raise NotAllowed("submit jobs with a limited proxy")
    if not ident.vo:
        raise NotAllowed("submit jobs without VO attributes (make a VOMS proxy: vgrid ca proxy --vo VO)")
    if jdl_vo and jdl_vo.lower() != ident.vo.lower():
        raise NotAllowed(f"submit a job for VO {jdl_vo!r} with a proxy of VO {ident.vo!r}")
    return Owner(ident.dn, ident.vo, ident.fqans)


def may_see(who: Caller, job: Job, admins: list[str]) -> bool:
    """The job's owner or an administrator (any caller in plain-HTTP mode)."""
    return may_see_owned(who, job.owner_dn, admins)


def may_see_owned(who: Caller, owner_dn: str | None, admins: list[str]) -> bool:
    """:func:`may_see` for a job owned by ``owner_dn`` (e.g. a cached record's owner)."""
    return who.identity is None or who.dn == owner_dn or who.is_one_of(admins)


def listing_owner(who: Caller, admins: list[str]) -> str | None:
    """Whose jobs ``GET /jobs`` lists: the caller's DN, or None (everyone's) for an
    administrator or in plain-HTTP mode."""
    if who.identity is None or who.is_one_of(admins):
        return None
    return who.dn


def listing_filter(who: Caller, admins: list[str], requested: str | None) -> str | None:
    """The owner DN ``GET /jobs?owner=...`` filters on (None: every job). ``requested``: None
    (the default rule, :func:`listing_owner`), ``"me"`` (the caller's own jobs; everyone's in
    plain-HTTP mode, where there is no identity) or a DN: the caller's own, or any DN for an
    administrator (or in plain-HTTP mode); NotAllowed for a user asking for another owner."""
    if requested is None:
        return listing_owner(who, admins)
    if requested == "me":
        return who.dn if who.identity is not None else None
    if who.identity is None or who.is_one_of(admins) or requested == who.dn:
        return requested
    raise NotAllowed(f"list the jobs of {requested} (not theirs)")


def may_report(who: Caller, job: Job) -> bool:
    """Events of ``job``: only the CE agent it was dispatched to."""
    return who.identity is None or who.serves(job.ce_url)


def may_transfer(who: Caller, job: Job) -> bool:
    """Input/output sandbox transfers of ``job``: its CE agent or the node agent running it."""
    return who.identity is None or who.serves(job.ce_url) or who.serves(job.node_url)


def may_heartbeat(who: Caller, url: str | None) -> bool:
    """``POST /heartbeats`` naming CE agent ``url``: only that CE agent (its host certificate
    serves ``url``); any caller in plain-HTTP mode."""
    return who.identity is None or (bool(url) and who.serves(url))


def is_service(who: Caller) -> bool:
    """A service (host certificate), or anyone in plain-HTTP mode: may be told that an event
    of a past attempt was ignored (nothing is applied)."""
    return who.identity is None or bool(who.identity.hosts)
