"""Seed 002 Section 7.2 requests from a Lublin workload (requestmix.py), LWF/SWF text, and
``vgrid workload lublin``."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st
from lxml import etree

from vgrid_cli.workload_cmds import workload_group
from vwn_agents.leasing import lublin, requestmix
from vwn_agents.leasing.requesttypes import REQUEST_TYPE_NAMES
from vwn_agents.leasing.requestmix import (DEADLINE_NON_PREEMPTABLE, DEADLINE_TYPES, REQUEST_TYPES,
                                           assign_requests, local_count)
from vwn_agents.leasing.traces import read_trace

JOBS = lublin.LublinModel.adjusted(32, 3000, 14, 4, 7200).sample(3000, seed=2)


def test_request_type_names_are_the_agreed_strings():
    assert REQUEST_TYPES == ("cancellable", "suspendable", "migratable", "non-preemptable")
    assert REQUEST_TYPES == REQUEST_TYPE_NAMES           # the lease model's names, in seed 002's order


def test_section_7_2_default_split_and_mix():
    reqs = assign_requests(JOBS, seed=2, local=1000)
    assert len(reqs) == 3000 and sum(r.local for r in reqs) == 1000
    ext = [r for r in reqs if not r.local]
    assert {t: sum(r.request_type == t for r in ext) for t in REQUEST_TYPES} == dict.fromkeys(REQUEST_TYPES, 500)
    assert all(r.request_type == DEADLINE_NON_PREEMPTABLE and not r.preemptible for r in reqs if r.local)
    # local slack 0: the deadline is the arrival plus the duration (Table II's local request)
    assert all(r.deadline_s == r.ready_s + r.duration_s for r in reqs if r.local)
    assert [r.id for r in reqs] == list(range(1, 3001))
    assert [(r.ready_s, r.n_vms, r.duration_s) for r in reqs] == [(j.submit_s, j.size, j.runtime_s) for j in JOBS]


def test_local_count_forms():
    assert local_count(3000, 1000) == 1000
    assert local_count(3000, "30%") == 900
    assert local_count(3000, 0.7) == 2100
    assert local_count(3000, "1000") == 1000
    for bad in (3001, -1, "120%", 1.5, "many"):
        with pytest.raises(ValueError):
            local_count(3000, bad)


def test_bad_mix_and_slack_are_refused():
    with pytest.raises(ValueError, match="add up to 100"):
        assign_requests(JOBS, 1, type_mix={"cancellable": 50})
    with pytest.raises(ValueError, match="unknown request type"):
        assign_requests(JOBS, 1, type_mix={"spot": 100})
    with pytest.raises(ValueError):
        assign_requests(JOBS, 1, external_slack=(1.0, 0.5))


mixes = st.lists(st.integers(0, 100), min_size=3, max_size=3).filter(lambda v: sum(v) <= 100).map(
    lambda v: dict(zip(REQUEST_TYPES, [*v, 100 - sum(v)])))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 400), local=st.one_of(st.floats(0, 1), st.integers(0, 100).map(lambda p: f"{p}%")),
       mix=mixes, seed=st.integers(0, 2**31), lo=st.floats(0, 2), width=st.floats(0, 2))
def test_split_mix_and_deadlines_are_respected(n, local, mix, seed, lo, width):
    jobs = JOBS[:n]
    reqs = assign_requests(jobs, seed, local, mix, (lo, lo + width))
    n_local = local_count(n, local)
    assert sum(r.local for r in reqs) == n_local
    n_ext = n - n_local
    for t in REQUEST_TYPES:
        count = sum(1 for r in reqs if not r.local and r.request_type == t)
        assert abs(count - n_ext * mix[t] / 100) < 1          # largest-remainder quota
    for r in reqs:
        if r.request_type in DEADLINE_TYPES:
            assert r.ready_s + r.duration_s * (1 + (0 if r.local else lo)) <= r.deadline_s + 1
            assert r.deadline_s <= r.ready_s + r.duration_s * (1 + (0 if r.local else lo + width)) + 1
        else:
            assert r.deadline_s is None and not r.local
    assert assign_requests(jobs, seed, local, mix, (lo, lo + width)) == reqs


def test_lwf_round_trip_through_the_trace_reader(tmp_path):
    reqs = assign_requests(JOBS[:200], seed=3, local="25%")
    path = tmp_path / "w.lwf"
    path.write_text(requestmix.to_lwf(reqs, 32, "w", description="a <test> & more"))
    wl = read_trace(path)
    assert len(wl.nodes) == 32 and len(wl.leases) == 200
    by_id = {l.id: l for l in wl.leases}
    for r in reqs:
        lease = by_id[r.id]
        assert (lease.submit_s, lease.n_vms, lease.duration_s) == (r.ready_s, r.n_vms, r.duration_s)
        assert lease.preemptible == r.preemptible
        # seed 002's attributes reach the lease model (helper 6's reader) unchanged
        assert (lease.request_type.value, lease.local, lease.deadline_s) == (r.request_type, r.local, r.deadline_s)
    root = etree.parse(str(path)).getroot()
    attrs = [el.attrib for el in root.iter("lease")]
    assert [a["request-type"] for a in attrs] == [r.request_type for r in reqs]
    assert [a["origin"] == "local" for a in attrs] == [r.local for r in reqs]
    from vwn_agents.leasing.traces import parse_time
    assert [parse_time(a["deadline"]) if "deadline" in a else None for a in attrs] == [r.deadline_s for r in reqs]


def test_swf_round_trip(tmp_path):
    reqs = assign_requests(JOBS[:100], seed=3, local=10)
    text = requestmix.to_swf(reqs, 32, "note line")
    assert "; MaxNodes: 32" in text and "; Note: note line" in text
    path = tmp_path / "w.swf"
    path.write_text(text)
    leases = read_trace(path).leases
    assert [(l.submit_s, l.n_vms, l.duration_s) for l in leases] == [(r.ready_s, r.n_vms, r.duration_s) for r in reqs]
    rows = [line.split() for line in text.splitlines() if not line.startswith(";")]
    assert all(len(f) == 18 for f in rows)
    assert [f[12] == "1" for f in rows] == [r.local for r in reqs]
    assert [REQUEST_TYPES[int(f[15]) - 1] for f in rows] == [r.request_type for r in reqs]
    assert lublin.swf_jobs(text)[0].size == reqs[0].n_vms


def test_hms():
    assert requestmix.hms(0) == "00:00:00"
    assert requestmix.hms(14 * 86400 + 3661) == "337:01:01"


# ---- the command --------------------------------------------------------------------------------

def run(*args):
    return CliRunner().invoke(workload_group, ["lublin", *args])


def test_cli_writes_lwf_and_reports_json(tmp_path):
    out = tmp_path / "w.lwf"
    r = run("--jobs", "300", "--days", "2", "--seed", "5", "--local", "100", "--out", str(out), "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    assert summary["requests"] == 300 and summary["local"] == 100
    assert sum(summary["external_by_type"].values()) == 200
    assert summary["model"]["expected_mean_vms"] == pytest.approx(4.0, abs=1e-6)
    assert len(read_trace(out).leases) == 300
    again = tmp_path / "again.lwf"
    assert run("--jobs", "300", "--days", "2", "--seed", "5", "--local", "100", "--out", str(again)).exit_code == 0
    assert again.read_text() == out.read_text()


def test_cli_swf_by_suffix_and_stdout(tmp_path):
    out = tmp_path / "w.swf"
    assert run("--jobs", "50", "--out", str(out), "--local", "10%").exit_code == 0
    assert out.read_text().startswith("; Version: 2")
    r = run("--jobs", "20", "--local", "0")
    assert r.exit_code == 0 and r.output.startswith("<?xml")


def test_cli_plot_against_the_bundled_trace(tmp_path):
    png = tmp_path / "h.png"
    r = run("--no-adjust", "--nodes", "256", "--classes", "whole-sample", "--jobs", "10000", "--seed", "3",
            "--out", str(tmp_path / "w.swf"), "--plot", str(png), "--json")
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = (tmp_path / "h.csv").read_text().splitlines()
    assert rows[0] == "quantity,ks,bound,n_generated,n_reference" and rows[1].startswith("size,") and rows[3].endswith(",9999,9999")
    comparison = json.loads(r.output[r.output.index("{"):])["comparison"]
    assert set(comparison) == {"size", "runtime_s", "interarrival_s", "interarrival_points"}
    assert all(v["ks"] <= v["bound"] for v in comparison.values())


@pytest.mark.parametrize("args, words", [
    (["--mix", "50,50,50"], "--mix"),
    (["--mix", "50,50,50,50"], "add up to 100"),
    (["--local", "120%"], "outside"),
    (["--local", "5000"], "5000 local"),
    (["--mean-size", "64"], "out of reach"),
    (["--plot", "x.png", "--reference", "no-such-trace"], "unknown trace"),
])
def test_cli_input_errors_exit_2(args, words):
    r = run("--jobs", "100", "--local", "10", *args)  # the last --local given wins
    assert r.exit_code == 2, r.output
    assert words in r.output


def test_section_7_2_requests_is_the_cli_default_workload(tmp_path):
    reqs = requestmix.section_7_2_requests(seed=2, exact_mean_runtime=True)
    assert len(reqs) == 3000 and sum(r.local for r in reqs) == 1000
    assert sum(r.duration_s for r in reqs) / 3000 == pytest.approx(7200, rel=1e-3)
    assert max(r.n_vms for r in reqs) <= 32
    out = tmp_path / "w.lwf"
    assert run("--seed", "2", "--exact-mean-runtime", "--out", str(out)).exit_code == 0
    assert [(l.submit_s, l.n_vms, l.duration_s) for l in read_trace(out).leases] == \
        [(r.ready_s, r.n_vms, r.duration_s) for r in reqs]
