"""A rank that starts work after waiting runs ahead of its core-mates for a moment.

Processor sharing splits a core evenly among the ranks with work on it from the first
instant. Linux does not: a task that wakes from sleep is placed ahead of the tasks that have
been running (EEVDF gives it the lag it did not use while asleep; CFS placed it behind by
half a latency period), so its first stretch of work runs on the core alone while the running
ones pause, and only after that do they take turns. On this project's 2-core host a burst
woken after 0.3–20 ms of sleep ran beside a CPU-bound process on the same core at full speed
up to 1 ms, and at about half speed from 2.5 ms on (``simdist calibrate cpu-share`` measures
it as ``node.co_run.wake_run_s``, docs/calibration.md).

For a parameter server that shares a core with a worker this decides who waits: the server's
short apply after a push runs at once and at full speed, the worker's forward/backward pauses
meanwhile, and the pull reply leaves sooner than processor sharing would let it.

:class:`WakeRuns` applies the rule on the shared core pools of a simulation: when a rank
starts work on its pool after a gap (it waited, or never ran), every rank of the pool that is
working and not in a run of its own pauses (its CPU-share cap goes to 0) for ``wake_run_s`` of
wall time or until the woken rank's work ends, whichever is first. Ranks that wake together
share. Nothing changes where ``wake_run_s`` is 0 (the default) or a rank's cpus are its own.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Sequence

__all__ = ["PoolPauses", "WakeRuns"]


class PoolPauses:
    """What a rule over who runs on shared core pools needs: each rank's pool, and pausing a
    rank (its CPU-share cap to 0 on the flow network) and resuming it."""

    def __init__(self, env: Any, network: Any, routes: Sequence[tuple[Any, ...]], pools: Sequence[Any]):
        self._env, self._network = env, network
        self._cap = [route[0].index for route in routes]  # each rank's CPU-share cap link
        self._pools = pools

    def _pause(self, ranks: Sequence[int]) -> None:
        self._network.degrade([self._cap[r] for r in ranks], 0.0, active=True)

    def _resume_paused(self, ranks: Sequence[int]) -> None:
        self._network.degrade([self._cap[r] for r in ranks], 0.0, active=False)


class WakeRuns(PoolPauses):
    """Woken ranks running ahead on shared core pools (see the module doc)."""

    def __init__(self, env: Any, network: Any, routes: Sequence[tuple[Any, ...]], pools: Sequence[Any],
                 co_run: dict[int, Any]):
        super().__init__(env, network, routes, pools)
        self._run_s = {index: float(getattr(spec, "wake_run_s", 0.0) or 0.0) for index, spec in co_run.items()}
        self._working: dict[int, set[int]] = {}  # pool -> ranks with work on its cores now
        self._last_end: dict[int, float] = {}  # rank -> when its latest work on the cores ended
        self._runs: dict[int, tuple[int, list[int]]] = {}  # woken rank -> (its run's token, the ranks it paused)
        self._tokens = itertools.count()

    def enter(self, rank: int) -> None:
        """``rank`` starts work on its cores now."""
        pool = self._pools[rank]
        if pool is None:
            return
        working = self._working.setdefault(pool.index, set())
        run_s = self._run_s.get(pool.index, 0.0)
        now = self._env.now
        if run_s > 0 and self._last_end.get(rank, -math.inf) < now and rank not in self._runs:
            paused = sorted(r for r in working if r not in self._runs)
            token = next(self._tokens)
            self._runs[rank] = (token, paused)
            if paused:
                self._pause(paused)
            self._env.timeout(run_s).callbacks.append(lambda _event: self._end_run(rank, token))
        working.add(rank)

    def leave(self, rank: int) -> None:
        """``rank``'s work on its cores ended now (its run, if any, with it)."""
        pool = self._pools[rank]
        if pool is None:
            return
        self._working.get(pool.index, set()).discard(rank)
        self._last_end[rank] = self._env.now
        if rank in self._runs:
            self._end_run(rank, self._runs[rank][0])

    def _end_run(self, rank: int, token: int) -> None:
        run = self._runs.get(rank)
        if run is None or run[0] != token:  # that run ended already (its work did)
            return
        del self._runs[rank]
        if run[1]:
            self._resume_paused(run[1])
