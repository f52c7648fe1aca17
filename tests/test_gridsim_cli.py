"""``vgrid simulate-grid`` and ``vgrid report`` (issue 6), through click's CliRunner."""
import json

from click.testing import CliRunner

from vgrid_cli.gridsim_cmds import report_cmd, simulate_grid_cmd


def invoke(cmd, *args):
    return CliRunner().invoke(cmd, list(args), catch_exceptions=False)


def test_json_document_has_exactly_the_issue_keys():
    res = invoke(simulate_grid_cmd, "--workload", "poisson:rate=10,jobs=60", "--policy", "fuzzy",
                 "--feedback", "off", "--seed", "3", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert set(doc) == {"policy", "feedback", "metrics", "jobs_per_ce", "capacity_share"}
    assert set(doc["metrics"]) == {"mean_delay_s", "makespan_s", "mean_queue_s", "deadline_misses"}
    assert doc["policy"] == "fuzzy" and doc["feedback"] is False
    assert sum(doc["jobs_per_ce"].values()) == 60
    assert set(doc["jobs_per_ce"]) == set(doc["capacity_share"])
    assert doc["metrics"]["deadline_misses"] is None


def test_seed_reproducible_from_the_command_line():
    args = ("--workload", "poisson:rate=25,jobs=80", "--policy", "max", "--seed", "9", "--json")
    assert invoke(simulate_grid_cmd, *args).output == invoke(simulate_grid_cmd, *args).output


def test_vwns_deadlines_table_and_out_dir(tmp_path):
    out = tmp_path / "run"
    res = invoke(simulate_grid_cmd, "--workload", "poisson:rate=20,jobs=50,deadline_factor=2",
                 "--vwns", "3", "--vwn-overhead", "0.05", "--vwn-startup", "20", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "mean queue time at the CE" in res.output and "capacity share" in res.output
    doc = json.loads((out / "result.json").read_text())
    assert isinstance(doc["metrics"]["deadline_misses"], int)
    rows = (out / "jobs.csv").read_text().splitlines()
    assert len(rows) == 51
    assert (out / "distribution.png").read_bytes()[:4] == b"\x89PNG"


def test_toml_ces_and_swf_workload(tmp_path):
    spec = tmp_path / "ces.toml"
    spec.write_text('[[ce]]\nid = "a.site:8443/q"\ncpus = 2\nsi00 = 1000\n'
                    '[[ce]]\nid = "b.site:8443/q"\ncpus = 1\nsi00 = 500\n')
    swf = tmp_path / "t.swf"
    swf.write_text("; Partition: 1 alpha.org\n"
                   + "".join(f"{i} {i * 10} -1 {100 + i} 1 -1 -1 -1 600 -1 -1 1 1 -1 -1 1 -1 -1\n"
                             for i in range(1, 21)))
    res = invoke(simulate_grid_cmd, "--ces", str(spec), "--workload", f"swf:{swf}", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["capacity_share"] == {"a.site:8443/q": 0.8, "b.site:8443/q": 0.2}
    assert sum(doc["jobs_per_ce"].values()) == 20


def test_input_errors_exit_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[ce]]\nid = \"x\"\ncpus = 0\n")
    jdl_file = tmp_path / "bad.jdl"
    jdl_file.write_text("[ Executable = \"/bin/true\" Rank = 1; ]")
    cases = [(("--ces", str(bad)), "ce[0].cpus"),
             (("--ces", str(tmp_path / "missing.toml")), "cannot read"),
             (("--workload", "poisson:rate=abc"), "rate='abc'"),
             (("--workload", "gamma:1"), "unknown kind"),
             (("--vwns", "4", "--vwn-overhead", "0.5"), "leaves no capacity"),
             (("--vwns", "many"), "off"),
             (("--ism-refresh", "0"), "refresh"),
             (("--jdl", str(jdl_file)), "bad.jdl:1:")]
    for args, needle in cases:
        res = CliRunner().invoke(simulate_grid_cmd, list(args))
        assert res.exit_code == 2, (args, res.output)
        assert needle in res.output, (args, res.output)
        assert "Traceback" not in res.output


def test_report_writes_figures_and_exit_code_follows_checks(tmp_path):
    res = invoke(report_cmd, "--out", str(tmp_path), "--seeds", "1", "--jobs", "40",
                 "--rates", "5,20", "--ablation-refresh", "30,480", "--vwns", "2,8", "--json")
    doc = json.loads((tmp_path / "report.json").read_text())
    for name in ("fig8a_delay.png", "fig8b_makespan.png", "fig9_distribution.png",
                 "fig10_queue.png", "fig11_vwns.png", "ablation_refresh.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    assert len(doc["checks"]) == 6
    assert res.exit_code == (0 if all(c["passed"] for c in doc["checks"]) else 1)
    assert set(doc["series"]["sfete"]) == {"5.0", "20.0"}


def test_report_input_errors_exit_2(tmp_path):
    for args in (("--rates", ""), ("--rates", "5,x"), ("--vwns", "0"), ("--ces", "missing.toml")):
        res = CliRunner().invoke(report_cmd, ["--out", str(tmp_path), "--seeds", "1", "--jobs", "5",
                                              *args])
        assert res.exit_code == 2, (args, res.output)
        assert "Traceback" not in res.output
