"""Ranks that outnumber their cores take turns in the scheduler's time slices.

Processor sharing runs every rank of an oversubscribed core pool at once, each at a fraction
of a core, so ranks that start the same work together end it together. Linux does not: a
core runs one task at a time and switches at its scheduler tick. On this project's 2-core
host, two processes spinning on one core alternate in runs of 3.97 ms (the 250 Hz tick). Two
ranks that start a forward/backward together on one core therefore end it up to a slice
apart, and the first waits for the second at the next collective: in real 4-rank sync runs on
2 cores the ranks' forward/backwards of one step spread over a median 5 ms and a rank waited a
median 0.8 ms per step, where processor sharing gives 0.

:class:`TimeSlices` runs that rule on the shared core pools of a simulation whose
``node.co_run.slice_s`` is set (``simdist calibrate cpu-share`` measures it):

* a pool runs at most as many ranks at a time as it has cores (a part of one counts as one);
  the others wait in a queue with their CPU-share cap at 0;
* at every tick (instants ``k * slice_s``) the ranks that have run longest hand their cores to
  the head of the queue and join its back;
* a rank that starts work while every core is taken preempts the one that has run longest
  (the scheduler favours a task waking from sleep), which goes to the head of the queue; the
  woken rank keeps its core through the ticks of its first ``wake_run_s``, as it ran alone that
  long in the measurement (:mod:`simdist.calibrate.wake_run`);
* a rank that ends its work gives its core to the head of the queue once the instant is over,
  unless it starts more work in that instant (work that follows work, with no wait between,
  runs on in its slice: a process that does not sleep is not switched out).

The rate of each running rank is still the flow network's (its cap, the pool's cores and the
co-run factor), so a pool with no more ranks than cores behaves exactly as before.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Sequence

from .wake_runs import PoolPauses

__all__ = ["TimeSlices"]

_TICK_LATE_S = 1e-9  # ticks fire this much after k * slice_s (the clocks' rounding is far below it)


class TimeSlices(PoolPauses):
    """Turn-taking on shared core pools with ``slice_s`` (see the module doc)."""

    def __init__(self, env: Any, network: Any, routes: Sequence[tuple[Any, ...]], pools: Sequence[Any],
                 co_run: dict[int, Any]):
        super().__init__(env, network, routes, pools)
        self._slice_s = {index: float(spec.slice_s) for index, spec in co_run.items()
                         if float(getattr(spec, "slice_s", 0.0) or 0.0) > 0}
        self._wake_s = {index: float(getattr(co_run[index], "wake_run_s", 0.0) or 0.0) for index in self._slice_s}
        self._running: dict[int, dict[int, float]] = {}  # pool -> running rank -> when it took its core
        self._queue: dict[int, deque[int]] = {}  # pool -> ranks with work waiting for a core, head first
        self._kept_until: dict[int, float] = {}  # woken rank -> until when ticks leave it its core
        self._ticking: set[int] = set()  # pools with a tick scheduled
        self._idle: set[int] = set()  # ranks that ended their work this instant and still hold their core
        self._due: set[int] = set()  # pools whose tick is this instant
        self._instant_hook = False  # whether the end of this instant is watched for (releases, ticks)

    def applies_to(self, rank: int) -> bool:
        """Whether ``rank``'s cores take turns (a shared pool with ``slice_s``)."""
        pool = self._pools[rank]
        return pool is not None and pool.index in self._slice_s

    def enter(self, rank: int) -> None:
        """``rank`` starts work on its cores now (it had none): it runs, preempts, or queues."""
        pool = self._pools[rank]
        p, now = pool.index, self._env.now
        running = self._running.setdefault(p, {})
        queue = self._queue.setdefault(p, deque())
        if rank in self._idle:  # more work in the instant its last ended: it runs on in its slice
            self._idle.discard(rank)
            return
        if len(running) < _cores(pool):
            running[rank] = now
            return
        victim = self._longest_running(p, now)
        if victim is None:  # every core was taken at this instant or is kept by a woken run: it waits its turn
            self._pause([rank])
            queue.append(rank)
        else:
            del running[victim]
            self._pause([victim])
            queue.appendleft(victim)
            running[rank] = now
            self._kept_until[rank] = now + self._wake_s[p]
        self._arm_tick(p)

    def leave(self, rank: int) -> None:
        """``rank``'s work on its cores ended now (it has none left): its core goes to the head of
        the queue when the instant is over, unless the rank has more work by then."""
        p = self._pools[rank].index
        running, queue = self._running.get(p, {}), self._queue.get(p, deque())
        if rank in running:
            self._idle.add(rank)
            self._watch_instant_end()
        elif rank in queue:  # its work was cut short while it waited (not done by the runtime today)
            queue.remove(rank)
            self._resume_paused([rank])

    def _watch_instant_end(self) -> None:
        if not self._instant_hook:
            self._instant_hook = True
            self._env.timeout(0).callbacks.append(self._instant_end)

    def _instant_end(self, _event: Any) -> None:
        """Once no other event is left at this instant, the ranks still idle give up their cores,
        then the pools whose tick it is switch (work that ends at a tick ends before it)."""
        env = self._env
        if env.peek() <= env.now:  # more of this instant is to come: look again after it
            env.timeout(0).callbacks.append(self._instant_end)
            return
        self._instant_hook = False
        for rank in sorted(self._idle):
            p = self._pools[rank].index
            del self._running[p][rank]
            self._kept_until.pop(rank, None)
            if self._queue[p]:
                self._resume(p, self._queue[p].popleft())
        self._idle.clear()
        due, self._due = sorted(self._due), set()
        for p in due:
            self._switch(p)

    def _longest_running(self, p: int, now: float) -> int | None:
        """The pool's running rank that took its core first, among those that have run (took it
        before ``now``), have work, and that a woken run does not keep."""
        candidates = [(since, rank) for rank, since in self._running[p].items()
                      if since < now and rank not in self._idle and self._kept_until.get(rank, -math.inf) <= now]
        return min(candidates)[1] if candidates else None

    def _arm_tick(self, p: int) -> None:
        if p in self._ticking or not self._queue[p]:
            return
        period, now = self._slice_s[p], self._env.now
        at = (math.floor(now / period + 1e-9) + 1) * period
        self._ticking.add(p)  # a nanosecond late: work that ends at the tick, give or take rounding, ends first
        self._env.timeout(at - now + _TICK_LATE_S).callbacks.append(lambda _event: self._tick(p))

    def _tick(self, p: int) -> None:
        """The pool's tick: it switches once everything else of this instant has happened."""
        self._due.add(p)
        self._watch_instant_end()

    def _switch(self, p: int) -> None:
        """At a tick, the ranks that have run longest give their cores to the queue's head."""
        self._ticking.discard(p)
        now, queue = self._env.now, self._queue[p]
        for _ in range(len(queue)):  # each rank queued at the tick gets a core, if one may switch
            victim = self._longest_running(p, now)
            if victim is None:
                break  # every core left to switch was taken at this instant or is kept by a woken run
            del self._running[p][victim]
            self._pause([victim])
            queue.append(victim)
            self._resume(p, queue.popleft())
        self._arm_tick(p)

    def _resume(self, p: int, rank: int) -> None:
        self._running[p][rank] = self._env.now
        self._resume_paused([rank])
        self._arm_tick(p)


def _cores(pool: Any) -> int:
    """How many ranks a pool runs at once: its cores, a part of one counting as one (1.5 cores run
    two ranks, sharing the pool's capacity, so that no part of a core idles while ranks queue)."""
    return max(1, math.ceil(pool.bandwidth_Bps - 1e-9))
