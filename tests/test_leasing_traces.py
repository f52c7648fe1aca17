"""Trace input (LWF XML, old LWF text, SWF) and the configuration file."""
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from vwn_agents.leasing.requesttypes import RequestType
from vwn_agents.leasing import ConfigError, LeaseType, TraceError, load_config, read_site, read_trace
from vwn_agents.leasing.config import OPTIONS, LeaseConfig, options_markdown
from vwn_agents.leasing.traces import parse_time

from .paths import TRACES

BLUE = TRACES / "haizea/blue/30days.swf"
LWF_OLD = TRACES / "lwf/haizea-blue-60days-inj-work_20-dur_1h-size_1small.lwf"


@given(st.integers(0, 9), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59))
def test_parse_time_roundtrip(d, h, m, s):
    text = f"{h:02d}:{m:02d}:{s:02d}.00" if d == 0 else f"{d}:{h:02d}:{m:02d}:{s:02d}"
    assert parse_time(text) == d * 86400 + h * 3600 + m * 60 + s


@given(st.text(max_size=12))
def test_parse_time_rejects_or_parses(text):
    try:
        assert parse_time(text) >= 0
    except ValueError as exc:
        assert "bad time" in str(exc)


XML = """<?xml version="1.0"?>
<lease-workload name="t">
  <site><resource-types names="CPU Memory"/>
    <nodes><node-set numnodes="3"><res type="CPU" amount="200"/><res type="Memory" amount="2048"/></node-set></nodes>
  </site>
  <lease-requests>
    <lease-request arrival="00:10:00.00">
      <realduration time="00:05:00"/>
      <lease id="7" preemptible="true">
        <nodes><node-set numnodes="2"><res amount="100" type="CPU"/><res amount="512" type="Memory"/></node-set></nodes>
        <start/><duration time="00:15:00"/>
        <software><disk-image id="x.img" size="600"/></software>
      </lease>
    </lease-request>
    <lease-request arrival="00:00:00">
      <lease id="8" preemptible="false">
        <nodes><node-set numnodes="1"><res amount="100" type="CPU"/><res amount="512" type="Memory"/></node-set></nodes>
        <start><exact time="01:00:00"/></start><duration time="00:30:00"/>
        <software><disk-image id="y.img" size="1024"/></software>
      </lease>
    </lease-request>
    <lease-request arrival="00:00:00">
      <lease id="9" preemptible="false">
        <nodes><node-set numnodes="1"><res amount="100" type="CPU"/><res amount="512" type="Memory"/></node-set></nodes>
        <start><now/></start><duration time="00:30:00"/>
        <software><disk-image id="y.img" size="1024"/></software>
      </lease>
    </lease-request>
  </lease-requests>
</lease-workload>
"""


def test_lwf_xml(tmp_path):
    p = tmp_path / "t.lwf"
    p.write_text(XML)
    w = read_trace(p)
    assert [n.capacity[:2] for n in w.nodes] == [(200, 2048)] * 3
    by_id = {l.id: l for l in w.leases}
    be, ar, im = by_id[7], by_id[8], by_id[9]
    assert be.type is LeaseType.BEST_EFFORT and be.submit_s == 600 and be.duration_s == 900
    assert be.real_duration_s == 300 and be.n_vms == 2 and be.per_vm[:2] == (100, 512)
    assert be.image_id == "x.img" and be.image_mb == 600 and be.preemptible
    assert ar.type is LeaseType.ADVANCE_RESERVATION and ar.requested_start_s == 3600 and not ar.preemptible
    assert im.type is LeaseType.IMMEDIATE
    assert [l.id for l in w.leases] == [8, 9, 7]  # sorted by submission


def test_lwf_xml_errors_name_file_and_line(tmp_path):
    p = tmp_path / "bad.lwf"
    p.write_text(XML.replace('<duration time="00:15:00"/>', '<duration time="15 minutes"/>'))
    with pytest.raises(TraceError) as exc:
        read_trace(p)
    assert str(exc.value).startswith(f"{p}:9:") and "bad time" in str(exc.value)
    p.write_text(XML.replace("</lease-requests>", ""))
    with pytest.raises(TraceError) as exc:
        read_trace(p)
    assert str(p) in str(exc.value) and exc.value.line > 0


def test_deadline_leases_are_refused_not_taken_for_ars(tmp_path):
    p = tmp_path / "deadline.lwf"
    p.write_text(XML.replace('<start><exact time="01:00:00"/></start><duration time="00:30:00"/>',
                             '<start><exact time="01:00:00"/></start><deadline time="02:00:00"/>'
                             '<duration time="00:30:00"/>'))
    with pytest.raises(TraceError) as exc:
        read_trace(p)
    assert str(exc.value).startswith(f"{p}:18:") and "deadline leases" in str(exc.value)
    p.write_text(XML.replace("<start><now/></start>", "<start><soon/></start>"))
    with pytest.raises(TraceError, match="<start> may hold <exact> or <now>, not <soon>"):
        read_trace(p)


def test_old_lwf_text(tmp_path):
    p = tmp_path / "old.lwf"
    p.write_text("# comment\n0 86400 4504 4000 17 1 1024 0 'NONE.img' 600\n10 -1 100 100 2 1 512 0 a.img 300\n")
    w = read_trace(p)
    ar, be = w.leases
    assert ar.type is LeaseType.ADVANCE_RESERVATION and ar.requested_start_s == 86400 and ar.n_vms == 17
    assert ar.real_duration_s == 4000 and ar.image_id == "NONE.img" and ar.per_vm[:2] == (100, 1024)
    assert be.type is LeaseType.BEST_EFFORT and be.real_duration_s is None and be.preemptible
    p.write_text("0 86400 4504\n")
    with pytest.raises(TraceError, match=r"old.lwf:1: expected 10 fields"):
        read_trace(p)


def test_old_lwf_text_carries_the_seed_002_attributes(tmp_path):
    """vgrid extension: request-type=, origin=, deadline= after the 10 fields (docs/leasing.md)."""
    p = tmp_path / "s002.lwf"
    p.write_text("0 -1 600 600 2 1 512 0 a.img 0 request-type=cancellable\n"
                 "5 -1 300 300 1 1 512 0 a.img 0 origin=local request-type=non-preemptable\n"
                 "9 -1 100 100 1 1 512 0 a.img 0 request-type=Deadline-Constraint-Migratable deadline=00:10:00\n"
                 "9 -1 100 100 1 1 512 0 a.img 0 deadline=900 origin=external\n"
                 "9 -1 100 100 1 1 512 0 a.img 0\n")
    c, loc, mig, dl, plain = read_trace(p).leases
    assert c.request_type is RequestType.BEST_EFFORT_CANCELLABLE and not c.local and c.is_be
    assert loc.local and loc.type is LeaseType.ADVANCE_RESERVATION and loc.requested_start_s == 5
    assert loc.request_type is RequestType.DEADLINE_CONSTRAINT_NON_PREEMPTABLE and not loc.preemptable
    assert mig.request_type is RequestType.DEADLINE_CONSTRAINT_MIGRATABLE and mig.deadline_s == 600
    assert dl.deadline_s == 900 and not dl.local
    assert plain.request_type is RequestType.BEST_EFFORT_SUSPENDABLE and plain.deadline_s is None
    for bad, what in (("priority=1", "expected name=value"), ("origin=remote", "origin"),
                      ("request-type=x", "request type 'x'"), ("deadline=soon", "deadline"),
                      ("origin=local origin=local", "given twice")):
        line = f"0 -1 10 10 1 1 512 0 a.img 0 {bad}"
        col = line.rindex(bad.split()[-1]) + 1                # the offending field's column
        p.write_text(line + "\n")
        with pytest.raises(TraceError) as exc:
            read_trace(p)
        assert (exc.value.line, exc.value.column) == (1, col) and what in exc.value.message, str(exc.value)
    p.write_text("0 -1 10 10 1 1 512 0 a.img 0 origin=local request-type=suspendable\n")
    with pytest.raises(TraceError, match=r"s002.lwf:1: .*local request"):    # Section 4.2: refused
        read_trace(p)


def test_swf_conversion_like_haizea(tmp_path):
    p = tmp_path / "t.swf"
    p.write_text("; header\n"
                 "1 0 5 100 8 -1 -1 8 200 -1 1 1 -1 -1 1 -1 -1 -1\n"     # ok: 8 procs, runs 100 of 200
                 "2 10 5 -1 8 -1 -1 8 200 -1 5 1 -1 -1 1 -1 -1 -1\n"     # cancelled in the queue: skipped
                 "3 20 5 300 8 -1 -1 16 200 -1 1 1 -1 -1 1 -1 -1 -1\n"   # runs longer than requested: capped
                 "4 30 5 0 8 -1 -1 8 -1 -1 1 1 -1 -1 1 -1 -1 -1\n"       # no requested time, no run time: skipped
                 "5 40 5 50 16 -1 -1 -1 -1 -1 1 1 -1 -1 1 -1 -1 -1\n")   # nothing requested: run time, allocated
    w = read_trace(p, cpus_per_node=8)
    assert [l.id for l in w.leases] == [1, 3, 5]
    a, b, c = w.leases
    assert c.n_vms == 2 and c.duration_s == 50 and c.real_duration_s is None
    assert a.n_vms == 1 and a.duration_s == 200 and a.real_duration_s == 100
    assert b.n_vms == 2 and b.real_duration_s is None  # min(300, 200) = requested


def test_blue_30_days_has_haizeas_5108_leases():
    assert len(read_trace(BLUE).leases) == 5108


def test_bundled_old_lwf_parses():
    w = read_trace(LWF_OLD)
    assert w.leases and all(l.type is LeaseType.ADVANCE_RESERVATION for l in w.leases)


def test_read_site(tmp_path):
    p = tmp_path / "site.xml"
    p.write_text('<site><nodes><node-set numnodes="2"><res type="CPU" amount="400"/>'
                 '<res type="Memory" amount="8192"/></node-set></nodes></site>')
    nodes = read_site(p)
    assert [n.name for n in nodes] == ["P1", "P2"] and nodes[0].capacity[:2] == (400, 8192)


def test_config_toml(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[scheduling]\nbackfilling = "conservative"\nsuspend-rate = 50\n'
                 '[deploy-imagetransfer]\ntransfer-mechanism = "multicast"\n')
    cfg = load_config(p)
    assert cfg.backfilling == "conservative" and cfg.suspend_rate == 50.0 and cfg.transfer_mechanism == "multicast"
    assert cfg.max_future_reservations == float("inf")
    p.write_text('[scheduling]\nbackfilling = "sometimes"\n')
    with pytest.raises(ConfigError, match=r"c.toml: \[scheduling\] backfilling = 'sometimes'; expected one of"):
        load_config(p)
    p.write_text('[simulation]\nbackfilling = "off"\n')
    with pytest.raises(ConfigError, match="belongs in \\[scheduling\\]"):
        load_config(p)
    p.write_text('[scheduling]\nbackfilling = \n')
    with pytest.raises(ConfigError, match="c.toml"):
        load_config(p)
    with pytest.raises(ConfigError, match="unknown option"):
        LeaseConfig({"no-such-option": 1})


def test_every_option_is_documented():
    table = options_markdown()
    docs = Path(__file__).resolve().parent.parent / "docs" / "leasing.md"
    text = docs.read_text() if docs.exists() else ""
    for opt in OPTIONS:
        assert f"`{opt.name}`" in table and opt.doc
        assert f"`{opt.name}`" in text, f"docs/leasing.md does not document {opt.name}"


def test_lwf_ids_are_offset_and_must_be_unique(tmp_path):
    p = tmp_path / "t.lwf"
    p.write_text(XML)
    assert sorted(l.id for l in read_trace(p, id_offset=100).leases) == [107, 108, 109]
    p.write_text(XML.replace('<lease id="8"', '<lease id="7"'))
    with pytest.raises(TraceError, match=r"t.lwf:\d+: lease id 7 already used on line 7"):
        read_trace(p)


rows = st.lists(st.tuples(st.integers(0, 10**6), st.one_of(st.just(-1), st.integers(0, 10**6)),
                          st.integers(1, 10**5), st.integers(1, 10**5), st.integers(1, 64),
                          st.integers(1, 4), st.integers(1, 8192), st.integers(0, 10**4),
                          st.from_regex(r"[a-z][a-z0-9_.]{0,12}", fullmatch=True), st.integers(0, 4096)),
                min_size=1, max_size=20)


@given(rows)
def test_old_lwf_text_fields_roundtrip(tmp_path_factory, rows):
    p = tmp_path_factory.mktemp("lwf") / "r.lwf"
    p.write_text("".join(" ".join(str(x) for x in r) + "\n" for r in rows))
    leases = sorted(read_trace(p).leases, key=lambda l: l.id)
    assert len(leases) == len(rows)
    for lease, (submit, start, dur, real, n, cpu, mem, disk, image, size) in zip(leases, rows):
        assert (lease.submit_s, lease.duration_s, lease.n_vms, lease.image_id, lease.image_mb) == \
            (submit, dur, n, image, size)
        assert lease.per_vm[:3] == (cpu * 100, mem, disk)
        assert lease.requested_start_s == (None if start == -1 else start)
        assert lease.real_duration_s == (None if real == dur else real)
