"""Pooled flows: many flows behind one bottleneck, moved in O(log n) per start or end.

Many workers pushing to one parameter server put every push on the server's link, and each
start or end changes every push's rate (max-min: ``C / n`` each): an O(n) re-solve per event,
so such a run costs O(n) host time per update. When a component's flows all cross one link
``L`` and no link of theirs offers a smaller fair share than ``C_L / n``, max-min fairness
gives every one of them exactly ``C_L / n``: ``L`` saturates first and every flow crosses it.

A :class:`FlowPool` holds such a component in *virtual time*: its service per flow ``V(t)``
grows at the common rate, a flow's last byte arrives when ``V`` reaches its ``v_end`` (``V`` at
its join plus its bytes left), and the order of the ``v_end`` never changes; a start or an end
changes the count, the rate and a heap, whatever the number of flows. The allocation is the
max-min one at every instant, as the solver's; finish times agree to rounding (the solver
takes each flow's bytes off at every re-rate, the pool once).

**What keeps a pool exact.** Its flows are a whole component: no flow outside shares a link
with one inside. A flow starting on a pool's links joins it if it crosses ``L``; otherwise,
or on a capacity change of a pool's link, the pool dissolves back into ordinary shared flows
(bytes left and rates made current) for the max-min solver. The fair-share condition is kept
with a lower bound ``bound`` <= the smallest ``C_l / n_l`` of the pool's links other than ``L``:
exact when the pool forms, lowered as flows join, left as they leave (shares only grow then);
while ``C_L / n`` <= ``bound`` the pool moves on, above it ``bound`` is recomputed and, if still
exceeded, the pool dissolves.

**Link usage.** With a recorder on, the pool keeps ``V``'s history (a point where its rate
changes) and each link's count since it last changed: a link with ``n_l`` pool flows over an
interval carried ``n_l · (V(end) − V(start))`` bytes. Closed intervals are collected and handed
to the recorder in batches with the history (:meth:`~.link_usage.RateSegments.add_along_many`:
``V`` read at every edge at once), which places them in its bins exactly; a pool hands what it
holds before it trims its history, dissolves or is dropped, and at the run's end.

:class:`PooledFlows` is a mixin of :class:`~.network.FlowNetwork`, beside
:class:`~.lone_flows.LoneFlows`: it reads the network's ``env``, ``active``, ``_capacity``,
``_link_flows``, ``_finish``, ``_dirty`` and ``usage``.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Sequence

import numpy as np

from .flow import Flow

__all__ = ["FlowPool", "PooledFlows", "POOL_MIN"]

POOL_MIN = 32  # flows in a component from which it may be pooled (below, the solver is as fast)
_ALONG_BATCH = 1024  # closed usage intervals a pool holds before handing them to the recorder at once


class ServiceHistory:
    """A pool's service ``V`` over time: points where its rate changed, linear in between.

    Kept in arrays that double as they fill, so reading ``V`` at many instants is one
    ``np.interp``; points before the oldest open usage interval are dropped (amortised O(1))."""

    def __init__(self, now: float):
        self._t = np.empty(64)
        self._v = np.empty(64)
        self._t[0], self._v[0], self.size = now, 0.0, 1
        self._trim_at = 1024

    @property
    def last_s(self) -> float:
        return float(self._t[self.size - 1])

    def append(self, t: float, v: float) -> None:
        if self.size == len(self._t):
            self._t, self._v = np.resize(self._t, 2 * self.size), np.resize(self._v, 2 * self.size)
        self._t[self.size], self._v[self.size] = t, v
        self.size += 1

    def at(self, t):
        """``V`` at ``t`` (a float or an array of instants within the history; a recorded
        instant gives its recorded value exactly)."""
        n, times, values = self.size, self._t, self._v
        if isinstance(t, np.ndarray):
            return np.interp(t, times[:n], values[:n])
        if t >= times[n - 1]:  # the interval just closed ends at the last point (the common case)
            return float(values[n - 1])
        k = max(int(times[:n].searchsorted(t, "right")) - 1, 0)
        t0, v0 = float(times[k]), float(values[k])
        if t0 == t:
            return v0
        return v0 + (float(values[k + 1]) - v0) * (t - t0) / (float(times[k + 1]) - t0)

    @property
    def due_for_trim(self) -> bool:
        """Whether it has doubled since it was last trimmed."""
        return self.size >= self._trim_at

    def trim(self, oldest_s: float) -> None:
        """Forget the points before the one at or just before ``oldest_s``."""
        k = max(int(np.searchsorted(self._t[:self.size], oldest_s, side="right")) - 1, 0)
        keep = self.size - k
        self._t[:keep], self._v[:keep] = self._t[k:self.size].copy(), self._v[k:self.size].copy()
        self.size = keep
        self._trim_at = max(1024, 2 * keep)


class FlowPool:
    """Flows of one component that all move at ``capacity / n`` (module docstring)."""

    def __init__(self, link: int, capacity: Sequence[float], now: float, owner: dict[int, "FlowPool"],
                 keep_history: bool):
        self.link = link
        self._capacity = capacity  # the network's list: read, never written
        self.flows: dict[Flow, None] = {}
        self.service = 0.0  # V: bytes each flow has moved while in the pool, as of ``since``
        self.since = now
        self.rate = 0.0
        self.bound = math.inf
        self.counts: dict[int, int] = {}  # link -> pool flows on it
        self.count_since: dict[int, float] = {}  # link -> when its count last changed
        self.changed = False  # whether a flow joined or left since the last fair-share check
        self._owner = owner  # the network's link -> pool map, kept for the links with flows
        self._heap: list[tuple[float, int, Flow]] = []
        self._seq = itertools.count()
        self.history = ServiceHistory(now) if keep_history else None
        self._closed: list[float] = []  # usage intervals not yet handed over: (link, start, end, count) ...

    # -- virtual time ---------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        if now != self.since:
            self.service += self.rate * (now - self.since)
            self.since = now
        if self.history is not None and self.history.last_s != now:
            self.history.append(now, self.service)

    def _rerate(self) -> None:
        n = len(self.flows)
        self.rate = self._capacity[self.link] / n if n else 0.0

    def service_at(self, t):
        """``V(t)``: bytes per flow moved in the pool by ``t`` (a float or an array of instants
        up to now; read from the history, which has a point at every change of rate)."""
        if self.history is None:
            return self.service + self.rate * (t - self.since)
        return self.history.at(t)

    def next_s(self) -> float:
        """When the next flow's last byte arrives (inf: none moves)."""
        if not self._heap or self.rate <= 0:
            return math.inf
        return self.since + (self._heap[0][0] - self.service) / self.rate

    # -- membership -----------------------------------------------------------------------

    def add(self, flows: Sequence[Flow], now: float, usage) -> None:
        """``flows`` (their ``remaining`` current as of ``now``) move in the pool from ``now``."""
        self._advance(now)
        capacity = self._capacity
        for flow in flows:
            flow.pool = self
            flow.v_end = self.service + max(flow.remaining, 0.0)
            self.flows[flow] = None
            heapq.heappush(self._heap, (flow.v_end, next(self._seq), flow))
            for i in flow.link_indices:
                self._count(i, +1, now, usage)
                if i != self.link:
                    self.bound = min(self.bound, capacity[i] / self.counts[i])
        self._rerate()
        self.changed = True

    def remove(self, flow: Flow, now: float, usage) -> None:
        """``flow`` has ended (popped by :meth:`due`)."""
        self._advance(now)
        del self.flows[flow]
        flow.pool = None
        for i in flow.link_indices:
            self._count(i, -1, now, usage)
        self._rerate()
        self.changed = True

    def _count(self, link: int, delta: int, now: float, usage) -> None:
        """Change ``link``'s pool-flow count, closing its usage interval at the old count."""
        old = self.counts.get(link, 0)
        if usage is not None and old and self.count_since[link] < now:
            self._closed += (link, self.count_since[link], now, old)
            if len(self._closed) >= 4 * _ALONG_BATCH:
                self.hand_usage(usage)
        new = old + delta
        self.count_since[link] = now
        if new:
            self.counts[link] = new
            self._owner[link] = self
        else:
            del self.counts[link], self.count_since[link]
            self._owner.pop(link, None)

    def due(self, until_s: float, now_s: float, relative_eps: float) -> list[Flow]:
        """Pop the flows whose last byte is due by ``until_s`` or that have no more than
        ``relative_eps`` of their bytes left at ``now_s`` (as :meth:`FinishTimes.due`)."""
        heap, done = self._heap, []
        service = self.service + self.rate * (now_s - self.since)
        while heap:
            v_end, _, flow = heap[0]
            left = v_end - service
            finish = self.since + (v_end - self.service) / self.rate if self.rate > 0 else math.inf
            if finish > until_s and left > relative_eps * flow.nbytes + 1e-6:
                break
            heapq.heappop(heap)
            done.append(flow)
        return done

    def fair(self) -> bool:
        """Whether ``C_L / n`` is still every flow's max-min rate (recomputing the bound if needed)."""
        self.changed = False
        if not self.flows or self.rate <= self.bound:
            return True
        capacity, counts = self._capacity, self.counts
        self.bound = min((capacity[i] / n for i, n in counts.items() if i != self.link), default=math.inf)
        return self.rate <= self.bound

    def dissolve(self, now: float, usage) -> list[Flow]:
        """Hand every flow back as an ordinary shared flow, its bytes left and rate current."""
        self._advance(now)
        flows = list(self.flows)
        for flow in flows:
            flow.remaining = flow.v_end - self.service
            flow.rate_Bps, flow.updated_s, flow.pool, flow.finish_seq = self.rate, now, None, -1
        if usage is not None:
            self._close_intervals(now, usage)
        for link in self.counts:
            self._owner.pop(link, None)
        self.counts, self.count_since, self.flows, self._heap = {}, {}, {}, []
        return flows

    def close_usage(self, now: float, usage) -> None:
        """Close every link's usage interval at ``now`` (the end of a run); the counts go on."""
        self._advance(now)
        self._close_intervals(now, usage)
        self.trim_history(usage)

    def _close_intervals(self, now: float, usage) -> None:
        """Hand ``usage`` every link's interval at its count up to ``now`` (advanced to it), and
        the intervals closed before."""
        for link, n in self.counts.items():
            if self.count_since[link] < now:
                self._closed += (link, self.count_since[link], now, n)
                self.count_since[link] = now
        self.hand_usage(usage)

    def hand_usage(self, usage) -> None:
        """The closed intervals to ``usage`` in one call (their service read from the history at once)."""
        if self._closed:
            closed = np.array(self._closed).reshape(-1, 4)
            self._closed = []
            usage.add_along_many(closed[:, 0].astype(np.int64), closed[:, 1], closed[:, 2], closed[:, 3],
                                 self.service_at)

    def trim_history(self, usage) -> None:
        """Forget the history before the oldest open usage interval (the closed ones handed over first)."""
        if self.history is not None and self.history.due_for_trim:
            self.hand_usage(usage)
            self.history.trim(min(self.count_since.values(), default=self.since))


class PooledFlows:
    """The pools of a :class:`~.network.FlowNetwork` (see the module docstring)."""

    def _init_pools(self, pool_min: float) -> None:
        self.pool_min = pool_min
        self._pools: list[FlowPool] = []
        self._pool_of_link: dict[int, FlowPool] = {}
        self._fresh: list[Flow] = []  # shared flows started since the last re-solve, while pools exist

    def _pool_flows(self) -> list[Flow]:
        return [flow for pool in self._pools for flow in pool.flows]

    def _settle_pools(self, dirty: dict[int, None]) -> dict[int, None]:
        """The pools' part of a re-solve: fresh flows on a pool's links join it or dissolve it, pools
        whose flows changed check their fair share. Returns the changed links left for the solver."""
        now, usage = self.env.now, self.usage
        fresh, self._fresh = self._fresh, []
        for flow in fresh:
            if flow.pool is not None or flow not in self.active:
                continue
            touched = {id(p): p for i in flow.link_indices if (p := self._pool_of_link.get(i)) is not None}
            if not touched:
                continue
            pool = next(iter(touched.values()))
            if len(touched) == 1 and self._may_join(pool, flow):
                del self.active[flow]
                self._finish.forget(flow)
                pool.add([flow], now, usage)
                continue
            for pool in touched.values():
                self._dissolve(pool, dirty)
        for pool in list(self._pools):
            if not pool.flows:
                if usage is not None:
                    pool.hand_usage(usage)  # its last flows' intervals
                self._pools.remove(pool)
            elif pool.changed and not pool.fair():
                self._dissolve(pool, dirty)
        for pool in self._pools:
            pool.trim_history(usage)
        owner = self._pool_of_link
        return {i: None for i in dirty if i not in owner}

    def _may_join(self, pool: FlowPool, flow: Flow) -> bool:
        """``flow`` crosses the pool's bottleneck, names each link once, and shares no link with
        a flow outside the pool."""
        indices = flow.link_indices
        if pool.link not in indices or len(set(indices)) != len(indices):
            return False
        on, owner = self._link_flows, self._pool_of_link
        return all(owner.get(i) is pool or on.count(i) == 1 for i in indices)

    def _dissolve(self, pool: FlowPool, dirty: dict[int, None]) -> None:
        if pool not in self._pools:
            return
        links = list(pool.counts)
        for flow in pool.dissolve(self.env.now, self.usage):
            self.active[flow] = None
        dirty.update(dict.fromkeys(links))
        self._pools.remove(pool)

    def _dissolve_on(self, links: Sequence[int]) -> None:
        """Dissolve the pools holding any of ``links`` (their capacity is about to change)."""
        for i in links:
            pool = self._pool_of_link.get(i)
            if pool is not None:
                self._dissolve(pool, self._dirty)

    def _pool_component(self, flows: list[Flow]) -> bool:
        """Pool ``flows`` (one re-solved component) if they qualify; True if they were pooled."""
        if len(flows) < self.pool_min or self._weight_of is not None:
            return False
        on, capacity = self._link_flows, self._capacity
        n = len(flows)
        shared = [i for i in flows[0].link_indices if on.count(i) == n]  # links every flow crosses
        if not shared:
            return False
        link = min(shared, key=capacity.__getitem__)
        rate = capacity[link] / n
        links: dict[int, None] = {}
        for flow in flows:
            indices = flow.link_indices
            if link not in indices or len(set(indices)) != len(indices):
                return False
            links.update(dict.fromkeys(indices))
        if any(capacity[i] / on.count(i) < rate for i in links if i != link):
            return False
        now = self.env.now
        if self.usage is not None:  # the solver's intervals on these links end here; the pool's begin
            self.usage.rates_at(list(links), [0.0] * len(links), [0.0] * len(links), now)
        for flow in flows:
            if flow.updated_s != now:
                flow.remaining -= flow.rate_Bps * (now - flow.updated_s)
                flow.updated_s = now
            self._finish.forget(flow)
            del self.active[flow]
        pool = FlowPool(link, capacity, now, self._pool_of_link, keep_history=self.usage is not None)
        pool.add(flows, now, self.usage)
        pool.changed = False
        self._pools.append(pool)
        return True

    def _pools_next_s(self) -> float:
        return min((pool.next_s() for pool in self._pools), default=math.inf)

    def _pools_due(self, until_s: float, now_s: float, relative_eps: float) -> list[Flow]:
        """Pop every pool's flows that are due, taking them out of their pools."""
        done = []
        for pool in self._pools:
            finished = pool.due(until_s, now_s, relative_eps)
            for flow in finished:
                pool.remove(flow, now_s, self.usage)
            done += finished
        return done

    def _close_pool_usage(self, now: float) -> None:
        for pool in self._pools:
            pool.close_usage(now, self.usage)
