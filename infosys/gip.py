"""GIP: the Generic Information Provider of a vgrid CE, GLUE 1.3 (and 2.0) LDIF of its state.

``render_glue13(state)`` gives what a CE's resource BDII publishes, laid out as in a site BDII:

    Mds-Vo-name=<site>,o=grid                                      (MDS)
    GlueClusterUniqueID=<host>,Mds-Vo-name=<site>,o=grid           (GlueCluster)
    GlueSubClusterUniqueID=<host>,GlueClusterUniqueID=<host>,...   (GlueSubCluster: GlueHost*)
    GlueCEUniqueID=<ce_id>,Mds-Vo-name=<site>,o=grid               (GlueCE, GlueForeignKey -> cluster)

Every entry is valid against the Debian glue-schema package, so the text loads into slapd
unchanged (tests/test_infosys_bdii.py does that). Units follow GLUE 1.3: GlueCEPolicyMaxWallClockTime
in minutes, GlueCEStateEstimatedResponseTime in seconds, GlueHostMainMemoryRAMSize in MB.
Source: GLUE Schema 1.3 specification (OGF GLUE WG, 2007), Sections 6.1-6.3.
``render_glue2(state)`` gives the same CE in GLUE 2.0 (OGF GFD.147; times in seconds), and
``ce_state_from_ad(ad)`` turns a GLUE 1.3 CE ad back into a CEState (``vgrid gip --ce URL``);
``glue13_ads(state)`` gives the ads an ISM reads from ``render_glue13(state)`` (and
``glue13_ads_update`` refreshes their dynamic attributes only).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ldap3.utils.dn import escape_rdn

from infosys.glue import glue13_ce_ads, glue_typed
from infosys.ldif import LdifEntry, format_ldif

GLUE_SCHEMA_VERSION = {"GlueSchemaVersionMajor": ["1"], "GlueSchemaVersionMinor": ["3"]}


@dataclass
class CEState:
    """The static and dynamic state of one CE queue, as its GIP publishes it.

    ce_id: GlueCEUniqueID, ``host:port/vgrid-<lrms>-<queue>``; ert_s and max_wallclock_s in
    seconds; ram_mb in MB; si00 the SPECint2000 rating of one CPU; vos the VOs allowed
    (published as ``GlueCEAccessControlBaseRule: VO:<vo>``).
    """

    ce_id: str
    host: str
    site: str
    queue: str
    status: str = "Production"
    lrms_type: str = "vwn"
    total_cpus: int = 1
    free_cpus: int = 0
    running: int = 0
    waiting: int = 0
    ert_s: int = 0
    max_wallclock_s: int = 0
    si00: int = 1000
    ram_mb: int = 1024
    vos: list[str] = field(default_factory=list)
    os_name: str | None = None
    os_release: str | None = None
    arch: str | None = None
    software: list[str] = field(default_factory=list)
    cluster_id: str | None = None
    contact_string: str | None = None

    @property
    def cluster(self) -> str:
        """GlueClusterUniqueID: ``cluster_id`` or, as in gLite, the CE host."""
        return self.cluster_id or self.host

    @property
    def port(self) -> str:
        """GlueCEInfoGatekeeperPort: the port in ce_id (``host:port/...``), else "8443"."""
        hostport = self.ce_id.split("/", 1)[0]
        return hostport.rsplit(":", 1)[1] if ":" in hostport else "8443"


def site_dn(site: str) -> str:
    """DN of a site's subtree in a BDII: ``Mds-Vo-name=<site>,o=grid``."""
    return f"Mds-Vo-name={escape_rdn(site)},o=grid"


def _s(v: object) -> list[str]:
    return [str(v)]


def glue13_entries(state: CEState) -> list[LdifEntry]:
    """The GLUE 1.3 entries of one CE (site MDS node, cluster, subcluster, CE), see module doc."""
    base = site_dn(state.site)
    cl_dn = f"GlueClusterUniqueID={escape_rdn(state.cluster)},{base}"
    sc_dn = f"GlueSubClusterUniqueID={escape_rdn(state.cluster)},{cl_dn}"
    ce_dn = f"GlueCEUniqueID={escape_rdn(state.ce_id)},{base}"
    mds = LdifEntry(base, {"objectClass": ["MDS"], "Mds-Vo-name": [state.site]})
    cluster = LdifEntry(cl_dn, {
        "objectClass": ["GlueClusterTop", "GlueCluster", "GlueInformationService", "GlueKey",
                        "GlueSchemaVersion"],
        "GlueClusterUniqueID": [state.cluster],
        "GlueClusterName": [state.cluster],
        "GlueForeignKey": [f"GlueSiteUniqueID={state.site}", f"GlueCEUniqueID={state.ce_id}"],
        **GLUE_SCHEMA_VERSION,
    })
    return [mds, cluster, LdifEntry(sc_dn, _subcluster_attrs(state)),
            LdifEntry(ce_dn, _ce_attrs(state))]


def _subcluster_attrs(state: CEState) -> dict[str, list[str]]:
    attrs: dict[str, list[str]] = {
        "objectClass": ["GlueClusterTop", "GlueSubCluster", "GlueHostApplicationSoftware",
                        "GlueHostArchitecture", "GlueHostBenchmark", "GlueHostMainMemory",
                        "GlueHostOperatingSystem", "GlueKey", "GlueSchemaVersion"],
        "GlueSubClusterUniqueID": [state.cluster],
        "GlueSubClusterName": [state.cluster],
        "GlueSubClusterPhysicalCPUs": _s(state.total_cpus),
        "GlueSubClusterLogicalCPUs": _s(state.total_cpus),
        "GlueChunkKey": [f"GlueClusterUniqueID={state.cluster}"],
        "GlueHostBenchmarkSI00": _s(int(state.si00)),
        "GlueHostMainMemoryRAMSize": _s(int(state.ram_mb)),
    }
    if state.software:
        attrs["GlueHostApplicationSoftwareRunTimeEnvironment"] = list(state.software)
    if state.arch:
        attrs["GlueHostArchitecturePlatformType"] = [state.arch]
    if state.os_name:
        attrs["GlueHostOperatingSystemName"] = [state.os_name]
    if state.os_release:
        attrs["GlueHostOperatingSystemRelease"] = [state.os_release]
    attrs.update(GLUE_SCHEMA_VERSION)
    return attrs


def glue13_dynamic_attrs(state: CEState) -> dict[str, list[str]]:
    """The GlueCE attributes that change with the jobs (what a GIP dynamic plugin such as
    lcg-info-dynamic-pbs refreshes): running, waiting and total jobs, free CPUs and job slots,
    estimated response time (s). Names and order as in the CE entry."""
    return {
        "GlueCEStateRunningJobs": _s(state.running),
        "GlueCEStateWaitingJobs": _s(state.waiting),
        "GlueCEStateTotalJobs": _s(state.running + state.waiting),
        "GlueCEStateFreeCPUs": _s(state.free_cpus),
        "GlueCEStateFreeJobSlots": _s(state.free_cpus),
        "GlueCEStateEstimatedResponseTime": _s(int(state.ert_s)),
    }


def _ce_attrs(state: CEState) -> dict[str, list[str]]:
    classes = ["GlueCETop", "GlueCE", "GlueCEInfo", "GlueCEPolicy", "GlueCEState",
               "GlueInformationService", "GlueKey", "GlueSchemaVersion"]
    if state.vos:
        classes.insert(2, "GlueCEAccessControlBase")
    contact = state.contact_string or f"https://{state.ce_id.split('/', 1)[0]}/"
    attrs: dict[str, list[str]] = {
        "objectClass": classes,
        "GlueCEUniqueID": [state.ce_id],
        "GlueCEName": [state.queue],
        "GlueCEHostingCluster": [state.cluster],
        "GlueCEImplementationName": ["vgrid"],
        "GlueCEInfoHostName": [state.host],
        "GlueCEInfoGatekeeperPort": [state.port],
        "GlueCEInfoLRMSType": [state.lrms_type],
        "GlueCEInfoJobManager": [state.lrms_type],
        "GlueCEInfoContactString": [contact],
        "GlueCEInfoTotalCPUs": _s(state.total_cpus),
        "GlueCEStateStatus": [state.status],
        **glue13_dynamic_attrs(state),
        "GlueCEPolicyMaxWallClockTime": _s(int(state.max_wallclock_s) // 60),
        "GlueCEPolicyMaxRunningJobs": _s(state.total_cpus),
    }
    if state.vos:
        attrs["GlueCEAccessControlBaseRule"] = [f"VO:{vo}" for vo in state.vos]
    attrs["GlueForeignKey"] = [f"GlueClusterUniqueID={state.cluster}"]
    attrs.update(GLUE_SCHEMA_VERSION)
    return attrs


def render_glue13(state: CEState) -> str:
    """GLUE 1.3 LDIF text of one CE (see the module docstring for the entries and units).

    GlueCEPolicyMaxWallClockTime is ``max_wallclock_s // 60`` minutes (rounded down, so a job
    that fits the published limit fits the real one); GlueCEStateTotalJobs = running + waiting.
    """
    return format_ldif(glue13_entries(state))


def glue13_ads(state: CEState) -> list[dict]:
    """The CE ads (one, or one per VO view) an ISM source reads from this CE's GLUE 1.3 LDIF.

    Equal to ``glue13_ce_ads(parse_ldif(render_glue13(state)))[0]`` (the path of a live CE's
    ``GET /glue``), built from the same entries without the text round trip; the grid
    simulator publishes its CEs with it. Values are typed as the ISM types them (integers for
    GlueCEStateRunningJobs, GlueHostBenchmarkSI00, ...).
    """
    return glue13_ce_ads(glue13_entries(state))[0]


def glue13_ads_update(ads: list[dict], state: CEState) -> list[dict]:
    """``glue13_ads(state)`` for a CE whose ``ads`` were built by ``glue13_ads`` from a state
    with the same static part: new ad dicts in which only :func:`glue13_dynamic_attrs` are
    rendered and typed again (as a GIP's dynamic plugin refreshes a static LDIF), about 4x
    cheaper. The GIP publishes no VO views, so every ad is the CE's."""
    dynamic = glue_typed(glue13_dynamic_attrs(state))
    return [{**ad, **dynamic} for ad in ads]


_SERVING = {"production": "production", "draining": "draining", "queueing": "queueing",
            "closed": "closed"}


def glue2_entries(state: CEState) -> list[LdifEntry]:
    """The GLUE 2.0 entries of one CE under ``GLUE2GroupID=resource,GLUE2DomainID=<site>,
    GLUE2GroupID=grid,o=glue`` (EGI GLUE 2.0 LDAP rendering): AdminDomain, ComputingService,
    ComputingManager, ExecutionEnvironment + specint2000 Benchmark, ComputingEndpoint,
    ComputingShare (OtherInfo ``CREAMCEId=<ce_id>`` links it to the GLUE 1.3 CE) and its
    MappingPolicy, one ApplicationEnvironment per software tag. Times in seconds (GLUE 2.0)."""
    host, site = state.host, state.site
    dom = f"GLUE2DomainID={escape_rdn(site)},GLUE2GroupID=grid,o=glue"
    grp = f"GLUE2GroupID=resource,{dom}"
    svc_id, man_id = f"{host}_ComputingElement", f"{host}_ComputingElement_Manager"
    ep_id, share_id = f"{host}_org.vgrid.ce", f"{state.queue}_{host}_ComputingElement"
    svc = f"GLUE2ServiceID={escape_rdn(svc_id)},{grp}"
    man = f"GLUE2ManagerID={escape_rdn(man_id)},{svc}"
    ee = f"GLUE2ResourceID={escape_rdn(host)},{svc}"
    share = f"GLUE2ShareID={escape_rdn(share_id)},{svc}"
    serving = _SERVING.get(state.status.lower(), "closed")
    contact = state.contact_string or f"https://{state.ce_id.split('/', 1)[0]}/"
    arch = {"x86_64": "amd64", "i686": "i386"}.get(state.arch or "x86_64", state.arch or "amd64")
    out = [
        LdifEntry(dom, {"objectClass": ["GLUE2Domain", "GLUE2AdminDomain"],
                        "GLUE2DomainID": [site], "GLUE2EntityName": [site]}),
        LdifEntry(grp, {"objectClass": ["GLUE2Group"], "GLUE2GroupID": ["resource"]}),
        LdifEntry(svc, {"objectClass": ["GLUE2Service", "GLUE2ComputingService"],
                        "GLUE2ServiceID": [svc_id], "GLUE2ServiceType": ["org.vgrid.ce"],
                        "GLUE2ServiceQualityLevel": ["production"],
                        "GLUE2ServiceCapability": ["executionmanagement.jobexecution"],
                        "GLUE2ServiceAdminDomainForeignKey": [site]}),
        LdifEntry(man, {"objectClass": ["GLUE2Manager", "GLUE2ComputingManager"],
                        "GLUE2ManagerID": [man_id], "GLUE2ManagerProductName": [state.lrms_type],
                        "GLUE2ManagerServiceForeignKey": [svc_id],
                        "GLUE2ComputingManagerTotalLogicalCPUs": _s(state.total_cpus),
                        "GLUE2ComputingManagerTotalSlots": _s(state.total_cpus)}),
        LdifEntry(ee, {"objectClass": ["GLUE2Resource", "GLUE2ExecutionEnvironment"],
                       "GLUE2ResourceID": [host], "GLUE2ResourceManagerForeignKey": [man_id],
                       "GLUE2ExecutionEnvironmentPlatform": [arch],
                       "GLUE2ExecutionEnvironmentMainMemorySize": _s(int(state.ram_mb)),
                       "GLUE2ExecutionEnvironmentOSFamily": ["linux"],
                       "GLUE2ExecutionEnvironmentConnectivityIn": ["FALSE"],
                       "GLUE2ExecutionEnvironmentConnectivityOut": ["TRUE"],
                       "GLUE2ExecutionEnvironmentLogicalCPUs": _s(state.total_cpus),
                       "GLUE2ExecutionEnvironmentPhysicalCPUs": _s(state.total_cpus),
                       **({"GLUE2ExecutionEnvironmentOSName": [state.os_name]}
                          if state.os_name else {}),
                       **({"GLUE2ExecutionEnvironmentOSVersion": [state.os_release]}
                          if state.os_release else {})}),
        LdifEntry(f"GLUE2BenchmarkID={escape_rdn(host + '_specint2000')},{ee}", {
            "objectClass": ["GLUE2Benchmark"], "GLUE2BenchmarkID": [f"{host}_specint2000"],
            "GLUE2BenchmarkType": ["specint2000"], "GLUE2BenchmarkValue": _s(int(state.si00)),
            "GLUE2BenchmarkExecutionEnvironmentForeignKey": [host]}),
        LdifEntry(f"GLUE2EndpointID={escape_rdn(ep_id)},{svc}", {
            "objectClass": ["GLUE2Endpoint", "GLUE2ComputingEndpoint"],
            "GLUE2EndpointID": [ep_id], "GLUE2EndpointURL": [contact],
            "GLUE2EndpointInterfaceName": ["org.vgrid.ce"],
            "GLUE2EndpointImplementationName": ["vgrid"],
            "GLUE2EndpointQualityLevel": ["production"], "GLUE2EndpointHealthState": ["ok"],
            "GLUE2EndpointServingState": [serving], "GLUE2EndpointServiceForeignKey": [svc_id],
            "GLUE2EndpointCapability": ["executionmanagement.jobexecution"]}),
        LdifEntry(share, {
            "objectClass": ["GLUE2Share", "GLUE2ComputingShare"],
            "GLUE2ShareID": [share_id], "GLUE2ShareServiceForeignKey": [svc_id],
            "GLUE2ComputingShareComputingEndpointForeignKey": [ep_id],
            "GLUE2ComputingShareExecutionEnvironmentForeignKey": [host],
            "GLUE2ComputingShareMappingQueue": [state.queue],
            "GLUE2ComputingShareServingState": [serving],
            "GLUE2ComputingShareRunningJobs": _s(state.running),
            "GLUE2ComputingShareWaitingJobs": _s(state.waiting),
            "GLUE2ComputingShareTotalJobs": _s(state.running + state.waiting),
            "GLUE2ComputingShareFreeSlots": _s(state.free_cpus),
            "GLUE2ComputingShareEstimatedAverageWaitingTime": _s(int(state.ert_s)),
            "GLUE2ComputingShareMaxWallTime": _s(int(state.max_wallclock_s)),
            "GLUE2ComputingShareMaxRunningJobs": _s(state.total_cpus),
            "GLUE2EntityOtherInfo": [f"CREAMCEId={state.ce_id}"]}),
    ]
    if state.vos:
        out.append(LdifEntry(f"GLUE2PolicyID={escape_rdn(share_id + '_Policy')},{share}", {
            "objectClass": ["GLUE2Policy", "GLUE2MappingPolicy"],
            "GLUE2PolicyID": [f"{share_id}_Policy"], "GLUE2PolicyScheme": ["org.glite.standard"],
            "GLUE2PolicyRule": [f"VO:{vo}" for vo in state.vos],
            "GLUE2MappingPolicyShareForeignKey": [share_id]}))
    for tag in state.software:
        app_id = f"{tag}_{host}"
        out.append(LdifEntry(f"GLUE2ApplicationEnvironmentID={escape_rdn(app_id)},{man}", {
            "objectClass": ["GLUE2ApplicationEnvironment"],
            "GLUE2ApplicationEnvironmentID": [app_id],
            "GLUE2ApplicationEnvironmentAppName": [tag],
            "GLUE2ApplicationEnvironmentComputingManagerForeignKey": [man_id]}))
    return out


def render_glue2(state: CEState) -> str:
    """GLUE 2.0 LDIF text of one CE (see ``glue2_entries``); MaxWallTime in seconds."""
    return format_ldif(glue2_entries(state))


def ce_state_from_ad(ad: dict, site: str | None = None) -> CEState:
    """A CEState from a GLUE 1.3 CE ad (the inverse of publishing: ``vgrid gip --ce URL``).

    Raises KeyError if the ad has no GlueCEUniqueID.
    """
    ce_id = str(ad["GlueCEUniqueID"])
    host = str(ad.get("GlueCEInfoHostName") or ce_id.split(":", 1)[0].split("/", 1)[0])

    def i(name: str, default: int = 0) -> int:
        v = ad.get(name)
        return int(v) if isinstance(v, (int, float)) else default

    vos = [r[3:] for r in ad.get("GlueCEAccessControlBaseRule") or [] if str(r)[:3] == "VO:"]
    return CEState(
        ce_id=ce_id, host=host, site=site or str(ad.get("GlueSiteUniqueID") or "local"),
        queue=str(ad.get("GlueCEName") or ce_id.rsplit("-", 1)[-1]),
        status=str(ad.get("GlueCEStateStatus") or "Production"),
        lrms_type=str(ad.get("GlueCEInfoLRMSType") or "vwn"),
        total_cpus=i("GlueCEInfoTotalCPUs", 1), free_cpus=i("GlueCEStateFreeCPUs"),
        running=i("GlueCEStateRunningJobs"), waiting=i("GlueCEStateWaitingJobs"),
        ert_s=i("GlueCEStateEstimatedResponseTime"),
        max_wallclock_s=i("GlueCEPolicyMaxWallClockTime") * 60,
        si00=i("GlueHostBenchmarkSI00", 1000), ram_mb=i("GlueHostMainMemoryRAMSize", 1024),
        vos=vos, os_name=ad.get("GlueHostOperatingSystemName"),
        os_release=ad.get("GlueHostOperatingSystemRelease"),
        arch=ad.get("GlueHostArchitecturePlatformType"),
        software=list(ad.get("GlueHostApplicationSoftwareRunTimeEnvironment") or []),
        cluster_id=ad.get("GlueClusterUniqueID"),
        contact_string=(ad.get("GlueCEInfoContactString") or [None])[0])
