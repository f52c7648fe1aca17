"""Lease-for-lease parity with Haizea 1.1: compare vgrid's per-lease schedule with Haizea's.

Haizea's per-lease output is read from a CSV (one line per lease, ``#`` comment lines
allowed): ``id,type,state,submit_s,start_s,end_s,segments`` where ``id`` is vgrid's lease id
(the SWF job number; injected ARs offset by the trace's largest id, as ``vgrid simulate
--inject``), ``type`` ``BE`` or ``AR``, ``state`` Haizea's (``Done``, ``Rejected``...),
times in seconds from the trace's start (empty when the lease never started/ended), and
``segments`` space-separated ``start-end@n1+n2`` runs with 0-based node indexes.
``benchmarks/haizea_parity.py`` produces the numbers of docs/leasing.md ("Haizea-compatible
mode") from such files; ``tests/test_haizea_parity.py`` checks a short trace against a golden one.
"""
from __future__ import annotations

import csv
from pathlib import Path

#: Times closer than this (s) are equal (Haizea's times are mx.DateTime floats).
TOLERANCE_S = 1e-3


class ParityInputError(ValueError):
    """A Haizea per-lease CSV that cannot be read: the message names file:line and the field."""


def _num(text: str, where: str, field: str) -> float | None:
    if text.strip() == "":
        return None
    try:
        return float(text)
    except ValueError:
        raise ParityInputError(f"{where}: {field} must be a number of seconds, got {text!r}") from None


def read_haizea_csv(path: str | Path) -> dict[int, dict]:
    """{lease id: {"type", "state", "submit_s", "start_s", "end_s", "segments"}} from a Haizea
    per-lease CSV (module doc). Raises ParityInputError naming file:line and the field, or
    FileNotFoundError when the file is missing."""
    p = Path(path)
    lines = [(i, ln) for i, ln in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if ln.strip() and not ln.startswith("#")]
    if not lines:
        raise ParityInputError(f"{p}: no header line")
    header = next(csv.reader([lines[0][1]]))
    want = ["id", "type", "state", "submit_s", "start_s", "end_s", "segments"]
    if header[:len(want)] != want:
        raise ParityInputError(f"{p}:{lines[0][0]}: header must start with {','.join(want)}")
    out: dict[int, dict] = {}
    for lineno, ln in lines[1:]:
        row = next(csv.reader([ln]))
        where = f"{p}:{lineno}"
        if len(row) < len(want):
            raise ParityInputError(f"{where}: {len(row)} fields, expected {len(want)}")
        try:
            lid = int(row[0])
        except ValueError:
            raise ParityInputError(f"{where}: id must be an integer, got {row[0]!r}") from None
        out[lid] = {"type": row[1], "state": row[2], "submit_s": _num(row[3], where, "submit_s"),
                    "start_s": _num(row[4], where, "start_s"), "end_s": _num(row[5], where, "end_s"),
                    "segments": row[6]}
    return out


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= TOLERANCE_S


def all_best_effort(records) -> float | None:
    """The end (s) of the last best-effort lease (HPDC'08's all-best-effort time)."""
    ends = [r["end_s"] for r in records if r["type"] in ("BE", "best-effort") and r["end_s"] is not None]
    return max(ends, default=None)


def compare(haizea: dict[int, dict], vgrid_leases: list[dict]) -> dict:
    """Compare Haizea's records with vgrid's (``report(sched)["leases"]``): a lease is
    identical when both sides have it with equal start and end (within ``TOLERANCE_S``; a
    rejected AR has neither). Returns {"leases", "identical", "identical_pct", "missing"
    (ids on one side only), "first_difference" (the differing lease whose earlier start on
    either side is earliest: id, time, Haizea's and vgrid's start/end), "ar" (accepted and
    rejected on each side, decisions that agree), "all_best_effort_s" {vgrid, haizea}}."""
    ours = {r["id"]: r for r in vgrid_leases}
    ids = sorted(set(haizea) | set(ours))
    same, diffs, missing = 0, [], []
    ar = {"haizea_accepted": 0, "haizea_rejected": 0, "vgrid_accepted": 0, "vgrid_rejected": 0, "agree": 0}
    for lid in ids:
        h, v = haizea.get(lid), ours.get(lid)
        if h is None or v is None:
            missing.append(lid)
            continue
        if h["type"] == "AR":
            h_rej = h["state"].lower() == "rejected"
            v_rej = v["state"].lower() == "rejected"
            ar["haizea_rejected" if h_rej else "haizea_accepted"] += 1
            ar["vgrid_rejected" if v_rej else "vgrid_accepted"] += 1
            ar["agree"] += h_rej == v_rej
        v_start = None if v["state"].lower() == "rejected" else v["start_s"]
        if _same(h["start_s"], v_start) and _same(h["end_s"], v["end_s"]):
            same += 1
        else:
            times = [x for x in (h["start_s"], v_start, h["end_s"], v["end_s"]) if x is not None]
            diffs.append((min(times, default=0.0), lid, h, v))
    diffs.sort(key=lambda d: (d[0], d[1]))
    first = None
    if diffs:
        t, lid, h, v = diffs[0]
        first = {"id": lid, "time_s": t, "haizea": [h["start_s"], h["end_s"]],
                 "vgrid": [v["start_s"], v["end_s"]]}
    total = len(ids)
    return {"leases": total, "identical": same, "identical_pct": round(100.0 * same / total, 2) if total else None,
            "missing": missing[:20], "first_difference": first, "ar": ar,
            "all_best_effort_s": {"vgrid": all_best_effort(ours.values()),
                                  "haizea": all_best_effort(haizea.values())}}
