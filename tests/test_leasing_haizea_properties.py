"""Hypothesis property tests of the Haizea 1.1 inputs and options (issue 16).

* lease annotation files (``annotations.py``): any set of annotations written as Haizea writes
  them is read back and applied exactly -- by id, or the i-th id-less one to the i-th request
  by submission time -- and leaves every other lease as it was;
* shutdown time and enactment overhead (``haizea_options.frontend``): on random workloads of
  every lease type, with and without suspensions, no node is over-committed, every lease that
  finishes ran its real duration when the trace gives one, and otherwise its requested duration
  plus ``shutdown-time`` + ``enactment-overhead`` x VMs;
* ``override-suspend-time``: every suspension of a random workload takes the override
  (+ ``enactment-overhead``) per VM.
"""
import os
from unittest import mock

from hypothesis import HealthCheck, given, settings, strategies as st

from vwn_agents.leasing import LeaseConfig, LeaseState, simulate, uniform_site
from vwn_agents.leasing.annotations import apply_annotations, read_annotations
from vwn_agents.leasing.model import Lease, LeaseType, resource_vector
from vwn_agents.leasing.enactment import SimulatedNodes

SETTINGS = settings(max_examples=int(os.environ.get("LEASING_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def hms(seconds: int) -> str:
    d, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{d}:" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def be(i: int, submit: float) -> Lease:
    return Lease(id=i, type=LeaseType.BEST_EFFORT, submit_s=submit, duration_s=600.0, n_vms=1,
                 per_vm=resource_vector(cpu=100, memory=512), image_id="orig.img", image_mb=10.0)


annotation = st.fixed_dictionaries({
    "start": st.one_of(st.none(), st.just("be"), st.just("now"), st.integers(0, 3 * 86400)),
    "image": st.one_of(st.none(), st.just("none"), st.tuples(st.sampled_from(["x.img", "y.img"]),
                                                             st.integers(1, 8192))),
})


def xml(ann: dict, lease_id) -> str:
    parts = [f'<lease-annotation{"" if lease_id is None else f" id={chr(34)}{lease_id}{chr(34)}"}>']
    if ann["start"] == "be":
        parts.append("<start/>")
    elif ann["start"] == "now":
        parts.append("<start><now/></start>")
    elif ann["start"] is not None:
        parts.append(f'<start><exact time="+{hms(ann["start"])}"/></start>')
    if ann["image"] == "none":
        parts.append("<software><none/></software>")
    elif ann["image"] is not None:
        parts.append(f'<software><disk-image id="{ann["image"][0]}" size="{ann["image"][1]}"/></software>')
    return "".join(parts) + "</lease-annotation>"


def expect(lease: Lease, ann: dict | None):
    if ann is None:
        return (lease.type, lease.requested_start_s, lease.image_id, lease.image_mb)
    start = ann["start"]
    kind, at = lease.type, lease.requested_start_s
    if start == "be":
        kind, at = LeaseType.BEST_EFFORT, None
    elif start == "now":
        kind, at = LeaseType.IMMEDIATE, None
    elif start is not None:
        kind, at = LeaseType.ADVANCE_RESERVATION, lease.submit_s + start
    img = (lease.image_id, lease.image_mb)
    if ann["image"] == "none":
        img = ("none.img", 0.0)
    elif ann["image"] is not None:
        img = (ann["image"][0], float(ann["image"][1]))
    return (kind, at, *img)


@SETTINGS
@given(submits=st.lists(st.integers(0, 10_000), min_size=1, max_size=8),
       anns=st.lists(annotation, max_size=10), by_id=st.booleans(), data=st.data())
def test_annotations_are_applied_as_written(tmp_path_factory, submits, anns, by_id, data):
    leases = [be(i + 1, float(t)) for i, t in enumerate(submits)]
    if by_id:
        ids = data.draw(st.lists(st.integers(1, len(leases) + 3), unique=True, max_size=len(anns)))
        wanted = dict(zip(ids, anns))
        body = "".join(xml(a, i) for i, a in wanted.items())
    else:
        body = "".join(xml(a, None) for a in anns)
    path = tmp_path_factory.mktemp("lwfa") / "a.lwfa"
    path.write_text(f"<lease-annotations><attributes/>{body}</lease-annotations>")
    ann = read_annotations(path)
    out = {l.id: l for l in apply_annotations(leases, ann)}
    if by_id:
        per_lease = {l.id: wanted.get(l.id) for l in leases}
        assert ann.unused == len(set(wanted) - set(out))
    else:
        order = sorted(leases, key=lambda l: (l.submit_s, l.id))
        per_lease = {l.id: (anns[k] if k < len(anns) else None) for k, l in enumerate(order)}
        assert ann.unused == max(len(anns) - len(leases), 0)
    assert set(out) == {l.id for l in leases}
    for lease in leases:
        new = out[lease.id]
        assert (new.type, new.requested_start_s, new.image_id, new.image_mb) == expect(lease, per_lease[lease.id])
        assert (new.submit_s, new.duration_s, new.n_vms) == (lease.submit_s, lease.duration_s, lease.n_vms)


@st.composite
def workloads(draw):
    n_nodes = draw(st.integers(1, 3))
    leases = []
    for i in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["AR", "BE", "BE", "IM"]))
        submit = 60.0 * draw(st.integers(0, 60))
        dur = 60.0 * draw(st.integers(1, 60))
        real = draw(st.one_of(st.none(), st.integers(30, int(dur)).map(float))) if kind != "AR" else None
        leases.append(Lease(
            id=i + 1, type={"AR": LeaseType.ADVANCE_RESERVATION, "BE": LeaseType.BEST_EFFORT,
                            "IM": LeaseType.IMMEDIATE}[kind],
            submit_s=submit, duration_s=dur, n_vms=draw(st.integers(1, n_nodes)),
            per_vm=resource_vector(cpu=100, memory=draw(st.sampled_from([256, 512]))),
            preemptible=kind == "BE", real_duration_s=real,
            requested_start_s=submit + 60.0 * draw(st.integers(1, 90)) if kind == "AR" else None))
    return n_nodes, leases


@SETTINGS
@given(w=workloads(), shutdown=st.integers(0, 600), enact=st.integers(0, 30),
       preempt=st.sampled_from(["ar-preempts-everything", "no-preemption"]))
def test_shutdown_time_and_enactment_overhead(w, shutdown, enact, preempt):
    n_nodes, leases = w
    cfg = LeaseConfig({"shutdown-time": float(shutdown), "enactment-overhead": float(enact),
                       "policy-preemption": preempt, "suspend-rate": 32.0, "resume-rate": 32.0})
    r = simulate(leases, uniform_site(n_nodes, 1, 1024), cfg)   # OverCommitError on any over-commit
    for lease in r.scheduler.leases.values():
        assert lease.state in (LeaseState.DONE, LeaseState.REJECTED)
        if lease.state is LeaseState.DONE:
            ran = sum(s.end - s.start for s in lease.segments)
            orig = next(l for l in leases if l.id == lease.id)
            want = orig.real_duration_s if orig.real_duration_s is not None else \
                orig.duration_s + shutdown + enact * orig.n_vms
            assert abs(ran - want) < 1e-6, (lease.id, ran, want)


@SETTINGS
@given(w=workloads(), override=st.integers(0, 200), enact=st.integers(0, 10))
def test_override_suspend_time_times_every_suspension(w, override, enact):
    n_nodes, leases = w
    cfg = LeaseConfig({"override-suspend-time": float(override), "enactment-overhead": float(enact),
                       "suspendresume-exclusion": "global"})
    paused, took = {}, []
    real_paused, real_suspended = SimulatedNodes.vms_paused, SimulatedNodes.suspended

    def on_paused(self, lease, now):
        paused[lease.id] = now
        return real_paused(self, lease, now)

    def on_suspended(self, lease, now):
        took.append((lease.n_vms, now - paused.pop(lease.id)))
        return real_suspended(self, lease, now)
    with mock.patch.object(SimulatedNodes, "vms_paused", on_paused), \
            mock.patch.object(SimulatedNodes, "suspended", on_suspended):
        r = simulate(leases, uniform_site(n_nodes, 1, 1024), cfg)
    assert all(l.state in (LeaseState.DONE, LeaseState.REJECTED) for l in r.scheduler.leases.values())
    # global exclusion: one VM after another, each (override + enactment overhead) s
    assert all(abs(t - (override + enact) * n) < 1e-6 for n, t in took), took
