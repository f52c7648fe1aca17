"""``vgrid report hpdc08`` (issue 16) on a reduced input: the first 300 requests of the 30-day
Blue trace and the 10 % / 3 h / medium AR set's first reservations; the page's Table 1 cells
are the engine's own numbers (checked against direct simulations), next to the paper's, with
the difference in percentage points; ``vgrid report --list``."""
import re

from click.testing import CliRunner

from vgrid_cli.report_cmds import report_cmd
from vwn_agents.leasing import hpdc08
from vwn_agents.leasing.sweepspec import load_spec, run_simulation

from .test_sweep_runner import ARS, write_spec


def test_report_list_names_every_report():
    r = CliRunner().invoke(report_cmd, ["--list"])
    assert r.exit_code == 0
    assert [line.split()[0] for line in r.output.splitlines()] == ["sfete", "sfete-table1", "seed000", "hpdc08", "federation"]
    r = CliRunner().invoke(report_cmd, ["nope"])
    assert r.exit_code == 2 and "unknown report 'nope'" in r.output


def test_hpdc08_report_on_a_reduced_input(tmp_path):
    spec = write_spec(tmp_path, grid=ARS + 'configurations = ["NOVM-NOSR", "NOVM-SR"]')
    docs = tmp_path / "docs"
    r = CliRunner().invoke(report_cmd, ["hpdc08", "--spec", str(spec), "--store", str(tmp_path / "s.sqlite"),
                                        "--docs", str(docs), "--workers", "2"])
    assert r.exit_code == 0, r.output
    page = (docs / "hpdc08.md").read_text()
    table1 = page[page.index("## Table 1"):page.index("## Against Haizea")]
    direct = {(run.configuration, run.labels["inject"]): run_simulation(run)["all_best_effort_s"]
              for run in load_spec(spec).runs}
    base = direct[("NOVM-NOSR", "none")]
    for i, conf in enumerate(("NOVM-NOSR", "NOVM-SR")):
        ours = 100 * (direct[(conf, "work_10-dur_3h-size_2medium")] / base - 1)
        paper = hpdc08.PAPER_TABLE1[conf][0]
        row = re.search(rf"^\| {conf} \| (.*) \|$", table1, re.M).group(1).split(" | ")
        assert row[:3] == [f"{ours:+.2f}", f"{paper:+.2f}", f"{ours - paper:+.2f}"]
        p20, p30 = hpdc08.PAPER_TABLE1[conf][1:]          # rho 20 and 30 % were not in the input
        assert row[3:] == ["-", f"{p20:+.2f}", "-", "-", f"{p30:+.2f}", "-"]
    assert re.search(r"^\| VM-MULT \| - \| \+0\.60 \| - \|", table1, re.M)
    nosr_haizea = re.search(r"^\| NOVM-NOSR rho 10 %.*$", page, re.M).group(0)
    assert f"| {hpdc08.HAIZEA_TABLE1[('NOVM-NOSR', 10)]:+.2f} |" in nosr_haizea
    assert f"{100 * (direct[('NOVM-SR', 'none')] / base - 1):+.2f}" in page      # the SR baseline row
    for png in ("besteffort_by_duration", "besteffort_by_size", "acceptance_by_duration", "acceptance_by_size"):
        assert (docs / f"hpdc08_{png}.png").read_bytes()[:4] == b"\x89PNG"
        assert f"(hpdc08_{png}.png)" in page
    assert "4 of 4 runs present" in page and "2 of 2 runs" not in page
