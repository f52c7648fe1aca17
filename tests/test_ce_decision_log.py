"""The live CE agent's per-decision log (``decision_log``, vwn_agents/decision_file.py): the
same lease engine as ``vgrid simulate --decision-log``, over real loopback node agents; the
file is bounded (rotated to PATH.1) and what-if placements (GlueCEStateEstimatedResponseTime)
are not logged."""
from __future__ import annotations

import json
import stat

import pytest

from vgrid_runtime.config import ConfigError
from vwn_agents.ce_agent import CEAgentConfig
from vwn_agents.decision_file import BoundedLines

from .test_ce_agent import glue_attrs, site, sleep_jdl, submit  # noqa: F401  (fixtures)
from .waiting import gated_jdl, release, wait_until

BASE = {"ce_id": "ce1.vgrid.local:8443/vgrid-vwn-long", "host": "ce1.vgrid.local", "site": "S",
        "queue": "long", "nodes": ["http://127.0.0.1:1"]}


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_live_engine_logs_why_each_job_went_where(site, receiver, tmp_path):
    log = tmp_path / "decisions.jsonl"
    ce_url, ce, _nodes = site(n_nodes=1, vwns_per_node=1, decision_log=str(log))
    node_url = ce.nodes[0]
    jdl, gate = gated_jdl(tmp_path, "hold")
    k1, _ = submit(ce_url, receiver, jdl)
    receiver.wait_event(k1, "running")
    first = wait_until(lambda: [r for r in records(log) if r.get("job") == k1], "k1's decision")
    assert first[0]["decision"] == "placed" and first[0]["nodes"] == [node_url]
    assert first[0]["type"] == "BE" and first[0]["future"] is False
    assert first[0]["hosts"][0]["node"] == node_url and first[0]["hosts"][0]["vms"] == 1
    assert abs(first[0]["t"] - ce.clock.now()) < 600          # the CE clock's time, epoch seconds
    assert stat.S_IMODE(log.stat().st_mode) == 0o640
    k2, _ = submit(ce_url, receiver, sleep_jdl(0.1))              # waits behind k1 (one slot)
    k3, _ = submit(ce_url, receiver, '[ Executable = "/bin/true"; LeaseType = "immediate"; LeaseDuration = 60; ]',
                   "im.jdl")
    receiver.wait_event(k3, "aborted")
    rejected = wait_until(lambda: [r for r in records(log) if r.get("job") == k3], "k3's decision")
    assert rejected[0]["decision"] == "rejected" and "cannot start now" in rejected[0]["reason"]
    before = len(records(log))
    for _ in range(3):                    # the ERT outlook places the queue in a rolled-back what-if
        glue_attrs(ce_url)
    assert len(records(log)) == before
    release(gate)
    receiver.wait_event(k2, "done")
    placed2 = [r for r in records(log) if r.get("job") == k2 and r["decision"] == "placed"]
    assert placed2 and placed2[-1]["nodes"] == [node_url]
    assert {r["job"] for r in records(log)} <= {k1, k2, k3}


def test_the_log_is_bounded_and_lines_stay_whole(tmp_path):
    path = tmp_path / "d.jsonl"
    sink = BoundedLines(path, max_mb=0.001)                     # 1,000 bytes
    for i in range(100):
        sink.write(json.dumps({"i": i, "pad": "x" * 40}) + "\n")
    sink.close()
    sink.write("after close is dropped\n")
    kept = records(path.with_name("d.jsonl.1")) + records(path)
    assert sink.rotations >= 4 and path.stat().st_size <= 1000 and path.with_name("d.jsonl.1").stat().st_size <= 1000
    assert [r["i"] for r in kept] == list(range(100 - len(kept), 100))   # the newest, in order, whole
    with pytest.raises(ValueError, match="max_mb must be > 0"):
        BoundedLines(path, 0)


def test_bad_options_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match="decision_log_max_mb': must be > 0"):
        CEAgentConfig.from_dict({**BASE, "decision_log": str(tmp_path / "d"), "decision_log_max_mb": 0})
    with pytest.raises(ConfigError, match="decision_log': directory of .*/nope/d' does not exist"):
        CEAgentConfig.from_dict({**BASE, "decision_log": str(tmp_path / "nope" / "d")})
