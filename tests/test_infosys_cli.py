"""vgrid bdii / info / gip (click CliRunner) against real parts: slapd, a loopback GIP server."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from vgrid_cli.infosys_cmds import bdii_group, gip_cmd, info_cmd
from infosys.bdii import stop_bdii
from infosys.ldif import parse_ldif
from tests.slapd_fixture import bdii, slapd_missing  # noqa: F401  (fixture)
from tests.test_infosys_ism import GipServer, state
from tests.paths import SHARED_LDIF

DATA = SHARED_LDIF
SITE = str(DATA / "synthetic_site.ldif")


def run(cmd, args, input=None):
    return CliRunner().invoke(cmd, args, input=input, catch_exceptions=False)


def test_info_ldif_json_shape_and_vo_filter():
    r = run(info_cmd, ["--ldif", SITE, "--ldif", str(DATA / "glue13_site2_cache.ldif"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert set(doc) == {"stale", "age_s", "rejected", "ces"}
    assert doc["stale"] is False and doc["age_s"] == 0
    assert [c["id"] for c in doc["ces"]] == ["ce01.example:8443/cream-pbs-long",
                                             "ce01.example:8443/cream-pbs-long/dteam",
                                             "ce01.example:8443/cream-pbs-short"]
    assert set(doc["ces"][0]) == {"id", "status", "total_cpus", "free_cpus", "running",
                                  "waiting", "total_jobs", "ert_s", "si00", "vo", "acbr"}
    view = doc["ces"][1]
    assert (view["vo"], view["waiting"], view["acbr"], view["si00"]) == ("dteam", 1, ["VO:dteam"], 2500)
    assert len(doc["rejected"]) == 1 and doc["rejected"][0]["line"] == 11
    r = run(info_cmd, ["--ldif", SITE, "--vo", "atlas", "--json"])
    assert [c["id"] for c in json.loads(r.stdout)["ces"]] == ["ce01.example:8443/cream-pbs-long"]
    r = run(info_cmd, ["--ldif", SITE])
    assert r.exit_code == 0 and "cream-pbs-short" in r.stdout and "Draining" in r.stdout


def test_info_usage_and_input_errors(tmp_path):
    assert run(info_cmd, []).exit_code == 2
    assert run(info_cmd, ["--ldif", SITE, "--bdii", "ldap://127.0.0.1:1"]).exit_code == 2
    bad = tmp_path / "bad.ldif"
    bad.write_text("dn: o=grid\nno colon here\n")
    r = run(info_cmd, ["--ldif", str(bad)])
    assert r.exit_code == 2 and f"{bad}:2:" in r.stderr and "Traceback" not in r.output
    r = run(info_cmd, ["--bdii", "ldap://127.0.0.1:1", "--json"])
    assert r.exit_code == 1 and "cannot connect" in r.stderr
    assert json.loads(r.stdout)["ces"] == []


def test_bdii_start_update_info_stop(tmp_path):
    why = slapd_missing()
    if why:
        pytest.skip(why)
    d = tmp_path / "bdii"
    try:
        r = run(bdii_group, ["start", "--dir", str(d), "--json"])
        assert r.exit_code == 0, r.output
        url = json.loads(r.stdout)["url"]
        assert run(bdii_group, ["status", "--dir", str(d)]).stdout.startswith(url)
        r = run(bdii_group, ["update", "--bdii", url, "--from", SITE, "--from",
                             str(DATA / "glue2_service_endpoint_policy.ldif"), "--json"])
        assert r.exit_code == 0, r.output
        rep = json.loads(r.stdout)
        assert rep["added"] > 10 and len(rep["rejected"]) == 5  # the endpoint + its 4 children
        r = run(bdii_group, ["update", "--bdii", url, "--from", SITE])
        assert r.exit_code == 0 and "deleted 2" in r.stdout  # the GLUE2 test service + its group
        doc = json.loads(run(info_cmd, ["--bdii", url, "--json"]).stdout)
        assert len(doc["ces"]) == 3 and doc["stale"] is False
        r = run(bdii_group, ["update", "--bdii", url, "--from", str(tmp_path / "missing.ldif")])
        assert r.exit_code == 2 and "cannot read" in r.stderr
        r = run(bdii_group, ["stop", "--dir", str(d)])
        assert r.exit_code == 0
        assert run(bdii_group, ["stop", "--dir", str(d)]).exit_code == 1
        assert run(bdii_group, ["status", "--dir", str(d)]).exit_code == 1
        r = run(bdii_group, ["update", "--bdii", url, "--from", SITE])
        assert r.exit_code == 1 and "cannot connect" in r.stderr
    finally:
        stop_bdii(d)


@pytest.fixture
def gip_server():
    s = GipServer(state(3, waiting=6))
    yield s
    s.close()


def test_gip_prints_glue13_and_glue2(gip_server):
    r = run(gip_cmd, ["--ce", gip_server.url])
    assert r.exit_code == 0, r.output
    entries = parse_ldif(r.stdout)
    dns = [e.dn for e in entries]
    assert any(d.startswith("GlueCEUniqueID=ce3.vgrid.local") for d in dns)
    share = [e for e in entries if e.dn.startswith("GLUE2ShareID=")][0]
    assert share.first("GLUE2ComputingShareWaitingJobs") == "6"
    r = run(gip_cmd, ["--ce", gip_server.url, "--glue", "2.0"])
    assert "GlueCEUniqueID=" not in r.stdout and "GLUE2ShareID=" in r.stdout
    assert run(gip_cmd, ["--ce", "http://127.0.0.1:1"]).exit_code == 1


def test_bdii_update_from_a_ce_agent_publishes_glue13_and_glue2(bdii, gip_server):
    r = run(bdii_group, ["update", "--bdii", bdii.url, "--from", gip_server.url, "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["rejected"] == []
    from infosys.ism import BdiiSource
    a13 = BdiiSource(bdii.url, glue="1.3").fetch()
    a2 = BdiiSource(bdii.url, glue="2.0").fetch()
    assert [a["GlueCEStateWaitingJobs"] for a in a13] == [6] == [a["GlueCEStateWaitingJobs"] for a in a2]
    gip_server.state.waiting = 8
    r = run(bdii_group, ["update", "--bdii", bdii.url, "--from", gip_server.url])
    assert r.exit_code == 0 and "modified 2" in r.stdout  # the GlueCE and the GLUE2 share
    assert BdiiSource(bdii.url).fetch()[0]["GlueCEStateWaitingJobs"] == 8


def test_bdii_update_every_keeps_updating_until_interrupted(bdii, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from infosys.ism import BdiiSource
    site = tmp_path / "site.ldif"
    site.write_text(Path(SITE).read_text())
    proc = subprocess.Popen([sys.executable, "-m", "vgrid_cli", "bdii", "update", "--bdii",
                             bdii.url, "--from", str(site), "--every", "0.2", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(BdiiSource(bdii.url).fetch()) < 3:
            time.sleep(0.1)
        assert len(BdiiSource(bdii.url).fetch()) == 3
        site.write_text(Path(SITE).read_text().replace("GlueCEStateWaitingJobs: 10",
                                                       "GlueCEStateWaitingJobs: 77"))
        while time.monotonic() < deadline and BdiiSource(bdii.url).fetch()[0][
                "GlueCEStateWaitingJobs"] != 77:
            time.sleep(0.1)
        assert BdiiSource(bdii.url).fetch()[0]["GlueCEStateWaitingJobs"] == 77
    finally:
        proc.send_signal(signal.SIGINT)
        out, errs = proc.communicate(timeout=60)     # a deadline: it normally ends at once
    assert proc.returncode == 0 and "Traceback" not in errs
    reports = [json.loads(line) for line in out.splitlines()]
    assert reports[0]["report"]["added"] > 10 and any(r["report"]["modified"] for r in reports)


def test_info_glue2_view_of_the_same_site():
    r = run(info_cmd, ["--ldif", SITE, "--glue", "2.0", "--json"])
    assert r.exit_code == 0, r.output
    ces = json.loads(r.stdout)["ces"]
    assert [(c["id"], c["waiting"], c["acbr"]) for c in ces] == [
        ("ce01.example:8443/cream-pbs-long", 1, ["VO:dteam"])]
    both = json.loads(run(info_cmd, ["--ldif", SITE, "--json"]).stdout)["ces"]
    assert len(both) == 3  # the GLUE 2.0 share is the same CE as the GLUE 1.3 one
