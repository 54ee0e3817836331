"""Transfers as flows sharing links by max-min fairness (the SimGrid flow model).

A transfer of ``nbytes`` over a route first pays the route's latency, then becomes a flow.
The rates of all active flows are the max-min fair allocation over the links they cross
(progressive filling), re-solved whenever a flow starts or ends; between those instants
every flow moves at a constant rate, so the next completion time is known exactly and one
timer is enough. Contention — many workers pushing to one parameter server, several
groups crossing one uplink — emerges from this, not from special cases.

References: D. Bertsekas and R. Gallager, *Data Networks*, §6.5.2 (max-min fairness and
progressive filling); P. Velho et al., "On the validity of flow-level TCP network models
for grid and cloud simulations", ACM TOMACS 23(4), 2013 (SimGrid's flow model).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..registry import Registry
from .topology import Link

__all__ = ["max_min_rates", "Flow", "FlowNetwork", "NETWORK_MODELS"]

_RELATIVE_EPS = 1e-9


def max_min_rates(routes: Sequence[Sequence[int]], capacity: Sequence[float]) -> list[float]:
    """Max-min fair rates of flows with the given routes (link indices) and link capacities.

    Progressive filling: find the smallest fair share (remaining capacity split evenly over
    a link's unfrozen flows); freeze every flow crossing a link with that share (those links
    saturate together) and subtract; repeat. Every flow ends with a bottleneck link that is
    saturated and on which it has the largest rate. A flow with an empty route gets ``inf``.
    """
    rates = [float("inf")] * len(routes)
    remaining: dict[int, float] = {}
    users: dict[int, set[int]] = defaultdict(set)
    for f, route in enumerate(routes):
        for link in route:
            users[link].add(f)
            remaining[link] = capacity[link]
    while users:
        shares = {link: remaining[link] / len(fs) for link, fs in users.items()}
        share = min(shares.values())
        tie = share * (1 + 1e-12)
        frozen = {f for link, s in shares.items() if s <= tie for f in users[link]}
        share = max(share, 0.0)
        for f in frozen:
            rates[f] = share
            for link in routes[f]:
                remaining[link] -= share
                flows_here = users.get(link)
                if flows_here is not None:
                    flows_here.discard(f)
                    if not flows_here:
                        del users[link]
    return rates


@dataclass(eq=False)
class Flow:
    """A transfer in progress."""

    route: tuple[Link, ...]
    nbytes: float
    done: Any  # the event succeeded when the last byte arrives
    src: int | None = None
    dst: int | None = None
    remaining: float = field(init=False)
    counted_bytes: float = field(init=False)  # whole bytes for the counters: sums of integers are exact
    rate_Bps: float = 0.0
    started_s: float = 0.0

    def __post_init__(self) -> None:
        self.remaining = float(self.nbytes)
        self.counted_bytes = float(math.ceil(self.nbytes))


class FlowNetwork:
    """Flows over the links of one platform, driven by a SimPy environment.

    Counters kept for the results: bytes and busy time per link, bytes sent and received
    per (src, dst) rank pair. Counters count whole bytes (a collective's S/n chunks round up),
    so they add up exactly whatever the order flows finish in; timing uses the exact sizes.
    """

    def __init__(self, env, links: Sequence[Link]):
        self.env = env
        self.links = list(links)
        self._capacity = [link.bandwidth_Bps for link in self.links]
        self.active: list[Flow] = []
        self._last_advance_s = 0.0
        self._timer_generation = 0
        self._resolve_pending = False
        self.link_bytes = [0.0] * len(self.links)
        self.link_busy_s = [0.0] * len(self.links)
        self._link_active = [0] * len(self.links)
        self._link_busy_since = [0.0] * len(self.links)
        self.sent_bytes: dict[tuple[int, int], float] = defaultdict(float)
        self.received_bytes: dict[tuple[int, int], float] = defaultdict(float)
        self.solves = 0

    # -- public -----------------------------------------------------------------------

    def transfer(self, route: Sequence[Link], nbytes: float, *, src: int | None = None, dst: int | None = None,
                 latency_s: float | None = None):
        """An event that succeeds when ``nbytes`` have crossed ``route``.

        ``latency_s`` overrides the route's summed link latency (collective models pay
        latency separately and pass 0).
        """
        done = self.env.event()
        flow = Flow(tuple(route), max(float(nbytes), 0.0), done, src, dst)
        if src is not None and dst is not None:
            self.sent_bytes[(src, dst)] += flow.counted_bytes
        delay = sum(link.latency_s for link in flow.route) if latency_s is None else latency_s
        if delay > 0:
            self.env.timeout(delay).callbacks.append(lambda _event: self._start(flow))
        else:
            self._start(flow)
        return done

    def finalize(self, now_s: float) -> None:
        """Close the busy intervals of links still carrying flows at the end of the run."""
        for i, active in enumerate(self._link_active):
            if active:
                self.link_busy_s[i] += now_s - self._link_busy_since[i]
                self._link_busy_since[i] = now_s

    # -- flow life cycle --------------------------------------------------------------

    def _start(self, flow: Flow) -> None:
        now = self.env.now
        flow.started_s = now
        if flow.nbytes <= 0 or not flow.route:
            self._account_end(flow)
            flow.done.succeed()
            return
        self._advance(now)
        self.active.append(flow)
        for link in flow.route:
            if self._link_active[link.index] == 0:
                self._link_busy_since[link.index] = now
            self._link_active[link.index] += 1
        self._resolve_soon()

    def _resolve_soon(self) -> None:
        """Re-solve once at the end of this instant, however many flows start in it."""
        if self._resolve_pending:
            return
        self._resolve_pending = True
        self._timer_generation += 1  # a completion timer due now was computed with stale rates
        event = self.env.event()
        event.callbacks.append(self._deferred_resolve)
        event.succeed()

    def _deferred_resolve(self, _event) -> None:
        self._resolve_pending = False
        self._advance(self.env.now)
        self._resolve_and_schedule()

    def _advance(self, now: float) -> None:
        dt = now - self._last_advance_s
        if dt > 0:
            for flow in self.active:
                flow.remaining -= flow.rate_Bps * dt
        self._last_advance_s = now

    def _resolve_and_schedule(self) -> None:
        if not self.active:
            return
        self.solves += 1
        rates = max_min_rates([[link.index for link in f.route] for f in self.active], self._capacity)
        for flow, rate in zip(self.active, rates):
            flow.rate_Bps = rate
        next_s = min(max(f.remaining, 0.0) / f.rate_Bps for f in self.active)
        self._timer_generation += 1
        generation = self._timer_generation
        self.env.timeout(next_s).callbacks.append(lambda _event: self._on_timer(generation))

    def _on_timer(self, generation: int) -> None:
        if generation != self._timer_generation:
            return  # superseded by a re-solve
        now = self.env.now
        self._advance(now)
        finished = [f for f in self.active if f.remaining <= _RELATIVE_EPS * f.nbytes + 1e-6]
        if not finished:  # rounding left a sliver: finish the nearest flow
            finished = [min(self.active, key=lambda f: f.remaining / f.rate_Bps)]
        done = set(map(id, finished))
        self.active = [f for f in self.active if id(f) not in done]
        for flow in finished:
            for link in flow.route:
                self._link_active[link.index] -= 1
                if self._link_active[link.index] == 0:
                    self.link_busy_s[link.index] += now - self._link_busy_since[link.index]
            self._account_end(flow)
        self._resolve_and_schedule()
        for flow in finished:
            flow.done.succeed()

    def _account_end(self, flow: Flow) -> None:
        for link in flow.route:
            self.link_bytes[link.index] += flow.counted_bytes
        if flow.src is not None and flow.dst is not None:
            self.received_bytes[(flow.src, flow.dst)] += flow.counted_bytes


NETWORK_MODELS: Registry[type[FlowNetwork]] = Registry("network model")
NETWORK_MODELS.add(
    "max-min", FlowNetwork,
    "flows share links by max-min fairness (progressive filling), re-solved when a flow starts or ends; "
    "latency paid up front",
    citation="Velho et al., ACM TOMACS 23(4), 2013 (SimGrid flow model); Bertsekas & Gallager, Data Networks §6.5.2")
