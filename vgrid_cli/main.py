"""The ``vgrid`` command line (click). Thin adapters: the logic lives in the packages.

Exit codes: 0 ok; 1 the thing checked is wrong or a service failed; 2 usage or input error.
No Python traceback reaches the user: known errors are printed as one clear message.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path

import click
from rich.table import Table

import jdl as jdlmod

from broker.client import BrokerClient, ClientError, split_job_id
from vgrid_runtime.wsgi import ServeError

from .common import exit_on, fail
from .tables import jobs_table, out_console
from vgrid_runtime.config import ConfigError

def handle_errors(fn):
    """Turn the errors people cause into a message and an exit code (never a traceback)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ClientError as exc:
            fail(str(exc), 2 if exc.status and 400 <= exc.status < 500 else 1)
    return exit_on((jdlmod.JDLError, 2), (ConfigError, 2), (ServeError, 1))(wrapper)


#: Commands other modules provide, imported only when used (keeps `vgrid serve` fast to start).
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "ca": ("vgrid_cli.ca_cmds", "ca_group"),
    "proxy": ("vgrid_cli.ca_cmds", "proxy_group"),
    "jdl": ("vgrid_cli.jdl_cmds", "jdl_group"),
    "bdii": ("vgrid_cli.infosys_cmds", "bdii_group"),
    "info": ("vgrid_cli.infosys_cmds", "info_cmd"),
    "gip": ("vgrid_cli.infosys_cmds", "gip_cmd"),
    "simulate": ("vgrid_cli.simulate_cmds", "simulate_cmd"),
    "simulate-grid": ("vgrid_cli.gridsim_cmds", "simulate_grid_cmd"),
    "report": ("vgrid_cli.report_cmds", "report_cmd"),
    "workload": ("vgrid_cli.workload_cmds", "workload_group"),
    "sweep-preemption": ("vgrid_cli.sweep_cmds", "sweep_cmd"),
    "voc-sim": ("vgrid_cli.voc_cmds", "voc_sim_cmd"),
    "sweep": ("vgrid_cli.sweep_run_cmds", "sweep_run_cmd"),
    "api-doc": ("vgrid_cli.api_doc", "api_doc_cmd"),
    "guest": ("vgrid_cli.guest_cmds", "guest_group"),
    "node-cleanup": ("vgrid_cli.node_cmds", "node_cleanup_cmd"),
}


class LazyGroup(click.Group):
    """A click group whose LAZY_COMMANDS are imported on first use."""

    def list_commands(self, ctx):
        present = [n for n, (m, _) in LAZY_COMMANDS.items() if importlib.util.find_spec(m)]
        return sorted(set(super().list_commands(ctx)) | set(present))

    def get_command(self, ctx, name):
        if name in LAZY_COMMANDS and name not in self.commands:
            module, attr = LAZY_COMMANDS[name]
            if importlib.util.find_spec(module) is None:
                return None
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vgrid")
@click.option("--proxy", default=None, metavar="FILE",
              help="the user's proxy (default $X509_USER_PROXY or /tmp/x509up_u<uid>)")
@click.option("--cert-dir", default=None, metavar="DIR",
              help="trusted CAs (default $X509_CERT_DIR or /etc/grid-security/certificates)")
@click.option("--voms-dir", default=None, metavar="DIR",
              help="trusted VO servers (default $X509_VOMS_DIR or /etc/grid-security/vomsdir)")
def main(proxy: str | None, cert_dir: str | None, voms_dir: str | None) -> None:
    """vgrid: gLite-style grid meta-scheduler with virtual worker nodes and VM leases.

    Against an https:// broker the commands present the user's proxy (RFC 3820, with VOMS
    attributes) and trust only the CAs of the certificate directory (docs/security.md)."""
    for name, value in (("X509_USER_PROXY", proxy), ("X509_CERT_DIR", cert_dir),
                        ("X509_VOMS_DIR", voms_dir)):
        if value:
            os.environ[name] = value   # read where gLite tools read them (vgrid_runtime.pki)


# -- user commands -------------------------------------------------------------------------------
broker_opt = click.option("--broker", "broker_url", default=None, metavar="URL",
                          help="broker URL (default $VGRID_BROKER_URL or http://127.0.0.1:8440)")


@main.command()
@click.argument("jdl_file", type=click.Path(dir_okay=False, exists=True))
@broker_opt
@click.option("--attempts", type=click.IntRange(min=1), default=5, show_default=True,
              help="tries when the broker cannot be reached or does not answer (same Idempotency-Key)")
@handle_errors
def submit(jdl_file: str, broker_url: str | None, attempts: int) -> None:
    """Submit JDL_FILE (with its InputSandbox files); prints the job id.

    Retried on connection errors and timeouts with one Idempotency-Key: stored once."""
    res = BrokerClient(broker_url, submit_attempts=attempts).submit_file(jdl_file)
    click.echo(res["id"])


@main.command()
@click.argument("job_ids", nargs=-1)
@broker_opt
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.option("--state", "states", multiple=True, help="only jobs in this gLite state (repeatable)")
@click.option("--owner", default=None, help="'me', or a DN (administrators: anyone's jobs)")
@click.option("--since", type=float, default=None,
              help="only jobs submitted at or after this broker-clock time (s)")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="print at most this many jobs (default: every page)")
@handle_errors
def status(job_ids: tuple[str, ...], broker_url: str | None, as_json: bool, states: tuple[str, ...],
           owner: str | None, since: float | None, limit: int | None) -> None:
    """State of the given jobs (all jobs the broker shows you when none is given, read page by
    page from GET /jobs, oldest first, filtered by --state/--owner/--since)."""
    if job_ids:
        url = split_job_id(job_ids[0], broker_url)[0]
        keys = [split_job_id(j, broker_url)[1] for j in job_ids]
        client = BrokerClient(url)
        jobs = [client.job(k) for k in keys]
    else:
        jobs = []
        pages = BrokerClient(broker_url).job_pages(
            state=",".join(states) or None, owner=owner, since=since,
            limit=min(limit, 1000) if limit else None)
        for page in pages:
            jobs.extend(page)
            if limit and len(jobs) >= limit:
                jobs = jobs[:limit]
                break
    if as_json:
        click.echo(json.dumps({"jobs": jobs}, indent=2))
    else:
        out_console().print(jobs_table(jobs))


@main.command()
@click.argument("job_id")
@click.option("--dir", "dest", type=click.Path(file_okay=False), default=None,
              help="where to put the files (default ./<key>)")
@broker_opt
@handle_errors
def output(job_id: str, dest: str | None, broker_url: str | None) -> None:
    """Retrieve the output sandbox of JOB_ID; the job becomes Cleared."""
    url, key = split_job_id(job_id, broker_url)
    files = BrokerClient(url).output(key, Path(dest or key))
    for f in files:
        click.echo(str(f))


@main.command()
@click.argument("job_id")
@broker_opt
@handle_errors
def cancel(job_id: str, broker_url: str | None) -> None:
    """Cancel JOB_ID."""
    url, key = split_job_id(job_id, broker_url)
    res = BrokerClient(url).cancel(key)
    click.echo(f"{res['id']} {res['state']}")


@main.command()
@broker_opt
@click.option("--lifetime", "lifetime_s", type=click.FloatRange(min=60), default=12 * 3600.0,
              show_default=True, help="seconds the delegated proxy is valid (never beyond yours)")
@handle_errors
def delegate(broker_url: str | None, lifetime_s: float) -> None:
    """Delegate your proxy to the broker, so that it may forward your jobs to peer brokers
    (docs/federation.md): the broker makes the key, your proxy signs it."""
    from vgrid_runtime.clock import WallClock
    from vgrid_runtime.pki import user_proxy_path
    res = BrokerClient(broker_url).delegate(user_proxy_path(), WallClock().now(), lifetime_s)
    click.echo(f"delegated {res['dn']} (VO {res['vo']}) until {res['not_after']:.0f}")


def _local_match(text: str, jdl_file: str, ldif: tuple[str, ...], bdii: str | None) -> dict:
    """list-match without a broker: an ISM over LDIF files or a BDII, refreshed once."""
    from vgrid_runtime.clock import WallClock
    from infosys.ism import ISM
    from infosys.sources import LdifFileSource

    from broker.matchmaker import Matchmaker

    if bdii:
        from infosys.ism import BdiiSource
        sources = [BdiiSource(bdii)]
    else:
        sources = [LdifFileSource(p) for p in ldif]
    clock = WallClock()
    ism = ISM(sources, refresh_s=3600, clock=clock)
    snap = ism.refresh()
    if snap.errors:
        fail("; ".join(snap.errors), 1)
    desc = jdlmod.parse_jdl(text, jdl_file)
    return Matchmaker(ism.feedback).match(desc, ism.candidates(), now=clock.now()).to_json()


@main.command("list-match")
@click.argument("jdl_file", type=click.Path(dir_okay=False, exists=True))
@broker_opt
@click.option("--ldif", multiple=True, type=click.Path(dir_okay=False, exists=True),
              help="match against CE ads from GLUE LDIF file(s) instead of a broker's ISM")
@click.option("--bdii", default=None, metavar="LDAP_URL", help="match against a BDII instead of a broker's ISM")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@handle_errors
def list_match(jdl_file: str, broker_url: str | None, ldif: tuple[str, ...], bdii: str | None,
               as_json: bool) -> None:
    """CEs that satisfy JDL_FILE's Requirements, best first, without submitting."""
    try:
        text = Path(jdl_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{jdl_file}: cannot read: {exc}", 2)
    jdlmod.parse_jdl(text, jdl_file)  # local syntax check with file:line:column
    if ldif or bdii:
        res = _local_match(text, jdl_file, ldif, bdii)
    else:
        res = BrokerClient(broker_url).list_match(text, jdl_file)
    if as_json:
        click.echo(json.dumps(res, indent=2))
        return
    t = Table(title=f"CEs matching {jdl_file} (selection: {res['policy']})")
    for col in ("CE", "Rank", "(N_j+1)/C_j", "N_j", "C_j"):
        t.add_column(col)
    for c in res["ces"]:
        t.add_row(c["id"], "undefined" if c["rank"] is None else f"{c['rank']:g}",
                  "-" if c["sfete"] is None else f"{c['sfete']:.3g}", str(c["n_j"]), f"{c['capacity']:g}")
    out_console().print(t)
    if not res["ces"]:
        raise SystemExit(1)


# -- services ------------------------------------------------------------------------------------
@main.command()
@click.argument("service", type=click.Choice(["broker", "ce", "node", "images"]))
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="TOML configuration file")
@click.option("--ready-file", type=click.Path(dir_okay=False), default=None,
              help="write {url, pid} here once listening")
@click.option("--port", type=int, default=None, help="override the configured port")
@handle_errors
def serve(service: str, config_file: str | None, ready_file: str | None, port: int | None) -> None:
    """Run one vgrid service in the foreground (what `vgrid demo` starts)."""
    import logging
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if service == "broker":
        from broker.config import BrokerConfig      # here: its import costs every command ~1 s
        from broker.server import serve_broker
        config = BrokerConfig.from_toml(config_file) if config_file else BrokerConfig()
        if port is not None:
            config.port = port
        serve_broker(config, ready_file)
    elif service == "images":                  # the image repository (docs/vwn.md)
        from vwn_agents.images.repository import serve_images
        serve_images(config_file, ready_file, port)
    else:
        from .services import serve_agent
        serve_agent(service, config_file, ready_file, port)


@main.command()
@click.option("--ces", default=2, show_default=True, type=click.IntRange(1, 8), help="number of CE agents")
@click.option("--jobs", "jobs_dir", type=click.Path(file_okay=False), default=None,
              help="directory of *.jdl files (default examples/jdl)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document")
@click.option("--bdii", is_flag=True, help="run the ISM against a real slapd BDII fed by vgrid bdii update")
@click.option("--ism-refresh", "ism_refresh_s", default=30.0, show_default=True, help="seconds between ISM refreshes")
@click.option("--timeout", "timeout_s", default=600.0, show_default=True, help="give up after this many seconds")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="also write jobs.json and vwn_caps.png (CPU caps over time per node) here")
@click.option("--tls/--plain-http", "tls", default=True, show_default=True,
              help="mutual TLS with a CA, host certificates and a user proxy made for the run, "
                   "or plain HTTP on 127.0.0.1 (no authentication)")
@click.option("--serve", is_flag=True,
              help="a personal grid: start the site, submit nothing, run until SIGTERM/Ctrl-C")
@click.option("--ready-file", type=click.Path(dir_okay=False), default=None,
              help="--serve: write the site's URLs, pids and client environment here (JSON)")
@click.option("--dir", "site_dir", type=click.Path(file_okay=False), default=None,
              help="--serve: where the site lives (kept; default a temporary directory)")
@click.option("--set", "settings", multiple=True, metavar="KIND.KEY=VALUE",
              help="--serve: a config option of every broker, ce or node (repeatable)")
@click.option("--driver", type=click.Choice(["cgroup", "libvirt"]), default="cgroup", show_default=True,
              help="what a VWN is: a cgroup process tree, or a qemu VM through libvirt (starts "
                   "libvirtd if none runs; default jobs then examples/jdl_vm; docs/vwn.md)")
@handle_errors
def demo(ces: int, jobs_dir: str | None, as_json: bool, bdii: bool, ism_refresh_s: float, timeout_s: float,
         out_dir: str | None, tls: bool, serve: bool, ready_file: str | None, site_dir: str | None,
         settings: tuple[str, ...], driver: str) -> None:
    """The main job: broker + CE agents + node agents on loopback, run every JDL to the end.

    With --serve: a personal grid that stays up (docs/cli.md)."""
    if serve:
        from .personal import parse_options, run_personal_grid
        if jobs_dir or as_json or bdii or out_dir:
            fail("vgrid demo --serve takes none of --jobs, --json, --bdii, --out", 2)
        try:
            options = parse_options(settings)
        except ValueError as exc:
            fail(str(exc), 2)
        raise SystemExit(run_personal_grid(n_ces=ces, site_dir=site_dir, ready_file=ready_file, tls=tls,
                                           ism_refresh_s=ism_refresh_s, options=options))
    if ready_file or site_dir or settings:
        fail("--ready-file, --dir and --set go with --serve", 2)
    from .demo import run_demo
    ok = run_demo(n_ces=ces, jobs_dir=jobs_dir, as_json=as_json, use_bdii=bdii,
                  ism_refresh_s=ism_refresh_s, timeout_s=timeout_s, out_dir=out_dir, tls=tls,
                  driver=driver)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
