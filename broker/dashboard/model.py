"""What the dashboard shows, as plain dicts (the templates only lay them out; issue 17).

* :func:`grid_model`: every CE of the broker's ISM (status, CPUs, jobs, the feedback counter
  since the last refresh, the SFETE estimate (N_j + 1) / C_j of seed 004 eq. (1) and Section
  4.2, information age, stale, blacklisted) and the peer gateways.
* :func:`site_model`: one CE's ``GET /site`` (``vwn_agents.ce_site``), fetched with the broker's
  credential from the contact URL the ISM publishes for that CE (never from a URL a user
  gives), with every VWN and reservation of a job the caller may not see made anonymous.
* :func:`jobs_model` / :func:`job_model`: the caller's jobs (an administrator's: everyone's)
  through ``broker.listing``'s keyset pagination, with a search over file names and ids.

Who may see what is ``broker.authz``'s: ``may_see`` (owner or administrator) for a job and what
names it; anyone authenticated for the grid and the site views' numbers. Times are broker
clock seconds; CPU caps fractions of a core.
"""
from __future__ import annotations

from typing import Any, Mapping

from infosys.summary import snapshot_summary
from vwn_agents.ce_client import CEAgentClient, CEAgentError

from .. import authz, listing
from ..db import UnknownJob, job_key_of
from ..selection import ce_capacity, published_jobs, sfete_rank

#: Seconds the broker waits for a CE agent's ``GET /site``.
SITE_TIMEOUT_S = 5.0
#: Jobs a search scans per page request at most (then it offers ``next`` to go on).
SEARCH_SCAN = 5000


class NotFound(Exception):
    """A CE the ISM does not list (HTTP 404)."""


def _ads_by_id(broker) -> dict[str, Mapping]:
    from infosys.glue import AD_ID
    return {(a.get(AD_ID) or a.get("GlueCEUniqueID")): a for a in broker.ism.snapshot().ads}


def grid_model(broker) -> dict[str, Any]:
    """``{"taken_at", "stale", "errors", "ces": [row], "peers": [{"name", "url", ...}]}``; a row
    is ``infosys.summary.ce_summary``'s plus ``contact`` (the CE agent URL), ``dispatched``
    (feedback counter), ``n_jobs`` (N_j = published + dispatched), ``capacity`` (C_j = CPUs x
    SI00), ``sfete`` ((N_j + 1) / C_j, None for a CE of capacity 0), ``fetched_at`` (when its
    ad was fetched: the information age is now - fetched_at) and ``ad_stale`` (its source failed
    at the last refresh: the ad is an older one, kept until it expires)."""
    snap = broker.ism.snapshot()
    now = broker.clock.now()
    doc = snapshot_summary(snap, now, blacklist=broker.ism.blacklist_entries(now))
    counters = broker.ism.feedback.snapshot()
    for ad, row in zip(snap.ads, doc["ces"]):
        dispatched = counters.get(row["id"], 0)
        cap = ce_capacity(ad)
        n_jobs = published_jobs(ad) + dispatched
        fetched = snap.ad_time.get(row["id"], snap.fresh_at)
        row.update(contact=broker._ce_url(ad), dispatched=dispatched, n_jobs=n_jobs, capacity=cap,
                   fetched_at=fetched, ad_stale=fetched < snap.taken_at - 1e-6,
                   sfete=sfete_rank(published_jobs(ad), dispatched, cap) if cap > 0 else None,
                   peer=bool(broker.federation and broker.federation.peers.of_ad(ad)))
    peers = []
    if broker.federation is not None:
        peers = [{"name": p.name, "url": p.url, "send_vos": list(p.send_vos),
                  "accept_vos": list(p.accept_vos), "share_cpus": p.share_cpus, "priority": p.priority}
                 for p in broker.federation.peers.list]
    return {"taken_at": snap.taken_at, "stale": doc["stale"], "errors": list(getattr(snap, "errors", []) or []),
            "ces": doc["ces"], "peers": peers}


def site_model(broker, ce_id: str, who, admins: list[str]) -> dict[str, Any]:
    """The CE's ``GET /site`` document as ``who`` may see it, plus ``"error"`` (None, or why
    the CE agent could not be read). NotFound for a CE id the ISM does not list."""
    ad = _ads_by_id(broker).get(ce_id)
    if ad is None:
        raise NotFound(f"no CE {ce_id!r} in the information system")
    url = broker._ce_url(ad)
    base = {"ce_id": ce_id, "url": url, "nodes": [], "slots": None, "now": broker.clock.now(), "error": None}
    if not url or (broker.federation is not None and broker.federation.peers.of_ad(ad)):
        return {**base, "error": "a peer gateway: its sites are shown by that broker's dashboard"}
    try:
        doc = CEAgentClient(url, session=broker.http, timeout_s=SITE_TIMEOUT_S).site()
    except CEAgentError as exc:
        return {**base, "error": f"the CE agent did not answer GET /site: {exc}"}
    seen: dict[str, bool] = {}

    def visible(job_key: str | None) -> bool:
        if job_key is None:
            return False
        if job_key not in seen:
            try:
                seen[job_key] = authz.may_see(who, broker.get(job_key), admins)
            except UnknownJob:
                seen[job_key] = who.identity is None or who.is_one_of(admins)
        return seen[job_key]

    for node in doc.get("nodes", []):
        vwns = []
        for rec in node.get("vwns", []):
            jk = broker.key_of(rec["job_id"]) if rec.get("job_id") else None
            if visible(jk):
                vwns.append({**rec, "job_key": jk, "mine": True})
            else:
                vwns.append({k: rec.get(k) for k in ("vwn", "state", "cpu_cap", "cpu_caps", "capped",
                                                    "created", "ended", "limits")} | {"mine": False})
        node["vwns"] = vwns
        images = node.get("images") or {}
        for img in images.get("images", []) if isinstance(images.get("images"), list) else []:
            img["pins"] = len(img.get("pins") or [])        # pins name jobs: shown as a count
        images.pop("transfers", None)
    slots = doc.get("slots")
    if slots:
        for item in slots.get("reservations", []) + slots.get("history", []):
            jk = job_key_of(item["key"]) if item.get("key") else None
            item["job_key"] = jk if visible(jk) else None
            item["mine"] = item["job_key"] is not None
            if not item["mine"]:
                item["key"] = None
    labels = {n["url"]: n["status"]["node"] for n in doc.get("nodes", []) if (n.get("status") or {}).get("node")}
    return {**base, **doc, "url": url, "error": None, "labels": labels}


def _search_hit(job, q: str, broker) -> bool:
    q = q.lower()
    return any(q in (s or "").lower() for s in (job.filename, job.key, broker.job_id(job.key), job.ce_id,
                                                  job.node_name))


def jobs_model(broker, args: Mapping[str, str], who, admins: list[str]) -> dict[str, Any]:
    """One page of the caller's jobs: ``{"jobs": [Job], "next": cursor | None, "query": {...}}``.
    ``args`` as ``GET /jobs`` (``broker.listing``: state, owner, since, limit, after) plus ``q``:
    a case-insensitive substring of the file name, job id, CE or DAG node name (up to
    :data:`SEARCH_SCAN` jobs scanned per page). Raises ``listing.BadQuery`` and
    ``authz.NotAllowed`` (another owner asked for by a user)."""
    query = listing.parse_query(args, broker.key_of)
    owner = authz.listing_filter(who, admins, query.owner)
    q = (args.get("q") or "").strip()
    if not q:
        jobs, last = broker.jobs_page(states=query.states, owner_dn=owner, since=query.since,
                                      keys=query.keys, after=query.after, limit=query.limit)
        return {"jobs": jobs, "next": listing.encode_cursor(*last) if last else None}
    found, after, scanned = [], query.after, 0
    while len(found) < query.limit and scanned < SEARCH_SCAN:
        page, last = broker.jobs_page(states=query.states, owner_dn=owner, since=query.since,
                                      keys=query.keys, after=after, limit=listing.MAX_LIMIT)
        for job in page:
            scanned += 1
            after = (job.submitted_at, job.key)
            if _search_hit(job, q, broker):
                found.append(job)
                if len(found) >= query.limit:
                    break
        if not page or (last is None and len(found) < query.limit):
            return {"jobs": found, "next": None}
    return {"jobs": found, "next": listing.encode_cursor(*after) if after else None}


def job_model(broker, key: str, who, admins: list[str]) -> dict[str, Any]:
    """``{"job", "children": [Job], "edges": [(from name, to name)], "outputs": [names]}`` for a
    job ``who`` may see; raises ``authz.NotAllowed`` otherwise and ``UnknownJob``."""
    job = broker.get(key)
    if not authz.may_see(who, job, admins):
        raise authz.NotAllowed(f"read job {key} (not theirs)")
    children = broker.store.list(parent=job.key, history=False) if job.compound else []
    by_key = {c.key: c for c in children}
    edges = [((by_key[d].node_name or d) if d in by_key else d, c.node_name or c.key)
             for c in children for d in c.depends_on]
    return {"job": job, "children": children, "edges": edges, "outputs": broker.output_files(job.key)}
