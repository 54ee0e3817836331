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
        # counters of pieces priced at once, by end: (starts, ends, outcomes)
        self._owed: deque[tuple[np.ndarray, np.ndarray, list[tuple]]] = deque()
        self._replaying: dict[int, tuple[float, tuple]] = {}  # replays under way: token -> (start, outcome)

    def _replay_alone(self, key: Any, index: int, phase):
        """A phase on a network nobody else uses: its outcome was fixed the first time it ran."""
        alone = self._phase_alone(key, index, phase)
        yield from self._replay(alone, alone[0])

    def _phase_alone(self, key: Any, index: int, phase) -> tuple:
        alone = self._alone.get((key, index))
        if alone is None:
            alone = self._alone[(key, index)] = self._measured(
                lambda env, network: self._run_phase(env, network, (key, index), phase))
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
            pair_bytes = self._pair_bytes(key, plan)
            alone = self._alone[(key, "priced")] = self._measured(
                lambda env, network: self._aggregate_flows(env, network, pair_bytes))
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

    def _add_counters(self, alone: tuple) -> None:
        _alone_s, link_bytes, link_busy_s, sent, received, _usage = alone
        net = self.network
        for i, nbytes in link_bytes:
            net.link_bytes[i] += nbytes
        for i, busy_s in link_busy_s:
            net.link_busy_s[i] += busy_s
        for pair, nbytes in sent:
            net.sent_bytes[pair] += nbytes
        for pair, nbytes in received:
            net.received_bytes[pair] += nbytes

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
            price = self._price(key) if self.pricer and plan else None
            if price is not None:
                alone = self._priced_alone(key, plan, price)
                pieces = [(max(price.seconds, alone[0]), alone)]
            else:
                pieces = [(alone[0], alone) for alone in
                          (self._phase_alone(key, index, phase) for index, phase in enumerate(plan))]
            self._pieces[key] = pieces
        return pieces

    def run_alone(self, pieces: Sequence[list[tuple[float, tuple]]], starts: np.ndarray) -> np.ndarray:
        """Collectives alone on their links, collective ``i`` from ``starts[i]`` as ``pieces[i]``:
        when each ends. Each piece's link usage counts from its start; its bytes and busy time
        when it ends (:meth:`settle_alone`), as a replay's would."""
        usage = self.network.usage
        ends = np.asarray(starts, dtype=float).copy()
        for j in range(max((len(p) for p in pieces), default=0)):
            outcomes = [p[j][1] if j < len(p) else None for p in pieces]
            durations = np.array([p[j][0] if j < len(p) else 0.0 for p in pieces])
            if usage is not None:
                for outcome, start in zip(outcomes, ends):
                    if outcome is not None and outcome[5] is not None:
                        usage.add_profile(outcome[5], float(start))
            piece_starts, ends = ends, ends + durations  # as each replay's timer adds its duration to its start
            self._owed.append((piece_starts, ends, outcomes))
        self.settle_alone(self.env.now)
        return ends

    def settle_alone(self, now_s: float) -> None:
        """Add the counters of collectives priced at once that have ended by ``now_s``."""
        owed = self._owed
        while owed and float(owed[0][1].max()) <= now_s:
            _starts, _ends, outcomes = owed.popleft()
            for outcome in outcomes:
                if outcome is not None:
                    self._add_counters(outcome)

    def settle_alone_at_stop(self, now_s: float) -> None:
        """At the run's end: pieces that ended by then count whole; a piece under way counts what
        its flows had moved by then (it is run again alone to that moment), as running its flows
        on the links would have; pieces not started count nothing."""
        under_way = list(self._replaying.values())
        for starts, ends, outcomes in self._owed:
            for start, end, outcome in zip(starts, ends, outcomes):
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


def _nonzero(values: list[float]) -> list[tuple[int, float]]:
    """(index, value) of the positive entries: the links a phase used."""
    return [(i, v) for i, v in enumerate(values) if v > 0]
