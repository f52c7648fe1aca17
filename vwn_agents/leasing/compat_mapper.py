"""Haizea 1.1's greedy mapper at a start, for a lease that may be suspended (compat rules 15
and 23 of ``compat_staging``; issue 16, session 12): called by ``Mapper.earliest`` when its host
score asks for it (``StartScore.score_order``). Times in seconds.
"""
from __future__ import annotations

import numpy as np

from .slotfit import first_fit


def greedy_start(mapper, need: tuple, n: int, duration: float, need_len: float, S, hit, fit,
                 ready_arr, allowed, score):
    """Rule 23 (``compat_staging``): Haizea 1.1's ``GreedyMapper`` for a lease that may be
    suspended. ``Mapper.earliest`` calls it with itself (``mapper``), the slots at least
    ``need_len`` (s) long (``fit``: arrays A, B, NODE), the sorted candidate starts ``S`` (s) and
    ``first_fit``'s first hit among them. At each candidate start s from there on: every VM
    slot of ``need`` free at s (ready by then: ``ready_arr``, per-node s; on an ``allowed``
    node) competes in ``score`` order, even one shorter than ``need_len``; the mapping ends
    when its shortest chosen slot does (``latest_fit``), at most ``duration`` (s) after s, and a
    start whose end is less than ``need_len`` after s is rejected, so the next start where n
    slots of that length are free is tried. Returns ``(start, end, mapping)`` or None."""
    A0, B0, NODE0, _ = mapper.slot_arrays(need)
    with np.errstate(invalid="ignore"):   # a free slot [inf, inf) after a hold: never free
        every = B0 > A0
    if allowed is not None:
        every &= allowed[NODE0]
    A0, B0, NODE0 = A0[every], B0[every], NODE0[every]
    A, B, NODE = fit
    while hit is not None:
        s = float(S[hit[0]])
        free = (A0 <= s) & (B0 > s)
        if ready_arr is not None:
            free &= ready_arr[NODE0] <= s
        mapping, slots = mapper._pick(np.nonzero(free)[0], NODE0, B0, n, score.at(s), by_end=False, slots=True)
        end = min(s + duration, min(float(B0[k]) for k in slots))
        if end - s >= need_len:
            return s, end, mapping
        S = S[hit[0] + 1:]
        hit = first_fit(A, B, S, n, need_len, None, None if ready_arr is None else ready_arr[NODE]) if len(S) else None
    return None
