"""Server-side SVG of the dashboard: the slot table as a Gantt chart and a VWN's CPU cap steps.

Both are plain SVG strings (escaped with ``markupsafe``, which comes with Flask), so the page
needs no JavaScript to show them; the page script only moves the "now" line between polls.

* :func:`gantt` draws a CE's slot table (``vwn_agents.slot_view``): one row per node, one bar
  per reservation (VM reservations coloured by lease type: AR, BE, IM; suspensions,
  resumptions, migrations, image transfers and memory holds in their own colours), the ended
  run segments in a lighter tone, and a vertical "now" line, as Haizea's reports draw a slot
  table. Every bar carries ``data-kind``, ``data-lease-type``, ``data-start`` and ``data-end``
  (clock seconds) and a ``<title>`` with its interval; the ``<svg>`` carries ``data-t0`` (s)
  and ``data-px-per-s`` so that x = ``LEFT`` + (t - t0) x px_per_s.
* :func:`cap_steps` draws a VWN's ``cpu_caps`` ``[[t, fraction of a core], ...]`` as a step
  function (seed 004 Section 5.1: the C/(N+1) steps as VWNs arrive and leave).
"""
from __future__ import annotations

import datetime
import math

from markupsafe import Markup, escape

#: Width of the node-name column and of the chart (px); row height (px).
LEFT, WIDTH, ROW = 150, 900, 26
#: Colours per reservation kind (VM bars: per lease type).
COLOURS = {"AR": "#c0392b", "BE": "#2e86c1", "IM": "#8e44ad", "SUSPEND": "#f39c12", "SUSPENDED": "#fad7a0",
           "RESUME": "#27ae60", "MIGRATE": "#16a085", "TRANSFER": "#7f8c8d", "HOLD": "#d5dbdb"}


def clock_text(t: float | None) -> str:
    """``HH:MM:SS`` (UTC) of clock seconds ``t``; "open" for None."""
    if t is None:
        return "open"
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%H:%M:%S")


def span_text(start: float | None, end: float | None) -> str:
    """``HH:MM:SS - HH:MM:SS`` of an interval, with the end's date when it is another day."""
    if start is None or end is None or end - start < 43200:
        return f"{clock_text(start)} - {clock_text(end)}"
    day = datetime.datetime.fromtimestamp(end, datetime.timezone.utc).strftime("%Y-%m-%d ")
    return f"{clock_text(start)} - {day}{clock_text(end)}"


def window(slots: dict, now: float, min_past_s: float = 60.0, min_future_s: float = 120.0,
           past_s: float = 900.0, future_s: float = 1800.0) -> tuple[float, float]:
    """The time axis ``(t0, t1)`` (s): from the earliest bar start (at most ``past_s`` before
    ``now``, at least ``min_past_s``) to the latest bar start or end that is at most
    ``future_s`` after ``now`` (at least ``min_future_s`` after it; a bar starting later is
    drawn clipped at the right edge). A lease of a day does not squeeze the next minutes."""
    items = slots.get("reservations", []) + slots.get("history", [])
    starts = [i["start"] for i in items if i.get("start") is not None]
    ends = [i["end"] for i in items if i.get("end") is not None]
    t0 = min([now - min_past_s] + [s for s in starts if s >= now - past_s])
    t1 = max([now + min_future_s] + [t + 30.0 for t in starts + ends if t <= now + future_s])
    return t0, min(t1, now + future_s)


def suspended_gaps(slots: dict, url: str) -> list[dict]:
    """The times a lease was suspended on node ``url``, as history items of kind ``SUSPENDED``:
    the gaps between its consecutive run segments there (the slot table forgets ended
    suspension reservations; a lease's segments remain), up to the next segment or, when it
    has not run again yet, its next reservation on that node."""
    runs: dict = {}
    for item in slots.get("history", []) + [r for r in slots.get("reservations", []) if r.get("kind") == "VM"]:
        if url in item.get("nodes", []) and item.get("lease") is not None and item.get("start") is not None:
            runs.setdefault(item["lease"], []).append(item)
    gaps = []
    for items in runs.values():
        items.sort(key=lambda i: i["start"])
        for a, b in zip(items, items[1:]):
            if a.get("end") is not None and b["start"] - a["end"] > 1e-6:
                gaps.append({**a, "kind": "SUSPENDED", "start": a["end"], "end": b["start"], "state": "suspended"})
    return gaps


def _tick_step(span: float) -> float:
    for step in (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200):
        if span / step <= 10:
            return float(step)
    return 14400.0


def gantt(slots: dict, now: float, labels: dict | None = None) -> Markup:
    """The SVG Gantt chart of a slot view (see module doc); ``now`` in clock seconds;
    ``labels``: node URL -> the name shown for its row (default: the URL's host:port)."""
    labels = labels or {}
    nodes = list(slots.get("nodes", []))
    t0, t1 = window(slots, now)
    scale = WIDTH / max(t1 - t0, 1e-9)
    height = ROW * (len(nodes) + 1) + 10

    def x(t: float | None, default: float) -> float:
        t = default if t is None else min(max(t, t0), t1)
        return round(LEFT + (t - t0) * scale, 2)

    out = [f'<svg class="gantt" xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 10}" '
           f'height="{height}" data-t0="{t0:.3f}" data-t1="{t1:.3f}" data-px-per-s="{scale:.6f}" '
           f'data-left="{LEFT}" role="img" aria-label="slot table">']
    step = _tick_step(t1 - t0)
    tick = math.ceil(t0 / step) * step
    while tick <= t1:
        xx = x(tick, tick)
        out.append(f'<line class="tick" x1="{xx}" x2="{xx}" y1="0" y2="{height - 10}" stroke="#eee"/>'
                   f'<text x="{xx}" y="{height - 1}" font-size="9" text-anchor="middle">'
                   f'{clock_text(tick)}</text>')
        tick += step
    for row, url in enumerate(nodes):
        y = ROW * row + 4
        out.append(f'<text x="4" y="{y + 15}" font-size="11">{escape(labels.get(url) or _short(url))}</text>')
        items = [(i, True) for i in slots.get("history", []) if url in i.get("nodes", [])]
        items += [(i, True) for i in suspended_gaps(slots, url)]
        items += [(i, False) for i in slots.get("reservations", []) if url in i.get("nodes", [])]
        for item, past in items:
            kind = item["kind"] if not past or item.get("kind") == "SUSPENDED" else "VM"
            colour = COLOURS.get(item.get("lease_type") if kind == "VM" else kind, "#999")
            xs, xe = x(item.get("start"), t0), x(item.get("end"), t1)
            who = item.get("job_key") or ("lease %s" % item.get("lease"))
            label = (f'{kind} {item.get("lease_type") or ""} {who}: '
                     f'{span_text(item.get("start"), item.get("end"))}'
                     + (" (ran)" if past and kind == "VM" else f' ({item.get("state")})'))
            out.append(
                f'<rect class="res" x="{xs}" y="{y}" width="{max(xe - xs, 1.5)}" height="{ROW - 8}" '
                f'fill="{colour}" fill-opacity="{0.45 if past else 0.9}" data-kind="{kind}" '
                f'data-lease-type="{escape(item.get("lease_type") or "")}" data-past="{str(past).lower()}" '
                f'data-start="{item.get("start")}" data-end="{item.get("end")}" '
                f'data-job="{escape(item.get("job_key") or "")}"><title>{escape(label)}</title></rect>')
    nx = x(now, now)
    out.append(f'<line class="now" x1="{nx}" x2="{nx}" y1="0" y2="{height - 10}" stroke="#000" '
               f'stroke-width="2" data-now="{now:.3f}"><title>now</title></line></svg>')
    return Markup("".join(out))


def _short(url: str) -> str:
    return url.split("://", 1)[-1]


def cap_steps(caps: list, now: float, ended: float | None = None, width: int = 160,
              height: int = 28) -> Markup:
    """A VWN's CPU cap over time as an SVG step line (y: 0 .. max(1, highest cap) of a core)."""
    if not caps:
        return Markup("")
    t0, t1 = caps[0][0], max(ended or now, caps[-1][0] + 1e-3)
    top = max(1.0, max(c for _, c in caps))
    sx = width / max(t1 - t0, 1e-9)

    def y(c: float) -> float:
        return round(height - 2 - (c / top) * (height - 4), 2)

    pts = []
    for i, (t, c) in enumerate(caps):
        xx = round((t - t0) * sx, 2)
        if i:
            pts.append(f"{xx},{y(caps[i - 1][1])}")
        pts.append(f"{xx},{y(c)}")
    pts.append(f"{width},{y(caps[-1][1])}")
    steps = " ".join(f"{c:g}" for _, c in caps)
    return Markup(f'<svg class="caps" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
                  f'<polyline fill="none" stroke="#2e86c1" stroke-width="1.5" points="{" ".join(pts)}"/>'
                  f'<title>CPU cap steps: {escape(steps)}</title></svg>')


#: Colours of the gLite job states in a job's history timeline.
STATE_COLOURS = {"Submitted": "#bdc3c7", "Waiting": "#f5b041", "Ready": "#f8c471", "Scheduled": "#85c1e9",
                 "Running": "#2e86c1", "Done": "#27ae60", "Aborted": "#c0392b", "Cancelled": "#7f8c8d",
                 "Cleared": "#aab7b8", "Stalled": "#e67e22"}
ENDED_STATES = ("Done", "Aborted", "Cancelled", "Cleared")


def timeline(history: list, now: float, width: int = 640, height: int = 24) -> Markup:
    """A job's history ``[{"state", "time", "reason"}]`` as one bar of state segments from
    submission to ``now`` (or to its last, final state); each segment has ``data-state`` and
    a ``<title>`` with its start time and reason."""
    if not history:
        return Markup("")
    t0 = history[0]["time"]
    last = history[-1]
    t1 = last["time"] if last["state"] in ENDED_STATES else max(now, last["time"])
    span = max(t1 - t0, 1e-6)
    out = [f'<svg class="timeline" width="{width + 8}" height="{height}" xmlns="http://www.w3.org/2000/svg">']
    for i, h in enumerate(history):
        end = history[i + 1]["time"] if i + 1 < len(history) else t1
        x = round((h["time"] - t0) / span * width, 2)
        w = max(round((end - h["time"]) / span * width, 2), 4.0 if h["state"] in ENDED_STATES else 1.0)
        text = f'{h["state"]} at {clock_text(h["time"])}' + (f': {h["reason"]}' if h.get("reason") else "")
        out.append(f'<rect x="{x}" y="2" width="{w}" height="{height - 4}" '
                   f'fill="{STATE_COLOURS.get(h["state"], "#999")}" data-state="{escape(h["state"])}">'
                   f'<title>{escape(text)}</title></rect>')
    out.append("</svg>")
    return Markup("".join(out))
