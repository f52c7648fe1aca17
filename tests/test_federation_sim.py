"""The simulated federation (issue 15): three Grids, each its own broker, forwarding by the live
gateway's policy code (broker/federation/policy.py) on the grid simulator's clock."""
from __future__ import annotations

import json

from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from broker.gridsim.federation import FedConfig, FedJob, simulate_federation
from broker.gridsim.fedtrace import Split, build, check_runs, run_all, run_metrics
from broker.gridsim.model import CESpec


def live_like(threshold_s: float, peering: bool):
    """The live experiment's shape (docs/experiments/federation.md): A admits dteam only, B and
    C dteam and atlas, 2 CPUs each; 16 jobs at A (every 4th atlas), 4 at B, none at C."""
    grids = {g: ([CESpec(f"ce-{g}.sim:8443/vgrid-pbs-q", 2, 1000.0)], [vos])
             for g, vos in (("a", ["dteam"]), ("b", ["dteam", "atlas"]), ("c", ["dteam", "atlas"]))}
    jobs = []
    for i in range(16):
        jobs.append(FedJob(i + 1, "carol" if (i + 1) % 4 == 0 else "alice", i * 20.0, 600 * 1000.0,
                           vo="atlas" if (i + 1) % 4 == 0 else "dteam", home="a", limit_s=600))
    for i in range(4):
        jobs.append(FedJob(100 + i, "bob", i * 40.0 + 10, 600 * 1000.0, vo="dteam", home="b", limit_s=600))
    cfg = FedConfig(peering=peering, threshold_s=threshold_s, ism_refresh_s=30, match_expiry_s=1800,
                    share_fraction=1.0)
    return simulate_federation(grids, jobs, cfg)


def test_live_scenario_unmatched_jobs_leave_instead_of_being_rejected():
    iso = live_like(600, peering=False)
    atlas = [j for j in iso.jobs if j.vo == "atlas"]
    assert all(j.rejected for j in atlas) and not any(j.rejected for j in iso.jobs if j.vo == "dteam")
    for threshold in (-1, 600):
        fed = live_like(threshold, peering=True)
        assert not any(j.rejected for j in fed.jobs)
        for j in fed.jobs:
            if j.vo == "atlas":
                assert j.grid in ("b", "c") and j.path[0] == "a"
            elif threshold < 0:
                assert j.path == [j.home]      # only unmatched jobs leave
    # the wait threshold moves dteam jobs off the overloaded Grid A: A's dteam jobs wait less
    m_iso = run_metrics(live_like(600, peering=True)), run_metrics(live_like(-1, peering=True))
    assert m_iso[0]["by_home"]["a"]["wait_mean_s"] < m_iso[1]["by_home"]["a"]["wait_mean_s"]
    assert m_iso[0]["by_home"]["a"]["forwarded_fraction"] > m_iso[1]["by_home"]["a"]["forwarded_fraction"]


@st.composite
def federations(draw):
    vos = ["v1", "v2", "v3"]
    grids = {}
    for g in ("a", "b", "c"):
        n = draw(st.integers(1, 3))
        specs = [CESpec(f"ce{k}.{g}.sim:8443/q", draw(st.integers(1, 3)), 1000.0) for k in range(n)]
        admits = [draw(st.lists(st.sampled_from(vos), min_size=1, max_size=3, unique=True)) for _ in range(n)]
        grids[g] = (specs, admits)
    jobs = []
    for i in range(draw(st.integers(1, 40))):
        run = draw(st.integers(1, 2000))
        jobs.append(FedJob(i + 1, f"u{i % 4}", float(draw(st.integers(0, 3000))), run * 1000.0,
                           vo=draw(st.sampled_from(vos + ["v4"])), home=draw(st.sampled_from("abc")),
                           limit_s=run * draw(st.sampled_from([1, 2]))))
    return grids, jobs


@settings(max_examples=60, deadline=None)
@given(federations(), st.sampled_from([-1.0, 0.0, 300.0]), st.integers(0, 2),
       st.sampled_from([0.0, 0.5, 1.0]))
def test_peering_never_rejects_more_never_loops_counts_each_job_once(fed, threshold, hops, share):
    grids, jobs = fed
    runs = []
    for peering in (False, True):
        copies = [FedJob(j.job_id, j.user, j.submit_s, j.work, vo=j.vo, home=j.home, limit_s=j.limit_s)
                  for j in jobs]
        cfg = FedConfig(peering=peering, threshold_s=threshold, max_hops=hops, share_fraction=share,
                        ism_refresh_s=60, match_expiry_s=120)
        r = simulate_federation(grids, copies, cfg)
        runs.append((cfg, run_metrics(r), r))
        # every CPU of a share a Grid gave a peer is returned once the jobs ended
        assert all(v == 0 for held in r.held_at_end.values() for v in held.values())
    assert check_runs(runs) == []
    iso, fed_run = runs[0][2], runs[1][2]
    for j in fed_run.jobs:
        assert len(j.path) - 1 <= hops
        if not j.rejected:
            assert j.vo in grids[j.grid][1][[s.ce_id for s in grids[j.grid][0]].index(j.ce)]
    if share == 0 or hops == 0:
        assert all(len(j.path) == 1 for j in fed_run.jobs)   # nothing may leave
        assert [j.rejected for j in fed_run.jobs] == [j.rejected for j in iso.jobs]


def test_lcg_slice_split_and_properties():
    split = Split(limit=2500, cpu_scale=0.1)
    grid_specs, jobs = build(split)
    sites = [s.ce_id for specs, _ in grid_specs.values() for s in specs]
    assert len(sites) == len(set(sites)) == 170          # every trace site in exactly one Grid
    cpus = [sum(s.cpus for s in specs) for specs, _ in grid_specs.values()]
    assert max(cpus) - min(cpus) <= max(s.cpus for specs, _ in grid_specs.values() for s in specs)
    homes = [sum(j.home == g for j in jobs) for g in grid_specs]
    assert homes[0] > homes[1] > homes[2]                # uneven on purpose: 60 / 30 / 10 %
    runs = run_all(split, FedConfig(), [-1, 600])
    assert check_runs(runs) == []
    assert runs[2][1]["all"]["forwarded_fraction"] > runs[1][1]["all"]["forwarded_fraction"]


def test_cli_report_federation_writes_outputs(tmp_path):
    from vgrid_cli.main import main as cli
    res = CliRunner().invoke(cli, ["report", "federation", "--jobs", "800", "--thresholds", "-1,600",
                                   "--out", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "federation_sim.json").read_text())
    assert [r["run"] for r in doc["runs"]] == ["isolated", "peering, unmatched only", "peering, threshold 600 s"]
    assert doc["problems"] == [] and doc["cpu_s"] >= 0
    for name in ("federation_sim.csv", "federation_sim_rates.png", "federation_sim_wait.png"):
        assert (tmp_path / name).stat().st_size > 0
    bad = CliRunner().invoke(cli, ["report", "federation", "--cpu-scale", "0", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "cpu_scale" in bad.output and "Traceback" not in bad.output
