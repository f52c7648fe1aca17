"""``vgrid bdii start|stop|status|update``, ``vgrid info`` and ``vgrid gip`` (click adapters over
infosys; registered by vgrid_cli/main.py).

Exit codes: 0 ok; 1 the thing checked is wrong (BDII unreachable, no slapd, nothing to show);
2 usage or input error (bad LDIF, unreadable source).
"""
from __future__ import annotations

import json
import signal
import threading
import sys

import click
from rich.console import Console
from rich.table import Table

from infosys.bdii import BdiiError, bdii_status, start_bdii, stop_bdii
from infosys.bdii_update import update_bdii
from vgrid_runtime.clock import WallClock
from infosys.gip import ce_state_from_ad, render_glue2
from infosys.glue import AD_ID, glue13_ce_ads
from infosys.ism import ISM, BdiiSource, LdifFileSource
from infosys.ldapclient import LdapError
from infosys.ldif import LdifEntry, LdifError, parse_ldif
from infosys.providers import BdiiFeeder, fetch_ce_glue, load_source
from infosys.sources import SourceError, glue_url
from infosys.summary import snapshot_summary

from .common import err_console as err  # noqa: E402
from .common import fail as _fail  # noqa: E402


def _echo_json(doc) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=False))


# -- vgrid bdii ----------------------------------------------------------------------------------
@click.group("bdii")
def bdii_group() -> None:
    """A real BDII: OpenLDAP slapd with the GLUE 1.3 and 2.0 schemas (o=grid, o=glue)."""


@bdii_group.command("start")
@click.option("--dir", "dir_", required=True, type=click.Path(file_okay=False),
              help="directory for slapd.conf, the databases and the pid file")
@click.option("--port", default=0, show_default=True, help="loopback port (0 = a free one)")
@click.option("--json", "as_json", is_flag=True, help="print {url, port, pid, dir}")
def bdii_start(dir_: str, port: int, as_json: bool) -> None:
    """Start slapd in DIR on 127.0.0.1 (or report the one already running there)."""
    try:
        server = start_bdii(dir_, port=port)
    except BdiiError as e:
        _fail(str(e), 1)
    if as_json:
        _echo_json({"url": server.url, "port": server.port, "pid": server.pid, "dir": server.dir})
    else:
        click.echo(server.url)


@bdii_group.command("stop")
@click.option("--dir", "dir_", required=True, type=click.Path(file_okay=False))
def bdii_stop(dir_: str) -> None:
    """Stop the slapd of DIR by its PID (exit 1 if none was running)."""
    if not stop_bdii(dir_):
        _fail(f"no BDII running in {dir_}", 1)
    click.echo(f"stopped the BDII in {dir_}")


@bdii_group.command("status")
@click.option("--dir", "dir_", required=True, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True)
def bdii_status_cmd(dir_: str, as_json: bool) -> None:
    """Show the BDII running in DIR (exit 1 if none)."""
    server = bdii_status(dir_)
    if as_json:
        _echo_json(None if server is None else
                   {"url": server.url, "port": server.port, "pid": server.pid, "dir": server.dir})
    elif server is not None:
        click.echo(f"{server.url} pid {server.pid}")
    if server is None:
        if not as_json:
            err.print(f"vgrid: no BDII running in {dir_}", highlight=False, markup=False)
        raise SystemExit(1)


def _update_with_progress(bdii_url: str, entries: list[LdifEntry]):
    """update_bdii with a rich progress bar on a terminal, quiet in pipes."""
    if not sys.stderr.isatty():
        return update_bdii(bdii_url, entries)
    from rich.progress import Progress
    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("loading the BDII", total=len(entries))
        return update_bdii(bdii_url, entries,
                           progress=lambda done, total: bar.update(task, completed=done,
                                                                   total=total))


@bdii_group.command("update")
@click.option("--bdii", "bdii_url", required=True, metavar="LDAP_URL", help="ldap://host:port")
@click.option("--from", "sources", required=True, multiple=True, metavar="SOURCE",
              help="LDIF file, '-' for stdin, or a CE agent URL (its GET /glue); repeatable")
@click.option("--glue2/--no-glue2", default=True, show_default=True,
              help="also publish CE agents' CEs as GLUE 2.0")
@click.option("--every", "every_s", type=float, default=None, metavar="SECONDS",
              help="keep updating every SECONDS until interrupted (the BDII update loop); a "
                   "provider that fails keeps its last output")
@click.option("--json", "as_json", is_flag=True)
def bdii_update(bdii_url: str, sources: tuple[str, ...], glue2: bool, every_s: float | None,
                as_json: bool) -> None:
    """Load provider output into the BDII by difference (add, modify, delete)."""
    if every_s is not None:
        _update_loop(bdii_url, list(sources), glue2, every_s, as_json)
        return
    entries: list[LdifEntry] = []
    for s in sources:
        try:
            entries += load_source(s, glue2, session=_session_for([s]))
        except LdifError as e:
            _fail(str(e), 2)
        except SourceError as e:
            _fail(str(e), 2)
    try:
        report = _update_with_progress(bdii_url, entries)
    except LdapError as e:
        _fail(str(e), 1)
    if as_json:
        _echo_json(report.as_dict())
        return
    click.echo(f"added {report.added}, modified {report.modified}, deleted {report.deleted}, "
               f"unchanged {report.unchanged}, refused {len(report.rejected)}")
    for r in report.rejected:
        err.print(f"  refused: {r}", highlight=False, markup=False, soft_wrap=True)


def _update_loop(bdii_url: str, sources: list[str], glue2: bool, every_s: float,
                 as_json: bool) -> None:
    if every_s <= 0:
        _fail("--every must be > 0 seconds", 2)
    feeder = BdiiFeeder(bdii_url, sources, interval_s=every_s, glue2=glue2,
                        session=_session_for(sources))
    # SIGINT/SIGTERM set a flag the loop checks: a KeyboardInterrupt raised inside a library call
    # (and swallowed there) must not leave the loop running.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set():
        report, errors = feeder.run_once()
        if as_json:
            click.echo(json.dumps({"report": report.as_dict() if report else None,
                                   "errors": errors}))
        elif report is not None:
            click.echo(f"added {report.added}, modified {report.modified}, deleted "
                       f"{report.deleted}, unchanged {report.unchanged}, refused "
                       f"{len(report.rejected)}")
        for e in errors:
            err.print(f"vgrid: {e}", highlight=False, markup=False, soft_wrap=True)
        stop.wait(every_s)


# -- vgrid info ----------------------------------------------------------------------------------
def _table(doc: dict) -> Table:
    t = Table(title="CEs" + ("  [stale]" if doc["stale"] else ""))
    t.add_column("CE / VO view", no_wrap=True)
    for col, just in (("status", "left"), ("CPUs", "right"),
                      ("free", "right"), ("running", "right"), ("waiting", "right"),
                      ("ERT (s)", "right"), ("SI00", "right"), ("VOs", "left")):
        t.add_column(col, justify=just, overflow="fold")
    from_broker = "blacklist" in doc   # a broker's GET /ism: it has a blacklist
    if from_broker:
        t.add_column("blacklisted", overflow="fold")
    for c in doc["ces"]:
        vos = ",".join(r[3:] if r.startswith("VO:") else r for r in c["acbr"])
        row = [c["id"], c["status"], c["total_cpus"], c["free_cpus"], c["running"], c["waiting"],
               c["ert_s"], c["si00"], vos]
        if from_broker:
            row.append(_blacklisted(c.get("blacklisted"), doc))
        t.add_row(*[("-" if v is None else str(v)) for v in row])
    return t


def _blacklisted(entry: dict | None, doc: dict) -> str | None:
    """The table's blacklist marker: "until +<s>s: <reason>" (seconds left on the broker's
    clock), "yes: <reason>" without an end, None (shown "-") when not blacklisted."""
    if not entry:
        return None
    until, now = entry.get("until"), doc.get("now")
    left = "yes" if until is None or now is None else f"for {max(0.0, until - now):.0f}s"
    return f"{left}: {entry.get('reason') or '?'}"


@click.command("info")
@click.option("--bdii", "bdii_url", default=None, metavar="LDAP_URL", help="read a BDII")
@click.option("--ldif", "ldif_files", multiple=True, type=click.Path(dir_okay=False),
              help="read GLUE LDIF files (repeatable)")
@click.option("--vo", default=None, help="only CEs / VO views open to this VO")
@click.option("--glue", type=click.Choice(["1.3", "2.0", "both"]), default="both",
              show_default=True, help="GLUE 1.3, GLUE 2.0 (mapped to 1.3 names), or both")
@click.option("--broker", "broker_url", default=None, metavar="URL",
              help="show a broker's ISM (GET /ism), with the CEs it has blacklisted")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document")
def info_cmd(bdii_url: str | None, ldif_files: tuple[str, ...], vo: str | None, glue: str,
             broker_url: str | None, as_json: bool) -> None:
    """The CEs of the information system, like lcg-infosites ce."""
    if sum((bool(bdii_url), bool(ldif_files), bool(broker_url))) != 1:
        _fail("give either --bdii LDAP_URL, one or more --ldif FILE, or --broker URL", 2)
    if broker_url:
        return _broker_info(broker_url, vo, as_json)
    sources = [BdiiSource(bdii_url, timeout_s=10, retries=1, glue=glue)] if bdii_url else \
        [LdifFileSource(f, glue=glue) for f in ldif_files]
    clock = WallClock()
    ism = ISM(sources, refresh_s=240, clock=clock)
    ism.refresh()
    doc = snapshot_summary(ism.snapshot(), clock.now(), vo)
    errors = ism.snapshot().errors
    if as_json:
        _echo_json(doc)
    elif doc["ces"] or not errors:
        Console(width=None if sys.stdout.isatty() else 200).print(_table(doc))
        for r in doc["rejected"]:
            err.print(f"rejected: {r['source']}:{r['line']}: {r['dn']}: {r['reason']}"
                      if r["source"] else f"rejected: {r['dn']}: {r['reason']}",
                      highlight=False, markup=False, soft_wrap=True)
    if errors:
        for e in errors:
            err.print(f"vgrid: {e}", highlight=False, markup=False, soft_wrap=True)
        raise SystemExit(2 if ldif_files else 1)  # a bad file is an input error


def _broker_info(broker_url: str, vo: str | None, as_json: bool) -> None:
    from broker.client import BrokerClient, ClientError
    try:
        doc = BrokerClient(broker_url).ism(vo)
    except ClientError as exc:
        _fail(str(exc), 1)
    if as_json:
        _echo_json({k: v for k, v in doc.items() if k != "ads"})
        return
    Console(width=None if sys.stdout.isatty() else 200).print(_table(doc))


def _session_for(urls: list[str]):
    """A session presenting the user's proxy when a source is an https:// CE agent (mutual TLS),
    else None (plain HTTP or files)."""
    if not any(u.startswith("https://") for u in urls):
        return None
    from broker.client import ClientError, user_credentials
    from vgrid_runtime.httpclient import new_session
    from vgrid_runtime.pki import CredentialError
    try:
        return new_session(user_credentials())
    except (ClientError, CredentialError) as exc:
        _fail(str(exc), 2)


# -- vgrid gip -----------------------------------------------------------------------------------
@click.command("gip")
@click.option("--ce", "ce_url", required=True, metavar="URL", help="a CE agent's URL")
@click.option("--glue", type=click.Choice(["1.3", "2.0", "both"]), default="both",
              show_default=True, help="which GLUE version(s) to print")
@click.option("--timeout", "timeout_s", default=10.0, show_default=True, help="seconds")
def gip_cmd(ce_url: str, glue: str, timeout_s: float) -> None:
    """Print a CE's GLUE LDIF: what its GIP publishes (1.3) and the same CE in GLUE 2.0."""
    try:
        text = fetch_ce_glue(ce_url, timeout_s, _session_for([ce_url]))
        entries = parse_ldif(text, source=glue_url(ce_url))
    except SourceError as e:
        _fail(str(e), 1)
    except LdifError as e:
        _fail(f"the CE published malformed LDIF: {e}", 1)
    ads, rejected = glue13_ce_ads(entries)
    for r in rejected:
        err.print(f"vgrid: inconsistent GLUE from the CE: {r}", highlight=False, markup=False)
    if glue in ("1.3", "both"):
        click.echo(text.rstrip("\n") + "\n")
    if glue in ("2.0", "both"):
        for ad in ads:
            if ad[AD_ID] == ad["GlueCEUniqueID"]:
                click.echo(render_glue2(ce_state_from_ad(ad)))
    if not ads:
        raise SystemExit(1)
