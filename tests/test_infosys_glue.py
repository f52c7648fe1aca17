"""GLUE 1.3 entries -> CE ads: typing, cluster/subcluster join, VO views, CESEBind, rejects."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infosys.gip import CEState, glue13_ads, glue13_ads_update, render_glue13
from infosys.glue import AD_ID, glue13_ce_ads, vos_of
from infosys.ldif import parse_ldif
from tests.paths import SHARED_LDIF

DATA = SHARED_LDIF


def _ads(text, source="t.ldif"):
    return glue13_ce_ads(parse_ldif(text, source))


def test_synthetic_site_as_the_glite_ism_assembles_it():
    ads, rejected = _ads((DATA / "synthetic_site.ldif").read_text(), "synthetic_site.ldif")
    assert rejected == []
    by_id = {a[AD_ID]: a for a in ads}
    assert list(by_id) == ["ce01.example:8443/cream-pbs-long",
                           "ce01.example:8443/cream-pbs-long/dteam",
                           "ce01.example:8443/cream-pbs-short"]
    long_ = by_id["ce01.example:8443/cream-pbs-long"]
    # integer attributes typed, multi-valued as lists, booleans as bool
    assert long_["GlueCEStateWaitingJobs"] == 10 and long_["GlueCEInfoTotalCPUs"] == 64
    assert long_["GlueCEPolicyMaxWallClockTime"] == 2880
    assert long_["GlueHostNetworkAdapterOutboundIP"] is True
    # joined with the first subcluster of the cluster named in GlueForeignKey
    assert long_["GlueHostBenchmarkSI00"] == 2500 and long_["GlueHostMainMemoryRAMSize"] == 8192
    assert long_["GlueHostApplicationSoftwareRunTimeEnvironment"] == ["MPICH", "VO-dteam-sw-1.0"]
    assert long_["GlueClusterUniqueID"] == "ce01.example"
    assert long_["GlueSiteUniqueID"] == "EXAMPLE-SITE"
    assert long_["CloseStorageElements"] == [{"name": "se01.example", "mount": "/storage"}]
    # the dteam rule moved to the VO view; the CE keeps the rest
    assert long_["GlueCEAccessControlBaseRule"] == ["VO:atlas"]
    view = by_id["ce01.example:8443/cream-pbs-long/dteam"]
    assert view["GlueCEAccessControlBaseRule"] == ["VO:dteam"]
    assert view["GlueCEStateWaitingJobs"] == 1 and view["GlueCEStateRunningJobs"] == 5
    assert view["GlueCEUniqueID"] == "ce01.example:8443/cream-pbs-long"
    assert view["GlueCEInfoTotalCPUs"] == 64  # not in the view: from the CE
    assert view["GlueVOViewLocalID"] == "dteam"
    short = by_id["ce01.example:8443/cream-pbs-short"]
    assert short["GlueCEStateStatus"] == "Draining" and short["CloseStorageElements"] == []
    assert vos_of(short) == ["dteam"]


def test_real_fixtures_are_reported_not_fatal():
    ads, rejected = _ads((DATA / "glue13_site2_cache.ldif").read_text(), "site2.ldif")
    assert ads == []
    assert [(r.dn, r.line) for r in rejected] == [
        ("GlueCEUniqueID=cream.cern.ch,Mds-Vo-name=resource,o=grid", 11)]
    assert "GlueCluster" in rejected[0].reason and str(rejected[0]).startswith("site2.ldif:11: ")
    ads, rejected = _ads((DATA / "glue13_subcluster_specint_vs_hepspec.ldif").read_text())
    assert ads == [] and "unknown GlueCluster 'host.invalid'" in rejected[0].reason
    ads, rejected = _ads((DATA / "glue2_service_endpoint_policy.ldif").read_text())
    assert ads == [] and rejected == []


SITE = (DATA / "synthetic_site.ldif").read_text()


def _replace(text, old, new):
    assert old in text
    return text.replace(old, new)


def test_cluster_without_subcluster_is_skipped_with_a_reason():
    cut = SITE.index("dn: GlueSubClusterUniqueID=ce01.example")
    end = SITE.index("\n\n", cut)
    ads, rejected = _ads(SITE[:cut] + SITE[end + 2:])
    assert ads == []
    assert len(rejected) == 2 and all("no GlueSubCluster" in r.reason for r in rejected)


def test_bad_integer_rejects_only_that_ce():
    text = _replace(SITE, "GlueCEStateWaitingJobs: 0\n", "GlueCEStateWaitingJobs: lots\n")
    ads, rejected = _ads(text)
    assert {a[AD_ID] for a in ads} == {"ce01.example:8443/cream-pbs-long",
                                       "ce01.example:8443/cream-pbs-long/dteam"}
    assert len(rejected) == 1 and "GlueCEStateWaitingJobs" in rejected[0].reason
    assert "cream-pbs-short" in rejected[0].dn


def test_negative_count_and_duplicate_id_rejected():
    text = _replace(SITE, "GlueCEStateRunningJobs: 8\n", "GlueCEStateRunningJobs: -3\n")
    ads, rejected = _ads(text)
    assert "negative" in rejected[0].reason
    short_start = SITE.index("dn: GlueCEUniqueID=ce01.example:8443/cream-pbs-short")
    short = SITE[short_start:SITE.index("\n\n", short_start)]
    dup = short.replace("Mds-Vo-name=EXAMPLE-SITE,", "Mds-Vo-name=OTHER,")
    ads, rejected = _ads(SITE + "\n" + dup + "\n")
    assert len(ads) == 3 and "duplicate GlueCEUniqueID" in rejected[0].reason


def test_gip_output_round_trips_through_the_ism_assembly():
    st_ = CEState(ce_id="ce1.vgrid.local:8443/vgrid-vwn-long", host="ce1.vgrid.local",
                  site="VGRID", queue="long", total_cpus=8, free_cpus=3, running=5, waiting=7,
                  ert_s=95, max_wallclock_s=7260, si00=1500, ram_mb=2048, vos=["dteam", "vgrid"],
                  os_name="Debian", arch="x86_64", software=["VO-vgrid-sw"])
    ads, rejected = glue13_ce_ads(parse_ldif(render_glue13(st_)))
    assert rejected == [] and len(ads) == 1
    ad = ads[0]
    assert ad["GlueCEUniqueID"] == st_.ce_id and ad[AD_ID] == st_.ce_id
    assert ad["GlueCEStateRunningJobs"] == 5 and ad["GlueCEStateWaitingJobs"] == 7
    assert ad["GlueCEStateTotalJobs"] == 12 and ad["GlueCEStateFreeCPUs"] == 3
    assert ad["GlueCEStateEstimatedResponseTime"] == 95
    assert ad["GlueCEPolicyMaxWallClockTime"] == 121  # minutes, 7260 s // 60
    assert ad["GlueHostBenchmarkSI00"] == 1500 and ad["GlueHostMainMemoryRAMSize"] == 2048
    assert ad["GlueCEAccessControlBaseRule"] == ["VO:dteam", "VO:vgrid"]
    assert ad["GlueCEInfoGatekeeperPort"] == "8443" and ad["GlueSiteUniqueID"] == "VGRID"
    assert ad["GlueHostOperatingSystemName"] == "Debian"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["drop", "dup", "junk", "neg", "keep"]), min_size=0, max_size=6))
def test_any_mutation_of_a_site_never_raises(ops):
    blocks = SITE.split("\n\n")
    for i, op in enumerate(ops):
        j = (i * 3) % len(blocks)
        if op == "drop":
            blocks.pop(j)
        elif op == "dup":
            blocks.append(blocks[j])
        elif op == "junk":
            blocks[j] = blocks[j].replace(": 1\n", ": x\n", 1)
        elif op == "neg":
            blocks[j] = blocks[j].replace("Jobs: ", "Jobs: -", 1)
    ads, rejected = _ads("\n\n".join(blocks))
    ids = [a[AD_ID] for a in ads]
    assert len(ids) == len(set(ids))
    for a in ads:
        assert isinstance(a["GlueCEUniqueID"], str)
        assert all(not isinstance(a.get(k), int) or a[k] >= 0 for k in ("GlueCEStateWaitingJobs",))


def test_rejected_as_dict():
    _, rejected = _ads((DATA / "glue13_site2_cache.ldif").read_text(), "s.ldif")
    d = rejected[0].as_dict()
    assert d["source"] == "s.ldif" and d["line"] == 11 and "reason" in d


@pytest.mark.parametrize("rules, vos", [(["VO:dteam", "VOMS:/atlas/Role=prod", "DENY:x"],
                                         ["dteam", "atlas"]), ([], [])])
def test_vos_of(rules, vos):
    assert vos_of({"GlueCEAccessControlBaseRule": rules}) == vos


def test_gip_ads_equal_the_ads_parsed_from_the_gip_ldif():
    # The grid simulator publishes through glue13_ads / glue13_ads_update: the same ads (values,
    # types, key order) as an ISM source parsing the CE's GET /glue text.
    state = CEState(ce_id="ce.example.org:8443/vgrid-pbs-lcg", host="ce.example.org", site="EX",
                    queue="lcg", lrms_type="pbs", total_cpus=8, free_cpus=8, si00=1800,
                    vos=["vgrid"])
    first = glue13_ads(state)
    assert first == glue13_ce_ads(parse_ldif(render_glue13(state)))[0]
    state.running, state.waiting, state.free_cpus, state.ert_s = 8, 5, 0, 600
    parsed = glue13_ce_ads(parse_ldif(render_glue13(state)))[0]
    updated = glue13_ads_update(first, state)
    assert updated == parsed and [list(a) for a in updated] == [list(a) for a in parsed]
    assert first[0]["GlueCEStateWaitingJobs"] == 0  # the old ads are not touched
