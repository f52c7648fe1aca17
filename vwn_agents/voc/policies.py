"""The VOC watchdog's sizing policies (seed 003, Section 5.2.2, and ours), selected by name.

A policy never boots or stops anything: it returns numbers the watchdog acts on
(``watchdog.Watchdog``), as the lease engine's policies return scores (STYLE.md):

- ``target(vo, now)``: the VOC size it wants for a VO before slot limits (nodes);
- ``grow_score(vo, granted, share)``: how much the VO deserves its next free slot this interval
  (``granted`` slots already given to it this interval; ``share`` its fair share of the slots);
  higher first, ``None`` = no more slots for it this interval;
- ``release_score(vo, idle_since, now, share)``: how eager it is to terminate one idle node of the
  VO (higher first), ``None`` = keep it; ``release_booting`` whether booting nodes may be
  terminated when the VOC is too large; ``reclaims`` whether idle nodes of a VO above its fair
  share are terminated for a VO below its share that has waiting jobs when no slot is free.

``POLICIES`` maps the names (``greedy``, ``damped``) to the classes; ``make_policy(name,
**options)`` builds one, ValueError naming an unknown policy or option.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from .pool import VOView


def fair_shares(slots: int, demands: Mapping[str, int]) -> dict[str, int]:
    """Max-min fair division of ``slots`` VWN slots between VOs demanding ``demands`` nodes.

    Water-filling: every VO gets min(demand, level), the level raised one slot at a time; the
    slots left by the level's rounding go to the VOs in mapping order. Returns {vo: slots} with
    sum <= slots, each <= its demand, and no VO below its demand while another holds more than it
    + 1. ValueError for negative slots or demands.
    """
    if slots < 0 or any(d < 0 for d in demands.values()):
        raise ValueError(f"fair_shares: negative slots or demand ({slots}, {dict(demands)})")
    share = {vo: 0 for vo in demands}
    left = slots
    while left > 0:
        hungry = [vo for vo in demands if share[vo] < demands[vo]]
        if not hungry:
            break
        for vo in sorted(hungry, key=lambda v: share[v]):
            if left == 0:
                break
            share[vo] += 1
            left -= 1
    return share


@dataclass
class Greedy:
    """The paper's policy (seed 003, Section 5.2.2): once per watchdog interval, start VMs
    whenever the VO's queue (waiting + running jobs) exceeds its VOC size and slots are free;
    terminate nodes as the queue shrinks below the VOC size (idle ones first, then booting ones:
    the over-responsiveness of Figure 7). Free slots go round-robin between the VOs that want
    more (Figure 11: both VOs claim 2 of 4 slots at the first cycle)."""

    name = "greedy"
    release_booting = True
    reclaims = False

    def target(self, vo: VOView, now: float) -> int:
        return vo.queue

    def grow_score(self, vo: VOView, granted: int, share: int) -> float | None:
        return -float(granted)          # round-robin: the VO given fewest this interval first

    def release_score(self, vo: VOView, idle_since: float, now: float, share: int) -> float | None:
        return now - idle_since         # any idle node; the longest idle first


@dataclass
class Damped:
    """Our damped policy: the greedy rule with hysteresis, a growth limit, warm nodes and a fair
    division of the slots between VOs.

    - grow when the queue exceeds the VOC size by more than ``hysteresis`` jobs (or the VO has
      jobs and no node at all), by at most ``growth_limit`` nodes per VO per interval (0 = no
      limit);
    - never terminate a booting node; terminate an idle node only once it has been idle for
      ``keep_warm_s`` seconds and the VOC is larger than queue + ``hysteresis`` (than 0 once the
      queue is empty);
    - free slots go to the VO with the fewest nodes relative to its max-min fair share of the
      slots (``fair_shares``); when the site is full and a VO with waiting jobs is below its share,
      idle nodes of VOs above their share are terminated at once (warm or not).
    """

    growth_limit: int = 8
    keep_warm_s: float = 120.0
    hysteresis: int = 1

    name = "damped"
    release_booting = False
    reclaims = True

    def __post_init__(self) -> None:
        if self.growth_limit < 0 or self.keep_warm_s < 0 or self.hysteresis < 0:
            raise ValueError(f"damped policy: growth_limit, keep_warm_s and hysteresis must be >= 0, "
                             f"got {self.growth_limit}, {self.keep_warm_s}, {self.hysteresis}")

    def target(self, vo: VOView, now: float) -> int:
        if vo.queue > vo.size + self.hysteresis or (vo.queue and not vo.size):
            return vo.queue
        return min(vo.size, vo.queue + self.hysteresis) if vo.queue else 0

    def grow_score(self, vo: VOView, granted: int, share: int) -> float | None:
        if self.growth_limit and granted >= self.growth_limit:
            return None
        return -(vo.size + granted) / max(share, 1)

    def release_score(self, vo: VOView, idle_since: float, now: float, share: int) -> float | None:
        idle_for = now - idle_since
        return idle_for if idle_for >= self.keep_warm_s else None


POLICIES = {"greedy": Greedy, "damped": Damped}


def make_policy(name: str, **options):
    """The policy called ``name`` with ``options`` (its dataclass fields). ValueError naming an
    unknown policy or option."""
    if name not in POLICIES:
        raise ValueError(f"unknown VOC policy {name!r} (known: {', '.join(POLICIES)})")
    cls = POLICIES[name]
    known = {f.name for f in fields(cls)}
    bad = sorted(set(options) - known)
    if bad:
        raise ValueError(f"VOC policy {name!r} has no option {', '.join(bad)} "
                         f"(options: {', '.join(sorted(known)) or 'none'})")
    return cls(**options)
