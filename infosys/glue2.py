"""GLUE 2.0 entries -> CE ads, under their GLUE2 names and mapped to the GLUE 1.3 names that JDL
expressions use.

One ad per (ComputingEndpoint, ComputingShare) pair, joined with the share's Service,
ComputingManager, ExecutionEnvironment, Benchmarks, ApplicationEnvironments and policies
(GLUE 2.0, OGF GFD.147, Sections 5-6; the EGI GLUE 2.0 LDAP rendering). The ad keeps the share's,
endpoint's, manager's and execution environment's GLUE2* attributes and adds the GLUE 1.3 names:

| GLUE 1.3                          | from GLUE 2.0                                          | unit    |
|-----------------------------------|--------------------------------------------------------|---------|
| GlueCEUniqueID                    | share OtherInfo ``CREAMCEId=``, else EndpointID/ShareID |         |
| GlueCEStateStatus                 | ComputingShareServingState (production -> Production)   |         |
| GlueCEStateRunning/Waiting/TotalJobs | ComputingShareRunning/Waiting/TotalJobs              | jobs    |
| GlueCEStateFreeCPUs, FreeJobSlots | ComputingShareFreeSlots                                 | slots   |
| GlueCEStateEstimatedResponseTime  | ComputingShareEstimatedAverageWaitingTime               | s       |
| GlueCEStateWorstResponseTime      | ComputingShareEstimatedWorstWaitingTime                 | s       |
| GlueCEPolicyMaxWallClockTime      | ComputingShareMaxWallTime // 60                         | s -> min|
| GlueCEPolicyMaxCPUTime            | ComputingShareMaxCPUTime // 60                          | s -> min|
| GlueCEInfoTotalCPUs               | ComputingManagerTotalLogicalCPUs                        | CPUs    |
| GlueCEInfoLRMSType/Version        | ManagerProductName/Version                              |         |
| GlueHostMainMemoryRAMSize         | ExecutionEnvironmentMainMemorySize                      | MB      |
| GlueHostBenchmarkSI00             | Benchmark specint2000, else HEP-SPEC06 x 250            | SI2K    |
| GlueCEAccessControlBaseRule       | MappingPolicy rules of the share, else AccessPolicy     |         |

GLUE 1.3 policy times are minutes and GLUE 2.0 times seconds; the gLite WMS copied the numbers
without converting. We convert.
"""
from __future__ import annotations

from typing import Iterable
from urllib.parse import urlsplit

from infosys.glue import AD_ID, EntryLike, Rejected, canonical_name
from infosys.schema import GLUE_TYPES, SchemaTypes

SI00_PER_HS06 = 250
"""SPECint2000 per HEP-SPEC06 (the WLCG conversion factor, 1 HS06 = 250 SI2K)."""

_STATES = {"production": "Production", "draining": "Draining", "queueing": "Queueing",
           "closed": "Closed"}
_PLATFORM = {"amd64": "x86_64", "i386": "i686"}
_CLASSES = ("glue2computingshare", "glue2computingendpoint", "glue2computingservice",
            "glue2computingmanager", "glue2executionenvironment", "glue2benchmark",
            "glue2applicationenvironment", "glue2mappingpolicy", "glue2accesspolicy")


def _classes(e: EntryLike) -> set[str]:
    return {v.lower() for k, vs in e.attrs.items() if k.lower() == "objectclass" for v in vs}


def _typed(e: EntryLike, types: SchemaTypes) -> dict:
    return {canonical_name(k, types): types.convert(k, v) for k, v in e.attrs.items()
            if k.lower() != "objectclass"}


def _list(v) -> list:
    if v is None:
        return []
    return list(v) if isinstance(v, list) else [v]


def _index(entries: Iterable[EntryLike], types: SchemaTypes, rejected: list[Rejected]):
    idx: dict[str, dict[str, dict]] = {c: {} for c in _CLASSES}
    for e in entries:
        cls = _classes(e) & set(_CLASSES)
        if not cls:
            continue
        try:
            attrs = _typed(e, types)
        except ValueError as err:
            rejected.append(Rejected(e.dn, str(err), getattr(e, "source", ""), getattr(e, "line", 0)))
            continue
        attrs["_dn"], attrs["_src"] = e.dn, (getattr(e, "source", ""), getattr(e, "line", 0))
        for c in cls:
            key_attr = {"glue2computingshare": "GLUE2ShareID",
                        "glue2computingendpoint": "GLUE2EndpointID",
                        "glue2computingservice": "GLUE2ServiceID",
                        "glue2computingmanager": "GLUE2ManagerID",
                        "glue2executionenvironment": "GLUE2ResourceID",
                        "glue2benchmark": "GLUE2BenchmarkID",
                        "glue2applicationenvironment": "GLUE2ApplicationEnvironmentID",
                        "glue2mappingpolicy": "GLUE2PolicyID",
                        "glue2accesspolicy": "GLUE2PolicyID"}[c]
            idx[c][str(attrs.get(key_attr, e.dn))] = attrs
    return idx


def _refers(value, target) -> bool:
    """True if a (possibly multi-valued) foreign key ``value`` names ``target``."""
    return target is not None and str(target) in (str(v) for v in _list(value))


def _other_info(attrs: dict, key: str) -> str | None:
    for v in _list(attrs.get("GLUE2EntityOtherInfo")):
        k, sep, val = str(v).partition("=")
        if sep and k.strip() == key:
            return val.strip()
    return None


def _si00(benchmarks: list[dict]) -> int | None:
    for b in benchmarks:
        if str(b.get("GLUE2BenchmarkType", "")).lower() == "specint2000":
            return int(float(b["GLUE2BenchmarkValue"]))
    for b in benchmarks:
        if str(b.get("GLUE2BenchmarkType", "")).lower() in ("hep-spec06", "hepspec06"):
            return int(float(b["GLUE2BenchmarkValue"]) * SI00_PER_HS06)
    return None


def glue2_ce_ads(entries: Iterable[EntryLike], types: SchemaTypes = GLUE_TYPES
                 ) -> tuple[list[dict], list[Rejected]]:
    """CE ads from GLUE 2.0 entries (see the module docstring), plus rejected entries.

    A share without a ComputingEndpoint, or whose numbers do not convert, is rejected with a
    reason; never raises on bad data.
    """
    rejected: list[Rejected] = []
    idx = _index(entries, types, rejected)
    ads: list[dict] = []
    for share_id, share in idx["glue2computingshare"].items():
        ep_ids = _list(share.get("GLUE2ComputingShareComputingEndpointForeignKey")) \
            or _list(share.get("GLUE2ShareEndpointForeignKey"))
        eps = [idx["glue2computingendpoint"][i] for i in ep_ids if i in idx["glue2computingendpoint"]]
        if not eps:
            rejected.append(Rejected(share["_dn"], "ComputingShare without a ComputingEndpoint",
                                     *share["_src"]))
            continue
        for ep in eps:
            try:
                ads.append(_share_ad(share_id, share, ep, idx, len(eps) > 1))
            except (ValueError, TypeError, KeyError) as err:
                rejected.append(Rejected(share["_dn"], f"cannot map to GLUE 1.3: {err}",
                                         *share["_src"]))
    return ads, rejected


def _related(idx, share: dict, ep: dict):
    service_id = next(iter(_list(share.get("GLUE2ShareServiceForeignKey"))), None)
    service = idx["glue2computingservice"].get(str(service_id), {})
    managers = [m for m in idx["glue2computingmanager"].values()
                if _refers(m.get("GLUE2ManagerServiceForeignKey"), service_id)]
    manager = managers[0] if managers else {}
    ee_ids = _list(share.get("GLUE2ComputingShareExecutionEnvironmentForeignKey")) \
        or _list(share.get("GLUE2ShareResourceForeignKey"))
    ee = next((idx["glue2executionenvironment"][i] for i in ee_ids
               if i in idx["glue2executionenvironment"]), {})
    ee_id, man_id = ee.get("GLUE2ResourceID"), manager.get("GLUE2ManagerID")
    benches = [b for b in idx["glue2benchmark"].values()
               if _refers(b.get("GLUE2BenchmarkExecutionEnvironmentForeignKey"), ee_id)
               or _refers(b.get("GLUE2BenchmarkComputingManagerForeignKey"), man_id)]
    apps = [a for a in idx["glue2applicationenvironment"].values()
            if _refers(a.get("GLUE2ApplicationEnvironmentComputingManagerForeignKey"), man_id)]
    rules = [r for p in idx["glue2mappingpolicy"].values()
             if _refers(p.get("GLUE2MappingPolicyShareForeignKey"), share.get("GLUE2ShareID"))
             for r in _list(p.get("GLUE2PolicyRule"))]
    if not rules:
        rules = [r for p in idx["glue2accesspolicy"].values()
                 if _refers(p.get("GLUE2AccessPolicyEndpointForeignKey"), ep.get("GLUE2EndpointID"))
                 for r in _list(p.get("GLUE2PolicyRule"))]
    return service, manager, ee, benches, apps, rules


def _share_ad(share_id: str, share: dict, ep: dict, idx, many_eps: bool) -> dict:
    service, manager, ee, benches, apps, rules = _related(idx, share, ep)
    ad: dict = {}
    for part in (service, manager, ee, ep, share):  # the share's generic GLUE2Entity* win
        ad.update({k: v for k, v in part.items() if not k.startswith("_")})
    url = str(ep.get("GLUE2EndpointURL", ""))
    host = urlsplit(url).hostname or ""
    ce_id = _other_info(share, "CREAMCEId") or f"{ep.get('GLUE2EndpointID')}/{share_id}"
    if many_eps and _other_info(share, "CREAMCEId"):
        ce_id = f"{ce_id}#{ep.get('GLUE2EndpointID')}"
    state = str(share.get("GLUE2ComputingShareServingState")
                or ep.get("GLUE2EndpointServingState") or "").lower()

    def put(name, value):
        """Set a GLUE 1.3 attribute in its GLUE 1.3 type: a list goes to a single-valued one as
        its first value, a string to an integer or boolean one converted (ValueError if bad)."""
        t = GLUE_TYPES.get(name)
        if isinstance(value, list) and t is not None and t.single_value:
            value = value[0] if value else None
        if isinstance(value, str) and t is not None and t.kind != "string":
            value = GLUE_TYPES.convert(name, [value])
        if value is not None:
            ad[name] = value

    put("GlueCEUniqueID", ce_id)
    put("GlueCEName", share.get("GLUE2ComputingShareMappingQueue"))
    put("GlueCEInfoHostName", host or None)
    put("GlueCEInfoContactString", [url] if url else None)
    put("GlueCEImplementationName", ep.get("GLUE2EndpointImplementationName"))
    put("GlueCEStateStatus", _STATES.get(state, state.capitalize() or None))
    for g1, g2 in (("GlueCEStateRunningJobs", "GLUE2ComputingShareRunningJobs"),
                   ("GlueCEStateWaitingJobs", "GLUE2ComputingShareWaitingJobs"),
                   ("GlueCEStateTotalJobs", "GLUE2ComputingShareTotalJobs"),
                   ("GlueCEStateFreeCPUs", "GLUE2ComputingShareFreeSlots"),
                   ("GlueCEStateFreeJobSlots", "GLUE2ComputingShareFreeSlots"),
                   ("GlueCEStateEstimatedResponseTime",
                    "GLUE2ComputingShareEstimatedAverageWaitingTime"),
                   ("GlueCEStateWorstResponseTime", "GLUE2ComputingShareEstimatedWorstWaitingTime"),
                   ("GlueCEPolicyMaxRunningJobs", "GLUE2ComputingShareMaxRunningJobs"),
                   ("GlueCEPolicyMaxWaitingJobs", "GLUE2ComputingShareMaxWaitingJobs")):
        put(g1, share.get(g2))
    for g1, g2 in (("GlueCEPolicyMaxWallClockTime", "GLUE2ComputingShareMaxWallTime"),
                   ("GlueCEPolicyMaxCPUTime", "GLUE2ComputingShareMaxCPUTime"),
                   ("GlueCEPolicyMaxObtainableWallClockTime", "GLUE2ComputingShareMaxWallTime")):
        if share.get(g2) is not None:
            ad[g1] = int(share[g2]) // 60  # GLUE 2.0 seconds -> GLUE 1.3 minutes
    put("GlueCEInfoTotalCPUs", manager.get("GLUE2ComputingManagerTotalLogicalCPUs"))
    put("GlueCEInfoLRMSType", manager.get("GLUE2ManagerProductName"))
    put("GlueCEInfoLRMSVersion", manager.get("GLUE2ManagerProductVersion"))
    put("GlueHostMainMemoryRAMSize", ee.get("GLUE2ExecutionEnvironmentMainMemorySize"))
    put("GlueHostMainMemoryVirtualSize", ee.get("GLUE2ExecutionEnvironmentVirtualMemorySize"))
    put("GlueHostOperatingSystemName", ee.get("GLUE2ExecutionEnvironmentOSName"))
    put("GlueHostOperatingSystemRelease", ee.get("GLUE2ExecutionEnvironmentOSVersion"))
    platform = ee.get("GLUE2ExecutionEnvironmentPlatform")
    put("GlueHostArchitecturePlatformType", _PLATFORM.get(str(platform), platform))
    put("GlueSubClusterPhysicalCPUs", ee.get("GLUE2ExecutionEnvironmentPhysicalCPUs"))
    put("GlueSubClusterLogicalCPUs", ee.get("GLUE2ExecutionEnvironmentLogicalCPUs"))
    put("GlueHostNetworkAdapterInboundIP", ee.get("GLUE2ExecutionEnvironmentConnectivityIn"))
    put("GlueHostNetworkAdapterOutboundIP", ee.get("GLUE2ExecutionEnvironmentConnectivityOut"))
    put("GlueHostBenchmarkSI00", _si00(benches))
    put("GlueSiteUniqueID", service.get("GLUE2ServiceAdminDomainForeignKey"))
    ad["GlueHostApplicationSoftwareRunTimeEnvironment"] = [
        str(a.get("GLUE2ApplicationEnvironmentAppName")) for a in apps]
    ad["GlueCEAccessControlBaseRule"] = [str(r) for r in rules]
    ad["CloseStorageElements"] = []
    ad[AD_ID] = ce_id
    return ad


def merge_glue_ads(ads13: list[dict], ads2: list[dict]) -> list[dict]:
    """GLUE 1.3 ads plus the GLUE 2.0 ads of CEs that publish no GLUE 1.3 (the WMS reads
    GLUE 1.3 first; a CE published in both schemas appears once)."""
    have = {a.get("GlueCEUniqueID") for a in ads13}
    return ads13 + [a for a in ads2 if a.get("GlueCEUniqueID") not in have]
