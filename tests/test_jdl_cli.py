"""`vgrid jdl check|expand|eval` through click (the group the lead registers as `vgrid jdl`)."""
import json

from click.testing import CliRunner

from vgrid_cli.jdl_cmds import jdl_group

from .paths import SHARED_JDL as DATA  # noqa: E402
from .paths import SHARED_LDIF  # noqa: E402
LDIF = SHARED_LDIF / "synthetic_site.ldif"


def run(*args):
    return CliRunner().invoke(jdl_group, [str(a) for a in args])


def test_check_real_files_ok():
    r = run("check", *sorted(DATA.glob("*.jdl")))
    assert r.exit_code == 0, r.output
    assert "05_collection_fuzzyrank.jdl: ok (collection, 3 jobs)" in r.output


def test_check_json_shape_and_exit_1(tmp_path):
    bad = tmp_path / "bad.jdl"
    bad.write_text('[\n  Executable = "run.sh";\n  RetryCount = "x";\n]\n')
    r = run("check", "--json", DATA / "06_parametric_list.jdl", bad)
    assert r.exit_code == 1
    doc = json.loads(r.output)
    ok, wrong = doc["files"]
    assert ok == {"path": str(DATA / "06_parametric_list.jdl"), "ok": True, "jobs": 2, "errors": []}
    assert wrong["ok"] is False and wrong["jobs"] == 0
    assert [(e["line"], e["column"]) for e in wrong["errors"]] == [(2, 16), (3, 16)]


def test_check_syntax_error_shows_location_and_caret(tmp_path):
    bad = tmp_path / "job.jdl"
    bad.write_text('[\n  Executable = "/bin/ls";\n  StdOutput = "out"\n  Myproxyserver = "px";\n]\n')
    r = run("check", bad)
    assert r.exit_code == 1
    assert f"{bad}:4:3: expected ';' after attribute value, found 'Myproxyserver'" in r.output
    assert '  Myproxyserver = "px";\n  ^' in r.output
    assert "Traceback" not in r.output


def test_check_unreadable_file_is_exit_2(tmp_path):
    r = run("check", tmp_path / "missing.jdl")
    assert r.exit_code == 2 and "cannot read" in r.output


def test_expand_json():
    r = run("expand", DATA / "05_collection_fuzzyrank.jdl", "--json")
    assert r.exit_code == 0
    doc = json.loads(r.output)
    assert doc["kind"] == "collection" and [j["name"] for j in doc["jobs"]] == [
        "first", "second", "third"]
    r = run("expand", DATA / "06_parametric_list.jdl")
    assert r.exit_code == 0 and "Node_1" in r.output


def test_eval_against_classad_and_ldif(tmp_path):
    ce = tmp_path / "ce.ad"
    ce.write_text('[ GlueCEStateStatus = "Production"; GlueCEInfoTotalCPUs = 8; '
                  'GlueCEInfoLRMSType = "torque"; GlueCEStateEstimatedResponseTime = 42; '
                  'GlueHostApplicationSoftwareRunTimeEnvironment = {"MPICH"} ]')
    r = run("eval", DATA / "02_mpi_member_totalcpus.jdl", "--ce-ad", ce, "--json")
    assert r.exit_code == 0, r.output
    row = json.loads(r.output)["jobs"][0]
    assert row["matches"] is True and row["rank_value"] == -42
    ce.write_text('[ GlueCEStateStatus = "Draining"; GlueCEStateEstimatedResponseTime = 1 ]')
    r = run("eval", DATA / "01_hostname_nobrackets.jdl", "--ce-ad", ce, "--json")
    assert r.exit_code == 1 and json.loads(r.output)["jobs"][0]["matches"] is False
    r = run("eval", DATA / "01_hostname_nobrackets.jdl", "--ce-ad", LDIF)
    assert r.exit_code in (0, 1) and "Requirements" in r.output


def test_eval_bad_ce_ad_is_exit_2(tmp_path):
    ce = tmp_path / "ce.ad"
    ce.write_text("[ a = ]")
    r = run("eval", DATA / "01_hostname_nobrackets.jdl", "--ce-ad", ce)
    assert r.exit_code == 2 and "expected an expression" in r.output


def test_eval_against_json_ad_and_lone_ldif_entry(tmp_path):
    ce = tmp_path / "ce.json"
    ce.write_text(json.dumps({"GlueCEUniqueID": "ce9:8443/cream-pbs-q", "GlueCEStateStatus":
                              "Production", "GlueCEStateEstimatedResponseTime": 7}))
    r = run("eval", DATA / "01_hostname_nobrackets.jdl", "--ce-ad", ce, "--json")
    assert r.exit_code == 0 and json.loads(r.output)["ce"] == "ce9:8443/cream-pbs-q"
    ldif = tmp_path / "ce.ldif"
    ldif.write_text("dn: GlueCEUniqueID=ce9:8443/cream-pbs-q,mds-vo-name=resource,o=grid\n"
                    "objectClass: GlueCE\nGlueCEUniqueID: ce9:8443/cream-pbs-q\n"
                    "GlueCEStateStatus: Draining\nGlueCEStateEstimatedResponseTime: 5\n")
    r = run("eval", DATA / "01_hostname_nobrackets.jdl", "--ce-ad", ldif, "--json")
    row = json.loads(r.output)["jobs"][0]
    assert r.exit_code == 1 and row["matches"] is False and row["rank_value"] == -5


def test_eval_time_is_now_option_else_the_wall_clock(tmp_path):
    job = tmp_path / "job.jdl"
    job.write_text('Executable = "/bin/x"; Requirements = time() < 1000; Rank = time();\n')
    ce = tmp_path / "ce.json"
    ce.write_text(json.dumps({"GlueCEUniqueID": "ce9:8443/cream-pbs-q"}))
    r = run("eval", job, "--ce-ad", ce, "--now", "0", "--json")
    row = json.loads(r.output)["jobs"][0]
    assert r.exit_code == 0 and row["matches"] is True and row["rank_number"] == 0.0
    r = run("eval", job, "--ce-ad", ce, "--json")  # the wall clock: far past 1000
    row = json.loads(r.output)["jobs"][0]
    assert r.exit_code == 1 and row["matches"] is False and row["rank_number"] > 1.7e9
