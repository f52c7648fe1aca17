"""End to end on loopback: broker + 2 CE agents + 4 node agents as separate `vgrid serve` processes.

Runs real gLite JDL files to Done in CPU-capped VWNs, checks the bad-input cases (a job no CE
matches, a missing executable), and kills the broker with SIGKILL mid-run to check that no
accepted job is lost.
"""
import signal
import socket
import time

import pytest

from broker.client import BrokerClient
from vgrid_cli.demo import start_site
from vgrid_cli.services import ServiceGroup

from .paths import EXAMPLES, SHARED_JDL
from .waiting import wait_until

pytestmark = pytest.mark.slow
ENDED = {"Done", "Aborted", "Cancelled", "Cleared"}


def wait_ended(client, keys, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = client.jobs(keys)
        if len(jobs) == len(keys) and all(j["state"] in ENDED for j in jobs):
            return {j["key"]: j for j in jobs}
        time.sleep(0.3)
    raise AssertionError(f"jobs did not end: {[(j['key'], j['state']) for j in client.jobs(keys)]}")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """One site for the module (starting 7 processes costs seconds); the SIGKILL test runs last
    and leaves a restarted broker behind."""
    tmp_path = tmp_path_factory.mktemp("site")
    with ServiceGroup(tmp_path) as group:
        url = start_site(group, n_ces=2, ism_refresh_s=2.0, state_dir=tmp_path, match_expiry_s=3.0)
        yield group, BrokerClient(url), tmp_path


def test_real_jdl_files_run_to_done_in_vwns(site, tmp_path):
    group, client, _ = site
    hostname = client.submit_file(SHARED_JDL / "01_hostname_nobrackets.jdl")["key"]
    sleeper = client.submit_file(EXAMPLES / "09_wmsfeedback_nobrackets.jdl")["key"]
    burn = client.submit_file(EXAMPLES / "06_cpu_burn_short.jdl")["key"]
    jobs = wait_ended(client, [hostname, sleeper, burn])
    for key in (hostname, sleeper, burn):
        j = jobs[key]
        assert j["state"] == "Done", j
        assert j["exit_code"] == 0
        assert j["ce"].endswith("/vgrid-vwn-long") and j["node"] and j["vwn"].startswith("vwn-")
        assert j["cpu_caps"] and all(0 < c <= 1.0 for c in j["cpu_caps"])
        assert [h["state"] for h in j["history"]] == ["Submitted", "Waiting", "Ready", "Scheduled", "Running", "Done"]
    assert jobs[hostname]["stdout_head"] == socket.gethostname()
    assert jobs[burn]["stdout_head"].startswith("burned 50000000 iterations")
    files = client.output(hostname, tmp_path / "out")
    assert sorted(f.name for f in files) == ["std.err", "std.out"]
    assert (tmp_path / "out" / "std.out").read_text().strip() == socket.gethostname()
    assert client.job(hostname)["state"] == "Cleared"


def test_bad_jobs_end_aborted_with_reasons(site, tmp_path):
    _, client, _ = site
    nomatch = tmp_path / "nomatch.jdl"
    nomatch.write_text('Executable = "/bin/true";\nRequirements = other.GlueCEInfoTotalCPUs > 4096;\n')
    missing = tmp_path / "missing.jdl"
    missing.write_text('Executable = "/nonexistent/vgrid-job";\nStdOutput = "o";\nOutputSandbox = {"o"};\n')
    k1 = client.submit_file(nomatch)["key"]
    k2 = client.submit_file(missing)["key"]
    jobs = wait_ended(client, [k1, k2], timeout=60)
    assert jobs[k1]["state"] == "Aborted" and jobs[k1]["reason"] == "no compatible resources"
    assert jobs[k2]["state"] == "Aborted"
    assert "/nonexistent/vgrid-job" in jobs[k2]["reason"]


def test_shallow_resubmission_over_real_agents(site, tmp_path):
    """A job whose executable is missing never starts (no ``running``): with ShallowRetryCount
    = 1 it is resubmitted once, shallow, to the other CE, then Aborted naming the count; with
    ShallowRetryCount = -1 (disabled) and RetryCount = 0 it is Aborted at once."""
    _, client, _ = site
    once = tmp_path / "once.jdl"
    once.write_text('Executable = "/nonexistent/vgrid-job";\nRetryCount = 0;\nShallowRetryCount = 1;\n')
    never = tmp_path / "never.jdl"
    never.write_text('Executable = "/nonexistent/vgrid-job";\nRetryCount = 0;\nShallowRetryCount = -1;\n')
    k1, k2 = client.submit_file(once)["key"], client.submit_file(never)["key"]
    jobs = wait_ended(client, [k1, k2], timeout=90)
    j1, j2 = jobs[k1], jobs[k2]
    assert j1["state"] == "Aborted" and j1["outcome"] == "wrapper-error" and j1["attempt"] == 1
    assert j1["shallow_resubmissions"] == 1 and j1["deep_resubmissions"] == 0
    assert j1["failed_ces"] and j1["ce"] not in j1["failed_ces"]          # the other CE
    assert "ShallowRetryCount = 1 exhausted" in j1["reason"] and "/nonexistent/vgrid-job" in j1["reason"]
    assert any("shallow resubmission 1/1 as attempt 1" in (h["reason"] or "") for h in j1["history"])
    assert j2["state"] == "Aborted" and j2["attempt"] == 0
    assert "RetryCount = 0 exhausted" in j2["reason"] and "ShallowRetryCount = -1" in j2["reason"]


DAG = """[
  Type = "dag";
  nodes = [
    first = [ description = [ Executable = "/bin/echo"; Arguments = "one"; StdOutput = "o"; OutputSandbox = {"o"}; ]; ];
    second = [ description = [ Executable = "/bin/echo"; Arguments = "two"; StdOutput = "o"; OutputSandbox = {"o"}; ]; ];
    failing = [ description = [ Executable = "/bin/false"; ]; ];
    never = [ description = [ Executable = "/bin/echo"; Arguments = "never"; ]; ];
    dependencies = { { first, second }, { failing, never } };
  ];
]
"""


def test_collection_parametric_and_dag_run_as_nodes(site, tmp_path):
    _, client, _ = site
    dag = tmp_path / "dag.jdl"
    dag.write_text(DAG)
    parents = {name: client.submit_file(path)["key"] for name, path in
               (("collection", SHARED_JDL / "05_collection_fuzzyrank.jdl"),
                ("parametric", SHARED_JDL / "06_parametric_list.jdl"), ("dag", dag))}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        jobs = {j["key"]: j for j in client.jobs()}
        if all(jobs[k]["state"] in ENDED for k in parents.values()):
            break
        time.sleep(0.3)
    nodes = lambda key: {j["node_name"]: j for j in jobs.values() if j["parent"] and j["parent"].endswith(key)}
    coll, param, dagn = (nodes(parents[k]) for k in ("collection", "parametric", "dag"))
    assert jobs[parents["collection"]]["state"] == "Done" and len(coll) == 3
    assert {n["state"] for n in coll.values()} == {"Done"}
    assert jobs[parents["parametric"]]["state"] == "Done" and len(param) == 2
    assert {n["state"] for n in param.values()} == {"Done"}
    outputs = sorted(f for n in param.values()
                     for f in client._call("GET", f"/jobs/{n['key']}/output").json()["files"])
    assert outputs == ["echo2.err", "echo2.out", "echotest.err", "echotest.out"]  # _PARAM_ replaced
    # DAG: second ran after first; never was not run because failing exited 1
    assert dagn["first"]["state"] == dagn["second"]["state"] == "Done"
    first_done = next(h["time"] for h in dagn["first"]["history"] if h["state"] == "Done")
    second_waiting = next(h["time"] for h in dagn["second"]["history"] if h["state"] == "Waiting")
    assert second_waiting >= first_done
    assert dagn["failing"]["state"] == "Done" and dagn["failing"]["exit_code"] == 1
    assert dagn["never"]["state"] == "Aborted" and "failing (Done, exit code 1)" in dagn["never"]["reason"]
    assert jobs[parents["dag"]]["state"] == "Aborted"


def test_broker_sigkill_loses_no_accepted_job(site):
    group, client, tmp = site
    broker = next(s for s in group.services if s.name == "broker")
    port = int(broker.url.rsplit(":", 1)[1])
    cfg = (tmp / "broker.toml").read_text().replace("port = 0", f"port = {port}")
    keys = [client.submit_file(EXAMPLES / "09_wmsfeedback_nobrackets.jdl")["key"] for _ in range(2)]
    keys.append(client.submit_file(SHARED_JDL / "01_hostname_nobrackets.jdl")["key"])
    # some dispatched (so the restarted broker has dispatched jobs to recover), maybe not all
    wait_until(lambda: any(j["state"] in ("Scheduled", "Running", "Done") for j in client.jobs(keys)),
               "a job dispatched to a CE", timeout_s=60)
    group.stop(broker, signal.SIGKILL)
    group.start("broker", "broker-restarted", cfg)
    jobs = wait_ended(client, keys, timeout=90)
    assert {j["state"] for j in jobs.values()} == {"Done"}, [(j["state"], j["reason"], j["history"]) for j in jobs.values()]
