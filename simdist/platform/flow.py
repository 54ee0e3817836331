"""One transfer in progress on the flow network: its route, size, rate and byte counts.

A plain record (slots, no behaviour beyond its constructor) that :class:`~.network.FlowNetwork`
moves between its shared, lone and latency-paying sets; kept apart so the network module
holds only the allocation and the life cycle of flows.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from .topology import Link

__all__ = ["Flow"]


class Flow:
    """A transfer in progress."""

    __slots__ = ("route", "nbytes", "done", "src", "dst", "remaining", "counted_bytes", "link_indices",
                 "counted_indices", "weight", "rate_Bps", "started_s", "busy_from_s", "updated_s", "order",
                 "finish_seq", "pool", "v_end")

    def __init__(self, route: tuple[Link, ...], nbytes: float, done: Callable[[], Any], src: int | None = None,
                 dst: int | None = None, link_indices: tuple[int, ...] | None = None,
                 counted_indices: tuple[int, ...] | None = None, counted_bytes: float | None = None):
        self.route = route
        self.nbytes = nbytes
        self.done = done  # called when the last byte arrives
        self.src, self.dst = src, dst
        self.remaining = float(nbytes)
        # whole bytes for the counters: sums of integers are exact (a stripe gets its share of the transfer's)
        self.counted_bytes = float(math.ceil(nbytes)) if counted_bytes is None else counted_bytes
        # the route as the solver takes it
        self.link_indices = tuple(link.index for link in route) if link_indices is None else link_indices
        # the links whose byte counters it adds to (not the shared capacities of half-duplex/capped links)
        self.counted_indices = self.link_indices if counted_indices is None else counted_indices
        self.weight = 1.0  # its weight on a bottleneck (rtt-weighted sharing)
        self.rate_Bps = 0.0
        self.started_s = 0.0
        self.busy_from_s = 0.0  # a lone flow: its links' busy time is counted up to here
        self.updated_s = 0.0  # ``remaining`` is as of this instant (it moves at ``rate_Bps`` since)
        self.order = 0  # when it started moving among the shared flows, as a sequence number
        self.finish_seq = -1  # its current entry in the network's finish-time heap (-1: none)
        self.pool = None  # the FlowPool it moves in (flow_pools), or None
        self.v_end = 0.0  # in a pool: the pool's service per flow at which its last byte arrives

    def __repr__(self) -> str:
        return f"Flow({self.src}->{self.dst}, {self.nbytes} B over {[link.name for link in self.route]})"
