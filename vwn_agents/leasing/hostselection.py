"""Host-selection policies (option ``policy-host-selection``): they score nodes, the mapper sorts.

As in Haizea's policy layer, a policy returns scores, not decisions: ``scorer(lease, t_start)``
gives ``score(node, hostable) -> tuple`` (node index, number of the lease's VMs the node can
host; higher tuples first) that ``Mapper.map_interval`` / ``Mapper.earliest`` sort candidate
nodes by, or None for the mapper's own order (most hostable VMs first). New policies are small
classes registered in ``POLICIES`` under the option value that selects them.
"""
from __future__ import annotations

from typing import Callable

from . import compat_staging
from .config import ConfigError, haizea
from .imagepool import ImagePools
from .model import Lease
from .slottable import INF

Scorer = Callable[[int, int], tuple]


class HostSelectionPolicy:
    """Base class. ``pools``: the per-node image pools; ``staging``: an object whose
    ``enabled`` says whether images are transferred (``lease-preparation = imagetransfer``)."""

    name = "base"

    def __init__(self, pools: ImagePools, staging) -> None:
        self.pools = pools
        self.staging = staging

    def scorer(self, lease: Lease, t_start: float = INF) -> Scorer | None:
        raise NotImplementedError


class GreedyHostSelection(HostSelectionPolicy):
    """``greedy`` (Haizea's): nodes where the lease's image is usable at ``t_start`` (in the
    node's pool or arriving by then: reuse, seed 000 Section 6.3) first, then nodes that can
    host more of its VMs. Without image transfers: None (the mapper's VMs-hostable order)."""

    name = "greedy"

    def scorer(self, lease: Lease, t_start: float = INF) -> Scorer | None:
        if not self.staging.enabled:
            return None
        if haizea(self.staging.cfg):   # Haizea's score: no images, transfers count
            return compat_staging.GreedyScore(self.staging.st, lease, t_start)
        pools = self.pools

        def score(node: int, k: int) -> tuple:
            return (1 if pools.usable(node, lease.image_id, lease.id, t_start) is not None else 0, k)
        return score


POLICIES: dict[str, type[HostSelectionPolicy]] = {"greedy": GreedyHostSelection}


def host_selection_policy(name: str, pools: ImagePools, staging) -> HostSelectionPolicy:
    """The policy ``policy-host-selection = name``; ConfigError naming the option and the
    choices for an unknown name."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ConfigError(f"[scheduling] policy-host-selection = {name!r}; expected one of "
                          f"{', '.join(POLICIES)}") from None
    return cls(pools, staging)
