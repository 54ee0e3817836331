"""Collectives alone on their links: each phase run once, then replayed.

Where a lockstep group's (or lanes') collectives are all the traffic there is, and no link
changes capacity (``network_exclusive``), a collective phase takes the same time and moves
the same bytes every time it runs with the same key. It is run once on a scratch copy of
the network (:meth:`AloneReplay._measure_alone`); afterwards it costs one timer, and its
bytes and busy time are added to the counters when it ends (timestamps agree with running
the flows to ~1e-15 relative). Lockstep lanes price many such collectives at once, one per
node, from their starts (:meth:`AloneReplay.run_alone`): no process and no timer each.

:class:`AloneReplay` is a mixin of :class:`~simdist.runtime.sim.SimWorld` over its network,
platform and collective pricing (:mod:`.sim_collectives`).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

import numpy as np
import simpy

from ..platform.link_usage import UsageLog

__all__ = ["AloneReplay"]


class AloneReplay:
    """Phases measured alone, replayed; many collectives priced at once (lanes)."""

    def _init_alone(self) -> None:
        self._alone: dict[Any, tuple] = {}  # phase -> its outcome alone on the network
        self._runs: dict[int, Any] = {}  # id(outcome) -> how to run it again (run(env, network))
        self._pieces: dict[Any, list[tuple[float, tuple]]] = {}  # collective key -> its (seconds, outcome) pieces
        # pieces priced at once whose counters are owed, by end: (their starts, their ends, the batch)
        self._owed: deque[tuple[np.ndarray, np.ndarray, "_PieceBatch"]] = deque()
        self._replaying: dict[int, tuple[float, tuple]] = {}  # replays under way: token -> (start, outcome)
        self._batches: dict[int, tuple[Any, list["_PieceBatch"]]] = {}  # id(pieces) -> (pieces, their batches)
        self._settled: dict[int, tuple["_PieceBatch", int]] = {}  # id(batch) -> (batch, times it ended whole)

    def _replay_alone(self, key: Any, index: int, phase):
        """A phase on a network nobody else uses: its outcome was fixed the first time it ran."""
        alone = self._phase_alone(key, index, phase)
        yield from self._replay(alone, alone[0])

    def _phase_alone(self, key: Any, index: int, phase) -> tuple:
        alone = self._alone.get((key, index))
        if alone is None:
            alone = self._alone[(key, index)] = self._measured(_phase_run(self, key, index, phase))
        return alone

    def _measured(self, run) -> tuple:
        """``run`` measured alone, kept with how to run it again (a stop inside it: :meth:`settle_alone_at_stop`)."""
        alone = self._measure_alone(run)
        self._runs[id(alone)] = run
        return alone

    def _priced_alone(self, key: Any, plan, price: Any) -> tuple:
        """A priced collective's flows alone (one per rank pair; measured once per key)."""
        alone = self._alone.get((key, "priced"))
        if alone is None:
            alone = self._alone[(key, "priced")] = self._measured(self._priced_run(key, plan))
            if alone[0] > price.seconds:
                ranks = key[2] if key[0] == "allreduce" else key[1]
                self.pricer.links_slower(key[0], len(ranks), self._nodes_of(ranks), price)
        return alone

    def _replay(self, alone: tuple, duration_s: float):
        """Wait ``duration_s``, then add what a run measured alone moved to the counters."""
        usage = alone[5]
        if self.network.usage is not None and usage is not None:
            self.network.usage.add_profile(usage, self.env.now)
        if duration_s > 0:
            token = object()
            self._replaying[id(token)] = (self.env.now, alone)
            yield self.env.timeout(duration_s)
            del self._replaying[id(token)]
        self._add_counters(alone)

    def _add_counters(self, alone: tuple, times: int = 1) -> None:
        """Add what a run measured alone moved, ``times`` over, to the network's counters."""
        _alone_s, link_bytes, link_busy_s, sent, received, _usage = alone
        net = self.network
        for i, nbytes in link_bytes:
            net.link_bytes[i] += nbytes * times
        for i, busy_s in link_busy_s:
            net.link_busy_s[i] += busy_s * times
        for pair, nbytes in sent:
            net.sent_bytes[pair] += nbytes * times
        for pair, nbytes in received:
            net.received_bytes[pair] += nbytes * times

    def _measure_alone(self, run, until_s: float | None = None):
        """(duration, link bytes, link busy time, bytes sent, bytes received, link usage over time
        or None) of ``run(env, network)`` on a scratch copy of the network with nothing else on it
        (``until_s``: only its first seconds, as a run stopped then counts them)."""
        env = simpy.Environment()
        network = type(self.network)(env, self.platform.links)
        if self.network.usage is not None:
            network.usage = UsageLog(len(self.platform.links))
        # until the run ends, not until the queue is empty: a lone flow that joined the shared
        # ones leaves its (then inert) timer queued, and SimPy cannot cancel a timeout
        process = env.process(run(env, network))
        env.run(until=process if until_s is None else env.any_of([process, env.timeout(until_s)]))
        network.finalize(env.now)
        return (env.now, _nonzero(network.link_bytes), _nonzero(network.link_busy_s),
                list(network.sent_bytes.items()), list(network.received_bytes.items()),
                None if network.usage is None else network.usage.profile())

    # -- many collectives at once (lockstep lanes) --------------------------------------------

    def alone_pieces(self, key: Any, plan) -> list[tuple[float, tuple]]:
        """The collective ``key`` alone on its links as the replays it takes, one after another:
        (seconds, outcome) of each (its table price, or each phase)."""
        pieces = self._pieces.get(key)
        if pieces is None:
            price = self._table_price(key, plan)
            if price is not None:
                alone = self._priced_alone(key, plan, price)
                pieces = [(max(price.seconds, alone[0]), alone)]
            else:
                pieces = [(alone[0], alone) for alone in
                          (self._phase_alone(key, index, phase) for index, phase in enumerate(plan))]
            self._pieces[key] = pieces
        return pieces

    def translated_pieces(self, measured: tuple[Any, Any], other: tuple[Any, Any],
                          rank_map: dict[int, int]) -> list[tuple[float, tuple]] | None:
        """The pieces of collective ``other`` (key, schedule) from those of ``measured``, where
        ``other`` is ``measured`` moved to other ranks (``rank_map``) on links of the same kind,
        capacity and latency, in the same pattern, between devices of the same kind and with
        the same per-byte costs (another node's copy of the same collective): its outcome
        alone is the same, link for link. None where anything differs (then measure it)."""
        links = self._link_map(measured, rank_map)
        if links is None:
            return None
        key, plan = other
        priced = self._table_price(key, plan) is not None
        pieces = []
        for index, (seconds, outcome) in enumerate(self.alone_pieces(*measured)):
            moved = _moved(outcome, links, rank_map)
            self._runs[id(moved)] = self._priced_run(key, plan) if priced else _phase_run(self, key, index, plan[index])
            pieces.append((seconds, moved))
        return pieces

    def _table_price(self, key: Any, plan) -> Any:
        """The measured table's price of the collective ``key`` (None: priced from its phases)."""
        return self._price(key) if self.pricer and plan else None

    def _priced_run(self, key: Any, plan):
        """How to run a priced collective's flows (one per rank pair) on a network."""
        pair_bytes = self._pair_bytes(key, plan)
        return lambda env, network: self._aggregate_flows(env, network, pair_bytes)

    def _link_map(self, measured: tuple[Any, Any], rank_map: dict[int, int]) -> dict[int, int] | None:
        """Link index -> link index, taking every route of ``measured`` to its image under
        ``rank_map``; None where a route, a link or a device does not match."""
        platform = self.platform
        devices, copies, rates = platform.devices, platform.copies, self.step_costs.reduce_rates_Bps
        links: dict[int, int] = {}
        images: set[int] = set()
        for src, dst in self._pair_bytes(*measured):
            a, b = rank_map[src], rank_map[dst]
            for rank, image in ((src, a), (dst, b)):
                d, e = devices[rank], devices[image]
                if (d.kind, d.speed, d.cpus, d.peak_flops, rates[rank]) != (e.kind, e.speed, e.cpus, e.peak_flops,
                                                                             rates[image]):
                    return None
            if copies.per_byte_s(src, dst) != copies.per_byte_s(a, b):
                return None
            stripes, moved = platform.stripes(src, dst), platform.stripes(a, b)
            if len(stripes) != len(moved) or any(len(x) != len(y) for x, y in zip(stripes, moved)):
                return None
            for route, image_route in zip(stripes, moved):
                for link, image in zip(route, image_route):
                    if (link.kind, link.latency_s, link.bandwidth_Bps, link.counts_bytes) != (
                            image.kind, image.latency_s, image.bandwidth_Bps, image.counts_bytes):
                        return None
                    known = links.setdefault(link.index, image.index)
                    if known != image.index:
                        return None
                    images.add(image.index)
        return links if len(images) == len(links) else None

    def run_alone(self, pieces: Sequence[list[tuple[float, tuple]]], starts: np.ndarray) -> np.ndarray:
        """Collectives alone on their links, collective ``i`` from ``starts[i]`` as ``pieces[i]``:
        when each ends. Each piece's link usage counts from its start; its bytes and busy time
        when it ends (:meth:`settle_alone`), as a replay's would. ``pieces`` is kept by the
        caller and passed again: what its pieces add up to is worked out once."""
        usage = self.network.usage
        batches = self._batches.get(id(pieces))
        if batches is None or batches[0] is not pieces:
            batches = self._batches[id(pieces)] = (pieces, _PieceBatch.of_all(pieces))
        ends = np.asarray(starts, dtype=float).copy()
        for batch in batches[1]:
            if usage is not None and len(batch.usage_link):
                offsets = np.repeat(ends, batch.usage_counts)
                usage.add_many(batch.usage_link, offsets + batch.span_start, offsets + batch.span_end,
                               batch.usage_bytes, batch.usage_flow_s)
            piece_starts, ends = ends, ends + batch.durations  # as each replay's timer adds its duration to its start
            self._owed.append((piece_starts, ends, batch))
        self.settle_alone(self.env.now)
        return ends

    def settle_alone(self, now_s: float) -> None:
        """Count the pieces priced at once that have all ended by ``now_s``."""
        owed = self._owed
        while owed and float(owed[0][1].max()) <= now_s:
            batch = owed.popleft()[2]
            self._settled[id(batch)] = (batch, self._settled.get(id(batch), (batch, 0))[1] + 1)

    def settle_alone_at_stop(self, now_s: float) -> None:
        """At the run's end: pieces that ended by then count whole; a piece under way counts what
        its flows had moved by then (it is run again alone to that moment), as running its flows
        on the links would have; pieces not started count nothing."""
        for batch, times in self._settled.values():
            batch.add_to(self, times)
        self._settled.clear()
        under_way = list(self._replaying.values())
        for starts, ends, batch in self._owed:
            for start, end, outcome in zip(starts, ends, batch.outcomes):
                if outcome is None or start >= now_s:
                    continue
                if end <= now_s:
                    self._add_counters(outcome)
                else:
                    under_way.append((float(start), outcome))
        for start, outcome in under_way:
            if now_s > start:
                self._add_counters(self._measure_alone(self._runs[id(outcome)], until_s=now_s - start))
        self._owed.clear()
        self._replaying.clear()


class _PieceBatch:
    """Piece ``j`` of many collectives priced at once (:meth:`AloneReplay.run_alone`): each one's
    duration, and their link usage and counters gathered into arrays."""

    def __init__(self, outcomes: list[tuple | None], durations: np.ndarray):
        self.outcomes, self.durations = outcomes, durations
        profiles = [None if o is None else o[5] for o in outcomes]
        self.usage_counts = np.array([0 if u is None else len(u.link) for u in profiles], dtype=np.int64)
        used = [u for u in profiles if u is not None and len(u.link)]
        join = (lambda parts, dtype: np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype))
        self.usage_link = join([u.link for u in used], np.int64)
        self.usage_bytes = join([u.nbytes for u in used], float)
        self.usage_flow_s = join([u.flow_s for u in used], float)
        self.span_start = join([np.full(len(u.link), u.span_s[0]) for u in used], float)
        self.span_end = join([np.full(len(u.link), u.span_s[1]) for u in used], float)

    @classmethod
    def of_all(cls, pieces: Sequence[list[tuple[float, tuple]]]) -> list["_PieceBatch"]:
        return [cls([p[j][1] if j < len(p) else None for p in pieces],
                    np.array([p[j][0] if j < len(p) else 0.0 for p in pieces]))
                for j in range(max((len(p) for p in pieces), default=0))]

    def add_to(self, world: AloneReplay, times: int) -> None:
        """Add the counters of ``times`` whole runs of every collective of the batch."""
        for outcome in self.outcomes:
            if outcome is not None:
                world._add_counters(outcome, times)


def _moved(outcome: tuple, links: dict[int, int], ranks: dict[int, int]) -> tuple:
    """An outcome alone moved to other links and ranks (:meth:`AloneReplay.translated_pieces`)."""
    seconds, link_bytes, link_busy_s, sent, received, usage = outcome
    if usage is not None:
        usage = type(usage)(np.array([links[int(i)] for i in usage.link], dtype=np.int64), usage.nbytes,
                            usage.flow_s, usage.span_s)
    return (seconds, [(links[i], v) for i, v in link_bytes], [(links[i], v) for i, v in link_busy_s],
            [((ranks[a], ranks[b]), v) for (a, b), v in sent], [((ranks[a], ranks[b]), v) for (a, b), v in received],
            usage)


def _phase_run(world: Any, key: Any, index: int, phase):
    return lambda env, network: world._run_phase(env, network, (key, index), phase)


def _nonzero(values: list[float]) -> list[tuple[int, float]]:
    """(index, value) of the positive entries: the links a phase used."""
    array = np.asarray(values, dtype=float)
    used = np.flatnonzero(array > 0)
    return list(zip(used.tolist(), array[used].tolist()))
