"""The VWN capacity rule: every virtual worker node on a resource gets an equal CPU share.

Source: seed 004 (virtual worker nodes for SFETE), Section 5.1 and Figure 2: a new job on a
resource of computational capacity C_j that already runs N_j(t) jobs gets a virtual WN of
capacity C_j / (N_j(t) + 1); the capacities of the virtual WNs already running are readjusted
(decreased) to the same value, and increased again when a job completes.

Capacities are CPU fractions of one core (1.0 = one full core, 0.5 = half a core, 2.0 = two cores).
"""
from __future__ import annotations


def vwn_cap(capacity: float, running: int) -> float:
    """CPU fraction of a new VWN: C / (N + 1).

    ``capacity`` is C, the node's configured capacity (CPU fraction, > 0); ``running`` is N, the
    number of jobs already on the node (>= 0). Raises ValueError otherwise. After the arrival every
    VWN on the node, old and new, gets this same value. Source: seed 004, Section 5.1.
    """
    if not capacity > 0:
        raise ValueError(f"capacity must be > 0 (a CPU fraction), got {capacity!r}")
    if running < 0:
        raise ValueError(f"running jobs must be >= 0, got {running!r}")
    return capacity / (running + 1)


def equal_shares(capacity: float, vwns: int) -> float | None:
    """CPU fraction of each of ``vwns`` VWNs sharing ``capacity`` equally: C / n.

    Returns None when there is no VWN (nothing to share). Used on a departure, when the
    remaining VWNs are readjusted (increased). Source: seed 004, Section 5.1.
    """
    if vwns < 0:
        raise ValueError(f"number of VWNs must be >= 0, got {vwns!r}")
    if vwns == 0:
        return None
    return vwn_cap(capacity, vwns - 1)
