"""``vgrid demo``: the main job end to end on one machine, on the embedded defaults.

Starts, as separate processes on free loopback ports, 2 node agents per CE, N CE agents with
different capacities, and one broker (SQLite job database in a temporary directory, ISM fed by
the CE agents' GLUE 1.3 LDIF). Submits every ``*.jdl`` of the jobs directory, shows live progress
until every job has ended, prints one row per job, stops everything it started (also on Ctrl-C),
and returns True only if every job is Done with exit code 0.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from broker.client import BrokerClient, ClientError
from vgrid_runtime import job_states
from vgrid_runtime.clock import WallClock

from . import vm_demo
from .demo_pki import DemoPKI, make_demo_pki
from .services import STOP_GRACE_S, ServiceError, ServiceGroup
from .stop_signals import raise_on_stop_signals

REPO_EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "jdl"
VM_EXAMPLES = REPO_EXAMPLES.parent / "jdl_vm"
ENDED = {s.value for s in job_states.ENDED}


def ce_layout(n_ces: int) -> list[dict]:
    """The embedded site: CE k has 2 worker nodes of capacity 1/k core each and SI00 2000/k.

    So CE 1 is the fastest, and the capacities C_j = TotalCPUs x SI00 differ (seed 004 Table II
    uses CEs of different capacities in the same spirit).
    """
    out = []
    for k in range(1, n_ces + 1):
        cap = round(1.0 / k, 3)
        out.append({"name": f"ce{k}", "capacity": cap, "si00": int(round(2000 / k)),
                    "nodes": [f"ce{k}-wn{i}" for i in (1, 2)]})
    return out


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def start_site(group: ServiceGroup, n_ces: int, ism_refresh_s: float, state_dir: Path,
               bdii_url: str = "", match_expiry_s: float = 30.0, on_ces=None,
               pki: DemoPKI | None = None, port=None, options: dict[str, dict] | None = None) -> str:
    """Start node agents, CE agents and the broker; returns the broker URL.

    With ``bdii_url`` the broker's ISM reads that BDII instead of the CE agents; ``on_ces`` (a
    callable taking the CE agent URLs) runs before the broker starts, e.g. to feed the BDII.
    With ``pki`` (:func:`site_pki`) every service listens on its own loopback address over
    mutual TLS and accepts only the callers its role allows. ``port`` (a callable: service
    name, listen address -> TCP port) fixes each service's port in its config file (default:
    port 0, a free port at each start); ``options`` (``{"broker"|"ce"|"node": {key: value}}``)
    sets or replaces config keys of every service of that kind. State directories are
    ``state_dir/<name>`` (node agents' ``work_dir``, CE agents' ``state_dir`` when the CE agent
    config has that option, the broker's ``state_dir``).
    """
    layout = ce_layout(n_ces)
    port = port or (lambda name, address: 0)
    options = options or {}

    def bind(name: str) -> str:
        return pki.address(name) if pki is not None else "127.0.0.1"

    def finish(kind: str, name: str, text: str) -> tuple[str, str, str]:
        text = text.replace("port = 0\n", f"port = {int(port(name, bind(name)))}\n")
        return kind, name, merge_toml(text, options.get(kind, {}))

    def secure(name: str, allow: str = "", dns: list[str] = ()) -> str:
        """TLS lines of service ``name``, and ``allow = [dns]`` (who may call its job API)."""
        if pki is None:
            return ""
        return pki.toml(name) + (f"{allow} = {_toml_list(list(dns))}\n" if allow else "")

    specs = []
    for ce in layout:
        for node in ce["nodes"]:
            specs.append(finish("node", node, f'node = "{node}"\ncapacity = {ce["capacity"]}\nport = 0\n'
                                f'work_dir = "{state_dir / node}"\n'
                                + secure(node, "ce_dns", [pki.dn(ce["name"])] if pki else [])))
    nodes = {svc.name: svc.url for svc in group.start_many(specs)}
    specs = []
    for ce in layout:
        node_urls = [nodes[n] for n in ce["nodes"]]
        specs.append(finish("ce", ce["name"],
                            f'ce_id = "{ce["name"]}.vgrid.local:8443/vgrid-vwn-long"\nsite = "VGRID-DEMO"\n'
                            f'host = "{ce["name"]}.vgrid.local"\nqueue = "long"\nnodes = {_toml_list(node_urls)}\n'
                            f'si00 = {ce["si00"]}\nram_mb = 2048\nmax_wallclock_s = 3600\n'
                            f'vos = ["dteam", "vgrid"]\nport = 0\nstate_dir = "{state_dir / ce["name"]}"\n'
                            + secure(ce["name"], "broker_dns", [pki.dn("broker")] if pki else [])))
    ce_urls = [svc.url for svc in group.start_many(specs)]
    if on_ces is not None:
        on_ces(ce_urls)
    broker_cfg = (f'port = 0\nstate_dir = "{state_dir / "broker"}"\nce_urls = {_toml_list(ce_urls)}\n'
                  f'ism_refresh_s = {float(ism_refresh_s)}\nmatch_expiry_s = {float(match_expiry_s)}\n'
                  + secure("broker"))
    if bdii_url:
        broker_cfg += f'bdii = "{bdii_url}"\n'
    return group.start(*finish("broker", "broker", broker_cfg)).url


def merge_toml(text: str, overrides: dict) -> str:
    """``text`` (top-level ``key = value`` lines) with the keys of ``overrides`` set to its values
    (TOML strings, numbers, booleans and lists of them): lines of those keys are replaced."""
    if not overrides:
        return text
    lines = text.rstrip("\n").split("\n") if text else []   # "\n" only: a value may hold U+0085
    kept = [line for line in lines if line.partition("=")[0].strip() not in overrides]
    return "\n".join(kept + [f"{k} = {_toml_value(v)}" for k, v in overrides.items()]) + "\n"


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + "".join(_TOML_ESCAPES.get(c, c) for c in str(value)) + '"'


#: A TOML basic string escapes the backslash, the quote and the control characters.
_TOML_ESCAPES = {"\\": "\\\\", '"': '\\"', **{chr(i): f"\\u{i:04x}" for i in [*range(0x20), 0x7f]}}


def site_pki(directory: Path, n_ces: int, users: tuple[str, ...] = ()) -> DemoPKI:
    """The identities of :func:`start_site`'s services and of the demo user (and of ``users``,
    more users by common name: ``make_demo_pki``)."""
    names = ["broker"] + [ce["name"] for ce in ce_layout(n_ces)]
    names += [n for ce in ce_layout(n_ces) for n in ce["nodes"]]
    return make_demo_pki(directory, names, WallClock().now(), users=users)


def job_rows(jobs: list[dict]) -> list[dict]:
    """The per-job result records of ``vgrid demo --json``."""
    return [{"id": j["id"], "file": j.get("filename"), "state": j["state"], "ce": j.get("ce"),
             "node": j.get("node"), "vwn": j.get("vwn"), "cpu_caps": j.get("cpu_caps") or [],
             "cpu_capped": j.get("cpu_capped"), "exit_code": j.get("exit_code"),
             "stdout_head": j.get("stdout_head"), "reason": j.get("reason")} for j in jobs]


def _progress_table(jobs: list[dict], elapsed: float) -> Table:
    ended = sum(j["state"] in ENDED for j in jobs)
    t = Table(title=f"vgrid demo — {ended}/{len(jobs)} jobs ended — {elapsed:.0f} s")
    for col in ("JDL", "state", "CE", "VWN", "CPU cap now"):
        t.add_column(col)
    for j in jobs:
        caps = j.get("cpu_caps") or []
        t.add_row(Path(j.get("filename") or "?").name, j["state"], j.get("ce") or "-",
                  j.get("vwn") or "-", f"{caps[-1]:.2f}" if caps else "-")
    return t


def watch(client: BrokerClient, keys: list[str], timeout_s: float, console: Console) -> list[dict]:
    """Poll the broker until every job has ended (or timeout); live table on a TTY."""
    start = time.monotonic()
    seen: dict[str, str] = {}
    jobs = client.jobs(keys)
    with Live(_progress_table(jobs, 0), console=console, refresh_per_second=4,
              transient=True, auto_refresh=console.is_terminal) as live:
        while True:
            jobs = client.jobs(keys)
            if not console.is_terminal:
                for j in jobs:
                    if seen.get(j["key"]) != j["state"]:
                        seen[j["key"]] = j["state"]
                        console.print(f"{Path(j.get('filename') or '?').name}: {j['state']}"
                                      + (f" at {j['ce']}" if j.get("ce") else ""), highlight=False)
            live.update(_progress_table(jobs, time.monotonic() - start))
            if all(j["state"] in ENDED for j in jobs) or time.monotonic() - start > timeout_s:
                return jobs
            time.sleep(0.5)


def run_demo(n_ces: int = 2, jobs_dir: str | None = None, as_json: bool = False,
             use_bdii: bool = False, ism_refresh_s: float = 30.0, timeout_s: float = 600.0,
             out_dir: str | None = None, tls: bool = True, driver: str = "cgroup") -> bool:
    """Run the demo; True when every job ended Done with exit code 0.

    ``tls``: a CA, host certificates and a user proxy are made in the temporary directory and
    every service runs over mutual TLS (job ids are ``https://...``); False runs plain HTTP on
    127.0.0.1. SIGTERM and SIGHUP are handled like Ctrl-C: every process the demo started is
    stopped. ``driver`` "libvirt": every VWN is a qemu VM (``vm_demo``; the jobs default to
    examples/jdl_vm, light enough for software-emulated guests). SIGINT is handled even when
    the process inherited it ignored (started in the background by a non-interactive shell).
    """
    raise_on_stop_signals()   # Ctrl-C too, even when started with SIGINT ignored
    from .tables import jobs_table, out_console  # the same table `vgrid status` prints

    err = Console(stderr=True)
    out = out_console()
    jdir = Path(jobs_dir) if jobs_dir else (REPO_EXAMPLES if driver == "cgroup" else VM_EXAMPLES)
    files = sorted(jdir.glob("*.jdl"))
    if not files:
        err.print(f"vgrid demo: no *.jdl files in {jdir}", highlight=False)
        return False
    ok = False
    feeders: list = []
    with tempfile.TemporaryDirectory(prefix="vgrid-demo-") as tmp, ServiceGroup(Path(tmp)) as group, \
            vm_demo.vm_site(driver, err) as node_options:
        try:
            err.print(f"starting {n_ces} CE agent(s), {2 * n_ces} node agents and the broker ...")
            pki = site_pki(Path(tmp) / "pki", n_ces) if tls else None
            bdii_url, feed = "", None
            if use_bdii:
                bdii_url = _start_bdii(Path(tmp))
                err.print(f"BDII (slapd + glue-schema) at {bdii_url}, fed from the CE agents' GIP")
                reader = pki.host_credentials("broker") if pki else None   # reads the CEs' GLUE
                feed = lambda ce_urls: feeders.append(  # noqa: E731
                    _feed_bdii(bdii_url, ce_urls, ism_refresh_s, reader))
            url = start_site(group, n_ces, ism_refresh_s, Path(tmp), bdii_url=bdii_url, on_ces=feed,
                             pki=pki, options={"node": node_options})
            client = BrokerClient(url, credentials=pki.user_credentials() if pki else None)
            keys, rejected = [], []
            for f in files:
                try:
                    keys.append(client.submit_file(f)["key"])
                except ClientError as exc:
                    rejected.append({"id": None, "file": str(f), "state": "Rejected", "reason": str(exc)})
                except Exception as exc:  # JDL errors: show them, keep going with the others
                    rejected.append({"id": None, "file": str(f), "state": "Rejected", "reason": str(exc)})
            err.print(f"submitted {len(keys)} job(s) to {url}")
            jobs = watch(client, keys, timeout_s, err) if keys else []
            rows = job_rows(jobs) + rejected
            if out_dir:
                _write_outputs(Path(out_dir), jobs, err)
            ok = bool(rows) and all(r["state"] == "Done" and r.get("exit_code") == 0 for r in rows)
            if as_json:
                print(json.dumps({"ok": ok, "jobs": rows}, indent=2))
            else:
                out.print(jobs_table(jobs, title="vgrid demo results", keys=False))
                for r in rejected:
                    out.print(f"[red]rejected[/] {r['file']}: {r['reason']}", highlight=False)
                out.print("[green]all jobs Done with exit code 0[/]" if ok else "[red]some jobs failed[/]")
        except KeyboardInterrupt:
            err.print("interrupted: stopping every service the demo started")
            ok = False
        except (ServiceError, ClientError) as exc:
            err.print(f"vgrid demo: {exc}", highlight=False, markup=False)
            ok = False
        finally:
            for feeder in feeders:
                feeder.stop()
            if use_bdii:
                _stop_bdii(Path(tmp))
    if group.stop_s is not None:       # the services' stop, for the operator (and test_demo)
        err.print(f"stopped every service in {group.stop_s:.1f} s" + (
            f"; killed after {STOP_GRACE_S:g} s: {', '.join(group.killed)}" if group.killed else ""),
            highlight=False)
    return ok


def _write_outputs(out: Path, jobs: list[dict], err: Console) -> None:
    """``jobs.json`` (the broker's records) and ``vwn_caps.png`` (caps over time per node)."""
    from .demo_plots import write_caps_plot
    out.mkdir(parents=True, exist_ok=True)
    (out / "jobs.json").write_text(json.dumps(jobs, indent=2))
    png = write_caps_plot(jobs, out / "vwn_caps.png")
    err.print(f"wrote {out / 'jobs.json'}" + (f" and {png}" if png else ""), highlight=False)


def _start_bdii(tmp: Path) -> str:
    """A real BDII (slapd with the Debian glue-schema) in ``tmp/bdii``; its LDAP URL."""
    from infosys.bdii import start_bdii
    return start_bdii(tmp / "bdii").url


def _feed_bdii(bdii_url: str, ce_urls: list[str], ism_refresh_s: float, tls=None):
    """The site BDII's update loop: load every CE agent's GIP output into the BDII by
    difference, now and then every half ISM refresh interval (so each refresh sees news).
    ``tls``: the credential to read CE agents served over mutual TLS."""
    from infosys.providers import BdiiFeeder
    from vgrid_runtime.httpclient import new_session
    feeder = BdiiFeeder(bdii_url, ce_urls, interval_s=max(1.0, ism_refresh_s / 2),
                        session=new_session(tls) if tls else None)
    _, errors = feeder.run_once()
    if errors:
        raise ServiceError("loading the CE agents' GLUE into the BDII failed: " + "; ".join(errors))
    feeder.start()
    return feeder


def _stop_bdii(tmp: Path) -> None:
    from infosys.bdii import stop_bdii
    stop_bdii(tmp / "bdii")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0 if run_demo() else 1)
