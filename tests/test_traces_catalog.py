"""Bundled traces by name (vgrid_runtime/traces.py): the catalogue, its files, and the CLI."""
import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from broker.gridsim.model import SpecError
from broker.gridsim.workloads import load_ces, read_swf
from vgrid_cli.gridsim_cmds import simulate_grid_cmd
from vgrid_cli.simulate_cmds import simulate_cmd
from vgrid_runtime import traces

from .paths import TRACES

NOT_TRACES = {"README.md", "SHA256SUMS"}


def bundled_files() -> set[str]:
    return {str(p.relative_to(TRACES)) for p in TRACES.rglob("*") if p.is_file() and p.name not in NOT_TRACES}


def test_every_name_has_its_file_and_every_file_a_name():
    assert set(traces.CATALOGUE.values()) == bundled_files()
    assert len(traces.AR_SETS) == 72 and len(traces.CATALOGUE) == 92
    assert all(traces.bundled(name).is_file() for name in traces.CATALOGUE)


def test_sha256sums_cover_every_bundled_file_and_match():
    sums = {}
    for line in (TRACES / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        sums[name] = digest
    assert set(sums) == bundled_files()
    for name, digest in sums.items():
        assert hashlib.sha256((TRACES / name).read_bytes()).hexdigest() == digest, name


def test_bundled_files_are_well_under_5_mb():
    assert max(p.stat().st_size for p in TRACES.rglob("*") if p.is_file()) < 4 * 2**20


def test_resolve_files_names_and_unknown_words(tmp_path):
    own = tmp_path / "wait"
    own.write_text("x")
    assert traces.resolve(own) == own                  # an existing file wins over a name
    assert traces.resolve("blue-30days") == TRACES / "haizea/blue/30days.swf"
    assert traces.resolve("work_30-dur_4h-size_3large").name == "work_30-dur_4h-size_3large.lwf"
    assert traces.resolve("no/such.swf") == Path("no/such.swf")  # its reader reports it
    with pytest.raises(traces.TraceNameError, match="known names: blue-15days, .*lcg-2005-1"):
        traces.resolve("blue-31days")


def test_swf_specs_accept_a_bundled_name():
    assert read_swf("lcg-2005-1") is read_swf(TRACES / "swf/LCG-2005-1.swf.gz")
    assert len(load_ces("swf:lcg-2005-1")) == 170
    with pytest.raises(SpecError, match="unknown trace 'lcg-2006'.*known names"):
        load_ces("swf:lcg-2006")


def test_simulate_a_named_trace_with_named_ar_injection():
    r = CliRunner().invoke(simulate_cmd, ["reservation", "--inject-ar", "work_05-dur_1h-size_1small", "--json"])
    assert r.exit_code == 0, r.output
    by_name = CliRunner().invoke(simulate_cmd, ["reservation", "--json"])
    by_path = CliRunner().invoke(simulate_cmd, [str(TRACES / "lwf/haizea-tests/reservation.lwf"), "--json"])
    assert by_name.exit_code == 0 and by_name.output == by_path.output
    assert len(json.loads(r.output)["leases"]) > len(json.loads(by_name.output)["leases"])


def test_blue_by_name_on_144_nodes():
    r = CliRunner().invoke(simulate_cmd, ["blue-15days", "--nodes", "144", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["leases"]


@pytest.mark.parametrize("args", [["blue-31days", "--nodes", "2"], ["reservation", "--inject-ar", "work_35"]])
def test_unknown_name_is_one_line_listing_the_names_exit_2(args):
    r = CliRunner().invoke(simulate_cmd, args)
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "unknown trace" in lines[0] and "blue-30days" in lines[0]


def test_list_traces():
    r = CliRunner().invoke(simulate_cmd, ["--list-traces"])
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert len(lines) == 92
    assert any(line.split() == ["lcg-2005-1", "examples/traces/swf/LCG-2005-1.swf.gz"] for line in lines)


def test_simulate_grid_with_named_traces():
    runner = CliRunner()
    r = runner.invoke(simulate_grid_cmd, ["--ces", "swf:lcg-2005-1", "--workload", "swf:lcg-2005-1,limit=300",
                                          "--json"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(simulate_grid_cmd, ["--ces", "seed004", "--workload", "swf:nosuch"])
    assert r.exit_code == 2 and "known names" in r.output and "Traceback" not in r.output
