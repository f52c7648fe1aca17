"""The CE agent with scheduler = "leases" over real loopback node agents: VWN slots and the
queue, advance reservations, immediate leases, wall-clock limits, cancel, lease attribute errors."""
from __future__ import annotations

import datetime
import time

import pytest
import requests
from hypothesis import given, strategies as st

from vwn_agents.ce_agent import CEAgentConfig
from vwn_agents.ce_leases import ERT_INFINITE_S, vwn_slot_units
from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.config import ConfigError
from vwn_agents.leasing.model import resource_vector, vms_in

from .test_ce_agent import glue_attrs, site, sleep_jdl, submit  # noqa: F401  (fixtures)
from .waiting import EngineTicks, gated_jdl, release


def record(ce_url: str, key: str) -> dict:
    return requests.get(f"{ce_url}/jobs/{key}", timeout=5).json()


def kinds(receiver, key: str) -> list[str]:
    return [e["event"] for e in receiver.events_for(key)]


def test_k_vwns_per_node_then_a_queue_and_the_caps_readjust(site, receiver, tmp_path):
    ce_url, ce, nodes = site(n_nodes=1, vwns_per_node=2)
    ticks = EngineTicks(ce)
    jdl1, gate1 = gated_jdl(tmp_path, "k1")             # k1 and k2 run until the test releases them
    jdl2, gate2 = gated_jdl(tmp_path, "k2")
    k1, _ = submit(ce_url, receiver, jdl1)
    receiver.wait_event(k1, "running")
    k2, _ = submit(ce_url, receiver, jdl2)
    receiver.wait_event(k2, "running")
    k3, resp = submit(ce_url, receiver, sleep_jdl(0.5))
    assert resp.status_code == 202 and resp.json()["state"] == "Scheduled"
    ticks.wait()                                        # whole engine passes with both slots held: k3 must stay queued
    queued = record(ce_url, k3)
    assert queued["state"] == "Scheduled" and queued["vwn"] is None
    assert queued["lease"]["type"] == "best-effort" and queued["lease"]["cpu"] == 50
    assert queued["lease"]["state"] in ("Queued", "Scheduled") and queued["lease"]["vwns"] == []
    assert len(nodes[0].active()) == 2 and receiver.events_for(k3) == []
    glue = glue_attrs(ce_url)
    assert glue["GlueCEStateRunningJobs"] == ["2"] and glue["GlueCEStateWaitingJobs"] == ["1"]
    assert glue["GlueCEStateFreeCPUs"] == ["0"]
    # behind k3 a new job waits for the end of both reservations (max_wallclock_s = 7200 s)
    assert 7000 < int(glue["GlueCEStateEstimatedResponseTime"][0]) <= 7200

    release(gate1)
    done1 = receiver.wait_event(k1, "done")
    run3 = receiver.wait_event(k3, "running")
    assert run3["time"] >= done1["time"]                # the third starts only after one ended
    receiver.wait_event(k3, "done")
    release(gate2)                                      # k2 ends last: its caps go 0.5, 1.0, 0.5, 1.0
    receiver.wait_event(k2, "done", timeout_s=30)
    assert kinds(receiver, k3)[0] == "running"          # nothing reached the broker while queued
    v1, v2, v3 = (nodes[0].vwns[record(ce_url, k)["vwn"]] for k in (k1, k2, k3))
    assert v3.created >= v1.ended
    # k2: 0.5 when it arrived next to k1, 1.0 when k1 left, 0.5 with k3, 1.0 when k3 left
    assert [c for _, c in v2.cpu_caps] == [0.5, 1.0, 0.5, 1.0]
    assert [c for _, c in v3.cpu_caps] == [0.5]
    caps2 = [e["cpu_caps"][-1][1] for e in receiver.events_for(k2, "caps")]
    assert caps2 == [1.0, 0.5, 1.0]
    lease3 = record(ce_url, k3)["lease"]
    assert lease3["state"] == "Done" and lease3["start_s"] >= done1["time"] - 0.01


def test_advance_reservation_starts_at_its_lease_start(site, receiver):
    clock = SimulatedClock(float(int(time.time())))     # the CE and its node agents run on it
    ce_url, ce, nodes = site(n_nodes=1, clock=clock)
    ticks = EngineTicks(ce)
    start = int(clock.now()) + 3
    iso = datetime.datetime.fromtimestamp(start, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    jdl = (f'[ Executable = "/bin/sleep"; Arguments = "0.2"; LeaseType = "advance-reservation"; '
           f'LeaseStart = "{iso}"; LeaseDuration = 60; ]')
    key, resp = submit(ce_url, receiver, jdl, "ar.jdl")
    assert resp.status_code == 202
    clock.advance_to(start - 2)
    ticks.wait()                                        # engine passes before its start: it must wait
    before = record(ce_url, key)
    assert before["state"] == "Scheduled" and before["lease"]["state"] == "Scheduled"
    assert before["lease"]["type"] == "advance-reservation"
    assert before["lease"]["requested_start_s"] == start and before["lease"]["preemptible"] is False
    assert before["lease"]["duration_s"] == 60 and before["lease"]["duration_from"] == "LeaseDuration"
    assert nodes[0].vwns == {}
    clock.advance_to(start)
    running = receiver.wait_event(key, "running", timeout_s=30)
    assert start <= running["time"] <= start + 1.0
    receiver.wait_event(key, "done")
    lease = record(ce_url, key)["lease"]
    assert start <= lease["start_s"] <= start + 1.0 and lease["state"] == "Done"


def test_immediate_lease_that_cannot_start_is_aborted(site, receiver):
    ce_url, _, nodes = site(n_nodes=1, vwns_per_node=1)
    busy, _ = submit(ce_url, receiver, sleep_jdl(30))
    receiver.wait_event(busy, "running")
    key, resp = submit(ce_url, receiver, '[ Executable = "/bin/true"; LeaseType = "immediate"; '
                                         'LeaseDuration = 60; ]', "im.jdl")
    assert resp.status_code == 202
    aborted = receiver.wait_event(key, "aborted")
    assert aborted["reason"].startswith("immediate lease rejected: it cannot start now")
    assert aborted["outcome"] == "lease-rejected"
    assert kinds(receiver, key) == ["aborted"]
    rec = record(ce_url, key)
    assert rec["state"] == "Aborted" and rec["lease"]["state"] == "Rejected"
    assert len(nodes[0].vwns) == 1
    requests.post(f"{ce_url}/jobs/{busy}/cancel", timeout=15)
    again, _ = submit(ce_url, receiver, '[ Executable = "/bin/true"; LeaseType = "immediate"; '
                                        'LeaseDuration = 60; ]', "im.jdl")
    assert receiver.wait_event(again, "done")["exit_code"] == 0      # a free node: it runs


def test_lease_duration_shorter_than_the_job_kills_it_at_the_limit(site, receiver):
    clock = SimulatedClock(float(int(time.time())))
    ce_url, ce, nodes = site(n_nodes=1, clock=clock)
    ticks = EngineTicks(ce)
    key, _ = submit(ce_url, receiver, '[ Executable = "/bin/sleep"; Arguments = "30"; LeaseDuration = 1; ]')
    running = receiver.wait_event(key, "running")
    clock.advance_to(running["time"] + 0.5)
    ticks.wait()                                        # engine passes before its limit: it keeps running
    assert kinds(receiver, key) == ["running"] and [v.vwn for v in nodes[0].active()] == [running["vwn"]]
    clock.advance_to(running["time"] + 1.0)
    aborted = receiver.wait_event(key, "aborted", timeout_s=30)
    assert aborted["outcome"] == "wallclock-limit"
    assert aborted["reason"] == ("killed at its wall-clock limit: the lease's 1 s (LeaseDuration) ended "
                                 "and its VWN was deleted")
    assert 0.5 <= aborted["time"] - running["time"] <= 2.0
    assert nodes[0].vwns[running["vwn"]].state == "cancelled" and nodes[0].active() == []
    assert record(ce_url, key)["state"] == "Aborted"


def test_cancel_a_queued_and_a_running_job(site, receiver):
    ce_url, ce, nodes = site(n_nodes=1, vwns_per_node=1)
    ticks = EngineTicks(ce)
    first, _ = submit(ce_url, receiver, sleep_jdl(30))
    running = receiver.wait_event(first, "running")
    queued, _ = submit(ce_url, receiver, sleep_jdl(30))
    receiver.wait_for(lambda _: record(ce_url, queued)["lease"]["state"] in ("Queued", "Scheduled"))
    resp = requests.post(f"{ce_url}/jobs/{queued}/cancel", timeout=15)
    assert resp.status_code == 200 and resp.json()["state"] == "Cancelled"
    assert resp.json()["lease"]["state"] == "Cancelled"
    resp = requests.post(f"{ce_url}/jobs/{first}/cancel", timeout=15)
    assert resp.status_code == 200 and resp.json()["lease"]["state"] == "Cancelled"
    assert nodes[0].vwns[running["vwn"]].state == "cancelled"
    ticks.wait()                                        # engine passes with the slot free: not given to the cancelled job
    assert len(nodes[0].vwns) == 1 and receiver.events_for(queued) == []


def test_preempted_best_effort_job_is_aborted_and_the_ar_runs(site, receiver):
    clock = SimulatedClock(float(int(time.time())))
    ce_url, ce, nodes = site(n_nodes=1, vwns_per_node=1, clock=clock)
    ticks = EngineTicks(ce)
    be, _ = submit(ce_url, receiver, '[ Executable = "/bin/sleep"; Arguments = "30"; '
                                     'PreemptionClass = "cancellable"; ]')
    receiver.wait_event(be, "running")
    start = int(clock.now()) + 2
    ar, resp = submit(ce_url, receiver, f'[ Executable = "/bin/true"; LeaseType = "advance-reservation"; '
                                        f'LeaseStart = {start}; LeaseDuration = 30; ]')
    assert resp.status_code == 202
    ticks.wait()                                        # engine passes before the AR's start: be keeps running
    assert "aborted" not in kinds(receiver, be) and receiver.events_for(ar) == []
    clock.advance_to(start)
    aborted = receiver.wait_event(be, "aborted", timeout_s=30)
    assert aborted["reason"].startswith("preempted by an advance reservation")
    assert aborted["outcome"] == "preempted"
    assert start - 0.01 <= aborted["time"] <= start + 1.0
    assert receiver.wait_event(ar, "done")["exit_code"] == 0
    assert record(ce_url, be)["lease"]["state"] == "Cancelled"


@pytest.mark.parametrize("jdl, field, message", [
    ('[ Executable = "/bin/true";\n  LeaseType = "sometimes"; ]', None, "LeaseType must be one of"),
    ('[ Executable = "/bin/true";\n  LeaseDuration = 99999; ]', "LeaseDuration",
     "LeaseDuration 99999 s is more than this CE's GlueCEPolicyMaxWallClockTime (7200 s)"),
    ('[ Executable = "/bin/true";\n  VMMemory = 4096; ]', "VMMemory",
     "VMMemory 4096 MB is more than a node's memory (2048 MB"),
    ('[ Executable = "/bin/true";\n  LeaseType = "advance-reservation"; LeaseStart = 1000; LeaseDuration = 5; ]',
     "LeaseStart", "LeaseStart 1000 is in the past"),
])
def test_bad_lease_attributes_are_refused_naming_the_attribute(site, receiver, jdl, field, message):
    ce_url, _, _ = site(n_nodes=1)
    key, resp = submit(ce_url, receiver, jdl, "lease.jdl")
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["file"] == "lease.jdl" and err["line"] == 2 and err["column"] >= 3
    assert err["message"].startswith(f"lease.jdl:2:{err['column']}: ") and message in err["message"]
    if field:
        assert err["field"] == field
    assert requests.get(f"{ce_url}/jobs/{key}", timeout=5).status_code == 404


def test_vmimage_is_recorded_and_vmmemory_sizes_the_lease(site, receiver):
    ce_url, _, _ = site(n_nodes=1)
    key, _ = submit(ce_url, receiver, '[ Executable = "/bin/true"; VMImage = "http://images.example.org/sl5.img"; '
                                      'VMImageSize = 1024; VMMemory = 1024; ]')
    receiver.wait_event(key, "done")
    lease = record(ce_url, key)["lease"]
    assert lease["image"] == "http://images.example.org/sl5.img" and lease["image_mb"] == 1024
    assert lease["memory_mb"] == 1024 and lease["duration_s"] == 7200
    assert lease["duration_from"] == "max_wallclock_s"


def test_glue_of_an_idle_lease_ce(site, receiver):
    ce_url, _, _ = site(n_nodes=2, vwns_per_node=3)
    glue = glue_attrs(ce_url)
    assert glue["GlueCEStateFreeCPUs"] == ["6"] and glue["GlueCEStateEstimatedResponseTime"] == ["0"]
    empty_url, _, _ = site(n_nodes=0)
    assert glue_attrs(empty_url)["GlueCEStateEstimatedResponseTime"] == [str(ERT_INFINITE_S)]
    key, _ = submit(empty_url, receiver, sleep_jdl(0.1))
    waiting = receiver.wait_for(lambda _: record(empty_url, key)["reason"] and record(empty_url, key))
    assert waiting["state"] == "Scheduled" and waiting["reason"] == "not started yet: the CE has no node agents"
    assert waiting["outcome"] == "not-started"


@given(st.integers(min_value=1, max_value=64), st.integers(min_value=1, max_value=1 << 20), st.data())
def test_exactly_k_job_leases_fit_on_a_node(cpus, ram_mb, data):
    k = data.draw(st.integers(min_value=1, max_value=min(100 * cpus, ram_mb)))   # what validate() allows
    units = vwn_slot_units(cpus, k)
    assert units >= 1 and units * k <= cpus * 100
    node = resource_vector(cpu=units * k, memory=ram_mb)    # the engine's node, as LeaseScheduling builds it
    assert vms_in(node, resource_vector(cpu=units, memory=ram_mb // k)) == k


def test_slot_units_and_config_checks():
    assert vwn_slot_units(1, 4) == 25 and vwn_slot_units(1, 3) == 33 and vwn_slot_units(2, 3) == 66
    with pytest.raises(ValueError):
        vwn_slot_units(1, 101)
    base = {"ce_id": "c:1/vgrid-vwn-q", "host": "c", "site": "s", "queue": "q", "nodes": []}
    assert CEAgentConfig.from_dict(base).scheduler == "leases"
    assert CEAgentConfig.from_dict(base).vwns_per_node == 4
    for change, message in [({"scheduler": "fifo"}, "field 'scheduler'"),
                            ({"vwns_per_node": 0}, "field 'vwns_per_node'"),
                            ({"vwns_per_node": 101}, "field 'vwns_per_node'"),
                            ({"vwns_per_node": 8, "ram_mb": 4}, "field 'vwns_per_node'.*1 MB"),
                            ({"lease_tick_s": 0}, "field 'lease_tick_s'")]:
        with pytest.raises(ConfigError, match=message):
            CEAgentConfig.from_dict({**base, **change})


def test_lease_config_file_is_checked_and_used(tmp_path, site, receiver):
    bad = tmp_path / "bad.toml"
    bad.write_text('[scheduling]\nbackfilling = "sometimes"\n')
    base = {"ce_id": "c:1/vgrid-vwn-q", "host": "c", "site": "s", "queue": "q", "nodes": []}
    with pytest.raises(ConfigError, match="field 'lease_config': .*bad.toml.*backfilling"):
        CEAgentConfig.from_dict({**base, "lease_config": str(bad)})
    good = tmp_path / "lease.toml"
    good.write_text('[scheduling]\nbackfilling = "off"\nsuspension = "all"\n')
    _, ce, _ = site(n_nodes=1, lease_config=str(good))
    cfg = ce.leases.engine.config
    assert cfg.backfilling == "off" and cfg.suspension == "all"    # suspend_vwns (default): frozen VWNs
    assert cfg.migration == "no"                                   # live migration: issue 14
    _, ce, _ = site(n_nodes=1, lease_config=str(good), suspend_vwns=False)
    assert ce.leases.engine.config.suspension == "none"            # off: deleted and restarted


def test_advance_reservation_without_room_is_aborted_with_the_engine_reason(site, receiver):
    ce_url, _, _ = site(n_nodes=1, vwns_per_node=1)
    start = int(time.time()) + 30
    ar_jdl = ('[ Executable = "/bin/true"; LeaseType = "advance-reservation"; '
              f'LeaseStart = {start}; LeaseDuration = 60; ]')
    first, _ = submit(ce_url, receiver, ar_jdl)
    second, resp = submit(ce_url, receiver, ar_jdl)
    assert resp.status_code == 202
    aborted = receiver.wait_event(second, "aborted")
    assert aborted["reason"] == "advance reservation rejected: not enough resources over the requested interval"
    assert aborted["outcome"] == "lease-rejected"
    assert record(ce_url, first)["lease"]["state"] == "Scheduled"
    requests.post(f"{ce_url}/jobs/{first}/cancel", timeout=15)
    assert record(ce_url, first)["lease"]["state"] == "Cancelled"
