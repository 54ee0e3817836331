"""Transfers as flows sharing links by max-min fairness (the SimGrid flow model).

A transfer of ``nbytes`` over a route first pays the route's latency, then becomes a flow.
The rates of all active flows are the max-min fair allocation over the links they cross
(:mod:`.maxmin`), re-solved whenever a flow starts or ends; between those instants every
flow moves at a constant rate, so the next completion time is known exactly and one timer
is enough. A re-solve covers only the flows connected to the links that changed (the
allocation decomposes over connected components: :mod:`.flow_components`); the others keep
their rates and predicted finish times, held in a heap. Contention — many workers pushing to
one parameter server, several groups crossing one uplink — emerges from this, not from
special cases.

How flows share a bottleneck is a *sharing rule* (:data:`SHARING_RULES`, chosen by the
platform's ``fabric.sharing``): ``max-min`` gives them equal shares; ``rtt-weighted`` gives
them shares proportional to 1/RTT, RTT = 2 x the route's summed latency, as TCP does to
flows of different round-trip times (weighted max-min, :func:`.weighted_max_min_rates`).
The rules live in :mod:`.sharing`, the :class:`Flow` record in :mod:`.flow`; both are
re-exported here.

A route may be a :class:`~simdist.platform.topology.StripedRoute` (multi-rail NICs): the
transfer is then split evenly into one flow per stripe and completes with the last one;
its bytes are split in whole bytes, so the counters add up to exactly the transfer's.

References: D. Bertsekas and R. Gallager, *Data Networks*, §6.5.2 (max-min fairness and
progressive filling); P. Velho et al., "On the validity of flow-level TCP network models
for grid and cloud simulations", ACM TOMACS 23(4), 2013 (SimGrid's flow model).
"""

from __future__ import annotations

import math
from collections import defaultdict
from itertools import chain
from typing import Any, Callable, Sequence

import numpy as np


from ..registry import Registry
from .flow import Flow
from .flow_components import FinishTimes, LinkFlows
from . import flow_pools
from .flow_pools import PooledFlows
from .lone_flows import LoneFlows
from .maxmin import max_min_rates, max_min_rounds, weighted_max_min_rates
from .sharing import MIN_RTT_S, SHARING_RULES, rtt_weight
from .topology import Link, StripedRoute

__all__ = ["max_min_rates", "max_min_rounds", "weighted_max_min_rates", "Flow", "FlowNetwork", "NETWORK_MODELS",
           "SHARING_RULES", "MIN_RTT_S", "rtt_weight"]

_RELATIVE_EPS = 1e-9  # a flow this close to its size (relative) has finished
_USAGE_BY_FLOW = 8  # re-solved flows up to which their links' usage is summed flow by flow, not in arrays
_ROUTES_KEPT = 1 << 16  # route tuples whose facts a network keeps (a platform has one per rank pair in use)


class FlowNetwork(LoneFlows, PooledFlows):
    """Flows over the links of one platform, driven by a SimPy environment.

    Counters kept for the results: bytes and busy time per link, bytes sent and received
    per (src, dst) rank pair. Counters count whole bytes (a collective's S/n chunks round up),
    so they add up exactly whatever the order flows finish in; timing uses the exact sizes.

    A transfer whose links carry nothing else when it is sent (the common case: one message
    between two ranks) is kept apart as a *lone* flow: one timer from the send to its last
    byte, no latency timer and no re-solve. Should another transfer claim one of its links
    first, it rejoins the shared flows with the bytes it has moved so far, so the allocation
    is the max-min one at every instant either way (``lone_shortcut=False`` turns it off,
    for tests that compare the two). The shortcut lives in :mod:`.lone_flows`.

    A component of at least ``pool_min`` flows that all cross one link, on which each gets the
    smallest fair share, moves as a *pool* in virtual time: O(log n) per start or end instead of
    a re-solve of every flow (many workers pushing to one parameter server; :mod:`.flow_pools`).
    ``pools=False`` turns them off; ``pool_min`` defaults to :data:`.flow_pools.POOL_MIN`.

    ``sharing`` names the rule in :data:`SHARING_RULES`; by default it is the one ``links``
    carries (a platform's :class:`~simdist.platform.topology.LinkList` carries its
    ``fabric.sharing``), else ``max-min``.
    """

    def __init__(self, env, links: Sequence[Link], *, lone_shortcut: bool = True, sharing: str | None = None,
                 pools: bool = True, pool_min: float | None = None):
        self.env = env
        self.sharing = sharing if sharing is not None else getattr(links, "sharing", "max-min")
        self._weight_of = SHARING_RULES.get(self.sharing)  # None: equal shares, the unweighted solver
        self.links = list(links)
        self.lone_shortcut = lone_shortcut
        self._capacity = [link.bandwidth_Bps for link in self.links]
        self._windows: dict[int, list[float]] = {}  # link index -> factors of open degradation windows
        self.active: dict[Flow, None] = {}  # the shared flows moving on their links, in the order they started
        self._link_flows = LinkFlows(len(self.links))
        self._finish = FinishTimes()
        self._dirty: dict[int, None] = {}  # links whose flows or capacity changed since the last re-solve
        self._armed_for = math.inf  # the instant the completion timer is set for (inf: none set)
        self._lone: dict[int, Flow] = {}  # link index -> the lone flow holding it (see _go_alone)
        self._paying_latency: set[Flow] = set()  # ordinary flows sent, not on their links yet
        self._routes: dict[int, tuple] = {}  # id of a route tuple -> its facts (see _route_facts)
        self._timer_generation = 0
        self._resolve_pending = False
        self.link_bytes = [0.0] * len(self.links)
        self.link_busy_s = [0.0] * len(self.links)
        self._link_busy_since = [0.0] * len(self.links)
        self.sent_bytes: dict[tuple[int, int], float] = defaultdict(float)
        self.received_bytes: dict[tuple[int, int], float] = defaultdict(float)
        self.solves = 0
        if not pools:
            pool_min = math.inf
        self._init_pools(flow_pools.POOL_MIN if pool_min is None else pool_min)
        # where link usage over time goes (a LinkUsage or UsageLog: link_usage.RateSegments); None: not kept
        self.usage = None

    # -- public -----------------------------------------------------------------------

    def transfer(self, route: Sequence[Link], nbytes: float, *, src: int | None = None, dst: int | None = None,
                 latency_s: float | None = None):
        """An event that succeeds when ``nbytes`` have crossed ``route``.

        ``latency_s`` overrides the route's summed link latency (collective models pay
        latency separately and pass 0). Over a :class:`StripedRoute`, the bytes are split
        evenly over its stripes, each a flow of its own, and the event succeeds with the last.
        """
        done = self.env.event()
        self.transfer_then(route, nbytes, done.succeed, src=src, dst=dst, latency_s=latency_s)
        return done

    def transfer_then(self, route: Sequence[Link], nbytes: float, on_done: Callable[[], Any], *,
                      src: int | None = None, dst: int | None = None, latency_s: float | None = None) -> None:
        """Like :meth:`transfer`, but call ``on_done()`` when the last byte arrives instead of
        succeeding an event (one SimPy event less per message for callers that only react)."""
        if type(route) is StripedRoute:
            self._transfer_striped(route.stripes, nbytes, on_done, src, dst, latency_s)
            return
        self._send(route, max(float(nbytes), 0.0), on_done, src, dst, latency_s, None)

    def _send(self, route: Sequence[Link], nbytes: float, on_done: Callable[[], Any], src: int | None,
              dst: int | None, latency_s: float | None, counted_bytes: float | None) -> None:
        """One flow of ``nbytes`` over ``route`` (``counted_bytes``: its whole bytes, default ceil)."""
        route, indices, route_latency_s, distinct, counted = self._route_facts(route)
        flow = Flow(route, nbytes, on_done, src, dst, indices, counted, counted_bytes)
        if self._weight_of is not None:
            flow.weight = self._weight_of(route_latency_s)  # the physical route's, whatever latency_s says
        if src is not None and dst is not None:
            self.sent_bytes[(src, dst)] += flow.counted_bytes
        delay = route_latency_s if latency_s is None else latency_s
        if distinct and self._can_go_alone(flow):
            self._go_alone(flow, delay)
        elif delay > 0:
            self._start_after(flow, delay)
        else:
            self._start(flow)

    def _transfer_striped(self, stripes: tuple[tuple[Link, ...], ...], nbytes: float, on_done: Callable[[], Any],
                          src: int | None, dst: int | None, latency_s: float | None) -> None:
        """``nbytes`` split evenly over ``stripes``, one flow each; ``on_done`` after the last.

        Timing uses the exact share ``nbytes / k``; the counters get the transfer's whole
        bytes split as evenly as integers allow, so they add up to exactly what one flow's
        would be.
        """
        size = max(float(nbytes), 0.0)
        share, extra = divmod(math.ceil(size), len(stripes))
        left = [len(stripes)]

        def stripe_done() -> None:
            left[0] -= 1
            if not left[0]:
                on_done()

        for k, stripe in enumerate(stripes):
            self._send(stripe, size / len(stripes), stripe_done, src, dst, latency_s, float(share + (k < extra)))

    def _route_facts(self, route: Sequence[Link]) -> tuple[tuple[Link, ...], tuple[int, ...], float, bool,
                                                            tuple[int, ...]]:
        """(route as a tuple, its link indices, summed latency, no link named twice, the indices
        of the links that count bytes), kept per route tuple: a platform hands out the same
        tuple for a pair every time."""
        facts = self._routes.get(id(route)) if type(route) is tuple else None
        if facts is None or facts[0] is not route:
            links = tuple(route)
            indices = tuple(link.index for link in links)
            counted = tuple(link.index for link in links if link.counts_bytes)
            facts = (links, indices, sum(link.latency_s for link in links), len(set(indices)) == len(indices),
                     indices if len(counted) == len(indices) else counted)
            if type(route) is tuple and len(self._routes) < _ROUTES_KEPT:
                self._routes[id(route)] = facts  # the tuple is kept alive with its facts: its id stays its own
        return facts

    def in_flight(self) -> list[Flow]:
        """Flows sent whose last byte has not arrived: moving, lone, or still paying latency."""
        return list(self.active) + self._pool_flows() + self._lone_flows() + list(self._paying_latency)

    @property
    def idle(self) -> bool:
        """Whether no flow is moving or about to move on any link."""
        return not self.active and not self._pools and not self._lone and not self._paying_latency

    def degrade(self, link_indices: Sequence[int], factor: float, *, active: bool) -> None:
        """Open (``active``) or close a window multiplying the links' capacity by ``factor``.

        Overlapping windows multiply; a link's capacity is recomputed from its nominal
        bandwidth, so closing every window restores it exactly. Rates re-solve at this instant
        (a pool on the links dissolves into shared flows first).
        """
        self._dissolve_on(link_indices)
        for index in link_indices:
            if index in self._lone:  # its rate changes: it shares the re-solve from now on
                self._join(self._lone[index])
            windows = self._windows.setdefault(index, [])
            if active:
                windows.append(factor)
            else:
                windows.remove(factor)
            capacity = self.links[index].bandwidth_Bps
            for f in windows:
                capacity *= f
            self._capacity[index] = capacity
            self._dirty[index] = None
        if self.active:
            self._resolve_soon()

    def finalize(self, now_s: float) -> None:
        """Close the busy intervals of links still carrying flows at the end of the run."""
        if self.usage is not None:
            self._close_pool_usage(now_s)
            self.usage.close(now_s)
            for lone in self._lone_flows():
                self._record_lone(lone, now_s)
        for i in self._link_flows.links_carrying():
            self.link_busy_s[i] += now_s - self._link_busy_since[i]
            self._link_busy_since[i] = now_s
        for lone in self._lone_flows():
            if lone.busy_from_s < now_s:
                for i in lone.link_indices:
                    self.link_busy_s[i] += now_s - lone.busy_from_s
                lone.busy_from_s = now_s

    # -- flow life cycle --------------------------------------------------------------

    def _start_after(self, flow: Flow, delay_s: float) -> None:
        """Start ``flow`` on its links once ``delay_s`` (its latency) has passed."""
        self._paying_latency.add(flow)

        def start(_event) -> None:
            self._paying_latency.discard(flow)
            self._start(flow)

        self.env.timeout(delay_s).callbacks.append(start)

    def _start(self, flow: Flow) -> None:
        now = self.env.now
        flow.started_s = now
        if flow.nbytes <= 0 or not flow.route:
            self._account_end(flow)
            flow.done()
            return
        if self._lone:
            self._claim(flow)
        for i in flow.link_indices:
            if not self._link_flows.carries(i):
                self._link_busy_since[i] = now
        self._add_active(flow, now)
        if len(self.active) == 1 and not self._pools and not self._resolve_pending:
            # alone on the network: its rate is known now. Should another flow start in this
            # instant, it re-solves (deferred) with both; rates only depend on the active set
            self._resolve_and_schedule()
        else:
            self._resolve_soon()

    def _add_active(self, flow: Flow, now: float) -> None:
        """``flow`` moves among the shared flows from ``now`` (its rate is solved with its links')."""
        flow.updated_s = now
        self.active[flow] = None
        self._link_flows.add(flow)
        self._dirty.update(dict.fromkeys(flow.link_indices))
        if self._pools:
            self._fresh.append(flow)

    def _resolve_soon(self) -> None:
        """Re-solve once at the end of this instant, however many flows start in it."""
        if self._resolve_pending:
            return
        self._resolve_pending = True
        event = self.env.event()
        event.callbacks.append(self._deferred_resolve)
        event.succeed()

    def _deferred_resolve(self, _event) -> None:
        self._resolve_pending = False
        self._resolve_and_schedule()

    def _note_usage_rates(self, flows: Sequence[Flow], links: dict[int, None]) -> None:
        """Tell the usage recorder the summed rate and flow count, as just solved, of every link
        the re-solved ``flows`` count bytes on, and of ``links`` (those that changed)."""
        if len(flows) > _USAGE_BY_FLOW:
            counted = [f.counted_indices for f in flows]
            lengths = np.fromiter(map(len, counted), dtype=np.int64, count=len(counted))
            flat = np.fromiter(chain.from_iterable(counted), dtype=np.int64, count=int(lengths.sum()))
            rates = np.repeat(np.fromiter((f.rate_Bps for f in flows), dtype=float, count=len(flows)), lengths)
            n = len(self._capacity)
            count = np.bincount(flat, minlength=n)
            told = count > 0
            told[list(links)] = True
            told = np.flatnonzero(told)
            self.usage.rates_at(told, np.bincount(flat, rates, minlength=n)[told], count[told].astype(float),
                                self.env.now)
            return
        rate: dict[int, float] = dict.fromkeys(links, 0.0)
        count: dict[int, float] = dict.fromkeys(links, 0.0)
        for flow in flows:
            for i in flow.counted_indices:
                rate[i] = rate.get(i, 0.0) + flow.rate_Bps
                count[i] = count.get(i, 0.0) + 1.0
        self.usage.rates_at(list(rate), list(rate.values()), list(count.values()), self.env.now)

    def _resolve_and_schedule(self) -> None:
        """New rates for the flows connected to the links that changed; the timer set for the
        next last byte anywhere."""
        dirty, self._dirty = self._dirty, {}
        if self._pools:
            dirty = self._settle_pools(dirty)
        if not self.active and not self._pools:
            if self.usage is not None:
                self.usage.close(self.env.now)  # nothing moves on any link now
            return
        if dirty:
            flows = self._link_flows.component(dirty, self.active) if self.active else []
            if flows and self._pool_component(flows):
                flows, dirty = [], {i: None for i in dirty if i not in self._pool_of_link}
            elif flows:
                self._solve(flows)
            if self.usage is not None:
                self._note_usage_rates(flows, dirty)
        self._arm_timer()

    def _solve(self, flows: list[Flow]) -> None:
        """Max-min rates of one set of components; each flow's bytes moved so far at its old rate
        are taken off first, and its last byte predicted at the new one."""
        self.solves += 1
        routes = [f.link_indices for f in flows]
        if self._weight_of is None:
            rates = max_min_rates(routes, self._capacity)
        else:
            rates = weighted_max_min_rates(routes, self._capacity, [f.weight for f in flows])
        self._finish.rerate(flows, rates, self.env.now, len(self.active))

    def _arm_timer(self) -> None:
        """Set the completion timer for the earliest predicted last byte, unless one is set earlier."""
        next_s = self._finish.next_s()
        if self._pools:
            next_s = min(next_s, self._pools_next_s())
        if next_s >= self._armed_for or next_s == math.inf:
            return
        self._armed_for = next_s
        self._timer_generation += 1
        generation = self._timer_generation
        self.env.timeout(max(next_s - self.env.now, 0.0)).callbacks.append(
            lambda _event: self._on_timer(generation, next_s))

    def _on_timer(self, generation: int, armed_for: float) -> None:
        if generation != self._timer_generation:
            return  # superseded by an earlier one
        self._armed_for = math.inf
        now = self.env.now
        finished = self._finish.due(max(now, armed_for), now, _RELATIVE_EPS)
        for flow in finished:
            del self.active[flow]
        if self._pools:
            finished += self._pools_due(max(now, armed_for), now, _RELATIVE_EPS)
        for flow in finished:
            self._link_flows.remove(flow)
            links = dict.fromkeys(flow.link_indices)  # a route may name a link twice: its busy time ends once
            self._dirty.update(links)
            for i in links:
                if not self._link_flows.carries(i):
                    self.link_busy_s[i] += now - self._link_busy_since[i]
            self._account_end(flow)
        self._resolve_and_schedule()
        for flow in finished:
            flow.done()

    def _account_end(self, flow: Flow) -> None:
        for i in flow.counted_indices:
            self.link_bytes[i] += flow.counted_bytes
        if flow.src is not None and flow.dst is not None:
            self.received_bytes[(flow.src, flow.dst)] += flow.counted_bytes


NETWORK_MODELS: Registry[type[FlowNetwork]] = Registry("network model")
NETWORK_MODELS.add(
    "max-min", FlowNetwork,
    "flows share links by max-min fairness (progressive filling), re-solved when a flow starts or ends; "
    "latency paid up front",
    citation="Velho et al., ACM TOMACS 23(4), 2013 (SimGrid flow model); Bertsekas & Gallager, Data Networks §6.5.2")
