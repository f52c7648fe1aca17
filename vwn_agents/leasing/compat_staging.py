"""Haizea 1.1's rules for image staging and VM overheads (``compat = "haizea-1.1"``; issue 16,
the HPDC'08 VM configurations lease for lease).

Found by running Haizea 1.1 (branch ``1.1``) and vgrid on the same Haizea XML trace with the
same images (``lwfwrite.py``; ``benchmarks/haizea_parity.py --trace FILE.xml``) and comparing
their placements; docs/leasing.md, "Haizea-compatible mode", gives each rule's measured effect.
The policies here are called from ``staging.Staging`` and ``tracefile.apply_overheads``; with
``compat = "none"`` nothing here runs and vgrid's schedules are unchanged.

1. Transfer time (:func:`transfer_time`): Haizea's ``estimate_transfer_time`` rounds every
   transfer up to the whole second (``round_datetime_delta``: ``ceil`` of the seconds), so a
   4,096 MB image at 80 Mb/s takes 410 s, not 409.6 s; FIFO transfers back to back drift apart
   by 0.4 s each without it.
"""
from __future__ import annotations

import math

from .compat import haizea


def transfer_time(cfg, mb: float, mb_per_s: float) -> float:
    """Seconds to send ``mb`` MB at ``mb_per_s`` MB/s: exact in vgrid's own mode, rounded up to
    the whole second in Haizea's (``haizea.common.utils.estimate_transfer_time``)."""
    seconds = mb / mb_per_s
    return float(math.ceil(seconds)) if haizea(cfg) else seconds
