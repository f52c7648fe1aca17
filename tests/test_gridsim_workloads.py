"""Grid simulator inputs: Poisson workloads, SWF traces, CE spec files (seed 004 6.2.1, Table II)."""
import gzip
import random
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from broker.gridsim.model import SEED004_TABLE2, SpecError, ces_from_toml, site_ce_id
from broker.gridsim.workloads import (PoissonSpec, load_ces, load_jobs, parse_poisson, poisson_jobs,
                                      read_swf)

from .paths import TRACES


def swf_line(job, submit, run, site, wait=-1, req=600, user=1):
    return f"{job} {submit} {wait} {run} 1 -1 -1 -1 {req} -1 -1 {user} 1 -1 -1 {site} -1 -1\n"


def test_seed004_testbed_is_table_ii():
    assert [c.cpus for c in SEED004_TABLE2] == [1, 1, 2, 2]
    assert [c.si00 for c in SEED004_TABLE2] == [1800, 3000, 3000, 3000]
    assert load_ces("seed004") == SEED004_TABLE2


def test_poisson_rates_and_durations_follow_the_spec():
    spec = PoissonSpec(rate_per_min=12, jobs=6000, users=5)
    jobs = poisson_jobs(spec, 3000.0, random.Random(1))
    gaps = [b.submit_s - a.submit_s for a, b in zip(jobs, jobs[1:])]
    assert statistics.fmean(gaps) == pytest.approx(5.0, rel=0.05)  # 60 s / 12
    by_user = {}
    for j in jobs:
        by_user.setdefault(j.user, []).append(j.work / 3000.0 / 60.0)  # minutes on the fastest CPU
    means = sorted(statistics.fmean(v) for v in by_user.values())
    for got, want in zip(means, (5, 6.5, 8.5, 10.5, 12.5)):
        assert got == pytest.approx(want, rel=0.12)


@settings(max_examples=50, deadline=None)
@given(st.floats(0.5, 60), st.integers(1, 200), st.integers(0, 10_000))
def test_poisson_jobs_are_ordered_positive_and_seeded(rate, n, seed):
    spec = PoissonSpec(rate_per_min=rate, jobs=n)
    a = poisson_jobs(spec, 1000.0, random.Random(seed))
    b = poisson_jobs(spec, 1000.0, random.Random(seed))
    assert [(j.submit_s, j.work, j.user) for j in a] == [(j.submit_s, j.work, j.user) for j in b]
    assert all(x.submit_s <= y.submit_s for x, y in zip(a, a[1:]))
    assert all(j.work >= 0 and j.submit_s > 0 for j in a) and len(a) == n


@pytest.mark.parametrize("text,needle", [("rate=0", "rate must be > 0"), ("jobs=x", "jobs='x'"),
                                         ("means=1/2", "means must give"), ("colour=red", "unknown option"),
                                         ("rate", "expected key=value")])
def test_poisson_spec_errors(text, needle):
    with pytest.raises(SpecError, match=needle):
        parse_poisson(text)


def test_swf_sites_become_ces_with_peak_concurrency(tmp_path):
    path = tmp_path / "t.swf.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("; Partition: 1 alpha.org\n; Partition: 2 beta.net\n")
        fh.write(swf_line(1, 0, 100, 1) + swf_line(2, 10, 100, 1) + swf_line(3, 20, 100, 1)
                 + swf_line(4, 150, 10, 1) + swf_line(5, 5, 50, 2) + swf_line(6, 7, -1, 2))
    trace = read_swf(path)
    assert trace.peak_jobs == {"alpha.org": 3, "beta.net": 1}
    assert trace.skipped == 1
    ces = load_ces(f"swf:{path}")
    assert [(c.ce_id, c.cpus) for c in ces] == [(site_ce_id("alpha.org"), 3), (site_ce_id("beta.net"), 1)]
    jobs = load_jobs(f"swf:{path},limit=4,deadline=requested", ces, 0)
    assert [j.job_id for j in jobs] == [1, 5, 2, 3]
    assert jobs[0].work == 100 * 1000.0 and jobs[0].deadline_s == 600
    assert jobs[1].site == "beta.net"


def test_swf_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.swf"
    path.write_text(swf_line(1, 0, 10, 1) + "2 5 -1\n")
    with pytest.raises(SpecError, match=r"bad.swf:2:1: SWF line has 3 fields"):
        read_swf(path)
    path.write_text(swf_line(1, 0, 10, 1).replace(" 10 ", " ten "))
    with pytest.raises(SpecError, match=r"bad.swf:1:1: SWF fields must be numbers"):
        read_swf(path)
    with pytest.raises(SpecError, match="unknown option"):
        load_jobs(f"swf:{tmp_path / 'bad.swf'},speed=2", SEED004_TABLE2, 0)


@pytest.mark.parametrize("body,needle", [
    ("[[ce]]\nid = 'a'\ncpus = 1\n[[ce]]\nid = 'a'\n", "defined twice"),
    ("[[ce]]\nid = 'a'\nsi00 = -3\n", "ce[0].si00"),
    ("[[ce]]\nid = 'a'\ncores = 2\n", "unknown field"),
    ("title = 'no ces'\n", "[[ce]]"),
    ("[[ce]\n", "line 1"),
])
def test_toml_spec_errors(tmp_path, body, needle):
    path = tmp_path / "ces.toml"
    path.write_text(body)
    with pytest.raises(SpecError) as exc:
        ces_from_toml(path)
    assert needle in str(exc.value) and str(path) in str(exc.value)


def test_toml_defaults(tmp_path):
    path = tmp_path / "ces.toml"
    path.write_text("[defaults]\nsi00 = 2000\n[[ce]]\nid = 'a:1/q'\ncpus = 3\nlabel = 'A'\n")
    (ce,) = ces_from_toml(path)
    assert (ce.cpus, ce.si00, ce.capacity, ce.label) == (3, 2000, 6000, "A")


def test_example_spec_file_is_the_builtin_testbed():
    path = Path(__file__).resolve().parent.parent / "examples" / "gridsim" / "seed004-table2.toml"
    assert ces_from_toml(path) == SEED004_TABLE2


LCG = TRACES / "swf" / "LCG-2005-1.swf.gz"


def test_real_lcg_trace_sites_and_a_replayed_slice():
    from broker.gridsim.engine import SimConfig, simulate
    from broker.gridsim.metrics import jobs_per_ce
    trace = read_swf(LCG)
    assert (len(trace.jobs), len(trace.sites), trace.skipped) == (188_041, 170, 0)
    ces = load_ces(f"swf:{LCG}")
    assert len(ces) == 170 and sum(c.cpus for c in ces) == sum(trace.peak_jobs.values())
    jobs = load_jobs(f"swf:{LCG},limit=3000", ces, 0)
    res = simulate(ces, jobs, SimConfig("sfete"))
    assert sum(jobs_per_ce(res).values()) == 3000
    assert all(j.end_s - j.start_s == pytest.approx(j.work / 1000.0) for j in jobs)
