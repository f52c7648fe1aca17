"""``vgrid report hpdc08`` (issue 16) on a reduced input: the first 300 requests of the 30-day
Blue trace and the 10 % / 3 h / medium AR set's first reservations; the page's Table 1 cells
are the engine's own numbers (checked against direct simulations), next to the paper's, with
the difference in percentage points; ``vgrid report --list``."""
import re

import pytest
from click.testing import CliRunner

from vgrid_cli.report_cmds import report_cmd
from vwn_agents.leasing import hpdc08
from vwn_agents.leasing.sweepspec import load_spec, run_simulation
from vwn_agents.leasing.sweepstore import SweepStore

from .paths import REPO
from .test_sweep_runner import write_spec

REFERENCE = REPO / "examples/haizea" / hpdc08.HAIZEA_REFERENCE


def test_report_list_names_every_report():
    r = CliRunner().invoke(report_cmd, ["--list"])
    assert r.exit_code == 0
    assert [line.split()[0] for line in r.output.splitlines()] == ["sfete", "sfete-table1", "seed000", "hpdc08", "federation"]
    r = CliRunner().invoke(report_cmd, ["nope"])
    assert r.exit_code == 2 and "unknown report 'nope'" in r.output


COMPAT = """
[configurations."NOVM-NOSR.haizea".general]
compat = "haizea-1.1"
[configurations."NOVM-NOSR.haizea".scheduling]
suspension = "none"
[configurations."NOVM-SR.haizea".general]
compat = "haizea-1.1"
[configurations."NOVM-SR.haizea".scheduling]
suspension = "all"
suspend-rate = 50
resume-rate = 50
"""


def test_hpdc08_report_on_a_reduced_input(tmp_path):
    """Both engine modes' Table 1 rows are the direct simulations' numbers, each relative to its
    own mode's NOVM-NOSR baseline; Haizea 1.1's committed cells are shown and counted. Two specs
    are one sweep (as the bundled hpdc08.toml + hpdc08-table1.toml): the own-mode runs both name
    are run and stored once."""
    own = write_spec(tmp_path)
    spec = tmp_path / "table1.toml"
    spec.write_text(own.read_text().replace('configurations = ["NOVM-NOSR", "NOVM-SR"]', 'configurations = '
                                            '["NOVM-NOSR", "NOVM-SR", "NOVM-NOSR.haizea", "NOVM-SR.haizea"]') + COMPAT)
    docs = tmp_path / "docs"
    r = CliRunner().invoke(report_cmd, ["hpdc08", "--spec", str(own), "--spec", str(spec), "--store",
                                        str(tmp_path / "s.sqlite"), "--docs", str(docs), "--workers", "2"])
    assert r.exit_code == 0, r.output
    page = (docs / "hpdc08.md").read_text()
    table1 = page[page.index("## Table 1"):page.index("## Against Haizea")]
    direct = {(run.configuration, run.labels["inject"]): run_simulation(run)["all_best_effort_s"]
              for run in load_spec(spec).runs}
    haizea = hpdc08.read_haizea_reference(REFERENCE)
    hz10 = haizea[("NOVM-NOSR", 10)]["rel_pct"]
    counts = {}
    for label, sfx in hpdc08.MODES:
        base = direct[("NOVM-NOSR" + sfx, "none")]
        for conf in ("NOVM-NOSR", "NOVM-SR"):
            ours = 100 * (direct[(conf + sfx, "work_10-dur_3h-size_2medium")] / base - 1)
            paper = hpdc08.PAPER_TABLE1[conf][0]
            row = re.search(rf"^\| {conf} \| {label} \| (.*) \|$", table1, re.M).group(1).split(" | ")
            assert row[:3] == [f"{ours:+.2f}", f"{paper:+.2f}", f"{ours - paper:+.2f}"]
            p20, p30 = hpdc08.PAPER_TABLE1[conf][1:]          # rho 20 and 30 % were not in the input
            assert row[3:] == ["-", f"{p20:+.2f}", "-", "-", f"{p30:+.2f}", "-"]
            hz = haizea.get((conf, 10), {}).get("rel_pct")
            counts[label] = counts.get(label, 0) + (abs(ours - paper) <= 1 or (hz is not None and abs(ours - hz) <= 1))
        assert f"{100 * (direct[('NOVM-SR' + sfx, 'none')] / base - 1):+.2f}" in page      # the SR baseline rows
    assert f"| NOVM-NOSR | Haizea 1.1 | {hz10:+.2f} | +3.91 | {hz10 - 3.91:+.2f} |" in table1
    assert re.search(r"^\| VM-MULT \| vgrid \| - \| \+0\.60 \| - \|", table1, re.M)
    assert f"vgrid: {counts['vgrid']} of 2 computed cells; vgrid, Haizea-compatible: " \
           f"{counts['vgrid, Haizea-compatible']} of 2 computed cells" in table1
    nosr_haizea = re.search(r"^\| NOVM-NOSR rho 10 %.*$", page, re.M).group(0)
    assert f"| {hz10:+.2f} |" in nosr_haizea
    for png in ("besteffort_by_duration", "besteffort_by_size", "acceptance_by_duration", "acceptance_by_size"):
        assert (docs / f"hpdc08_{png}.png").read_bytes()[:4] == b"\x89PNG"
        assert f"(hpdc08_{png}.png)" in page
    assert f"from `{own}` + `{spec}` (8 of 8 runs present" in page
    # --prune keeps only the runs the given specs plan (here: the own-mode spec's 4 of 8)
    r = CliRunner().invoke(report_cmd, ["hpdc08", "--spec", str(own), "--store", str(tmp_path / "s.sqlite"),
                                        "--docs", str(docs), "--no-run", "--prune"])
    assert r.exit_code == 0, r.output
    assert "pruned 4 runs" in r.output
    assert {row["key"] for row in SweepStore(tmp_path / "s.sqlite").rows()} == {run.key() for run in load_spec(own).runs}


def test_haizea_reference_table_errors_name_file_line_and_field(tmp_path):
    ref = hpdc08.read_haizea_reference(REFERENCE)
    assert ref[("NOVM-NOSR", 0)]["all_best_effort_s"] == 2_668_402      # session 7, Haizea 1.1 nosr-noar
    bad = tmp_path / "h.csv"
    header = "configuration,rho,all_best_effort_s,rel_pct,ar_rejected,ar_total,cpu_s,conf,source\n"
    for text, match in [(header + "NOVM-NOSR,10,,x,,,,,me\n", r"h.csv:2: rel_pct: not a number"),
                        (header + "# note\nNOVM-NOPE,10,,1,,,,,me\n", r"h.csv:3: configuration: unknown 'NOVM-NOPE'"),
                        ("configuration,rho\n", r"h.csv:1: header must be"),
                        (header + "NOVM-NOSR,,,1,,,,,me\n", r"h.csv:2: rho: missing")]:
        bad.write_text(text)
        with pytest.raises(ValueError, match=match):
            hpdc08.read_haizea_reference(bad)
