"""Against a real BDII (slapd + Debian glue-schema): loading, GLUE 1.3/2.0 assembly from LDAP,
update by difference, staleness while slapd is down, recovery, expiry, feedback counters."""
import threading
from pathlib import Path

import pytest

from infosys.bdii import bdii_status, pid_alive, start_bdii, stop_bdii
from infosys.bdii_update import update_bdii
from vgrid_runtime.clock import SimulatedClock
from infosys.feedback import FeedbackCounters
from infosys.gip import CEState, glue2_entries, glue13_entries, render_glue13, render_glue2
from infosys.glue import AD_ID
from infosys.ism import DISPATCHED, ISM, BdiiSource
from infosys.ldapclient import connect, search_entries
from infosys.ldif import parse_ldif
from tests.slapd_fixture import bdii  # noqa: F401  (fixture)
from tests.paths import SHARED_LDIF

DATA = SHARED_LDIF

LONG = "ce01.example:8443/cream-pbs-long"


def fixtures():
    out = []
    for p in sorted(DATA.glob("*.ldif")):
        out += parse_ldif(p.read_text(encoding="utf-8"), p.name)
    return out


def vgrid_ce(n, waiting=0, status="Production"):
    return CEState(ce_id=f"ce{n}.vgrid.local:8443/vgrid-vwn-long", host=f"ce{n}.vgrid.local",
                   site="VGRID", queue="long", status=status, total_cpus=4, free_cpus=1,
                   running=3, waiting=waiting, ert_s=300, max_wallclock_s=7200, si00=1500,
                   ram_mb=2048, vos=["vgrid", "dteam"], os_name="Debian", os_release="12",
                   arch="x86_64", software=["VO-vgrid-python3"])


def test_start_stop_by_pid_and_restart_keeps_data(bdii, tmp_path):
    d = Path(bdii.dir)
    assert bdii_status(d) == bdii and (d / "slapd.conf").exists()
    assert start_bdii(d) == bdii  # already running: the same server
    update_bdii(bdii.url, glue13_entries(vgrid_ce(1)))
    assert stop_bdii(d) is True
    assert not pid_alive(bdii.pid)
    assert bdii_status(d) is None and stop_bdii(d) is False
    again = start_bdii(d, port=bdii.port)
    assert again.pid != bdii.pid and again.url == bdii.url
    assert [a[AD_ID] for a in BdiiSource(again.url).fetch()] == [vgrid_ce(1).ce_id]


@pytest.mark.parametrize("client", ["ldap3", "ldapmodify"])
def test_real_fixtures_load_and_refused_entries_are_reported(bdii, client):
    report = update_bdii(bdii.url, fixtures(), client=client)
    assert report.added > 20
    refused = {(r.source, r.line): r.reason for r in report.rejected}
    reason = refused[("glue13_subcluster_specint_vs_hepspec.ldif", 5)].lower().replace(" ", "")
    assert "namingviolation" in reason
    assert "GLUE2EndpointInterfaceVersion" in refused[("glue2_service_endpoint_policy.ldif", 23)]
    # children of the refused endpoint cannot be added either, and say why
    assert sum("was refused" in r for r in refused.values()) == 4
    src = BdiiSource(bdii.url)
    snap = ISM([src], refresh_s=240, clock=SimulatedClock()).refresh(0)
    assert [a[AD_ID] for a in snap.ads] == [LONG, LONG + "/dteam",
                                            "ce01.example:8443/cream-pbs-short"]
    assert [r.dn.split(",")[0] for r in snap.rejected] == ["GlueCEUniqueID=cream.cern.ch"]
    ad = snap.ads[0]
    # typed from the server's own schema
    assert ad["GlueCEStateWaitingJobs"] == 10 and ad["GlueHostBenchmarkSI00"] == 2500
    assert ad["GlueCEAccessControlBaseRule"] == ["VO:atlas"]
    assert ad["CloseStorageElements"] == [{"name": "se01.example", "mount": "/storage"}]
    assert src.types.get("GlueCEStateRunningJobs").kind == "integer"


def test_paged_search_returns_every_entry(bdii):
    update_bdii(bdii.url, [e for i in range(12) for e in glue13_entries(vgrid_ce(i))])
    conn = connect(bdii.url)
    try:
        small = search_entries(conn, "o=grid", "(objectClass=GlueCE)", page_size=5)
    finally:
        conn.unbind()
    assert len(small) == 12
    assert len(BdiiSource(bdii.url, page_size=5).fetch()) == 12


def test_gip_glue13_and_glue2_are_schema_valid_and_convert_units(bdii):
    st = vgrid_ce(7, waiting=4)
    report = update_bdii(bdii.url, parse_ldif(render_glue13(st)) + parse_ldif(render_glue2(st)))
    assert report.rejected == [] and report.added == len(glue13_entries(st)) + len(glue2_entries(st))
    a13 = BdiiSource(bdii.url, glue="1.3").fetch()[0]
    a2 = BdiiSource(bdii.url, glue="2.0").fetch()[0]
    assert a13[AD_ID] == a2[AD_ID] == st.ce_id
    assert a13["GlueCEPolicyMaxWallClockTime"] == 120 == a2["GlueCEPolicyMaxWallClockTime"]
    assert a2["GLUE2ComputingShareMaxWallTime"] == 7200  # seconds in GLUE 2.0
    for name in ("GlueCEStateWaitingJobs", "GlueCEStateRunningJobs", "GlueCEStateTotalJobs",
                 "GlueCEStateFreeCPUs", "GlueCEStateEstimatedResponseTime", "GlueCEInfoTotalCPUs",
                 "GlueHostBenchmarkSI00", "GlueHostMainMemoryRAMSize", "GlueCEStateStatus",
                 "GlueCEAccessControlBaseRule", "GlueHostArchitecturePlatformType",
                 "GlueHostApplicationSoftwareRunTimeEnvironment", "GlueSiteUniqueID"):
        assert a2[name] == a13[name], name
    # "both": one ad per CE (GLUE 1.3 preferred)
    assert len(BdiiSource(bdii.url).fetch()) == 1


@pytest.mark.parametrize("client", ["ldap3", "ldapmodify"])
def test_update_by_difference(bdii, client):
    a, b = vgrid_ce(1, waiting=1), vgrid_ce(2, waiting=2)
    calls = []
    first = update_bdii(bdii.url, glue13_entries(a) + glue13_entries(b), client=client,
                        progress=lambda done, total: calls.append((done, total)))
    assert calls[-1][0] == calls[-1][1] >= 7
    assert first.added == 7 and first.modified == 0 and first.deleted == 0  # 3 + 3 + site MDS
    a.waiting = 9
    b.vos = ["vgrid"]   # a dropped value
    b.software = []      # a dropped attribute
    second = update_bdii(bdii.url, glue13_entries(a) + glue13_entries(b), client=client)
    assert (second.added, second.modified, second.deleted, second.unchanged) == (0, 3, 0, 8)
    ads = {x[AD_ID]: x for x in BdiiSource(bdii.url).fetch()}
    assert ads[b.ce_id]["GlueCEAccessControlBaseRule"] == ["VO:vgrid"]
    assert "GlueHostApplicationSoftwareRunTimeEnvironment" not in ads[b.ce_id]
    third = update_bdii(bdii.url, glue13_entries(a), client=client)
    assert third.deleted == 3 and third.added == 0
    ads = BdiiSource(bdii.url).fetch()
    assert [(x[AD_ID], x["GlueCEStateWaitingJobs"]) for x in ads] == [(a.ce_id, 9)]


def test_stale_while_slapd_is_down_then_recovers_and_expires(bdii):
    update_bdii(bdii.url, glue13_entries(vgrid_ce(1, waiting=2)))
    clock = SimulatedClock(0)
    ism = ISM([BdiiSource(bdii.url, timeout_s=1, retries=0)], refresh_s=240, clock=clock,
              timeout_s=60)
    assert not ism.refresh().stale
    stop_bdii(bdii.dir)
    clock.advance(240)
    snap = ism.refresh()
    assert snap.stale and bdii.url in snap.errors[0] and snap.age(clock.now()) == 240
    assert [v.key for v in ism.candidates()] == [vgrid_ce(1).ce_id]  # last snapshot serves
    clock.advance(61)  # past refresh + timeout since the last answer
    assert ism.candidates() == ()
    restarted = start_bdii(bdii.dir, port=bdii.port)
    update_bdii(restarted.url, glue13_entries(vgrid_ce(1, waiting=5)))
    snap = ism.refresh()
    assert not snap.stale and snap.age(clock.now()) == 0
    assert [v["GlueCEStateWaitingJobs"] for v in ism.candidates()] == [5]


def test_blacklist_with_a_bdii(bdii):
    update_bdii(bdii.url, glue13_entries(vgrid_ce(1)) + glue13_entries(vgrid_ce(2)))
    ism = ISM([BdiiSource(bdii.url)], refresh_s=240, clock=SimulatedClock())
    ism.refresh()
    ism.blacklist(vgrid_ce(1).ce_id)
    assert [v.key for v in ism.candidates()] == [vgrid_ce(2).ce_id]


def test_counters_between_refreshes_under_concurrent_dispatch(bdii):
    update_bdii(bdii.url, glue13_entries(vgrid_ce(1)))

    class Recording(FeedbackCounters):
        def __init__(self):
            super().__init__()
            self.removed = 0

        def subtract(self, mark):
            self.removed += sum(mark.values())
            super().subtract(mark)

    fc = Recording()
    ism = ISM([BdiiSource(bdii.url)], refresh_s=240, clock=SimulatedClock(), feedback=fc)
    ism.refresh()
    ce = vgrid_ce(1).ce_id
    stop = threading.Event()
    done = [0] * 4

    def dispatch(i):
        while not stop.is_set():
            view = ism.candidates()[0]
            assert view[DISPATCHED] >= 0
            fc.increment(view.key)
            done[i] += 1

    threads = [threading.Thread(target=dispatch, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    while sum(done) < 100:
        threading.Event().wait(0.001)
    for _ in range(5):  # refreshes while the matchmaking threads dispatch
        ism.refresh()
    stop.set()
    for t in threads:
        t.join()
    assert fc.removed >= 100
    assert fc.removed + fc.get(ce) == sum(done)
    ism.refresh()
    assert fc.get(ce) == 0


def test_ldap3_and_ldapsearch_clients_give_the_same_ads(bdii):
    from infosys.ldapclient import ldapsearch_available
    if not ldapsearch_available():
        pytest.skip("ldapsearch not installed (apt-get install -y ldap-utils)")
    entries = fixtures() + [e for i in range(3) for e in glue13_entries(vgrid_ce(i))]
    entries += glue2_entries(vgrid_ce(9))
    update_bdii(bdii.url, entries)
    a = BdiiSource(bdii.url, client="ldap3", page_size=4)
    b = BdiiSource(bdii.url, client="ldapsearch", page_size=4)
    ads_a, ads_b = a.fetch(), b.fetch()
    assert len(ads_a) == 7 and ads_a == ads_b
    assert [str(r) for r in a.rejected] == [str(r) for r in b.rejected]


def test_feeder_keeps_a_failed_providers_last_output(bdii):
    from infosys.providers import BdiiFeeder
    from tests.test_infosys_ism import GipServer
    gip = GipServer(vgrid_ce(4, waiting=3))
    try:
        feeder = BdiiFeeder(bdii.url, [gip.url, str(DATA / "synthetic_site.ldif")], interval_s=60)
        report, errors = feeder.run_once()
        assert errors == [] and report.rejected == []
        ids = {a[AD_ID] for a in BdiiSource(bdii.url).fetch()}
        assert vgrid_ce(4).ce_id in ids and LONG in ids
        gip.close()
        report, errors = feeder.run_once()
        assert len(errors) == 1 and "/glue" in errors[0]
        assert report.deleted == 0 and vgrid_ce(4).ce_id in {
            a[AD_ID] for a in BdiiSource(bdii.url).fetch()}
        stop_bdii(bdii.dir)
        report, errors = feeder.run_once()
        assert report is None and any("cannot connect" in e for e in errors)
    finally:
        gip.close()


def test_start_errors_are_clear_and_leave_nothing_running(bdii, tmp_path):
    from infosys.bdii import BdiiError
    with pytest.raises(BdiiError, match="slapd failed to start|did not answer"):
        start_bdii(tmp_path / "other", port=bdii.port)  # the port is taken
    assert bdii_status(tmp_path / "other") is None
    with pytest.raises(BdiiError, match="apt-get install"):
        start_bdii(tmp_path / "third", schema_dir=tmp_path / "no-schemas")


@pytest.mark.parametrize("client", ["ldap3", "ldapmodify"])
def test_object_class_change_is_a_delete_and_add(bdii, client):
    ce = vgrid_ce(1)
    update_bdii(bdii.url, glue13_entries(ce), client=client)
    ce.vos = []  # no rule left: the GlueCE loses its GlueCEAccessControlBase class
    report = update_bdii(bdii.url, glue13_entries(ce), client=client)
    assert (report.added, report.modified, report.deleted, report.rejected) == (0, 1, 0, [])
    conn = connect(bdii.url)
    try:
        [e] = search_entries(conn, "o=grid", "(objectClass=GlueCE)")
    finally:
        conn.unbind()
    assert "GlueCEAccessControlBase" not in e.attrs["objectClass"]
    assert "GlueCEAccessControlBaseRule" not in e.attrs
