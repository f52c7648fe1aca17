"""Where a CE agent puts a job: which of its node agents gets the new VWN.

A placement policy is a plain function ``(nodes: Sequence[NodeLoad]) -> list[NodeLoad]`` returning
the candidate nodes best first (the CE agent tries them in that order, skipping unreachable ones).
Policies are selected by name through ``PLACEMENTS`` (CE agent config field ``placement``) and are
used by the ``fair-share`` scheduler. With ``scheduler = "leases"`` the lease engine's mapper places
each job lease instead (``vwn_agents.leasing.mapper``: the node with the most free VWN slots, ties
in configuration order -- on nodes of equal size the same choice as ``fewest_vwns``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class NodeLoad:
    """A node agent as the CE agent sees it: its URL, its position in the configuration, and the
    number of VWNs of this CE's jobs that are active on it."""

    url: str
    index: int
    vwns: int


def fewest_vwns(nodes: Sequence[NodeLoad]) -> list[NodeLoad]:
    """Nodes ordered by fewest active VWNs, ties in configuration order.

    With the VWN capacity rule C/(N+1) (seed 004, Section 5.1) on nodes of equal capacity this
    gives the new job the largest CPU share available at the CE.
    """
    return sorted(nodes, key=lambda n: (n.vwns, n.index))


Placement = Callable[[Sequence[NodeLoad]], list[NodeLoad]]

PLACEMENTS: dict[str, Placement] = {"fewest-vwns": fewest_vwns}
