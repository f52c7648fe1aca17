"""``vgrid sweep`` (issue 16): the spec, the SQLite store, Dask (a 2-worker LocalCluster and an
explicit scheduler on loopback), retries of failed runs, and resuming a sweep killed midway (a
real subprocess, kill -9)."""
import json
import os
import signal
import socket
import subprocess
import sys

import pytest
from click.testing import CliRunner

from vgrid_cli.sweep_run_cmds import sweep_run_cmd
from vwn_agents.leasing.sweeprunner import run_sweep
from vwn_agents.leasing.sweepspec import SpecError, load_spec, run_simulation
from vwn_agents.leasing.sweepstore import SweepStore

from .paths import REPO, TRACES
from .waiting import wait_until

VGRID = [sys.executable, "-m", "vgrid_cli"]
DASK = os.path.join(os.path.dirname(sys.executable), "dask")


def reduced_inputs(d, jobs=300, ar_until=150_000):
    """The first ``jobs`` requests of the 30-day Blue trace and the 10 % / 3 h / medium AR set's
    reservations submitted before ``ar_until`` s, as files in ``d``."""
    lines = (TRACES / "haizea/blue/30days.swf").read_text().splitlines()
    (d / "blue-small.swf").write_text("\n".join([l for l in lines if not l.startswith(";")][:jobs]) + "\n")
    ar = (TRACES / "haizea/injected_leases/30days/work_10-dur_3h-size_2medium.lwf").read_text().splitlines()
    kept = [l for l in ar if l.strip() and int(l.split()[0]) < ar_until]
    (d / "work_10-dur_3h-size_2medium.lwf").write_text("\n".join(kept) + "\n")
    return len(kept)


SPEC = """name = "small"
[site]
nodes = 144
[grid]
traces = ["blue-small.swf"]
{grid}
[configurations.NOVM-NOSR.scheduling]
suspension = "none"
[configurations.NOVM-SR.scheduling]
suspension = "all"
suspend-rate = 50
resume-rate = 50
[configurations.NOVM-NOBF.scheduling]
backfilling = "off"
[configurations.VM-REUSE.general]
lease-preparation = "imagetransfer"
[configurations.VM-REUSE.simulation]
imagetransfer-bandwidth = 80.0
[configurations.VM-REUSE.tracefile]
add-overhead = "all"
runtime-slowdown-overhead = 5.0
bootshutdown-overhead = 20.0
[configurations.VM-REUSE.workload]
images = 37
image-size = 4096.0
image-distribution = "7,10 30,1"
"""


ARS = 'inject-ar = ["none", "work_10-dur_3h-size_2medium.lwf"]\n'


def write_spec(d, grid=ARS + 'configurations = ["NOVM-NOSR", "NOVM-SR"]'):
    reduced_inputs(d)
    (d / "spec.toml").write_text(SPEC.format(grid=grid))
    return d / "spec.toml"


def _same(result, direct):
    return {k: v for k, v in result.items() if k not in ("cpu_s", "wall_s")} == \
        {k: v for k, v in direct.items() if k not in ("cpu_s", "wall_s")}


def test_spec_is_validated_naming_file_and_field(tmp_path):
    spec = write_spec(tmp_path)
    runs = load_spec(spec).runs
    assert [(r.configuration, r.labels["inject"]) for r in runs] == [
        ("NOVM-NOSR", "none"), ("NOVM-SR", "none"),
        ("NOVM-NOSR", "work_10-dur_3h-size_2medium"), ("NOVM-SR", "work_10-dur_3h-size_2medium")]
    assert len({r.key() for r in runs}) == 4
    for bad, match in [(SPEC.format(grid="seeds = 3"), r"\[grid\] seeds must be a non-empty list"),
                       (SPEC.format(grid='configurations = ["NOPE"]'), r"\['NOPE'\] not defined"),
                       (SPEC.format(grid="").replace('suspension = "none"', 'suspension = "sometimes"'),
                        r"NOVM-NOSR.*suspension = 'sometimes'; expected one of"),
                       (SPEC.format(grid="").replace("images = 37", "imagez = 37"), r"unknown option 'imagez'"),
                       (SPEC.format(grid="").replace('"7,10 30,1"', '"7,10 29,1"'), r"36 positive weights for 37"),
                       (SPEC.format(grid='inject-ar = ["work_99*"]'), r"no bundled trace matches 'work_99\*'")]:
        spec.write_text(bad)
        with pytest.raises(SpecError, match=match):
            load_spec(spec)


def test_a_changed_input_or_option_changes_the_key_only_of_its_runs(tmp_path):
    spec = write_spec(tmp_path, grid=ARS + 'configurations = ["NOVM-NOSR", "VM-REUSE"]\nseeds = [1, 2]')
    runs = load_spec(spec).runs
    assert len(runs) == 6                       # NOSR draws no images: one seed
    before = {(r.configuration, r.labels["inject"], r.seed): r.key() for r in runs}
    spec.write_text(spec.read_text().replace('image-distribution = "7,10 30,1"', 'image-distribution = "uniform"'))
    after = {(r.configuration, r.labels["inject"], r.seed): r.key() for r in load_spec(spec).runs}
    assert [k for k in before if before[k] != after[k]] == [k for k in before if k[0] == "VM-REUSE"]
    ar = tmp_path / "work_10-dur_3h-size_2medium.lwf"
    ar.write_text(ar.read_text().splitlines()[0] + "\n")
    again = {(r.configuration, r.labels["inject"], r.seed): r.key() for r in load_spec(spec).runs}
    assert [k for k in after if after[k] != again[k]] == [k for k in after if k[1] != "none"]


def test_local_cluster_of_two_workers_matches_direct_simulation_and_resumes(tmp_path):
    runs = load_spec(write_spec(tmp_path)).runs
    n_ars = len((tmp_path / "work_10-dur_3h-size_2medium.lwf").read_text().splitlines())
    store = SweepStore(tmp_path / "s.sqlite")
    seen = []
    s = run_sweep(runs, store, workers=2, progress=lambda done, total: seen.append((done, total)))
    assert (s["planned"], s["computed_now"], s["present"], s["failed"], s["workers"]) == (4, 4, 4, [], 2)
    assert seen[0] == (0, 4) and seen[-1] == (4, 4)
    rows = {r["key"]: r for r in store.rows()}
    for run in runs:
        row = rows[run.key()]
        assert row["status"] == "done" and row["attempts"] == 1 and row["worker"].startswith("tcp://127.0.0.1:")
        assert _same(row["result"], run_simulation(run))
    nosr_ar = rows[runs[2].key()]["result"]
    assert nosr_ar["ar_accepted"] + nosr_ar["ar_rejected"] == n_ars > 0
    again = run_sweep(runs, store, workers=2)
    assert (again["computed_now"], again["present"]) == (0, 4)   # nothing recomputed


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_explicit_scheduler_address_on_loopback(tmp_path):
    spec = write_spec(tmp_path)
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = open(tmp_path / "dask.log", "w")
    procs = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              stdout=log, stderr=log, start_new_session=True)]
    try:
        procs.append(subprocess.Popen([DASK, "worker", address, "--nthreads", "1", "--nworkers", "1",
                                       "--no-dashboard", "--name", "loopback-worker"],
                                      stdout=log, stderr=log, start_new_session=True, cwd=tmp_path))
        from distributed import Client
        with Client(address, timeout=60) as c:
            wait_until(lambda: c.scheduler_info()["workers"], "the dask worker to join", timeout_s=60)
            worker = next(iter(c.scheduler_info()["workers"]))
        r = CliRunner().invoke(sweep_run_cmd, [str(spec), "--store", str(tmp_path / "s.sqlite"),
                                               "--scheduler", address, "--json"])
        assert r.exit_code == 0, r.output
        s = json.loads(r.output)
        assert (s["computed_now"], s["present"], s["scheduler"], s["workers"]) == (4, 4, address, 1)
        assert {row["worker"] for row in SweepStore(tmp_path / "s.sqlite").rows()} == {worker}
    finally:
        for p in reversed(procs):
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=30)
        log.close()
    r = CliRunner().invoke(sweep_run_cmd, [str(spec), "--store", str(tmp_path / "s.sqlite"),
                                           "--scheduler", address, "--json"])
    assert r.exit_code == 0, r.output                # complete: the scheduler is not even needed
    r = CliRunner().invoke(sweep_run_cmd, [str(spec), "--store", str(tmp_path / "t.sqlite"),
                                           "--scheduler", f"tcp://127.0.0.1:{_free_port()}", "--json"])
    assert r.exit_code == 2 and "Dask scheduler tcp://127.0.0.1:" in r.output


def test_failed_runs_are_retried_then_stored_and_reported(tmp_path):
    spec = write_spec(tmp_path)
    ar = tmp_path / "work_10-dur_3h-size_2medium.lwf"
    ar.write_text(ar.read_text() + "12 x\n")            # the AR set's last line is broken
    r = CliRunner().invoke(sweep_run_cmd, [str(spec), "--store", str(tmp_path / "s.sqlite"), "--workers", "2",
                                           "--retries", "1", "--json"])
    assert r.exit_code == 1, r.output
    s = json.loads(r.output)
    assert (s["computed_now"], s["retried"], len(s["failed"])) == (2, 2, 2)
    for f in s["failed"]:
        assert f["attempts"] == 2 and f["inject"] == "work_10-dur_3h-size_2medium"
        assert f["error"].startswith("TraceError: ") and "work_10-dur_3h-size_2medium.lwf:" in f["error"]
    failed = SweepStore(tmp_path / "s.sqlite").rows(status="failed")
    assert sorted(x["configuration"] for x in failed) == ["NOVM-NOSR", "NOVM-SR"]
    assert all(x["result"] is None and x["error"].startswith("TraceError") for x in failed)


def test_a_sweep_killed_midway_resumes_without_recomputing_or_losing_runs(tmp_path):
    spec = write_spec(tmp_path, grid=ARS + 'configurations = ["NOVM-NOSR", "NOVM-SR", "NOVM-NOBF"]')
    store_path = tmp_path / "s.sqlite"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([*VGRID, "sweep", str(spec), "--store", str(store_path), "--workers", "1", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=env)
    try:
        wait_until(lambda: store_path.exists() and SweepStore(store_path).rows(status="done"),
                   "the first stored run", timeout_s=120, interval_s=0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)              # the CLI and its Dask workers
        proc.wait(timeout=30)
    before = {r["key"]: r for r in SweepStore(store_path).rows()}
    assert 1 <= len(before) < 6, "the kill should land midway"
    r = subprocess.run([*VGRID, "sweep", str(spec), "--store", str(store_path), "--workers", "1", "--json"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert (s["planned"], s["present"], s["computed_now"]) == (6, 6, 6 - len(before))
    after = {r["key"]: r for r in SweepStore(store_path).rows()}
    assert set(after) == {run.key() for run in load_spec(spec).runs}
    for key, row in before.items():
        assert after[key] == row                          # nothing lost, nothing rewritten


def test_a_worker_killed_mid_run_loses_no_run(tmp_path):
    import threading

    import psutil
    spec = write_spec(tmp_path, grid=ARS + 'configurations = ["NOVM-NOSR", "NOVM-SR", "NOVM-NOBF"]')
    runs = load_spec(spec).runs
    store = SweepStore(tmp_path / "s.sqlite")
    out = {}
    t = threading.Thread(target=lambda: out.update(run_sweep(runs, store, workers=2)))
    t.start()
    me = psutil.Process()

    def cmdline(p):              # another test's zombie child, or a process gone meanwhile: not a worker
        try:
            return " ".join(p.cmdline())
        except psutil.Error:
            return ""

    def busy_worker():
        procs = [p for p in me.children(recursive=True) if "spawn_main" in cmdline(p)]
        return len(procs) >= 2 and store.rows(status="done") and procs

    try:
        victims = wait_until(busy_worker, "two workers and a first stored run", timeout_s=120, interval_s=0.02)
        victims[0].kill()                                # SIGKILL one worker process mid-sweep
    finally:
        t.join(timeout=600)
    assert not t.is_alive()
    assert (out["planned"], out["present"], out["failed"]) == (6, 6, [])
    assert {r["key"] for r in store.rows(status="done")} == {r.key() for r in runs}


def test_progress_bar_on_a_tty_and_quiet_in_a_pipe(tmp_path):
    """rich's bar (runs done / total) goes to standard error when it is a terminal (a pty
    here); in a pipe standard error stays empty and the summary is one unwrapped line."""
    import pty
    spec = write_spec(tmp_path, grid='configurations = ["NOVM-NOSR"]')
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "100"}
    r = subprocess.run([*VGRID, "sweep", str(spec), "--store", str(tmp_path / "p.sqlite"), "--workers", "1"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.splitlines()[0].startswith("1/1 runs in ") and r.stdout.splitlines()[0].endswith(" 0 retried")
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([*VGRID, "sweep", str(spec), "--store", str(tmp_path / "t.sqlite"), "--workers", "1"],
                                stdout=subprocess.PIPE, stderr=slave, env=env)
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:                         # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=300) == 0
    finally:
        os.close(master)
    text = seen.decode("utf-8", "replace")
    assert "sweep" in text and "\u2501" in text and "0/1" in text     # the bar, runs done / total


def test_compat_runs_are_keyed_by_the_compat_rules_version(tmp_path, monkeypatch):
    """A change to the Haizea-compatible rules (config.COMPAT_RULES) gives compat runs new keys,
    so a store recomputes them; own-mode keys do not move."""
    from vwn_agents.leasing import sweepspec
    spec = write_spec(tmp_path, grid=ARS + 'configurations = ["NOVM-NOSR", "NOVM-NOSR.haizea"]')
    spec.write_text(spec.read_text() + '[configurations."NOVM-NOSR.haizea".general]\ncompat = "haizea-1.1"\n')
    before = {(r.configuration, r.labels["inject"]): r.key() for r in load_spec(spec).runs}
    monkeypatch.setattr(sweepspec, "COMPAT_RULES", sweepspec.COMPAT_RULES + 1)
    after = {(r.configuration, r.labels["inject"]): r.key() for r in load_spec(spec).runs}
    assert len(before) == 4
    for (conf, inject), key in before.items():
        assert (after[(conf, inject)] == key) == (conf == "NOVM-NOSR"), (conf, inject)
