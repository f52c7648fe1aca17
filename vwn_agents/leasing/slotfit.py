"""The candidate-start test of ``Mapper.earliest`` and ``Mapper.could_start_before``, in chunks.

Both ask, for sorted candidate starts S (s) and VM slots [A, B) (s), at which starts at least n
slots are free: slot k counts at start s when ``A[k] <= s``, ``B[k] >= s + length`` (or the end
given per start) and ``B[k] > s``, and, with ready times per slot (s), when the slot's node is
ready by s. The whole (starts x slots) matrix was built at once although only the first start
with n slots matters; here it is built for 8, 32, 128, ... starts at a time, stopping at the
first chunk with such a start. Each row is computed with the same float operations, so the
answer is the same (issue 16, session 10: ``earliest`` tried hundreds of future starts against
about 1,300 slots of a 30-day HPDC'08 run for every queued lease it placed).
"""
from __future__ import annotations

import numpy as np


def first_fit(A, B, S, n: int, length=None, ends=None, ready=None):
    """``(i, row)``: the first index i of ``S`` (sorted starts, s) at which at least n slots of
    (``A``, ``B``) are free, and the boolean row of the slots free there; None if no start has n.
    A slot is free at s over [s, s + ``length``) (s), or, with ``ends`` (an array like ``S``),
    until ``ends[i]``; ``ready`` (s per slot, optional) must be <= s."""
    lo, step = 0, 8
    while lo < len(S):
        s = S[lo:lo + step, None]
        end = s + length if ends is None else ends[lo:lo + step, None]
        ok = (A[None, :] <= s) & (B[None, :] >= end) & (B[None, :] > s)
        if ready is not None:
            ok &= ready[None, :] <= s
        hits = np.nonzero(ok.sum(axis=1) >= n)[0]
        if len(hits):
            i = int(hits[0])
            return lo + i, ok[i]
        lo += step
        step *= 4
    return None
