"""Job tables as `vgrid status` and `vgrid demo` print them (rich)."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table


def _caps_text(caps) -> str:
    return " → ".join(f"{c:.2f}" for c in caps) if caps else "-"


def _state_text(j: dict) -> str:
    """The state, with the attempt and the resubmissions used once the job was resubmitted
    (``Running (attempt 2: deep 1, shallow 1)``)."""
    if not j.get("attempt"):
        return j["state"]
    return (f"{j['state']} (attempt {j['attempt']}: deep {j.get('deep_resubmissions', 0)}, "
            f"shallow {j.get('shallow_resubmissions', 0)})")


def jobs_table(jobs: list[dict], title: str | None = None) -> Table:
    """One row per job; the job column shows the key, the caption the id prefix."""
    prefixes = sorted({j["id"].rsplit("/jobs/", 1)[0] for j in jobs if j.get("id")})
    caption = "job id = " + " | ".join(f"{p}/jobs/<key>" for p in prefixes) if prefixes else None
    t = Table(title=title, caption=caption)
    for col in ("job key", "state", "CE", "node", "VWN", "CPU caps over time (cores)", "exit",
                "StdOutput (1st line) / reason"):
        t.add_column(col, overflow="fold")
    for j in jobs:
        tail = j.get("stdout_head") if j.get("state") in ("Done", "Cleared") else (j.get("reason") or "")
        caps = _caps_text(j.get("cpu_caps"))
        if j.get("cpu_capped") is False:
            caps += " (uncapped)"
        t.add_row(j["key"], _state_text(j), j.get("ce") or "-", j.get("node") or "-", j.get("vwn") or "-",
                  caps, "-" if j.get("exit_code") is None else str(j["exit_code"]), tail or "")
    return t


def out_console() -> Console:
    """stdout console; wide enough in pipes that ids and caps are not folded."""
    probe = Console()
    return probe if probe.is_terminal else Console(width=200)
