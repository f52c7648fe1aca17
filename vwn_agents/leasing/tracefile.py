"""What Haizea's tracefile frontend does to requests before scheduling: VM overheads and images.

* ``apply_overheads(leases, cfg)``: with ``add-overhead`` = ``besteffort`` or ``all``, the
  chosen leases' requested and real durations grow by ``runtime-slowdown-overhead`` percent
  (the VM runs slower than the bare machine; rounded to the second) and then by
  ``bootshutdown-overhead`` seconds (booting and shutting down the VMs). Sotomayor, Keahey,
  Foster, HPDC 2008, Section 5: 5 % and 20 s. Haizea 1.1 (``Duration.incr_by_percent``) scales
  only the requested duration when a real one is known, so there the slowdown never lengthens
  a lease's real run; here it does (docs/leasing.md, "Differences from Haizea 1.1"), unless
  ``runtime-slowdown-rule = haizea``: then the requested duration becomes ceil(real x
  (1 + pct)) when the real one is known (ceil(requested x (1 + pct)) otherwise; Haizea's
  ``round_datetime_delta`` rounds up, in floating point, so 3,600 s x 1.1 gives 3,961 s), the
  real one only gains the boot overhead -- Haizea 1.1's ``Duration.incr_by_percent`` and ``incr``.
* ``image_sequence(n_images, image_mb, distribution, count, seed)`` and ``assign_images``: the
  disk image of every lease, drawn from ``n_images`` images of ``image_mb`` MB each, in
  submission order (Haizea's ``imagefile``: the i-th image of the list goes to the i-th request
  by submission time, ARs included). ``distribution`` is ``"uniform"`` or Haizea's
  ``haizea-generate-images`` weights ``"7,10 30,1"``: 7 images of weight 10 and 30 of weight 1
  (the HPDC'08 skewed set: the 7 popular images get 70 % of the requests).
"""
from __future__ import annotations

import dataclasses
import math
import random

from .config import LeaseConfig
from .model import Lease


def _scaled(seconds: float | None, factor: float, add: float, rnd=round) -> float | None:
    if seconds is None:
        return None
    return float(rnd(seconds * factor)) + add if factor != 1.0 else seconds + add


def apply_overheads(leases: list[Lease], cfg: LeaseConfig) -> list[Lease]:
    """New Lease objects with the VM overheads of ``cfg`` added (the input is not changed);
    the same objects when ``add-overhead = none`` or both overheads are 0. Durations in s."""
    which = cfg.add_overhead
    pct, boot = cfg.runtime_slowdown_overhead, cfg.bootshutdown_overhead
    if which == "none" or (pct == 0 and boot == 0):
        return list(leases)
    factor = 1.0 + pct / 100.0
    haizea = cfg.runtime_slowdown_rule == "haizea"
    out = []
    for lease in leases:
        if (which == "all" or lease.is_be) and haizea:
            base = lease.duration_s if lease.real_duration_s is None or pct == 0 else lease.real_duration_s
            lease = dataclasses.replace(lease, duration_s=_scaled(base, factor, boot, math.ceil),
                                        real_duration_s=_scaled(lease.real_duration_s, 1.0, boot))
        elif which == "all" or lease.is_be:
            lease = dataclasses.replace(lease, duration_s=_scaled(lease.duration_s, factor, boot),
                                        real_duration_s=_scaled(lease.real_duration_s, factor, boot))
        out.append(lease)
    return out


def parse_distribution(text: str, n_images: int) -> list[float]:
    """Weights of ``n_images`` images: ``"uniform"`` or ``"COUNT,WEIGHT COUNT,WEIGHT ..."``
    (counts must add up to ``n_images``). ValueError naming the problem otherwise."""
    if n_images < 1:
        raise ValueError(f"images must be >= 1, got {n_images}")
    if text.strip() == "uniform":
        return [1.0] * n_images
    weights: list[float] = []
    for part in text.split():
        try:
            count, weight = part.split(",")
            weights += [float(weight)] * int(count)
        except ValueError:
            raise ValueError(f"image distribution {text!r}: expected 'uniform' or 'COUNT,WEIGHT ...' "
                             f"(e.g. '7,10 30,1'), bad part {part!r}") from None
    if len(weights) != n_images or not all(w > 0 and math.isfinite(w) for w in weights):
        raise ValueError(f"image distribution {text!r} gives {len(weights)} positive weights for "
                         f"{n_images} images")
    return weights


def image_sequence(n_images: int, image_mb: float, distribution: str, count: int,
                   seed: int) -> list[tuple[str, float]]:
    """``count`` (image id, size MB) draws, ids ``image_1`` .. ``image_N`` (Haizea's names);
    deterministic for a seed (Python's Mersenne Twister)."""
    weights = parse_distribution(distribution, n_images)
    rng = random.Random(seed)
    names = [f"image_{i + 1}" for i in range(n_images)]
    return [(name, float(image_mb)) for name in rng.choices(names, weights=weights, k=count)]


def assign_images(leases: list[Lease], n_images: int, image_mb: float, distribution: str,
                  seed: int) -> list[Lease]:
    """New Lease objects, in submission order (then id), each with the next image of
    ``image_sequence``."""
    ordered = sorted(leases, key=lambda l: (l.submit_s, l.id))
    seq = image_sequence(n_images, image_mb, distribution, len(ordered), seed)
    return [dataclasses.replace(l, image_id=img, image_mb=mb) for l, (img, mb) in zip(ordered, seq)]
