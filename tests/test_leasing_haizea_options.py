"""Haizea 1.1 options that vgrid used to accept only at their defaults, annotation files, injection
of any lease type, and the per-decision log (issue 16; vwn_agents.leasing.haizea_options,
annotations, decisionlog).

Each option is run on a small LWF written here, read through a Haizea-format configuration
file, and compared with the same run without the option: the difference is what Haizea 1.1
defines the option to do (docs/leasing.md, "Haizea configuration files").
"""
import io
import json
import math

import pytest
from click.testing import CliRunner

from vgrid_cli.simulate_cmds import simulate_cmd
from vgrid_runtime.clock import SimulatedClock
from vwn_agents.leasing import (LeaseConfig, LeaseScheduler, SimulatedNodes, read_trace, simulate,
                                uniform_site)
from vwn_agents.leasing.config import ConfigError, load_config
from vwn_agents.leasing.decisionlog import DecisionLog
from vwn_agents.leasing.haizeaconf import load_haizea
from vwn_agents.leasing.model import Lease, LeaseState, LeaseType, resource_vector

CONF = """[general]
mode: simulated
lease-preparation: {prep}
[scheduling]
mapper: greedy
policy-preemption: ar-preempts-everything
suspension: all
suspend-rate: 32
resume-rate: 32
{scheduling}
[simulation]
clock: simulated
resources: in-tracefile
imagetransfer-bandwidth: 100
{simulation}
[deploy-imagetransfer]
{deploy}
[tracefile]
tracefile: trace.lwf
{tracefile}
"""


def lwf(nodes: int, *leases: dict) -> str:
    """An LWF with ``nodes`` nodes of 1 CPU / 1024 MB and the given leases: dicts with
    ``arrival`` (HH:MM:SS), ``n`` VMs, ``dur``, optional ``start`` ("now" or HH:MM:SS),
    ``real``, ``mem`` and ``id``."""
    reqs = []
    for i, l in enumerate(leases, 1):
        start = l.get("start")
        start_xml = "<start/>" if start is None else (
            "<start><now/></start>" if start == "now" else f'<start><exact time="{start}"/></start>')
        real = f'<realduration time="{l["real"]}"/>' if l.get("real") else ""
        reqs.append(f"""<lease-request arrival="{l['arrival']}">{real}
  <lease id="{l.get('id', i)}" preemptible="{'false' if start else 'true'}">
    <nodes><node-set numnodes="{l['n']}"><res amount="100" type="CPU"/>
      <res amount="{l.get('mem', 1024)}" type="Memory"/></node-set></nodes>
    {start_xml}<duration time="{l['dur']}"/>
    <software><disk-image id="{l.get('image', 'foo.img')}" size="1024"/></software>
  </lease>
</lease-request>""")
    return f"""<?xml version="1.0"?>
<lease-workload name="t"><site><resource-types names="CPU Memory"/><nodes>
<node-set numnodes="{nodes}"><res type="CPU" amount="100"/><res type="Memory" amount="1024"/></node-set>
</nodes></site><lease-requests>
{chr(10).join(reqs)}
</lease-requests></lease-workload>
"""


# Haizea's "preemption" test trace: a running best-effort lease, suspended for an AR on all 4 nodes
PREEMPTION = lwf(4, dict(arrival="00:00:00", n=1, dur="01:00:00"),
                 dict(arrival="00:15:00", n=4, dur="00:30:00", start="00:30:00"))
# an AR known first, then a best-effort lease that could run in the 1790 s gap before it
GAP = lwf(4, dict(arrival="00:00:00", n=4, dur="00:30:00", start="00:30:00"),
          dict(arrival="00:00:10", n=1, dur="01:00:00"))


def write(tmp_path, trace: str, prep="unmanaged", scheduling="", simulation="", tracefile="", deploy="",
          extra=None):
    (tmp_path / "trace.lwf").write_text(trace)
    for name, text in (extra or {}).items():
        (tmp_path / name).write_text(text)
    conf = tmp_path / "haizea.conf"
    conf.write_text(CONF.format(prep=prep, scheduling=scheduling, simulation=simulation, tracefile=tracefile,
                                deploy=deploy))
    return conf


def run(tmp_path, trace: str, *args, **sections) -> dict:
    conf = write(tmp_path, trace, **sections)
    res = CliRunner().invoke(simulate_cmd, ["--config", str(conf), "--json", *args])
    assert res.exit_code == 0, res.output
    out = res.output[res.output.index("{"):]
    return {l["id"]: l for l in json.loads(out)["leases"]}


def segs(rec) -> list:
    return [(s["start_s"], s["end_s"]) for s in rec["segments"]]


def test_the_preemption_trace_with_defaults(tmp_path):
    leases = run(tmp_path, PREEMPTION)
    # 1024 MB at 32 MB/s: 32 s to suspend before the AR at 1800 s and to resume after it
    assert segs(leases[1]) == [(0.0, 1768.0), (3632.0, 5464.0)]
    assert segs(leases[2]) == [(1800.0, 3600.0)]


def test_override_suspend_time(tmp_path):
    leases = run(tmp_path, PREEMPTION, scheduling="override-suspend-time: 100")
    assert segs(leases[1]) == [(0.0, 1700.0), (3632.0, 5532.0)]


def test_override_resume_time(tmp_path):
    leases = run(tmp_path, PREEMPTION, scheduling="override-resume-time: 50")
    assert segs(leases[1]) == [(0.0, 1768.0), (3650.0, 5482.0)]


def test_enactment_overhead_lengthens_suspension_resumption_and_shutdown(tmp_path):
    leases = run(tmp_path, PREEMPTION, scheduling="enactment-overhead: 5")
    # 32 + 5 s per VM to suspend and resume; the 4-VM AR reserves 4 x 5 s to shut down
    assert segs(leases[2]) == [(1800.0, 3620.0)]
    assert segs(leases[1])[0] == (0.0, 1763.0)
    assert segs(leases[1])[1][0] == 3620.0 + 37.0


def test_shutdown_time_is_reserved_but_skipped_by_a_lease_that_ends_early(tmp_path):
    trace = lwf(1, dict(arrival="00:00:00", n=1, dur="01:00:00"),
                dict(arrival="00:00:00", n=1, dur="01:00:00", real="00:30:00"),
                dict(arrival="00:00:00", n=1, dur="01:00:00"))
    base = run(tmp_path, trace)
    assert [segs(base[i]) for i in (1, 2, 3)] == [[(0.0, 3600.0)], [(3600.0, 5400.0)], [(5400.0, 9000.0)]]
    leases = run(tmp_path, trace, scheduling="shutdown-time: 60")
    assert [segs(leases[i]) for i in (1, 2, 3)] == [[(0.0, 3660.0)], [(3660.0, 5460.0)], [(5460.0, 9120.0)]]


def test_override_memory(tmp_path):
    leases = run(tmp_path, PREEMPTION, tracefile="override-memory: 512")
    assert segs(leases[1])[0] == (0.0, 1784.0)      # 512 MB at 32 MB/s: 16 s


def test_force_scheduling_threshold(tmp_path):
    assert segs(run(tmp_path, GAP)[2])[0] == (10.0, 1768.0)   # threshold 64 s: it runs in the gap
    leases = run(tmp_path, GAP, scheduling="force-scheduling-threshold: 2000")
    assert segs(leases[2]) == [(3600.0, 7200.0)]              # 1790 s < 2000 s: after the AR


def test_force_imagetransfer_time(tmp_path):
    trace = lwf(2, dict(arrival="00:00:00", n=1, dur="00:10:00"))
    # 1024 MB at 100 Mb/s: 81.92 s, rounded up to the second as Haizea 1.1 does (compat mode)
    assert run(tmp_path, trace, prep="imagetransfer")[1]["start_s"] == math.ceil(1024 / 12.5)
    leases = run(tmp_path, trace, prep="imagetransfer", deploy="force-imagetransfer-time: 10")
    assert leases[1]["start_s"] == 10.0


def test_policy_admission_no_ars(tmp_path):
    leases = run(tmp_path, PREEMPTION, scheduling="policy-admission: no-ARs")
    assert leases[2]["state"] == "Rejected" and "no-ARs" in leases[2]["reject_reason"]
    assert segs(leases[1]) == [(0.0, 3600.0)]


def test_stop_when_exact_and_besteffort_submitted(tmp_path):
    # as Haizea's simulated clock: the first time step at or after 10 min (the AR's arrival at
    # 15 min) is processed, then the run stops
    leases = run(tmp_path, PREEMPTION, simulation="stop-when: exact\nstop-when-time: 00:00:10:00")
    assert leases[1]["state"] == "Active" and leases[2]["state"] == "Scheduled"
    leases = run(tmp_path, PREEMPTION, simulation="stop-when: exact\nstop-when-time: 00:00:20:00")
    assert leases[1]["state"] == "Suspending"          # the next step is the suspension at 1768 s
    leases = run(tmp_path, PREEMPTION, simulation="stop-when: besteffort-submitted")
    assert list(leases) == [1] and leases[1]["state"] == "Active"   # the AR was never submitted
    leases = run(tmp_path, PREEMPTION, simulation="stop-when: best-effort-done")
    assert leases[1]["state"] == "Done"


def test_stop_when_exact_needs_a_time_in_toml_too(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('[simulation]\nstop-when = "exact"\n')
    with pytest.raises(ConfigError, match=r"c.toml: \[simulation\] stop-when = 'exact' needs stop-when-time"):
        load_config(toml)
    toml.write_text('[simulation]\nstop-when = "exact"\nstop-when-time = 1200.0\n[scheduling]\n'
                    'shutdown-time = 60.0\n')
    assert load_config(toml).stop_when_time == 1200.0
    toml.write_text('[scheduling]\nshutdown-time = "long"\n')
    with pytest.raises(ConfigError, match=r"c.toml: \[scheduling\] shutdown-time must be float"):
        load_config(toml)


def test_status_message_interval(tmp_path):
    conf = write(tmp_path, PREEMPTION, scheduling="status-message-interval: 10")
    h = load_haizea(conf)
    wl = read_trace(tmp_path / "trace.lwf")
    seen = []
    simulate(wl.leases, wl.nodes, h.config, status=lambda t, counts: seen.append((t, counts)))
    wl = read_trace(tmp_path / "trace.lwf")      # a simulation changes its leases' records
    times = [t for t, _ in seen]
    assert times and all(b - a >= 600 for a, b in zip([0.0] + times, times))
    assert seen[-1][1] == {"Done": 2}
    quiet = []
    (tmp_path / "q").mkdir()
    simulate(wl.leases, wl.nodes, load_haizea(write(tmp_path / "q", PREEMPTION)).config,
             status=lambda t, c: quiet.append(t))
    assert quiet == []
    res = CliRunner().invoke(simulate_cmd, ["--config", str(conf)])
    assert res.exit_code == 0 and "t = 900 s: Active 1, Scheduled 1" in res.output


def test_non_schedulable_interval_is_checked_and_changes_no_simulation(tmp_path):
    base = run(tmp_path, PREEMPTION)
    assert run(tmp_path, PREEMPTION, scheduling="non-schedulable-interval: 60") == base
    h = load_haizea(write(tmp_path, PREEMPTION, scheduling="non-schedulable-interval: 60"))
    assert any(opt == "non-schedulable-interval" for opt, _ in h.notes)


def test_bootshutdown_overhead_lengthens_requested_and_real_durations(tmp_path):
    trace = lwf(1, dict(arrival="00:00:00", n=1, dur="01:00:00", real="00:30:00"),
                dict(arrival="00:00:00", n=1, dur="01:00:00"))
    leases = run(tmp_path, trace, tracefile="add-overhead: all\nbootshutdown-overhead: 20")
    assert segs(leases[1]) == [(0.0, 1820.0)] and segs(leases[2]) == [(1820.0, 5440.0)]


# ---------------------------------------------------------------- annotations and injection
ANNOTATED = lwf(4, dict(arrival="00:00:00", n=1, dur="01:00:00"),
                dict(arrival="00:10:00", n=1, dur="01:00:00"),
                dict(arrival="00:20:00", n=1, dur="01:00:00", start="02:00:00"))


def test_annotations_by_id_change_type_start_and_image(tmp_path):
    lwfa = """<lease-annotations>
  <attributes><attr name="set" value="a"/></attributes>
  <lease-annotation id="2"><start><exact time="+00:30:00"/></start>
    <software><disk-image id="big.img" size="4096"/></software></lease-annotation>
  <lease-annotation id="3"><start><now/></start><extra><attr name="x" value="1"/></extra></lease-annotation>
</lease-annotations>
"""
    leases = run(tmp_path, ANNOTATED, tracefile="annotationfile: a.lwfa", extra={"a.lwfa": lwfa})
    assert leases[1]["type"] == "BE" and leases[1]["start_s"] == 0.0
    assert leases[2]["type"] == "AR" and leases[2]["start_s"] == 600.0 + 1800.0
    assert leases[3]["type"] == "IM" and leases[3]["start_s"] == 1200.0


def test_annotations_without_ids_go_in_submission_order(tmp_path):
    lwfa = ("<lease-annotations><lease-annotation><start/></lease-annotation>"
            "<lease-annotation><start><exact time=\"+01:00:00\"/></start></lease-annotation>"
            "</lease-annotations>")
    (tmp_path / "b.lwfa").write_text(lwfa)
    (tmp_path / "trace.lwf").write_text(ANNOTATED)
    res = CliRunner().invoke(simulate_cmd, [str(tmp_path / "trace.lwf"), "--annotations", str(tmp_path / "b.lwfa"),
                                            "--json"])
    assert res.exit_code == 0, res.output
    leases = {l["id"]: l for l in json.loads(res.output)["leases"]}
    assert [leases[i]["type"] for i in (1, 2, 3)] == ["BE", "AR", "AR"]
    assert leases[2]["start_s"] == 600.0 + 3600.0


@pytest.mark.parametrize("body, message", [
    ('<lease-annotation id="1">\n<deadline time="+01:00:00"/></lease-annotation>', "deadline leases"),
    ('<lease-annotation id="1"/>\n<lease-annotation/>', "with and without an id"),
    ('<lease-annotation id="1"/>\n<lease-annotation id="1"/>', "lease 1 annotated twice"),
    ('<lease-annotation id="1">\n<start><exact time="soon"/></start></lease-annotation>', "bad time 'soon'"),
])
def test_bad_annotation_files_name_file_and_line(tmp_path, body, message):
    lwfa = tmp_path / "bad.lwfa"
    lwfa.write_text(f"<lease-annotations>\n{body}\n</lease-annotations>\n")
    (tmp_path / "trace.lwf").write_text(ANNOTATED)
    res = CliRunner().invoke(simulate_cmd, [str(tmp_path / "trace.lwf"), "--annotations", str(lwfa)])
    assert res.exit_code == 2 and message in res.output and f"{lwfa}:3" in res.output.replace("\n", ""), \
        res.output
    assert "Traceback" not in res.output


def test_injectionfile_takes_every_lease_type(tmp_path):
    inj = lwf(4, dict(arrival="00:05:00", n=1, dur="00:10:00"),
              dict(arrival="00:06:00", n=1, dur="00:10:00", start="now"),
              dict(arrival="00:07:00", n=2, dur="00:10:00", start="01:00:00"))
    leases = run(tmp_path, lwf(4, dict(arrival="00:00:00", n=1, dur="00:30:00")),
                 tracefile="injectionfile: inj.lwf", extra={"inj.lwf": inj})
    # injected ids are Haizea's: the file's + 1,000,000 (annotations by id can name them)
    assert [(leases[i]["type"], leases[i]["start_s"]) for i in (1_000_001, 1_000_002, 1_000_003)] == \
        [("BE", 300.0), ("IM", 360.0), ("AR", 3600.0)]


# ---------------------------------------------------------------- the per-decision log
def test_decision_log_explains_placements_preemptions_and_rejections(tmp_path):
    trace = PREEMPTION.replace("</lease-requests>", """<lease-request arrival="00:20:00">
  <lease id="3" preemptible="false"><nodes><node-set numnodes="9"><res amount="100" type="CPU"/>
  <res amount="1024" type="Memory"/></node-set></nodes><start><exact time="02:00:00"/></start>
  <duration time="00:10:00"/></lease></lease-request></lease-requests>""")
    log = tmp_path / "decisions.jsonl"
    run(tmp_path, trace, "--decision-log", str(log))
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    by = {(r["lease"], r["decision"]) for r in recs}
    assert by == {(1, "placed"), (2, "preempted"), (2, "accepted"), (3, "rejected")}
    first = next(r for r in recs if r["lease"] == 1)
    assert first["start"] == 0.0 and first["nodes"] == ["P1"] and first["candidates"][-1] == [0.0, 4]
    assert first["hosts"] == [{"node": "P1", "vms": 1, "hostable": 1, "score": None}]
    resumed = [r for r in recs if r["lease"] == 1][1]
    assert resumed["resuming"] and resumed["start"] == 3600.0
    pre = next(r for r in recs if r["decision"] == "preempted")
    assert pre["victims"] == [{"lease": 1, "order": 0, "submit_s": 0.0, "score": [0, 0.0], "preempted": True}]
    acc = next(r for r in recs if r["decision"] == "accepted")
    # a Haizea file runs in Haizea-compatible mode: AR hosts are scored on the schedule before
    # preemption (compat.py), so the node that held the victim comes last
    assert acc["nodes"] == ["P2", "P3", "P4", "P1"] and all(h["hostable"] == 1 for h in acc["hosts"])
    rej = next(r for r in recs if r["decision"] == "rejected")
    assert rej["reason"] == "the site cannot host that many VMs even when empty"



def test_decision_log_keeps_no_preemption_that_was_rolled_back():
    """An AR's preemption is committed inside the AR's own transaction; when the AR's image
    then cannot arrive in time the whole placement is rolled back, the victim keeps running,
    and the log says only "rejected" (SlotTable.after_commit), not "preempted"."""
    vm = resource_vector(cpu=100, memory=512)
    site = uniform_site(1, 1, 1024)
    s = LeaseScheduler(site, LeaseConfig({"lease-preparation": "imagetransfer", "imagetransfer-bandwidth": 80.0}),
                       SimulatedClock(0.0), SimulatedNodes(site))
    out = io.StringIO()
    s.decisions = DecisionLog(out, site)
    s.submit(Lease(1, LeaseType.BEST_EFFORT, 0.0, 10000.0, 1, vm, "be.img", 100.0, True))
    s.process(0.0)
    s.clock.advance_to(100.0)
    s.process(100.0)
    # 4,096 MB at 10 MB/s cannot be on the node 10 s from now
    s.submit(Lease(2, LeaseType.ADVANCE_RESERVATION, 100.0, 50.0, 1, vm, "ar.img", 4096.0, True,
                   requested_start_s=110.0))
    assert s.leases[2].state is LeaseState.REJECTED and s.leases[1].state is LeaseState.ACTIVE
    assert [(r["lease"], r["decision"]) for r in map(json.loads, out.getvalue().splitlines())] == \
        [(1, "placed"), (2, "rejected")]
    assert s.decisions.records == 2

def test_decision_log_candidates_show_why_a_lease_waited(tmp_path):
    # backfilling: the best-effort lease takes a future reservation after the AR
    log = tmp_path / "d.jsonl"
    run(tmp_path, GAP, "--decision-log", str(log),
        scheduling="backfilling: aggressive\nforce-scheduling-threshold: 2000")
    placed = [json.loads(l) for l in log.read_text().splitlines() if '"placed"' in l][0]
    assert placed["start"] == 3600.0 and placed["future"] and placed["threshold_s"] == 2000.0
    counts = dict((t, k) for t, k in placed["candidates"])
    assert counts[10.0] == 0 and counts[3600.0] >= 1        # no 2000 s slot at 10 s: it waits


def test_decision_log_is_off_by_default_and_the_file_must_be_writable(tmp_path):
    wl = read_trace(write(tmp_path, PREEMPTION).parent / "trace.lwf")
    assert simulate(wl.leases, wl.nodes).scheduler.decisions is None
    wl = read_trace(tmp_path / "trace.lwf")
    out = []

    class Sink:
        def write(self, text):
            out.append(text)
    r = simulate(wl.leases, wl.nodes, decisions=DecisionLog(Sink(), wl.nodes))
    assert r.scheduler.decisions.records == len(out) > 0
    res = CliRunner().invoke(simulate_cmd, [str(tmp_path / "trace.lwf"), "--decision-log",
                                            str(tmp_path / "no-such-dir" / "d.jsonl")])
    assert res.exit_code == 2 and "cannot write" in res.output


# the option names of Haizea 1.1's core/configfile.py (names only)
HAIZEA_11_OPTIONS = """loglevel logfile mode lease-preparation lease-failure-handling persistence-file mapper
policy-admission policy-preemption policy-host-selection policy-pricing wakeup-interval backfilling
backfilling-reservations suspension suspend-rate resume-rate suspendresume-exclusion
scheduling-threshold-factor override-suspend-time override-resume-time force-scheduling-threshold
migration non-schedulable-interval shutdown-time enactment-overhead clock starttime resources
imagetransfer-bandwidth stop-when stop-when-time status-message-interval sanity-check datafile probes
attributes transfer-mechanism avoid-redundant-transfers force-imagetransfer-time diskimage-reuse
diskimage-cache-size tracefile annotationfile injectionfile runtime-slowdown-overhead add-overhead
bootshutdown-overhead override-memory host port stop-when-no-more-leases dry-run""".split()


def test_every_haizea_11_option_is_known():
    from vwn_agents.leasing.haizeaconf import KNOWN_OPTIONS
    assert sorted(set(HAIZEA_11_OPTIONS) - KNOWN_OPTIONS) == []


def test_runtime_slowdown_follows_haizea_in_haizea_files_and_vgrid_in_toml(tmp_path):
    trace = lwf(1, dict(arrival="00:00:00", n=1, dur="01:00:00", real="00:30:00"),
                dict(arrival="00:00:00", n=1, dur="01:00:00"))
    over = "add-overhead: all\nruntime-slowdown-overhead: 10\nbootshutdown-overhead: 20"
    leases = run(tmp_path, trace, tracefile=over)
    # Haizea 1.1: requested = ceil(real x 1.1) + 20 = 2001 s, the real run only + 20 s; the
    # second lease requests ceil(3600 x 1.1) + 20 = 3981 s (round_datetime_delta rounds up the
    # float 3960.0000000000005)
    assert segs(leases[1]) == [(0.0, 1820.0)] and segs(leases[2]) == [(1820.0, 1820.0 + 3981.0)]
    toml = tmp_path / "c.toml"
    toml.write_text('[general]\nlease-preparation = "unmanaged"\n[tracefile]\nadd-overhead = "all"\n'
                    'runtime-slowdown-overhead = 10.0\nbootshutdown-overhead = 20.0\n')
    res = CliRunner().invoke(simulate_cmd, [str(tmp_path / "trace.lwf"), "--config", str(toml), "--json"])
    assert res.exit_code == 0, res.output
    leases = {l["id"]: l for l in json.loads(res.output)["leases"]}
    # vgrid: the VM runs 10 % slower, so the real run is 1980 + 20 s too
    assert segs(leases[1]) == [(0.0, 2000.0)] and segs(leases[2]) == [(2000.0, 2000.0 + 3980.0)]


def test_decision_log_host_scores_prefer_a_node_with_the_image(tmp_path):
    trace = lwf(3, dict(arrival="00:00:00", n=1, dur="00:10:00", image="a.img"),
                dict(arrival="00:20:00", n=1, dur="00:10:00", image="a.img"))
    log = tmp_path / "d.jsonl"
    run(tmp_path, trace, "--decision-log", str(log), "--compat", "none", prep="imagetransfer",
        deploy="diskimage-reuse: image-caches")
    placed = [json.loads(l) for l in log.read_text().splitlines()]
    first, second = placed
    assert first["hosts"][0]["score"] == [0, 1]            # no node has a.img yet
    assert second["nodes"] == first["nodes"] and second["start"] == 1200.0
    assert second["hosts"][0]["score"] == [1, 1]           # reuse: the image is in that node's pool
    # Haizea's greedy score ignores images (compat_staging rule 5): the reuse shows in the start
    log.unlink()
    run(tmp_path, trace, "--decision-log", str(log), prep="imagetransfer", deploy="diskimage-reuse: image-caches")
    first, second = [json.loads(l) for l in log.read_text().splitlines()]
    assert first["hosts"][0]["score"] == [1.0] == second["hosts"][0]["score"]
    assert second["nodes"] == first["nodes"] and second["start"] == 1200.0


def test_a_shutdown_time_past_a_deadline_is_a_clear_error(tmp_path):
    (tmp_path / "t.lwf").write_text(lwf(1, dict(arrival="00:00:00", n=1, dur="01:00:00")).replace(
        '<lease id="1" preemptible="true">', '<lease id="1" preemptible="true" deadline="01:00:00">'))
    toml = tmp_path / "c.toml"
    toml.write_text("[scheduling]\nshutdown-time = 60.0\n")
    res = CliRunner().invoke(simulate_cmd, [str(tmp_path / "t.lwf"), "--config", str(toml)])
    assert res.exit_code == 2 and "shutdown-time" in res.output and "deadline" in res.output
    assert "Traceback" not in res.output
