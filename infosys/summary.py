"""The operator's view of an ISM snapshot: one row per CE or VO view, like ``lcg-infosites ce``.

``snapshot_summary`` is the JSON document of ``vgrid info --json`` (issue 4):
``{"stale", "age_s", "rejected": [{"dn", "reason", "source", "line"}], "ces": [{"id", "status",
"total_cpus", "free_cpus", "running", "waiting", "total_jobs", "ert_s", "si00", "vo", "acbr"}]}``
(``ert_s`` in seconds, ``vo`` the GlueVOViewLocalID of a VO view, else null). A broker's
document (``GET /ism``, ``vgrid info --broker``) adds ``"blacklisted"`` to each row: null, or
``{"until", "reason"}`` when its ISM leaves the CE out of matching until ``until`` (broker clock
seconds, null = no end); and ``"blacklist": [{"ce", "until", "reason"}]``.
"""
from __future__ import annotations

from collections.abc import Mapping

from infosys.glue import AD_ID, vos_of


def ce_summary(ad: Mapping) -> dict:
    """One CE ad (or VO-view ad) as a row of ``snapshot_summary``."""
    return {"id": ad.get(AD_ID) or ad.get("GlueCEUniqueID"),
            "status": ad.get("GlueCEStateStatus"),
            "total_cpus": ad.get("GlueCEInfoTotalCPUs"),
            "free_cpus": ad.get("GlueCEStateFreeCPUs"),
            "running": ad.get("GlueCEStateRunningJobs"),
            "waiting": ad.get("GlueCEStateWaitingJobs"),
            "total_jobs": ad.get("GlueCEStateTotalJobs"),
            "ert_s": ad.get("GlueCEStateEstimatedResponseTime"),
            "si00": ad.get("GlueHostBenchmarkSI00"),
            "vo": ad.get("GlueVOViewLocalID"),
            "acbr": list(ad.get("GlueCEAccessControlBaseRule") or [])}


def snapshot_summary(snapshot, now: float, vo: str | None = None,
                     blacklist: Mapping[str, Mapping] | None = None) -> dict:
    """The ``vgrid info --json`` document of an ISM ``Snapshot`` at time ``now`` (seconds);
    with ``vo``, only ads whose GlueCEAccessControlBaseRule admits that VO. ``blacklist``
    (a broker's ``ISM.blacklist_entries(now)``: CE id or VO-view key -> ``{"until", "reason"}``)
    adds ``"blacklisted"`` to every row and the ``"blacklist"`` list; without it (a BDII or LDIF
    files read directly, where nothing is blacklisted) neither is present."""
    ads = [a for a in snapshot.ads if vo is None or vo in vos_of(a)]
    doc = {"stale": snapshot.stale, "age_s": round(snapshot.age(now), 3),
           "rejected": [r.as_dict() for r in snapshot.rejected],
           "ces": [ce_summary(a) for a in ads]}
    if blacklist is not None:
        for a, row in zip(ads, doc["ces"]):
            entry = blacklist.get(row["id"]) or blacklist.get(a.get("GlueCEUniqueID"))
            row["blacklisted"] = None if entry is None else {"until": entry.get("until"),
                                                             "reason": entry.get("reason", "")}
        doc["blacklist"] = [{"ce": k, "until": e.get("until"), "reason": e.get("reason", "")}
                            for k, e in blacklist.items()]
    return doc
