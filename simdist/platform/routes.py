"""Directional links and routes: what a platform is made of, and multi-rail routes.

A :class:`Link` is one direction of a physical link (or the capacity both directions of one
share, see :mod:`simdist.platform.topology`); a route is a tuple of links, and a
:class:`StripedRoute` one route per NIC pair of a multi-rail transfer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["Link", "LinkList", "StripedRoute"]


@dataclass(eq=False)
class Link:
    """One direction of a physical link, or the capacity both directions of one share.

    ``counts_bytes`` is False for a shared capacity (half duplex, aggregate cap): flows cross
    it and it has busy time, but their bytes are counted on the directional links only, so
    byte counters (and ``comm_bytes``) do not depend on how a link's directions are capped.
    """

    index: int
    name: str
    kind: str
    latency_s: float
    bandwidth_Bps: float
    counts_bytes: bool = True

    def __repr__(self) -> str:
        return f"Link({self.name}, {self.kind}, {self.bandwidth_Bps:.3g} B/s)"


class LinkList(list):
    """A platform's links, in index order, carrying the rule by which flows share them.

    ``sharing`` is the fabric's rule (``FabricSpec.sharing``); a flow network built on these
    links uses it unless told otherwise, so every network made from ``platform.links`` shares
    bandwidth the way the platform file says.
    """

    def __init__(self, sharing: str = "max-min"):
        super().__init__()
        self.sharing = sharing


class StripedRoute(tuple):
    """A multi-rail route between two ranks: one stripe (a route) per NIC pair.

    A transfer over it is split evenly across ``stripes`` and completes with its last stripe
    (:meth:`~simdist.platform.network.FlowNetwork.transfer`). As a tuple it is its first
    stripe, so code that reads a route as one path (summed latency, one rail's bandwidth)
    still gets a true figure for one rail.
    """

    stripes: tuple[tuple[Link, ...], ...]

    def __new__(cls, stripes: Sequence[tuple[Link, ...]]) -> "StripedRoute":
        route = super().__new__(cls, stripes[0])
        route.stripes = tuple(stripes)
        return route

    def __getnewargs__(self) -> tuple:  # copy and pickle rebuild it from its stripes
        return (self.stripes,)
