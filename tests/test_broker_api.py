"""The broker's HTTP API over a real loopback socket: submission, bad input, list-match, no match.

The ISM is the real infosys ISM over an in-memory source (CE agents are exercised in the
end-to-end tests); the job database is SQLite in a temporary directory.
"""
import time

import pytest
import requests

from broker.service import BrokerSettings
from vgrid_runtime.job_states import JobState
from vgrid_runtime.clock import WallClock

from .broker_site import start_broker
from .paths import SHARED_JDL

SIMPLE_JDL = '[ Executable = "/bin/true"; ]'


def ce_ad(ce_id, cpus, si00, waiting=0, running=0, vos=("dteam",)):
    return {"GlueCEUniqueID": ce_id, "GlueCEStateStatus": "Production", "GlueCEInfoTotalCPUs": cpus,
            "GlueHostBenchmarkSI00": si00, "GlueCEStateWaitingJobs": waiting,
            "GlueCEStateRunningJobs": running, "GlueCEStateTotalJobs": waiting + running,
            "GlueCEStateEstimatedResponseTime": 10 * waiting, "GlueCEStateFreeCPUs": max(0, cpus - running),
            "GlueCEAccessControlBaseRule": [f"VO:{v}" for v in vos],
            "GlueCEInfoContactString": "http://127.0.0.1:9/"}  # nothing listens: dispatch fails


@pytest.fixture
def site(tmp_path):
    server, broker = start_broker(
        tmp_path, [ce_ad("ce-a:8443/vgrid-vwn-long", 2, 1000, waiting=3),
                   ce_ad("ce-b:8443/vgrid-vwn-long", 4, 2000)], WallClock(),
        BrokerSettings(match_interval_s=0.05, match_expiry_s=0.5, max_dispatch_attempts=2))
    store = broker.store
    yield server.url, broker
    broker.stop()
    server.close()
    store.close()


def wait_state(url, key, states, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = requests.get(f"{url}/jobs/{key}", timeout=5).json()
        if job["state"] in states:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {key} still {job['state']}")


def test_syntax_error_is_400_with_location_and_nothing_is_stored(site):
    url, broker = site
    bad = 'Executable = "/bin/true";\nArguments = "a" "b";\n'
    r = requests.post(f"{url}/jobs", data={"jdl": bad, "filename": "bad.jdl"}, timeout=5)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["file"] == "bad.jdl" and err["line"] == 2 and err["column"] >= 1
    assert "bad.jdl:2:" in err["message"]
    assert requests.get(f"{url}/jobs", timeout=5).json()["jobs"] == []


def test_missing_input_sandbox_file_is_rejected(site):
    url, _ = site
    text = 'Executable = "run.sh"; InputSandbox = {"run.sh"};'
    r = requests.post(f"{url}/jobs", data={"jdl": text, "filename": "j.jdl"}, timeout=5)
    assert r.status_code == 400 and "run.sh" in r.json()["error"]["message"]


@pytest.mark.parametrize("name,nodes", [("05_collection_fuzzyrank.jdl", 3), ("06_parametric_list.jdl", 2)])
def test_compound_request_is_stored_as_parent_and_nodes(site, name, nodes):
    url, broker = site
    broker.stop()  # nothing dispatched: look at what submission stored
    text = (SHARED_JDL / name).read_text()
    r = requests.post(f"{url}/jobs", data={"jdl": text, "filename": name}, timeout=5)
    assert r.status_code == 201, r.text
    parent = r.json()["key"]
    jobs = requests.get(f"{url}/jobs", timeout=5).json()["jobs"]
    children = [j for j in jobs if j["parent"] and j["parent"].endswith(parent)]
    assert len(jobs) == nodes + 1 and len(children) == nodes
    assert {j["state"] for j in jobs} == {"Waiting"}
    assert all(j["kind"] == "node" for j in children)


def test_cancelling_a_collection_cancels_its_nodes(site):
    url, broker = site
    broker.stop()
    text = (SHARED_JDL / "05_collection_fuzzyrank.jdl").read_text()
    parent = requests.post(f"{url}/jobs", data={"jdl": text, "filename": "c.jdl"}, timeout=5).json()["key"]
    r = requests.post(f"{url}/jobs/{parent}/cancel", timeout=5)
    assert r.status_code == 200 and r.json()["state"] == "Cancelled"
    states = {j["node_name"]: j["state"] for j in requests.get(f"{url}/jobs", timeout=5).json()["jobs"]}
    assert states == {None: "Cancelled", "first": "Cancelled", "second": "Cancelled", "third": "Cancelled"}


def test_list_match_orders_by_sfete_and_filters_requirements(site):
    url, _ = site
    text = (SHARED_JDL / "01_hostname_nobrackets.jdl").read_text()
    res = requests.post(f"{url}/list-match", json={"jdl": text}, timeout=5).json()
    assert res["policy"] == "sfete"
    # ce-b: (0+1)/(4*2000) is smaller than ce-a: (3+1)/(2*1000)
    assert [c["id"] for c in res["ces"]] == ["ce-b:8443/vgrid-vwn-long", "ce-a:8443/vgrid-vwn-long"]
    none = requests.post(f"{url}/list-match", json={"jdl": 'Executable="/bin/true"; '
                                                    'Requirements = other.GlueCEInfoTotalCPUs > 64;'},
                         timeout=5).json()
    assert none["ces"] == []


def test_vo_filter_uses_access_control_base_rule(site):
    url, _ = site
    res = requests.post(f"{url}/list-match", json={"jdl": 'Executable="/bin/true"; VirtualOrganisation="atlas";'},
                        timeout=5).json()
    assert res["ces"] == []


def test_job_no_ce_matches_ends_aborted_no_compatible_resources(site):
    url, _ = site
    text = 'Executable = "/bin/true"; Requirements = other.GlueCEInfoTotalCPUs > 1000;'
    key = requests.post(f"{url}/jobs", data={"jdl": text, "filename": "big.jdl"}, timeout=5).json()["key"]
    job = wait_state(url, key, {"Aborted"})
    assert job["reason"] == "no compatible resources" and job["outcome"] == "no-resources"
    assert [h["state"] for h in job["history"]][:2] == ["Submitted", "Waiting"]


def test_unreachable_ce_is_retried_then_aborted_and_feedback_counted(site):
    url, broker = site
    key = requests.post(f"{url}/jobs", data={"jdl": 'Executable = "/bin/true";', "filename": "t.jdl"},
                        timeout=5).json()["key"]
    job = wait_state(url, key, {"Aborted"})
    assert job["reason"].startswith("dispatch failed") and job["outcome"] == "dispatch-failed"
    assert sum(broker.ism.feedback.snapshot().values()) == 2  # one per dispatch attempt


def test_cancel_waiting_job_and_cancel_twice_is_409(site):
    url, broker = site
    broker.stop()  # keep the job Waiting
    key = requests.post(f"{url}/jobs", data={"jdl": 'Executable = "/bin/true";', "filename": "t.jdl"},
                        timeout=5).json()["key"]
    r = requests.post(f"{url}/jobs/{key}/cancel", timeout=5)
    assert r.status_code == 200 and r.json()["state"] == "Cancelled" and r.json()["outcome"] == "cancelled"
    r2 = requests.post(f"{url}/jobs/{key}/cancel", timeout=5)
    assert r2.status_code == 409 and "already Cancelled" in r2.json()["error"]["message"]
    assert broker.store.get(key).state is JobState.CANCELLED


def test_unknown_job_is_404_json(site):
    url, _ = site
    r = requests.get(f"{url}/jobs/doesnotexist", timeout=5)
    assert r.status_code == 404 and "unknown job" in r.json()["error"]["message"]


def run_cli(*args, env_url=None):
    import os
    import subprocess
    import sys
    env = dict(os.environ)
    if env_url:
        env["VGRID_BROKER_URL"] = env_url
    return subprocess.run([sys.executable, "-m", "vgrid_cli", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_cli_submit_syntax_error_exit_2_with_location_no_traceback(site, tmp_path):
    url, _ = site
    bad = tmp_path / "bad.jdl"
    bad.write_text('[\n  Executable = "/bin/true";\n  Arguments = ;\n]\n')
    res = run_cli("submit", str(bad), "--broker", url)
    assert res.returncode == 2
    assert f"{bad}:3:" in res.stderr and "Traceback" not in res.stderr
    assert requests.get(f"{url}/jobs", timeout=5).json()["jobs"] == []


def test_cli_submit_status_cancel_round_trip(site, tmp_path):
    url, broker = site
    broker.stop()  # keep it Waiting so cancel has something to do
    good = tmp_path / "good.jdl"
    good.write_text('Executable = "/bin/true";\n')
    res = run_cli("submit", str(good), env_url=url)
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    assert job_id.startswith(f"{url}/jobs/")
    st = run_cli("status", job_id, "--json")
    assert st.returncode == 0 and '"state": "Waiting"' in st.stdout
    assert run_cli("cancel", job_id).returncode == 0
    again = run_cli("cancel", job_id)
    assert again.returncode == 2 and "already Cancelled" in again.stderr


def test_cli_unknown_job_and_unreachable_broker(site):
    url, _ = site
    res = run_cli("status", f"{url}/jobs/nosuchjob")
    assert res.returncode == 2 and "unknown job" in res.stderr
    down = run_cli("status", "--broker", "http://127.0.0.1:9")
    assert down.returncode == 1 and "cannot reach the broker" in down.stderr and "Traceback" not in down.stderr


def test_serve_on_a_busy_port_is_a_clear_error(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cfg = tmp_path / "b.toml"
        cfg.write_text(f'port = {port}\nstate_dir = "{tmp_path / "state"}"\n')
        res = run_cli("serve", "broker", "--config", str(cfg))
    assert res.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in res.stderr
    assert "Traceback" not in res.stderr


def test_serve_with_bad_config_names_the_field(tmp_path):
    cfg = tmp_path / "b.toml"
    cfg.write_text('port = "eighty"\n')
    res = run_cli("serve", "broker", "--config", str(cfg))
    assert res.returncode == 2 and "field 'port'" in res.stderr and str(cfg) in res.stderr


def test_ism_endpoint_is_the_info_document_with_feedback(site):
    url, _ = site
    doc = requests.get(f"{url}/ism", timeout=5).json()
    assert doc["stale"] is False and doc["age_s"] >= 0
    assert sorted(c["id"] for c in doc["ces"]) == ["ce-a:8443/vgrid-vwn-long", "ce-b:8443/vgrid-vwn-long"]
    assert {c["waiting"] for c in doc["ces"]} == {0, 3}
    assert isinstance(doc["dispatched_since_refresh"], dict)
    assert requests.get(f"{url}/ism", params={"vo": "atlas"}, timeout=5).json()["ces"] == []


def test_dag_file_nodes_are_never_read_on_the_broker_host(site, tmp_path):
    url, _ = site
    secret = tmp_path / "node.jdl"
    secret.write_text('Executable = "/bin/true";\n')
    dag = f'[ Type = "dag"; nodes = [ a = [ file = "{secret}"; ]; dependencies = {{}}; ]; ]'
    fake = tmp_path / "dag.jdl"  # exists on this host: the broker must still not read node files
    fake.write_text(dag)
    r = requests.post(f"{url}/jobs", data={"jdl": dag, "filename": str(fake)}, timeout=5)
    assert r.status_code == 400 and r.json()["error"]["line"] == 1
    assert requests.get(f"{url}/jobs", timeout=5).json()["jobs"] == []


def test_client_inlines_dag_file_nodes_like_the_glite_ui(site, tmp_path):
    from broker.client import BrokerClient
    url, broker = site
    broker.stop()
    (tmp_path / "a.jdl").write_text('Executable = "/bin/echo";\nArguments = "from a file";\n')
    dag = tmp_path / "dag.jdl"
    dag.write_text('[ Type = "dag"; nodes = [ a = [ file = "a.jdl"; ]; '
                   'b = [ description = [ Executable = "/bin/true"; ]; ]; dependencies = { { a, b } }; ]; ]')
    parent = BrokerClient(url).submit_file(dag)["key"]
    nodes = {j["node_name"]: j for j in requests.get(f"{url}/jobs", timeout=5).json()["jobs"]
             if j["parent"] and j["parent"].endswith(parent)}
    assert set(nodes) == {"a", "b"}
    assert nodes["a"]["state"] == "Waiting" and nodes["b"]["state"] == "Submitted"  # b waits for a
    assert 'Arguments = "from a file"' in broker.store.get(nodes["a"]["key"]).jdl


def test_missing_dag_node_file_is_a_local_error_with_location(site, tmp_path):
    url, _ = site
    dag = tmp_path / "dag.jdl"
    dag.write_text('[ Type = "dag";\n  nodes = [ a = [ file = "missing.jdl"; ]; dependencies = {}; ]; ]\n')
    res = run_cli("submit", str(dag), "--broker", url)
    assert res.returncode == 2 and f"{dag}:2:" in res.stderr and "missing.jdl" in res.stderr


def test_cli_status_reads_every_page_with_filters(site, tmp_path):
    url, broker = site
    broker.stop()  # keep them Waiting
    keys = [requests.post(f"{url}/jobs", data={"jdl": SIMPLE_JDL, "filename": "j.jdl"}, timeout=10).json()["key"]
            for _ in range(5)]
    cancelled = keys[0]
    assert requests.post(f"{url}/jobs/{cancelled}/cancel", timeout=10).status_code == 200
    import json
    res = run_cli("status", "--json", "--broker", url, env_url=url)
    assert res.returncode == 0, res.stderr
    assert sorted(j["key"] for j in json.loads(res.stdout)["jobs"]) == sorted(keys)
    res = run_cli("status", "--json", "--state", "Waiting", "--limit", "3", env_url=url)
    got = json.loads(res.stdout)["jobs"]
    assert res.returncode == 0 and len(got) == 3 and cancelled not in {j["key"] for j in got}
    assert [j["key"] for j in got] == [k for k in keys if k != cancelled][:3]  # oldest first
    bad = run_cli("status", "--state", "Sleeping", env_url=url)
    assert bad.returncode != 0 and "not a job state" in bad.stderr and "Traceback" not in bad.stderr


def test_client_follows_next_across_pages(site):
    url, broker = site
    broker.stop()
    keys = [requests.post(f"{url}/jobs", data={"jdl": SIMPLE_JDL, "filename": "j.jdl"}, timeout=10).json()["key"]
            for _ in range(7)]
    from broker.client import BrokerClient
    client = BrokerClient(url)
    pages = list(client.job_pages(limit=3))
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [j["key"] for p in pages for j in p] == keys
    assert [j["key"] for j in client.jobs(keys[2:4])] == keys[2:4]
