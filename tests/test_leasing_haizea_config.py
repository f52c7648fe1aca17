"""Haizea 1.1 configuration files read unchanged (vwn_agents.leasing.haizeaconf, issue 16)."""
import json

import pytest
from click.testing import CliRunner

from vwn_agents.leasing.config import ConfigError
from vwn_agents.leasing.haizeaconf import is_haizea_file, load_haizea
from vgrid_cli.simulate_cmds import simulate_cmd

# written for these tests in Haizea 1.1's format (sections, 'name: value', its option names)
HAIZEA = """[general]
loglevel: INFO
mode: simulated
lease-preparation: unmanaged
persistence-file: none

[scheduling]
mapper: greedy
policy-admission: accept-all
policy-preemption: ar-preempts-everything
wakeup-interval: 10
backfilling: aggressive
suspension: all
suspend-rate: 32
resume-rate: 32
migration: yes

[simulation]
clock: simulated
starttime: 2006-11-25 13:00:00
resources: 4  CPU:100 Memory:1024
imagetransfer-bandwidth: 100

[accounting]
datafile: /var/tmp/haizea/results.dat
probes: ar best-effort immediate cpu-utilization

[tracefile]
tracefile: /usr/share/haizea/traces/{trace}.lwf
"""
TOML = """[general]
lease-preparation = "unmanaged"
[scheduling]
policy-preemption = "ar-preempts-everything"
backfilling = "aggressive"
suspension = "all"
suspend-rate = 32.0
resume-rate = 32.0
migration = "yes"
diskimage-reuse = "none"
[deploy-imagetransfer]
diskimage-reuse = "none"
[simulation]
imagetransfer-bandwidth = 100.0
"""


def run(*args):
    return CliRunner().invoke(simulate_cmd, list(args))


@pytest.mark.parametrize("trace", ["preemption", "reservation", "wait", "migrate"])
def test_a_haizea_file_runs_like_the_equivalent_toml(tmp_path, trace):
    conf = tmp_path / "haizea.conf"
    conf.write_text(HAIZEA.format(trace=trace))
    toml = tmp_path / "same.toml"
    toml.write_text(TOML.replace('diskimage-reuse = "none"\n[deploy', "[deploy"))
    a = run("--config", str(conf), "--json")          # trace and site from the Haizea file
    b = run(trace, "--config", str(toml), "--nodes", "4", "--json")
    assert a.exit_code == 0, a.output
    assert b.exit_code == 0, b.output
    ra, rb = json.loads(a.output), json.loads(b.output)
    assert [(l["id"], l["start_s"], l["end_s"], l["nodes"]) for l in ra["leases"]] == \
        [(l["id"], l["start_s"], l["end_s"], l["nodes"]) for l in rb["leases"]]


def test_haizea_defaults_apply_where_the_file_is_silent(tmp_path):
    conf = tmp_path / "min.conf"
    conf.write_text("[general]\nmode: simulated\n[scheduling]\nsuspension: all\nsuspend-rate: 32\n"
                    "resume-rate: 32\n[simulation]\nresources: in-tracefile\nimagetransfer-bandwidth: 100\n")
    assert is_haizea_file(conf)
    h = load_haizea(conf)
    cfg = h.config
    assert (cfg.policy_preemption, cfg.migration, cfg.diskimage_reuse, cfg.backfilling) == \
        ("no-preemption", "no", "none", "off")      # Haizea 1.1's defaults, not vgrid's
    assert h.nodes is None and h.tracefile is None


def test_toml_files_are_not_taken_for_haizea_files(tmp_path):
    toml = tmp_path / "x.toml"
    toml.write_text(TOML)
    assert not is_haizea_file(toml)


@pytest.mark.parametrize("line, message", [
    ("mapper: deadline", "[scheduling] mapper = 'deadline': vgrid supports only 'greedy'"),
    ("mapper: deadline", "(Haizea 1.1 has no other mapper)"),
    ("enactment-overhead: soon", "enactment-overhead must be a number, got 'soon'"),
    ("override-memory: -5", "[tracefile] override-memory must be >= -1.0"),
    ("policy-admission: vip-only", "policy-admission = 'vip-only'; expected one of accept-all, no-ARs"),
    ("non-schedulable-interval: 1.5", "non-schedulable-interval: must be a whole number of seconds"),
    ("stop-when: exact", "'exact' needs stop-when-time"),
    ("stop-when-time: tomorrow", "stop-when-time: expected DD:HH:MM:SS"),
    ("shutdown-time: -3", "[scheduling] shutdown-time must be >= 0.0"),
    ("override-suspend-time: quick", "override-suspend-time must be a number, got 'quick'"),
    ("override-resume-time: -2", "[scheduling] override-resume-time must be >= -1.0"),
    ("force-scheduling-threshold: 1h", "force-scheduling-threshold must be a number, got '1h'"),
    ("force-imagetransfer-time: none", "force-imagetransfer-time must be a number, got 'none'"),
    ("status-message-interval: often", "status-message-interval must be a number, got 'often'"),
    ("bootshutdown-overhead: -20", "[tracefile] bootshutdown-overhead must be >= 0.0"),
    ("shape: round", "unknown option 'shape'"),
    ("suspend-rate: fast", "suspend-rate must be a number"),
])
def test_bad_or_unsupported_options_name_file_line_and_option(tmp_path, line, message):
    conf = tmp_path / "bad.conf"
    key = line.split(":")[0]
    same = [l for l in HAIZEA.splitlines() if l.startswith(key + ":")]
    text = HAIZEA.format(trace="preemption").replace(same[0] if same else "wakeup-interval: 10", line)
    conf.write_text(text)
    lineno = text.splitlines().index(line) + 1
    with pytest.raises(ConfigError) as exc:
        load_haizea(conf)
    assert f"{conf}:{lineno}:" in str(exc.value) and message in str(exc.value)
    res = run("--config", str(conf))
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output


def test_a_repeated_option_is_named_with_its_line(tmp_path):
    conf = tmp_path / "twice.conf"
    conf.write_text(HAIZEA.format(trace="preemption").replace("wakeup-interval: 10", "suspension: none"))
    with pytest.raises(ConfigError, match=r"twice.conf:\d+: \[scheduling\] option 'suspension' given twice"):
        load_haizea(conf)


def test_a_missing_tracefile_is_named(tmp_path):
    conf = tmp_path / "h.conf"
    conf.write_text(HAIZEA.format(trace="no-such-trace"))
    res = run("--config", str(conf))
    assert res.exit_code == 2 and "no-such-trace.lwf" in res.output
