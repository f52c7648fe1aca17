"""GIP: the Generic Information Provider of a vgrid CE, GLUE 1.3 LDIF of its state.

``render_glue13(state)`` gives what a CE's resource BDII publishes, laid out as in a site BDII:

    Mds-Vo-name=<site>,o=grid                                      (MDS)
    GlueClusterUniqueID=<host>,Mds-Vo-name=<site>,o=grid           (GlueCluster)
    GlueSubClusterUniqueID=<host>,GlueClusterUniqueID=<host>,...   (GlueSubCluster: GlueHost*)
    GlueCEUniqueID=<ce_id>,Mds-Vo-name=<site>,o=grid               (GlueCE, GlueForeignKey -> cluster)

Every entry is valid against the Debian glue-schema package, so the text loads into slapd
unchanged (tests/test_infosys_bdii.py does that). Units follow GLUE 1.3: GlueCEPolicyMaxWallClockTime
in minutes, GlueCEStateEstimatedResponseTime in seconds, GlueHostMainMemoryRAMSize in MB.
Source: GLUE Schema 1.3 specification (OGF GLUE WG, 2007), Sections 6.1-6.3.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ldap3.utils.dn import escape_rdn

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
        "GlueCEStateRunningJobs": _s(state.running),
        "GlueCEStateWaitingJobs": _s(state.waiting),
        "GlueCEStateTotalJobs": _s(state.running + state.waiting),
        "GlueCEStateFreeCPUs": _s(state.free_cpus),
        "GlueCEStateFreeJobSlots": _s(state.free_cpus),
        "GlueCEStateEstimatedResponseTime": _s(int(state.ert_s)),
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
