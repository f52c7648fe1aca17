"""Job tables as `vgrid status` and `vgrid demo` print them (rich).

The table fits 100 columns with one line per job for the usual cases: a CE is shown by a short
alias whose full GlueCEUniqueID the caption gives, CPU caps are written compactly, the JDL file is
named by its base name, and only the last column (StdOutput's first line or the reason) folds.
"""
from __future__ import annotations

from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table


def _caps_text(caps) -> str:
    return "→".join(f"{c:.2f}" for c in caps) if caps else "-"


def _state_text(j: dict) -> str:
    """The state, with the attempt and the resubmissions used once the job was resubmitted
    (``Running (attempt 2: deep 1, shallow 1)``)."""
    if not j.get("attempt"):
        return j["state"]
    return (f"{j['state']} (attempt {j['attempt']}: deep {j.get('deep_resubmissions', 0)}, "
            f"shallow {j.get('shallow_resubmissions', 0)})")


def ce_aliases(ce_ids: list[str]) -> dict[str, str]:
    """A short alias per GlueCEUniqueID (``host:port/queue``): the host's first DNS label
    (``ce1``), with ``/queue`` added where two CEs share that label, the whole id where
    that is still ambiguous; shapes: ids -> {id: alias}."""
    def label(ce: str) -> str:
        return ce.split("/", 1)[0].split(":", 1)[0].split(".", 1)[0] or ce

    ids = sorted(set(ce_ids))
    counts: dict[str, int] = {}
    for ce in ids:
        counts[label(ce)] = counts.get(label(ce), 0) + 1
    out = {}
    for ce in ids:
        alias = label(ce)
        if counts[alias] > 1 and "/" in ce:
            alias += "/" + ce.split("/", 1)[1]
        out[ce] = alias
    taken: dict[str, int] = {}
    for alias in out.values():
        taken[alias] = taken.get(alias, 0) + 1
    return {ce: (alias if taken[alias] == 1 else ce) for ce, alias in out.items()}


def jobs_table(jobs: list[dict], title: str | None = None, *, keys: bool = True) -> Table:
    """One row per job: its key (unless ``keys`` is false, as in the demo), the JDL file it came
    from, state, CE alias, node, the VWN's CPU caps over time (cores), exit code and (output) the first
    line of StdOutput (Done) or the reason. The caption gives the job id prefix and each CE
    alias's GlueCEUniqueID."""
    aliases = ce_aliases([j["ce"] for j in jobs if j.get("ce")])
    prefixes = sorted({j["id"].rsplit("/jobs/", 1)[0] for j in jobs if j.get("id")})
    caption = []
    if prefixes and keys:
        caption.append("job id = " + " | ".join(f"{p}/jobs/<key>" for p in prefixes))
    caption += [f"{alias} = {ce}" for ce, alias in aliases.items() if alias != ce]
    t = Table(title=title, caption="\n".join(caption) or None, box=box.SIMPLE_HEAD,
              caption_justify="left", pad_edge=False, padding=(0, 1), collapse_padding=True)
    if keys:
        t.add_column("job key", no_wrap=True)
    t.add_column("JDL", no_wrap=True, overflow="ellipsis", max_width=16 if keys else 24)
    t.add_column("state", overflow="fold")
    t.add_column("CE", no_wrap=True)
    t.add_column("node", no_wrap=True, overflow="ellipsis", max_width=14)
    t.add_column("CPU caps", overflow="fold", min_width=14)
    t.add_column("exit", no_wrap=True)
    t.add_column("output / reason", overflow="fold", ratio=1, min_width=12)
    for j in jobs:
        tail = j.get("stdout_head") if j.get("state") in ("Done", "Cleared") else (j.get("reason") or "")
        caps = _caps_text(j.get("cpu_caps"))
        if j.get("cpu_capped") is False:
            caps += " (uncapped)"
        row = [Path(j.get("filename") or "-").name, _state_text(j), aliases.get(j.get("ce") or "", "-"),
               j.get("node") or "-", caps, "-" if j.get("exit_code") is None else str(j["exit_code"]),
               tail or ""]
        t.add_row(*([j["key"]] if keys else []), *row)
    return t


def out_console() -> Console:
    """stdout console; wide enough in pipes that ids and caps are not folded."""
    probe = Console()
    return probe if probe.is_terminal else Console(width=200)
