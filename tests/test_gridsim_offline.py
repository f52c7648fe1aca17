"""Seed 004 Table I baselines (broker.gridsim.offline): FCFS/EDF/LLF with ECT, and SFETE."""
import json
import re
from collections import Counter

from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.gridsim.model import CESpec, Job
from broker.gridsim.offline import (ALGORITHMS, OfflineSpec, _run_ect, _run_sfete, run_one,
                                    tasks_for)
from vgrid_cli.report_cmds import report_cmd


def spec_of(resources, interval_s=1.0, tasks=10):
    return OfflineSpec(tasks=tasks, rates=(1.0,), interval_s=interval_s, resources=tuple(resources))


def res(i, cpus, si00):
    return CESpec(f"r{i}.test:8443/q", cpus, si00)


def busy_at_most_cpus(jobs, resources):
    """At every start instant, no resource runs more tasks than it has CPUs."""
    for r in resources:
        mine = [j for j in jobs if j.ce == r.ce_id]
        for j in mine:
            running = [k for k in mine if k.start_s <= j.start_s + 1e-9 < k.end_s - 1e-9]
            assert len(running) <= r.cpus, (r, j.job_id, len(running))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.sampled_from([500.0, 1000.0, 2000.0])), min_size=1, max_size=4),
       st.lists(st.tuples(st.floats(0, 20), st.floats(1, 5000), st.floats(0.5, 10)), min_size=1, max_size=30),
       st.sampled_from(["fcfs-ect", "edf-ect", "llf-ect"]), st.sampled_from([0.0, 1.0, 5.0]))
def test_ect_plans_are_feasible(resources, tasks, algorithm, interval):
    resources = [res(i, c, s) for i, (c, s) in enumerate(resources)]
    jobs = [Job(i + 1, "u", t, w, t + d) for i, (t, w, d) in enumerate(tasks)]
    spec = spec_of(resources, interval)
    _run_ect(jobs, spec, algorithm)
    speed = {r.ce_id: r.si00 for r in resources}
    for j in jobs:
        assert j.start_s >= j.submit_s - 1e-9                     # never before it arrived
        assert abs(j.end_s - j.start_s - j.work / speed[j.ce]) < 1e-6
    busy_at_most_cpus(jobs, resources)


def test_edf_and_llf_order_a_batch_and_fcfs_keeps_arrival_order():
    one = [res(0, 1, 1000.0)]
    def batch():   # three tasks in one scheduling period: arrival, deadline and length orders differ
        return [Job(1, "u", 0.1, 3000.0, 50.0), Job(2, "u", 0.2, 1000.0, 40.0), Job(3, "u", 0.3, 2000.0, 10.0)]
    for algorithm, order in (("fcfs-ect", [1, 2, 3]), ("edf-ect", [3, 2, 1]), ("llf-ect", [2, 3, 1])):
        jobs = batch()
        _run_ect(jobs, spec_of(one, 1.0), algorithm)
        assert [j.job_id for j in sorted(jobs, key=lambda j: j.start_s)] == order, algorithm
        assert min(j.start_s for j in jobs) == 1.0                  # scheduled at the period's end


def test_ect_prefers_the_resource_where_the_task_ends_first():
    slow, fast = res(0, 1, 1000.0), res(1, 1, 4000.0)
    jobs = [Job(1, "u", 0.0, 4000.0, 99.0), Job(2, "u", 0.0, 4000.0, 99.0), Job(3, "u", 0.0, 4000.0, 99.0)]
    _run_ect(jobs, spec_of([slow, fast], 0.0), "fcfs-ect")
    # fast ends them at 1, 2, 3 s; slow would end the third at 4 s, so all go to fast
    assert [j.ce for j in jobs] == [fast.ce_id] * 3 and [j.end_s for j in jobs] == [1.0, 2.0, 3.0]


def test_sfete_assigns_by_jobs_per_capacity():
    small, big = res(0, 1, 1000.0), res(1, 3, 1000.0)
    jobs = [Job(i + 1, "u", 0.0, 1e6, 1e9) for i in range(40)]
    _run_sfete(jobs, spec_of([small, big], 0.0), vwns=40, seed=1)
    counts = Counter(j.ce for j in jobs)
    # argmin (N_j + 1) / C_j keeps N_big / N_small near 3 (seed 004 eq. (1))
    assert counts[big.ce_id] in (29, 30, 31) and counts[small.ce_id] == 40 - counts[big.ce_id]


def test_metrics_and_reproducibility():
    spec = OfflineSpec(tasks=300, rates=(20.0, 70.0), deadline_factor=(1e6, 1e6))
    for a in ALGORITHMS:
        r = run_one(spec, a, 70.0, seed=2)
        assert r.tasks == 300 and r.missed == 0 and r.avg_excess_s == 0.0   # deadlines never bind
        assert r.avg_delay_s > 0 and r == run_one(spec, a, 70.0, seed=2)
    tight = OfflineSpec(tasks=300, rates=(70.0,), deadline_factor=(1.0, 1.0))
    r = run_one(tight, "fcfs-ect", 70.0)
    assert r.missed > 0 and r.avg_excess_s > 0     # a deadline of the fastest run time is missed on slower CPUs


def test_workload_matches_the_spec():
    spec = OfflineSpec(tasks=4000, rates=(10.0, 40.0), load_at_max=0.8)
    jobs = tasks_for(spec, 40.0, 0)
    span = jobs[-1].submit_s
    assert abs(len(jobs) / span - 40.0) < 4.0
    assert abs(sum(j.work for j in jobs) / len(jobs) / spec.mean_work - 1) < 0.1
    assert abs(spec.mean_work * 40.0 / spec.capacity - 0.8) < 1e-9


def test_report_command_writes_figures_and_json(tmp_path):
    res_ = CliRunner().invoke(report_cmd, ["sfete-table1", "--out", str(tmp_path), "--tasks", "200",
                                           "--seeds", "2", "--rates", "20,70"], catch_exceptions=False)
    assert res_.exit_code == 0, res_.output
    assert "Figure 6" in res_.output and "FCFS/ECT" in res_.output
    doc = json.loads((tmp_path / "table1.json").read_text())
    assert len(doc["results"]) == len(ALGORITHMS) * 2 * 2
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(
        ["table1_fig4_delay.png", "table1_delay_sd.png", "table1_fig5_excess.png", "table1_fig6_missed.png"])
    # the numbers: every cell is the direct run's, and the printed Figure 4/6 tables hold their means
    spec = OfflineSpec(tasks=200, rates=(20.0, 70.0))
    direct = {(a, rate, s): run_one(spec, a, rate, s) for a in ALGORITHMS for rate in (20.0, 70.0) for s in (0, 1)}
    for r in doc["results"]:
        d = direct[(r["algorithm"], r["rate"], r["seed"])]
        assert (r["avg_delay_s"], r["std_delay_s"], r["missed"], r["tasks"]) == (d.avg_delay_s, d.std_delay_s,
                                                                                  d.missed, 200)
    fig4 = res_.output[res_.output.index("average delay (s), Figure 4"):res_.output.index("delay standard deviation")]
    for rate in (20.0, 70.0):
        cells = [f"{(direct[(a, rate, 0)].avg_delay_s + direct[(a, rate, 1)].avg_delay_s) / 2:.2f}" for a in ALGORITHMS]
        assert f"| {rate:g} | " + " | ".join(cells) + " |" in fig4
    fig6 = res_.output[res_.output.index("deadlines missed (tasks), Figure 6"):]
    cells = [f"{(direct[(a, 70.0, 0)].missed + direct[(a, 70.0, 1)].missed) / 2:.0f}" for a in ALGORITHMS]
    assert "| 70 | " + " | ".join(cells) + " |" in fig6
    md = (tmp_path / "sfete-table1.md").read_text()
    assert "| 70 | " + " | ".join(cells) + " |" in md and "(table1_fig6_missed.png)" in md
    fewest = sum(min(ALGORITHMS, key=lambda a: ((direct[(a, rate, 0)].missed + direct[(a, rate, 1)].missed) / 2, a))
                 == "sfete" for rate in (20.0, 70.0))
    assert re.search(rf"^\| fewer tasks miss their deadlines with SFETE \(Figure 6\) \| fewest at {fewest} of 2 rates "
                     rf".*\| {'yes' if fewest == 2 else 'no'} \|$", md, re.M)


def test_report_command_refuses_an_unknown_algorithm(tmp_path):
    res_ = CliRunner().invoke(report_cmd, ["sfete-table1", "--out", str(tmp_path), "--algorithms", "sjf"])
    assert res_.exit_code == 2 and "sjf" in res_.output and "Traceback" not in res_.output
