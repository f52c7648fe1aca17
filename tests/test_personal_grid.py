"""`vgrid demo --serve`: a personal grid that stays up, used with the CLI unchanged, whose services
rejoin the site after `kill -9` and a restart by hand from /proc/PID/cmdline."""
import json
import re
import os
import signal
import subprocess
import sys

import pytest

from vgrid_cli.personal import ProcessImage, parse_options
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.tls import TLSFiles

from .waiting import wait_until

pytestmark = pytest.mark.slow

CE1 = "ce1.vgrid.local:8443/vgrid-vwn-long"


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def vgrid(env, *args, check=True):
    p = subprocess.run([sys.executable, "-m", "vgrid_cli", *args], env=env, capture_output=True,
                       text=True, timeout=120)
    if check:
        assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p


def status(env, job_id):
    return json.loads(vgrid(env, "status", "--json", job_id).stdout)["jobs"][0]


def wait_done(env, job_id, timeout_s=90):
    job = wait_until(lambda: (lambda j: j if j["state"] in ("Done", "Aborted", "Cancelled") else None)(
        status(env, job_id)), f"{job_id} to end", timeout_s=timeout_s, interval_s=0.5)
    assert job["state"] == "Done" and job["exit_code"] == 0, job
    return job


def kill_and_restart(pid, log):
    """What an operator does: note the command line, kill -9, start it again the same way."""
    image = ProcessImage.of(pid)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not _alive(pid), f"pid {pid} to die")
    return image.start(log)


@pytest.fixture
def site(tmp_path):
    ready = tmp_path / "site.json"
    d = tmp_path / "site"
    demo = subprocess.Popen([sys.executable, "-m", "vgrid_cli", "demo", "--serve", "--ready-file",
                             str(ready), "--dir", str(d), "--ism-refresh", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    restarted = []
    try:
        wait_until(lambda: ready.exists() or demo.poll() is not None, "the site's ready file", timeout_s=120)
        assert demo.poll() is None, demo.communicate()
        yield {"doc": json.loads(ready.read_text()), "ready": ready, "dir": d, "demo": demo,
               "restarted": restarted}
    finally:
        err = ""
        if demo.poll() is None:
            demo.send_signal(signal.SIGTERM)
            _, err = demo.communicate(timeout=90)
        for p in restarted:          # restarted by the test: its children; the demo stopped them
            p.wait(timeout=30)
    assert demo.returncode == 0, err
    if err:        # read here unless the test stopped the demo itself
        assert re.search(r"dashboard: https://[0-9.]+:\d+/dashboard/ \(a browser imports \S+browser\.p12", err), err


def test_serve_ready_file_cli_and_restarts_by_hand(site, tmp_path):
    doc = site["doc"]
    assert set(doc) == {"broker", "ces", "env"}
    assert set(doc["broker"]) == {"url", "pid"} and doc["broker"]["url"].startswith("https://")
    assert [c["id"] for c in doc["ces"]] == [CE1, "ce2.vgrid.local:8443/vgrid-vwn-long"]
    for ce in doc["ces"]:
        assert set(ce) == {"id", "url", "pid", "nodes"} and len(ce["nodes"]) == 2
        assert all(set(n) == {"url", "pid"} and _alive(n["pid"]) for n in ce["nodes"])
    assert set(doc["env"]) >= {"VGRID_BROKER_URL", "X509_USER_PROXY", "X509_CERT_DIR", "X509_VOMS_DIR"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("X509_", "VGRID_"))}
    env.update(doc["env"])

    # the CLI works against the site unchanged
    jdl = tmp_path / "hello.jdl"
    jdl.write_text('Executable = "/bin/echo";\nArguments = "hello personal grid";\n'
                   'StdOutput = "out.txt";\nOutputSandbox = {"out.txt"};\n'
                   f'Requirements = other.GlueCEUniqueID == "{CE1}";\n')
    first = vgrid(env, "submit", str(jdl)).stdout.strip()
    assert first.startswith(doc["broker"]["url"] + "/jobs/")
    job = wait_done(env, first)
    assert job["stdout_head"] == "hello personal grid"
    vgrid(env, "output", first, "--dir", str(tmp_path / "out"))
    assert (tmp_path / "out" / "out.txt").read_text() == "hello personal grid\n"

    # kill -9 of the broker, restarted by hand from its command line: same URL, same jobs
    old = doc["broker"]["pid"]
    site["restarted"].append(kill_and_restart(old, site["dir"] / "broker.log"))
    new = wait_until(lambda: (lambda p: p if p not in (None, old) else None)(
        json.loads(site["ready"].read_text())["broker"]["pid"]), "the ready file to show the new broker")
    assert new == site["restarted"][-1].pid
    assert status(env, first)["state"] == "Cleared"
    assert "Cleared" in vgrid(env, "status").stdout

    # kill -9 of the node agent that ran the job, restarted by hand: it rejoins its CE
    node_url = next(n["url"] for n in doc["ces"][0]["nodes"] if n["url"].startswith(
        "https://" + _address_of(site, job["node"]) + ":"))
    node_pid = next(n["pid"] for n in doc["ces"][0]["nodes"] if n["url"] == node_url)
    site["restarted"].append(kill_and_restart(node_pid, site["dir"] / f"{job['node']}.log"))
    pki = site["dir"] / "pki"
    ce_view = new_session(TLSFiles(cert=str(pki / "hosts" / "broker" / "hostcert.pem"),
                                   key=str(pki / "hosts" / "broker" / "hostkey.pem"),
                                   cert_dir=str(pki / "certificates"), voms_dir=str(pki / "vomsdir")))

    def node_answers_at_ce():
        nodes = ce_view.get(doc["ces"][0]["url"] + "/status", timeout=10).json()["nodes"]
        return any(n["url"] == node_url and n["up"] for n in nodes)
    wait_until(node_answers_at_ce, "the CE agent to see the restarted node agent up")
    second = vgrid(env, "submit", str(jdl)).stdout.strip()
    wait_done(env, second)


def _address_of(site, node_name):
    """The listen address of service ``node_name`` (its config file's ``bind``)."""
    for line in (site["dir"] / f"{node_name}.toml").read_text().splitlines():
        if line.startswith("bind = "):
            return json.loads(line.partition("=")[2].strip())
    raise AssertionError(f"no bind in {node_name}.toml")


def test_demo_does_not_restart_a_dead_service_and_reports_it(site):
    node = site["doc"]["ces"][1]["nodes"][1]
    os.kill(node["pid"], signal.SIGKILL)
    wait_until(lambda: json.loads(site["ready"].read_text())["ces"][1]["nodes"][1]["pid"] is None,
               "the ready file to show the dead node agent without a pid")
    assert not _alive(node["pid"])
    site["demo"].send_signal(signal.SIGTERM)
    _, err = site["demo"].communicate(timeout=90)
    assert "ce2-wn2 (node) was killed by signal 9; not restarted" in err


def test_set_options_are_parsed_and_checked():
    assert parse_options(["broker.ism_refresh_s=2", "node.keep_workdirs=true", "ce.site=X"]) == {
        "broker": {"ism_refresh_s": 2}, "node": {"keep_workdirs": True}, "ce": {"site": "X"}}
    with pytest.raises(ValueError, match="KIND.KEY=VALUE"):
        parse_options(["bdii.x=1"])


def test_serve_refuses_options_of_the_run_once_demo(tmp_path):
    p = subprocess.run([sys.executable, "-m", "vgrid_cli", "demo", "--serve", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--serve takes none of" in p.stderr
    p = subprocess.run([sys.executable, "-m", "vgrid_cli", "demo", "--ready-file", str(tmp_path / "f")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "go with --serve" in p.stderr


def _toml_values():
    from hypothesis import strategies as st
    scalar = st.one_of(st.booleans(), st.integers(-10**9, 10**9),
                       st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
    return st.one_of(scalar, st.lists(st.one_of(st.integers(-99, 99), st.text(max_size=5)), max_size=4))


def test_merge_toml_sets_and_replaces_keys():
    import tomllib

    from hypothesis import given, strategies as st

    from vgrid_cli.demo import merge_toml

    keys = st.sampled_from(["port", "state_dir", "heartbeat_s", "node_lost_s", "ce_urls", "site"])

    @given(base=st.dictionaries(keys, _toml_values(), max_size=4),
           overrides=st.dictionaries(keys, _toml_values(), max_size=4))
    def check(base, overrides):
        text = merge_toml("", base) if base else ""
        assert tomllib.loads(merge_toml(text, overrides)) == {**base, **overrides}
    check()


def test_a_stopped_site_starts_again_from_its_directory(tmp_path):
    d = tmp_path / "site"

    def serve(ready):
        p = subprocess.Popen([sys.executable, "-m", "vgrid_cli", "demo", "--serve", "--plain-http",
                              "--ready-file", str(ready), "--dir", str(d), "--ism-refresh", "2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: ready.exists() or p.poll() is not None, "the site's ready file", timeout_s=120)
        assert p.poll() is None, p.communicate()
        return p, json.loads(ready.read_text())

    def stop(p):
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=90)
        assert p.returncode == 0, err
        return err

    first, doc = serve(tmp_path / "one.json")
    assert doc["env"] == {"VGRID_BROKER_URL": doc["broker"]["url"]}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("X509_", "VGRID_"))}
    env.update(doc["env"])
    jdl = tmp_path / "true.jdl"
    jdl.write_text('Executable = "/bin/true";\n')
    job = vgrid(env, "submit", str(jdl)).stdout.strip()
    wait_done(env, job)
    stop(first)

    again, doc2 = serve(tmp_path / "two.json")
    try:
        assert doc2["broker"]["url"] == doc["broker"]["url"]
        assert [(c["url"], [n["url"] for n in c["nodes"]]) for c in doc2["ces"]] == \
            [(c["url"], [n["url"] for n in c["nodes"]]) for c in doc["ces"]]
        assert status(env, job)["state"] == "Done"          # the broker's state survived
        wait_done(env, vgrid(env, "submit", str(jdl)).stdout.strip())
    finally:
        err = stop(again)
    assert "restarting a personal grid" in err
