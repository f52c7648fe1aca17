"""GLUE 2.0 entries -> CE ads under GLUE2 and GLUE 1.3 names, with unit conversion."""

from infosys.gip import CEState, glue2_entries, render_glue2
from infosys.glue import AD_ID
from infosys.glue2 import SI00_PER_HS06, glue2_ce_ads
from infosys.ldif import LdifEntry, parse_ldif
from tests.paths import SHARED_LDIF

DATA = SHARED_LDIF


def test_synthetic_site_glue2_share():
    ads, rejected = glue2_ce_ads(parse_ldif((DATA / "synthetic_site.ldif").read_text()))
    assert rejected == [] and len(ads) == 1
    ad = ads[0]
    assert ad[AD_ID] == ad["GlueCEUniqueID"] == "ce01.example:8443/cream-pbs-long"
    assert ad["GLUE2ComputingShareMaxWallTime"] == 172800        # seconds, GLUE 2.0
    assert ad["GlueCEPolicyMaxWallClockTime"] == 2880            # minutes, GLUE 1.3
    assert ad["GlueCEPolicyMaxCPUTime"] == 2880
    assert ad["GlueCEStateStatus"] == "Production"
    assert (ad["GlueCEStateRunningJobs"], ad["GlueCEStateWaitingJobs"]) == (5, 1)
    assert ad["GlueCEStateEstimatedResponseTime"] == 300
    assert ad["GlueCEInfoTotalCPUs"] == 64 and ad["GlueCEInfoLRMSType"] == "pbs"
    assert ad["GlueHostMainMemoryRAMSize"] == 8192
    assert ad["GlueHostArchitecturePlatformType"] == "x86_64"   # amd64 in GLUE 2.0
    assert ad["GlueHostNetworkAdapterOutboundIP"] is True
    assert ad["GlueCEAccessControlBaseRule"] == ["VO:dteam"]    # the share's mapping policy
    assert ad["GlueSiteUniqueID"] == "EXAMPLE-SITE"
    assert ad["GlueCEInfoHostName"] == "ce01.example"


def test_real_glue2_service_fixture_has_no_computing_share():
    ads, rejected = glue2_ce_ads(parse_ldif((DATA / "glue2_service_endpoint_policy.ldif").read_text()))
    assert ads == [] and rejected == []


def _ce(**kw):
    base = dict(ce_id="ce5.vgrid.local:8443/vgrid-vwn-long", host="ce5.vgrid.local", site="S",
                queue="long", total_cpus=6, free_cpus=2, running=4, waiting=3, ert_s=45,
                max_wallclock_s=3599, si00=1800, ram_mb=4096, vos=["vgrid"],
                software=["VO-vgrid-a", "VO-vgrid-b"], status="Draining")
    base.update(kw)
    return CEState(**base)


def test_render_glue2_maps_back_with_units():
    ads, rejected = glue2_ce_ads(parse_ldif(render_glue2(_ce())))
    assert rejected == []
    ad = ads[0]
    assert ad["GlueCEPolicyMaxWallClockTime"] == 59              # 3599 s -> 59 min
    assert ad["GLUE2ComputingShareMaxWallTime"] == 3599
    assert ad["GlueHostBenchmarkSI00"] == 1800
    assert ad["GlueCEStateStatus"] == "Draining"
    assert ad["GlueHostApplicationSoftwareRunTimeEnvironment"] == ["VO-vgrid-a", "VO-vgrid-b"]
    assert ad["GlueCEStateTotalJobs"] == 7 and ad["GlueCEStateFreeCPUs"] == 2


def test_hepspec06_benchmark_converts_to_si00():
    entries = glue2_entries(_ce())
    for e in entries:
        if "GLUE2BenchmarkType" in e.attrs:
            e.attrs["GLUE2BenchmarkType"] = ["HEP-SPEC06"]
            e.attrs["GLUE2BenchmarkValue"] = ["10.5"]
    ad = glue2_ce_ads(entries)[0][0]
    assert ad["GlueHostBenchmarkSI00"] == int(10.5 * SI00_PER_HS06)


def test_inconsistent_shares_are_rejected_not_raised():
    entries = glue2_entries(_ce())
    share = next(e for e in entries if "GLUE2ShareID" in e.attrs)
    orphan = LdifEntry("GLUE2ShareID=x,o=glue", {**share.attrs, "GLUE2ShareID": ["x"],
                       "GLUE2ComputingShareComputingEndpointForeignKey": ["nowhere"],
                       "GLUE2ShareEndpointForeignKey": ["nowhere"]})
    bad = LdifEntry("GLUE2ShareID=y,o=glue", {**share.attrs, "GLUE2ShareID": ["y"],
                    "GLUE2ComputingShareWaitingJobs": ["many"]})
    ads, rejected = glue2_ce_ads(entries + [orphan, bad])
    assert len(ads) == 1
    reasons = sorted(r.reason for r in rejected)
    assert any("without a ComputingEndpoint" in r for r in reasons)
    assert any("not an integer" in r for r in reasons)
