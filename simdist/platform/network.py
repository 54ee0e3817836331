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

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

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

    Small problems (the common case inside a simulation) run in plain Python; from
    :data:`_VECTOR_ABOVE` route entries on, the same allocation is computed on NumPy arrays,
    freezing every link that is already final in one round (see :func:`_max_min_rates_numpy`).
    """
    if sum(len(route) for route in routes) > _VECTOR_ABOVE:
        return _max_min_rates_numpy(routes, capacity)
    return _max_min_rates_python(routes, capacity)


_VECTOR_ABOVE = 256  # route entries (flow-link incidences) above which the NumPy solver is faster


def _max_min_rates_python(routes: Sequence[Sequence[int]], capacity: Sequence[float]) -> list[float]:
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


def _max_min_rates_numpy(routes: Sequence[Sequence[int]], capacity: Sequence[float]) -> list[float]:
    """The same allocation as :func:`_max_min_rates_python`, many filling levels per round.

    Fair shares only grow as filling proceeds (freezing flows at a level no higher than a
    link's share leaves that link's share no lower). So a link whose share is no larger than
    the share of every other link its unfrozen flows cross is already final: progressive
    filling would freeze its flows at exactly that share. Each round freezes all such links at
    once, so the rounds number the longest chain of bottleneck dependencies, not the levels.
    """
    n_flows = len(routes)
    lengths = np.fromiter(map(len, routes), dtype=np.int64, count=n_flows)
    flat = np.array(list(itertools.chain.from_iterable(routes)), dtype=np.int64)
    flow_of = np.repeat(np.arange(n_flows, dtype=np.int64), lengths)
    n_links = len(capacity)
    remaining = np.append(np.asarray(capacity, dtype=float), np.inf)  # a padding link that never binds
    # a flow counts once on a link however often its route names it; it subtracts once per mention
    pair = np.sort(flow_of * n_links + flat)
    if pair.size > 1 and np.any(pair[1:] == pair[:-1]):
        pair = np.unique(pair)
    count = np.append(np.bincount(pair % n_links, minlength=n_links).astype(float), 0.0)
    routed = np.flatnonzero(lengths > 0)
    width = int(lengths.max()) if n_flows else 0
    column = np.arange(flat.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    table = np.full((n_flows, max(width, 1)), n_links, dtype=np.int64)  # route of each flow, padded
    table[flow_of, column] = flat
    rates = np.full(n_flows, np.inf)
    tie = 1e-12  # relative: shares this close count as equal (as in the plain solver)
    active, routes_left = routed, table[routed]
    while active.size:
        live = count > 0
        share = np.full(n_links + 1, np.inf)
        np.divide(remaining, count, out=share, where=live)
        incidence_share = share[routes_left]
        flow_min = incidence_share.min(axis=1)
        # a link is final unless one of its flows can be held lower by another link
        with np.errstate(invalid="ignore"):  # inf - inf on links that no finite flow crosses
            held_lower = flow_min[:, None] < incidence_share - np.abs(incidence_share) * tie
        not_final = np.zeros(n_links + 1, dtype=bool)
        not_final[routes_left[held_lower]] = True
        final = live & ~not_final
        frozen = final[routes_left].any(axis=1)
        level = np.maximum(flow_min[frozen], 0.0)
        rates[active[frozen]] = level
        frozen_routes = routes_left[frozen]
        remaining -= np.bincount(frozen_routes.ravel(), weights=np.repeat(level, frozen_routes.shape[1]),
                                 minlength=n_links + 1)
        frozen_flow = np.zeros(n_flows, dtype=bool)
        frozen_flow[active[frozen]] = True
        frozen_pairs = frozen_flow[pair // n_links]
        count[:n_links] -= np.bincount(pair[frozen_pairs] % n_links, minlength=n_links)
        pair = pair[~frozen_pairs]
        active, routes_left = active[~frozen], routes_left[~frozen]
    return rates.tolist()


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
        self._windows: dict[int, list[float]] = {}  # link index -> factors of open degradation windows
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

    def degrade(self, link_indices: Sequence[int], factor: float, *, active: bool) -> None:
        """Open (``active``) or close a window multiplying the links' capacity by ``factor``.

        Overlapping windows multiply; a link's capacity is recomputed from its nominal
        bandwidth, so closing every window restores it exactly. Rates re-solve at this instant.
        """
        self._advance(self.env.now)
        for index in link_indices:
            windows = self._windows.setdefault(index, [])
            if active:
                windows.append(factor)
            else:
                windows.remove(factor)
            capacity = self.links[index].bandwidth_Bps
            for f in windows:
                capacity *= f
            self._capacity[index] = capacity
        if self.active:
            self._resolve_soon()

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
