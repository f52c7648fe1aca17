"""Hypothesis property tests of the lease engine's invariants on random small workloads.

* no resource of any node is ever over-committed (SimulatedNodes raises OverCommitError, and
  the leases' run segments are checked again here);
* an accepted AR starts exactly at its requested time with its images already on its nodes,
  and runs its whole duration in one piece;
* every best-effort lease completes its full (real) duration across its running segments;
* EDF and EDF/JIT accept the same AR sets, and EDF/JIT never starts a transfer earlier -- for
  ARs submitted together. With ARs arriving over time the sets can differ either way, because
  a started transfer cannot move (see test_leasing_staging.py and docs/leasing.md).
"""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from vwn_agents.leasing import LeaseConfig, LeaseState, simulate, uniform_site
from vwn_agents.leasing.accounting import disk_series
from vwn_agents.leasing.model import CPU, MEM, Lease, LeaseType, resource_vector

SETTINGS = settings(max_examples=int(__import__("os").environ.get("LEASING_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def workloads(draw, ar_only=False):
    n_nodes = draw(st.integers(1, 4))
    cpus = draw(st.integers(1, 2))
    leases = []
    for i in range(draw(st.integers(1, 9))):
        kind = "AR" if ar_only else draw(st.sampled_from(["AR", "BE", "BE", "IM"]))
        submit = 0.0 if ar_only else 60.0 * draw(st.integers(0, 60))
        dur = 60.0 * draw(st.integers(1, 90))
        real = draw(st.one_of(st.none(), st.floats(30.0, dur))) if kind != "AR" else None
        per_vm = resource_vector(cpu=100, memory=draw(st.sampled_from([256, 512, 1024])))
        image = draw(st.sampled_from(["a.img", "b.img", "c.img"]))
        leases.append(Lease(
            id=i + 1, type={"AR": LeaseType.ADVANCE_RESERVATION, "BE": LeaseType.BEST_EFFORT,
                            "IM": LeaseType.IMMEDIATE}[kind],
            submit_s=submit, duration_s=dur, n_vms=draw(st.integers(1, n_nodes * cpus)), per_vm=per_vm,
            image_id=image, image_mb=float(draw(st.sampled_from([100, 600, 1024]))),
            preemptible=kind == "BE", real_duration_s=real,
            requested_start_s=submit + 60.0 * draw(st.integers(1, 120)) if kind == "AR" else None))
    return n_nodes, cpus, leases


configs = st.fixed_dictionaries({
    "lease-preparation": st.sampled_from(["unmanaged", "imagetransfer"]),
    "backfilling": st.sampled_from(["off", "aggressive", "conservative"]),
    "suspension": st.sampled_from(["all", "none"]),
    "suspendresume-exclusion": st.sampled_from(["local", "global"]),
    "transfer-mechanism": st.sampled_from(["unicast", "multicast"]),
    "diskimage-reuse": st.sampled_from(["none", "image-caches"]),
    "migration": st.sampled_from(["no", "yes", "yes-notransfer"]),
    "ar-transfer-strategy": st.sampled_from(["edf", "edf-jit"]),
    "besteffort-mode": st.sampled_from(["parallel", "serial"]),
    "imagetransfer-link": st.sampled_from(["separate", "shared"]),
    "diskimage-cache-expire": st.booleans(),
    "diskimage-cache-size": st.sampled_from([0.0, 2048.0]),
})


def check_links(sched, shared):
    """Transfers on one link never overlap (both links are one when shared)."""
    links: dict = {}
    for r in sched.transfer_log_res:
        key = "one" if shared else r.link
        links.setdefault(key, []).append((r.start, r.end))
    for spans in links.values():
        spans.sort()
        for (a1, b1), (a2, b2) in zip(spans, spans[1:]):
            assert a2 >= b1 - 1e-9, spans


def check_no_overcommit(leases, site):
    for node in site:
        spans = [(seg.start, seg.end, l.per_vm, seg.nodes.count(node.index))
                 for l in leases for seg in l.segments if node.index in seg.nodes]
        for t, _, _, _ in spans:
            cpu = sum(p[CPU] * k for s, e, p, k in spans if s <= t < e)
            mem = sum(p[MEM] * k for s, e, p, k in spans if s <= t < e)
            assert cpu <= node.capacity[CPU] and mem <= node.capacity[MEM], (node.name, t)


def simulate_staged(leases, site, opts, also=None):
    """Simulate with a check at every VM start: a best-effort or immediate lease's VMs start
    (the first time) only on nodes where its image has arrived; ``also(sched, res, t)`` adds
    checks. Returns ``(scheduler, ids of the leases so started)``."""
    from vwn_agents.leasing.scheduler import LeaseScheduler as _Sched
    started, real_start = [], _Sched._start_vm

    def checked_start(self, res, t):
        lease = res.lease
        if not lease.is_ar and lease.start_s is None:
            started.append(lease.id)
            assert self._images_present(lease, res.mapping), (lease, t)
        if also:
            also(self, res, t)
        return real_start(self, res, t)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_Sched, "_start_vm", checked_start)
        return simulate(leases, site, LeaseConfig(opts)).scheduler, started


def check_completed(sched, site, shared_link):
    """After a simulation: no node over-committed, one transfer at a time per link, every
    lease not rejected Done and every accepted AR on time. Returns the scheduler's leases."""
    done = list(sched.leases.values())
    check_no_overcommit([l for l in done if l.id not in sched.children], site)  # parents repeat VMs
    check_links(sched, shared_link)
    for lease in done:
        if lease.state is not LeaseState.REJECTED:
            assert lease.state is LeaseState.DONE, lease
            assert not lease.is_ar or lease.ar_on_time, lease
    return done


@SETTINGS
@given(workloads(), configs)
def test_invariants(work, opts):
    n_nodes, cpus, leases = work
    site = uniform_site(n_nodes, cpus, 1024 * cpus)
    result = simulate(leases, site, LeaseConfig(opts))  # OverCommitError would fail the test
    done = list(result.scheduler.leases.values())
    check_no_overcommit([l for l in done if l.id not in result.scheduler.children], site)  # parents repeat VMs
    check_links(result.scheduler, opts["imagetransfer-link"] == "shared")
    for lease in done:
        if lease.is_ar and lease.state is not LeaseState.REJECTED:
            assert lease.state is LeaseState.DONE
            assert lease.start_s == lease.requested_start_s
            assert lease.ar_on_time, lease
            assert len(lease.segments) == 1
            assert lease.segments[0].end - lease.segments[0].start == lease.duration_s
        elif lease.is_be and lease.n_vms > sum(min(n.capacity[CPU] // lease.per_vm[CPU],
                                                   n.capacity[MEM] // lease.per_vm[MEM]) for n in site):
            assert lease.state is LeaseState.REJECTED
        elif lease.is_be:
            assert lease.state is LeaseState.DONE, lease
            assert abs(lease.time_run - lease.effective_duration_s) < 1e-6
            total = sum(s.end - s.start for s in lease.segments)
            assert total >= lease.effective_duration_s - 1e-6
        elif lease.state is not LeaseState.REJECTED:  # immediate
            assert lease.state is LeaseState.DONE and len(lease.segments) == 1


@pytest.mark.parametrize("strategy", ["edf", "edf-jit"])
@pytest.mark.parametrize("reuse", ["none", "image-caches"])
def test_transfer_that_evicts_a_pinned_image_does_not_arrive_before_it_expires(strategy, reuse):
    """Regression (found by test_invariants): with a full image pool, AR 2's transfer evicts
    AR 1's image, pinned until AR 1 ends at 400 s. EDF used to lay that transfer out as early as
    possible (ending at 160 s), so the image left before AR 1 started at 300 s."""
    vm = resource_vector(cpu=100, memory=256)
    site = uniform_site(1, 1, 1024)
    leases = [Lease(1, LeaseType.ADVANCE_RESERVATION, 0.0, 100.0, 1, vm, "a.img", 1000.0, False, requested_start_s=300.0),
              Lease(2, LeaseType.ADVANCE_RESERVATION, 0.0, 100.0, 1, vm, "b.img", 600.0, False, requested_start_s=400.0)]
    opts = {"lease-preparation": "imagetransfer", "imagetransfer-bandwidth": 80.0,  # 10 MB/s
            "ar-transfer-strategy": strategy, "diskimage-reuse": reuse, "diskimage-cache-size": 1500.0}
    result = simulate(leases, site, LeaseConfig(opts))
    got = result.scheduler.leases
    assert [got[i].state for i in (1, 2)] == [LeaseState.DONE, LeaseState.DONE]
    assert got[1].ar_on_time and got[2].ar_on_time
    ends = {lid: end for lid, _, _, _, end in result.scheduler.transfer_log}
    assert ends[1] <= 300.0 and ends[2] == 400.0  # b.img arrives exactly when AR 1 lets a.img go
    peak = max(v for _, v in disk_series(result.scheduler)[0])
    assert peak <= 1500.0


@SETTINGS
@given(workloads(ar_only=True), st.sampled_from(["unicast", "multicast"]), st.sampled_from(["none", "image-caches"]))
def test_edf_and_edf_jit_accept_the_same_ars_and_jit_is_never_earlier(work, mechanism, reuse):
    n_nodes, cpus, leases = work
    site = uniform_site(n_nodes, cpus, 1024 * cpus)
    base = {"lease-preparation": "imagetransfer", "transfer-mechanism": mechanism, "diskimage-reuse": reuse,
            "imagetransfer-bandwidth": 40.0}
    runs = {}
    for strategy in ("edf", "edf-jit"):
        fresh = [Lease(l.id, l.type, l.submit_s, l.duration_s, l.n_vms, l.per_vm, l.image_id, l.image_mb,
                       l.preemptible, l.requested_start_s) for l in leases]
        runs[strategy] = simulate(fresh, site, LeaseConfig({**base, "ar-transfer-strategy": strategy})).scheduler
    accepted = {s: {l.id for l in r.leases.values() if l.state is not LeaseState.REJECTED} for s, r in runs.items()}
    assert accepted["edf"] == accepted["edf-jit"]
    edf = {(lid, img, dest): start for lid, img, dest, start, _ in runs["edf"].transfer_log}
    jit = {(lid, img, dest): start for lid, img, dest, start, _ in runs["edf-jit"].transfer_log}
    assert edf.keys() == jit.keys()
    for key, start in jit.items():
        assert start >= edf[key] - 1e-9
