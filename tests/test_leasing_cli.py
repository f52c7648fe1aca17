"""``vgrid simulate`` through click's CliRunner: JSON shape, outputs, exit codes."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from vgrid_cli.simulate_cmds import simulate_cmd

from .paths import TRACES

TESTS = TRACES / "lwf/haizea-tests"
LEASE_KEYS = {"id", "type", "state", "submit_s", "requested_start_s", "start_s", "end_s", "nodes", "wait_s",
              "suspensions", "transfers", "mb_transferred", "origin", "request_type", "deadline_s", "preemptions",
              "overhead_s", "segments", "slowdown", "reject_reason"}
METRIC_KEYS = {"all_best_effort_s", "mean_wait_s", "mean_bounded_slowdown", "utilization", "ar_accepted",
               "ar_rejected", "ar_client_satisfaction", "mb_transferred", "peak_disk_mb_per_node",
               "local_rejection_rate", "external_rejection_rate", "utilization_eq11", "preemptions",
               "preemption_overhead_s", "makespan_external_s", "last_end_s"}

TRACE = """<lease-workload name="x"><lease-requests>
<lease-request arrival="00:00:00"><lease id="1" preemptible="true">
 <nodes><node-set numnodes="1"><res amount="100" type="CPU"/><res amount="1024" type="Memory"/></node-set></nodes>
 <start/><duration time="01:00:00"/><software><disk-image id="a.img" size="1024"/></software></lease></lease-request>
<lease-request arrival="00:15:00"><lease id="2" preemptible="false">
 <nodes><node-set numnodes="2"><res amount="100" type="CPU"/><res amount="1024" type="Memory"/></node-set></nodes>
 <start><exact time="00:30:00"/></start><duration time="00:30:00"/>
 <software><disk-image id="b.img" size="1024"/></software></lease></lease-request>
</lease-requests></lease-workload>"""


@pytest.fixture
def trace(tmp_path):
    p = tmp_path / "x.lwf"
    p.write_text(TRACE)
    return p


def test_json_has_exactly_the_issue_shape(trace, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[general]\nlease-preparation = "imagetransfer"\n[scheduling]\nsuspend-rate = 32\n')
    r = CliRunner().invoke(simulate_cmd, [str(trace), "--nodes", "2", "--config", str(cfg), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert set(data) == {"leases", "metrics"}
    assert set(data["metrics"]) == METRIC_KEYS
    assert all(set(rec) == LEASE_KEYS for rec in data["leases"])
    be, ar = sorted(data["leases"], key=lambda r: r["id"])
    assert ar["type"] == "AR" and ar["start_s"] == 1800 and ar["requested_start_s"] == 1800
    assert be["type"] == "BE" and be["suspensions"] == 1 and be["transfers"] == 1
    assert data["metrics"]["ar_accepted"] == 1 and data["metrics"]["ar_client_satisfaction"] == 1.0
    assert set(data["metrics"]["peak_disk_mb_per_node"]) == {"P1", "P2"}


def test_out_dir_writes_csv_and_plots(trace, tmp_path):
    out = tmp_path / "out"
    cfg = tmp_path / "c.toml"
    cfg.write_text('[general]\nlease-preparation = "imagetransfer"\n')
    r = CliRunner().invoke(simulate_cmd, [str(trace), "--nodes", "2", "--config", str(cfg), "--out", str(out)])
    assert r.exit_code == 0, r.output
    names = {p.name for p in out.iterdir()}
    assert {"leases.csv", "utilization.png", "gantt.png", "disk.png", "utilization.csv", "disk.csv"} <= names
    rows = (out / "leases.csv").read_text().splitlines()
    assert rows[0].startswith("id,type,state") and len(rows) == 3
    assert (out / "gantt.png").read_bytes()[:4] == b"\x89PNG"
    assert "Metrics" in r.output


def test_embedded_site_and_injection(tmp_path):
    inj = tmp_path / "inj.lwf"
    inj.write_text("0 1800 600 600 2 1 1024 0 z.img 100\n")
    r = CliRunner().invoke(simulate_cmd, [str(TESTS / "reservation.lwf"), "--inject-ar", str(inj), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert len(data["leases"]) == 3 and data["metrics"]["ar_accepted"] == 1
    assert {rec["id"] for rec in data["leases"]} == {1, 2, 3}


def test_input_errors_exit_2_without_traceback(trace, tmp_path):
    runner = CliRunner()
    r = runner.invoke(simulate_cmd, [str(trace)])
    assert r.exit_code == 2 and "has no <site>" in r.output and "Traceback" not in r.output
    bad = tmp_path / "bad.lwf"
    bad.write_text(TRACE.replace('time="01:00:00"', 'time="one hour"'))
    r = runner.invoke(simulate_cmd, [str(bad), "--nodes", "2"])
    assert r.exit_code == 2 and f"{bad}:4:" in r.output
    cfg = tmp_path / "c.toml"
    cfg.write_text('[scheduling]\nbackfilling = "maybe"\n')
    r = runner.invoke(simulate_cmd, [str(trace), "--nodes", "2", "--config", str(cfg)])
    assert r.exit_code == 2 and "backfilling" in r.output
    r = runner.invoke(simulate_cmd, [str(tmp_path / "missing.lwf"), "--nodes", "2"])
    assert r.exit_code == 2 and "cannot read" in r.output
    r = runner.invoke(simulate_cmd, [str(trace), "--nodes", "2", "--site", str(trace)])
    assert r.exit_code == 2


def test_per_lease_segments_slowdown_and_rejection_reason(tmp_path):
    res = CliRunner().invoke(simulate_cmd, [str(TESTS / "preemption.lwf"), "--json", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    leases = {l["id"]: l for l in json.loads(res.output)["leases"]}
    suspended = [l for l in leases.values() if l["suspensions"]]
    assert suspended, "preemption.lwf suspends a best-effort lease"
    for l in suspended:      # one segment before the suspension and one after the resumption
        segs = l["segments"]
        assert len(segs) == l["suspensions"] + 1 and segs[0]["start_s"] == l["start_s"]
        assert segs[-1]["end_s"] == l["end_s"] and all(a["end_s"] <= b["start_s"] for a, b in zip(segs, segs[1:]))
        assert l["slowdown"] > 1.0
    assert all(l["reject_reason"] is None for l in leases.values() if l["state"] != "Rejected")
    rows = (tmp_path / "leases.csv").read_text().splitlines()
    assert rows[0].endswith("slowdown,reject_reason,segments") and "@P" in rows[1] + rows[2]
