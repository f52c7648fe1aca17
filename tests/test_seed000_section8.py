"""Seed 000 Section 8.3 (vwn_agents.leasing.seed000): the traces and the configurations' effects."""
import json
from collections import Counter

import pytest
from click.testing import CliRunner

from vwn_agents.leasing import seed000 as s
from vwn_agents.leasing.model import LeaseType

SHORT = s.TraceSpec(hours=(2.0, 2.1))     # a reduced input: 2 h of work instead of 10


@pytest.mark.parametrize("cell", [("long", "075-100", "25-75"), ("short", "000-025", "75-25"),
                                  ("medium", "050-075", "50-50")])
def test_traces_follow_section_8_3(cell):
    duration, ar_size, mix = cell
    leases = s.trace(*cell, seed=3)
    ars = [l for l in leases if l.type is LeaseType.ADVANCE_RESERVATION]
    bes = [l for l in leases if l.type is LeaseType.BEST_EFFORT]
    lo, hi = s.AR_SIZES[ar_size]
    assert ars and bes and all(lo <= l.n_vms <= hi and l.submit_s == 0.0 for l in ars)
    # the ARs fit the 16 VM slots at every instant (offline admission)
    edges = sorted({l.requested_start_s for l in ars} | {l.requested_start_s + l.duration_s for l in ars})
    for t in edges:
        assert sum(l.n_vms for l in ars if l.requested_start_s <= t < l.requested_start_s + l.duration_s) <= 16
    work = sum(l.n_vms * l.duration_s for l in leases)
    assert 0.98 * 10 * 3600 * 16 <= work <= 10.5 * 3600 * 16 * 1.05
    be_share = sum(l.n_vms * l.duration_s for l in bes) / work
    assert abs(be_share - s.MIXES[mix]) < 0.06
    mean = sum(l.duration_s for l in bes) / len(bes)
    assert abs(mean / s.DURATIONS[duration] - 1) < 0.15
    gaps = {round(b.submit_s - a.submit_s, 6) for a, b in zip(bes, bes[1:])}
    assert len(gaps) <= 2                                    # evenly spaced arrivals
    assert s.trace(*cell, seed=3)[5].duration_s == leases[5].duration_s    # deterministic


def test_images_are_skewed_seven_to_seventy_percent():
    counts = Counter(l.image_id for seed in range(4) for l in s.trace("short", "000-025", "75-25", seed))
    top7 = sum(n for img, n in counts.items() if int(img[3:]) <= 7) / sum(counts.values())
    assert 0.64 < top7 < 0.76 and len(counts) > 25


def test_reuse_recovers_what_prefetching_without_reuse_loses():
    cell = ("short", "000-025", "75-25")
    t = {c: s.run(*cell, c, seed=1, spec=SHORT) for c in ("predeploy", "prefetch", "reuse")}
    pre, nore, reuse = (t[c]["all_best_effort_s"] for c in ("predeploy", "prefetch", "reuse"))
    # Table 8.5's short rows: no reuse up to +97 %, reuse within a few per cent
    assert nore > 1.25 * pre and reuse < 1.12 * pre and reuse < nore
    assert t["predeploy"]["mb_transferred"] == 0 and t["reuse"]["mb_transferred"] < t["prefetch"]["mb_transferred"]
    assert all(r["ar_rejected"] == 0 for r in t.values())


def test_novm_never_suspends_and_vms_pay_their_overhead():
    cell = ("long", "000-025", "25-75")
    novm, vm = (s.run(*cell, c, seed=0, spec=SHORT) for c in ("novm", "predeploy"))
    assert novm["all_best_effort_s"] and vm["all_best_effort_s"]
    assert s.config("novm").suspension == "none" and s.config("predeploy").runtime_slowdown_overhead == 10.0


def test_report_command_writes_the_page(tmp_path, monkeypatch):
    from vgrid_cli.report_cmds import report_cmd
    monkeypatch.setattr(s, "TraceSpec", lambda: SHORT)
    monkeypatch.setattr(s.trace, "__defaults__", (0, SHORT))
    monkeypatch.setattr(s.run, "__defaults__", (0, SHORT))
    res = CliRunner().invoke(report_cmd, ["seed000", "--out", str(tmp_path), "--durations", "long",
                                          "--workers", "1"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    page = (tmp_path / "seed000.md").read_text()
    assert "| 8.3 VM predeployed / no VM |" in page and "seed000_ratios.png" in page
    doc = json.loads((tmp_path / "seed000_runs.json").read_text())
    assert len(doc["section_8_3"]) == 12 * 4 and len(doc["section_8_1"]) == 2 * 4 and len(doc["figure_8_4"]) == 2
    assert len(doc["section_4"]) == 2 and "| 4.1 | long 075-100 75-25 |" in page
    for png in ("seed000_ratios.png", "seed000_fig8_2_8_3.png", "seed000_fig8_4.png"):
        assert (tmp_path / png).stat().st_size > 10_000
    assert "| I | EDF (scheduled) |" in page and "| EDF-JIT |" in page
    assert page.index("## Section 8.2: image reuse") < page.index("## Section 8.3:")
    assert len(doc["section_8_2"]) > 4 and (tmp_path / "seed000_fig8_6_8_7.png").stat().st_size > 10_000
    # the numbers: each trace's row holds the mean all-best-effort time of its runs per configuration
    from vwn_agents.leasing.seed000 import CONFIGS
    for cell in {(r["duration"], r["ar_size"], r["mix"]) for r in doc["section_8_3"]}:
        times = [sum(v) / len(v) for v in ([r["all_best_effort_s"] for r in doc["section_8_3"]
                                            if (r["duration"], r["ar_size"], r["mix"]) == cell and r["config"] == c]
                                           for c in CONFIGS)]
        assert "| " + " | ".join(list(cell) + [f"{t:.0f}" for t in times]) + " |" in page, cell


def test_report_command_refuses_an_unknown_duration(tmp_path):
    from vgrid_cli.report_cmds import report_cmd
    res = CliRunner().invoke(report_cmd, ["seed000", "--out", str(tmp_path), "--durations", "tiny"])
    assert res.exit_code == 2 and "tiny" in res.output and "Traceback" not in res.output


def test_edf_satisfies_every_client_and_job_style_none():
    from vwn_agents.leasing import seed000_ar as a
    edf, job = (a.satisfaction("II", st, seed=0) for st in ("edf", "job-style"))
    assert edf["submitted"] >= 25 and edf["rejected"] == 0 and min(edf["satisfaction"]) == 1.0
    # job-style starts the transfer at the reservation's start: every client loses it
    assert max(job["satisfaction"]) < 1.0 and len(job["satisfaction"]) == edf["submitted"]


def test_edf_jit_holds_fewer_images_than_edf():
    from vwn_agents.leasing import seed000_ar as a
    edf, jit = a.disk_usage("edf"), a.disk_usage("edf-jit")
    assert jit["peak_mb"] * 4 <= edf["peak_mb"]      # Figure 8.4: 2.4 GB against 31.2 GB
