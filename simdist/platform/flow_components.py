"""What lets the flow network re-solve locally: the flows each link carries, and when each flow ends.

Max-min fair rates decompose over the connected components of the flow-link graph (two flows
are connected when they share a link, directly or through other flows): a flow's rate depends
only on the links and flows of its own component. When flows start or end on some links, or a
link's capacity changes, only the components holding those links get new rates; every other
flow keeps its rate and its finish time. :meth:`LinkFlows.component` finds the flows a change
touches; :class:`FinishTimes` keeps every moving flow's predicted last byte in a heap, so the
next completion is found without looking at every flow.

On a ring of neighbours exchanging gradients (nnt), a component is two or three flows however
many ranks there are, so an event costs a few flows' work instead of every moving flow's; many
workers pushing to one parameter server stay one component, solved whole as before.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Iterable

from .flow import Flow

__all__ = ["LinkFlows", "FinishTimes"]

_MANY = 32  # flows on one changed link from which a re-solve may take every moving flow (LinkFlows.component)


class LinkFlows:
    """The moving flows on each link, and the components they form."""

    def __init__(self, n_links: int):
        self._on: list[dict[Flow, None] | None] = [None] * n_links  # insertion-ordered: runs are reproducible
        self._started = itertools.count()

    def add(self, flow: Flow) -> None:
        flow.order = next(self._started)
        on = self._on
        for i in flow.link_indices:
            flows = on[i]
            if flows is None:
                on[i] = {flow: None}
            else:
                flows[flow] = None

    def count(self, link: int) -> int:
        """How many moving flows are on ``link``."""
        flows = self._on[link]
        return len(flows) if flows else 0

    def carries(self, link: int) -> bool:
        """Whether a moving flow is on ``link``."""
        return bool(self._on[link])

    def links_carrying(self) -> list[int]:
        """Every link a moving flow is on."""
        return [i for i, flows in enumerate(self._on) if flows]

    def remove(self, flow: Flow) -> None:
        on = self._on
        for i in flow.link_indices:
            flows = on[i]
            if flows is not None:
                flows.pop(flow, None)

    def component(self, links: Iterable[int], moving: dict[Flow, None]) -> list[Flow]:
        """Every flow of ``moving`` (all that move, in the order they started) connected to
        ``links`` through shared links, in that order, or more of ``moving`` where that is
        cheaper: all of them as soon as one of ``links`` carries a quarter of them and at least
        :data:`_MANY` (many workers pushing to one server), or once the search has found them
        all. Solving flows of other components with them changes no rate."""
        on, everyone = self._on, len(moving)
        seen_links = set(links)
        for i in seen_links:  # a link that carries a quarter of them: solving them all costs little more
            flows = on[i]
            if flows and len(flows) >= _MANY and 4 * len(flows) >= everyone:
                return list(moving)
        stack = list(seen_links)
        found: dict[Flow, None] = {}
        while stack:
            flows = on[stack.pop()]
            if not flows:
                continue
            for flow in flows:
                if flow in found:
                    continue
                found[flow] = None
                for i in flow.link_indices:
                    if i not in seen_links:
                        seen_links.add(i)
                        stack.append(i)
            if len(found) == everyone:
                return list(moving)
        if len(found) < 2:
            return list(found)
        return sorted(found, key=_start_order)


def _start_order(flow: Flow) -> int:
    return flow.order


class FinishTimes:
    """A heap of the moving flows' predicted last bytes; an entry is current while the flow's
    rate has not changed since it was pushed (``flow.finish_seq`` names the current one)."""

    def __init__(self):
        self._heap: list[tuple[float, int, Flow]] = []
        self._seq = itertools.count()

    def rerate(self, flows: list[Flow], rates: list[float], now_s: float, moving: int) -> None:
        """``flows`` move at ``rates`` from ``now_s``: the bytes each moved since its last change
        are taken off at its old rate, and its last byte is entered at the new one.

        A flow whose rate is unchanged keeps its entry. Each re-rated flow leaves a stale entry
        behind. When the new entries are many against the heap (a component re-solved at every
        event: many workers and one server), or the stale ones outnumber the ``moving`` flows
        by far, the heap is rebuilt from its current entries and the new ones, in linear time;
        otherwise the new ones are pushed one by one."""
        seqs = self._seq
        entries = []
        for flow, rate in zip(flows, rates):
            if rate == flow.rate_Bps and flow.finish_seq >= 0:
                continue  # solved with a changed component, its own rate unchanged: its entry holds
            if flow.updated_s != now_s:
                flow.remaining -= flow.rate_Bps * (now_s - flow.updated_s)
                flow.updated_s = now_s
            flow.rate_Bps = rate
            flow.finish_seq = seq = next(seqs)
            if rate > 0:
                entries.append((now_s + max(flow.remaining, 0.0) / rate, seq, flow))
        heap = self._heap
        if 2 * len(entries) >= len(heap) or len(heap) > 4 * moving + 64:
            heap = [entry for entry in heap if entry[2].finish_seq == entry[1]]
            heap += entries
            heapq.heapify(heap)
            self._heap = heap
        else:
            for entry in entries:
                heapq.heappush(heap, entry)

    @staticmethod
    def forget(flow: Flow) -> None:
        """``flow`` stops moving: its entries are stale from now on."""
        flow.finish_seq = -1

    def next_s(self) -> float:
        """The earliest current predicted last byte (inf: none)."""
        heap = self._heap
        while heap and heap[0][2].finish_seq != heap[0][1]:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def due(self, until_s: float, now_s: float, relative_eps: float) -> list[Flow]:
        """Pop the flows whose last byte is due by ``until_s``, and those left with no more than
        ``relative_eps`` of their bytes (plus a millionth of a byte) at ``now_s``: rounding
        keeps flows that end together from predicting exactly the same instant."""
        heap, done = self._heap, []
        while heap:
            finish_s, seq, flow = heap[0]
            if flow.finish_seq != seq:
                heapq.heappop(heap)
                continue
            left = flow.remaining - flow.rate_Bps * (now_s - flow.updated_s)
            if finish_s > until_s and left > relative_eps * flow.nbytes + 1e-6:
                break
            heapq.heappop(heap)
            self.forget(flow)
            done.append(flow)
        return done
