"""`vgrid jdl`: check, expand and evaluate gLite JDL files (thin adapter over jdl/).

Exit codes: 0 ok; 1 the JDL is wrong (syntax/validation problems) or, for `eval`, the job
does not match the CE; 2 usage or input errors (unreadable files, bad CE ad).
"""
from __future__ import annotations

import json
import re
import sys

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import jdl
from jdl.errors import caret_excerpt
from vgrid_runtime.clock import WallClock

_out = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True, highlight=False, soft_wrap=True)


class _InputError(Exception):
    """A file or CE ad that cannot be used (exit 2)."""


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise _InputError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None


def _problem_json(p) -> dict:
    return {"file": p.filename, "line": p.line, "column": p.column, "message": p.message}


def _check_one(path: str) -> dict:
    """{"path","ok","jobs","errors"} for one file (input errors included as errors)."""
    try:
        text = _read(path)
    except _InputError as e:
        return {"path": path, "ok": False, "jobs": 0, "input_error": True,
                "errors": [{"file": path, "line": 0, "column": 0, "message": str(e)}]}
    try:
        job = jdl.parse_jdl(text, path)
        expansion = jdl.expand(job)
    except jdl.JDLError as e:
        return {"path": path, "ok": False, "jobs": 0, "text": text,
                "errors": [_problem_json(p) for p in e.problems]}
    return {"path": path, "ok": True, "jobs": len(expansion.jobs), "kind": expansion.kind,
            "errors": []}


def _print_problem(err: dict, text: str | None):
    _out.print(escape(f"{err['file']}:{err['line']}:{err['column']}: {err['message']}"))
    src = text if err["file"] == err.get("_path", err["file"]) else None
    if src is None and err["line"]:
        try:
            src = open(err["file"], encoding="utf-8").read()
        except OSError:
            src = None
    excerpt = caret_excerpt(src, err["line"], err["column"]) if src else ""
    if excerpt:
        _out.print(escape(excerpt))


class _Group(click.Group):
    """Turns any unexpected exception into a one-line message (exit 2), never a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except Exception as e:  # noqa: BLE001 - last resort for the user-facing CLI
            _err.print(escape(f"vgrid jdl: internal error: {type(e).__name__}: {e}"))
            sys.exit(2)


@click.group("jdl", cls=_Group)
def jdl_group() -> None:
    """Check, expand and evaluate gLite JDL files."""


@jdl_group.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def check_cmd(files: tuple[str, ...], as_json: bool) -> None:
    """Report every problem in FILES (exit 1 if any, 2 if a file cannot be read)."""
    if sys.stderr.isatty() and len(files) > 50:  # long work: a progress bar, only on a TTY
        from rich.progress import track
        results = [_check_one(f) for f in track(files, description="checking",
                                                console=_err, transient=True)]
    else:
        results = [_check_one(f) for f in files]
    if as_json:
        doc = {"files": [{k: r[k] for k in ("path", "ok", "jobs", "errors")} for r in results]}
        click.echo(json.dumps(doc, indent=2))
    else:
        for r in results:
            if r["ok"]:
                _out.print(escape(f"{r['path']}: ok ({r['kind']}, {r['jobs']} "
                                  f"job{'s' if r['jobs'] != 1 else ''})"))
            for err in r["errors"]:
                err["_path"] = r["path"]
                if r.get("input_error"):
                    _out.print(escape(err["message"]))
                else:
                    _print_problem(err, r.get("text"))
    if any(r.get("input_error") for r in results):
        sys.exit(2)
    sys.exit(0 if all(r["ok"] for r in results) else 1)


def _load_job(path: str):
    text = _read(path)
    return jdl.parse_jdl(text, path)


def _fail_jdl(e: jdl.JDLError):
    for p in e.problems:
        _err.print(escape(str(p)))
        try:
            src = open(p.filename, encoding="utf-8").read()
        except OSError:
            src = getattr(e, "text", None)
        excerpt = caret_excerpt(src, p.line, p.column)
        if excerpt:
            _err.print(escape(excerpt))
    sys.exit(1)


@jdl_group.command("expand")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def expand_cmd(file: str, as_json: bool) -> None:
    """Print the plain jobs FILE expands to (parametric jobs, collections, DAGs)."""
    try:
        expansion = jdl.expand(_load_job(file))
    except _InputError as e:
        _err.print(escape(str(e)))
        sys.exit(2)
    except jdl.JDLError as e:
        _fail_jdl(e)
    if as_json:
        click.echo(json.dumps(expansion.to_json(), indent=2))
        return
    table = Table(title=f"{file}: {expansion.kind}, {len(expansion.jobs)} job(s)")
    for col in ("name", "parents", "parameter", "executable", "arguments", "stdout"):
        table.add_column(col)
    for j in expansion.jobs:
        d = j.description
        table.add_row(escape(j.name), escape(", ".join(j.parents)),
                      "" if j.parameter is None else escape(str(j.parameter)),
                      escape(d.executable or ""), escape(d.arguments), escape(d.std_output or ""))
    _out.print(table)


def _number(s: str):
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(s.lower(), s)


def load_ce_ad(path: str):
    """A CE ad from ClassAd text, a JSON object, or GLUE 1.3 LDIF (a full site: the first CE's
    ad via infosys; a lone entry: its attributes, numbers converted, multi-valued as lists)."""
    text = _read(path)
    body = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    if body.lstrip().startswith("{"):  # a JSON object of GLUE attributes (as infosys ads)
        try:
            ad = json.loads(body)
        except ValueError as e:
            raise _InputError(f"{path}: not JSON: {e}") from None
        if not isinstance(ad, dict):
            raise _InputError(f"{path}: a CE ad in JSON must be an object")
        return ad, ad.get("GlueCEUniqueID", path)
    if re.match(r"\s*dn:", body):
        from infosys.glue import glue13_ce_ads
        from infosys.ldif import parse_ldif
        try:
            entries = parse_ldif(text, path)
        except ValueError as e:
            raise _InputError(str(e)) from None
        if not entries:
            raise _InputError(f"{path}: no LDIF entry")
        ads, _ = glue13_ce_ads(entries)
        if ads:
            return ads[0], ads[0].get("GlueCEUniqueID", path)
        entry = entries[0]
        ad = {k: (_number(v[0]) if len(v) == 1 else [_number(x) for x in v])
              for k, v in entry.attrs.items()}
        return ad, entry.dn
    try:
        return jdl.parse_ad(text, path), path
    except jdl.JDLError as e:
        raise _InputError(str(e)) from None


def _value_json(v):
    if v is jdl.UNDEFINED:
        return "undefined"
    if v is jdl.ERROR:
        return "error"
    return jdl.to_python(v)


@jdl_group.command("eval")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--ce-ad", "ce_ad_path", required=True, type=click.Path(dir_okay=False),
              help="CE ad as ClassAd text, a GLUE LDIF entry or a JSON object")
@click.option("--now", "now", type=float, default=None, metavar="SECONDS",
              help="what time() returns, epoch seconds (default: the wall clock now)")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def eval_cmd(file: str, ce_ad_path: str, now: float | None, as_json: bool) -> None:
    """Evaluate Requirements and Rank of FILE's job(s) against one CE ad.

    Exit 0 when every job matches the CE, 1 when one does not (or the JDL is wrong).
    """
    now = WallClock().now() if now is None else now
    try:
        job = _load_job(file)
        ce_ad, ce_name = load_ce_ad(ce_ad_path)
        jobs = jdl.expand(job).jobs
    except _InputError as e:
        _err.print(escape(str(e)))
        sys.exit(2)
    except jdl.JDLError as e:
        _fail_jdl(e)
    ad = jdl.as_ad(ce_ad)
    rows = []
    for j in jobs:
        d = j.description
        req, rank = d.requirements.evaluate(ad, now), d.rank.evaluate(ad, now)
        rows.append({"job": j.name, "requirements": d.requirements.text,
                     "requirements_value": _value_json(req), "matches": req is True,
                     "rank": d.rank.text, "rank_value": _value_json(rank),
                     "rank_number": jdl.rank_value(d, ad, now)})
    if as_json:
        click.echo(json.dumps({"file": file, "ce": str(ce_name), "jobs": rows}, indent=2))
    else:
        table = Table(title=escape(f"{file} against {ce_name}"))
        for col in ("job", "matches", "Requirements", "value", "Rank", "value "):
            table.add_column(col)
        for r in rows:
            table.add_row(escape(r["job"]), "yes" if r["matches"] else "no",
                          escape(r["requirements"]), escape(str(r["requirements_value"])),
                          escape(r["rank"]), escape(str(r["rank_value"])))
        _out.print(table)
    sys.exit(0 if all(r["matches"] for r in rows) else 1)
