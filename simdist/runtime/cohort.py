"""Lockstep cohorts: many ranks that run the same program, simulated as one process.

In synchronous data-parallel training every worker computes, then every worker joins the
same allreduce, then every worker applies the same update: between two collectives the
ranks differ only in how long their compute takes. Driving a thousand such ranks as a
thousand SimPy processes costs a thousand generator resumes, events and recorder rows per
step, although the outcome of the step is fixed by two vectors: when each rank started and
how long it computed.

A :class:`CohortRuntime` is the view an algorithm's *cohort process* gets of a
:class:`~simdist.runtime.sim.SimWorld`: requests for all its ranks at once, with per-rank
quantities as NumPy arrays in rank order. What it produces is exactly what the per-rank
processes would have produced — the same durations from the same noise streams, the same
collective on the same links, the same spans and update rows (recorded as blocks) — and
``tests/test_cohort.py`` checks that equality on every result table. The simulator uses a
cohort only where that equality holds (:attr:`SimWorld.cohort_supported`); elsewhere it runs one
process per rank.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Generator, Sequence

import numpy as np
import simpy

from ..errors import SimulationError
from ..ledger import work_span_name
from ..recorder import SpanBlock, UpdateBlock
from .base import Group
from .payloads import payload_nbytes

__all__ = ["CohortRuntime", "CohortCompute", "CohortProcess"]

CohortProcess = Callable[["CohortRuntime"], Generator]


class CohortCompute:
    """Forward/backward of every rank of a cohort; ``event`` fires when the slowest is done.

    ``start_s``: when the forward/backwards started, one float for all or per rank (after
    loading their batches took different times).
    """

    def __init__(self, event: simpy.Event, start_s: float, durations_s: np.ndarray,
                 results: Callable[[], tuple[list[Any], list[float | None]]], uniform: bool,
                 free_s: np.ndarray | None = None):
        self.event = event
        self.start_s = start_s
        self.durations_s = durations_s
        # when each rank's own compute request would fire (its process resumes): the compute's end, up to
        # rounding where loading its batch came first
        self.free_s = start_s + durations_s if free_s is None else free_s
        self.uniform = uniform  # one gradient object stands for every rank's (timing-only)
        self._results = results

    def results(self) -> tuple[list[Any], list[float | None]]:
        """Every rank's gradient and batch loss, in rank order (evaluated together on first use)."""
        return self._results()


class CohortRuntime:
    """Requests on behalf of all ``ranks`` at once (the cohort's view of a SimWorld)."""

    def __init__(self, world: Any, ranks: Sequence[int]):
        self.world = world
        self.ranks = np.asarray(ranks, dtype=np.int64)
        self._rank_list = [int(r) for r in self.ranks]
        self._busy_until = np.zeros(len(self.ranks))  # end of each rank's latest compute

    def now(self) -> float:
        return self.world.env.now

    def compute(self, replicas: Sequence[Any], batches: Sequence[Any]) -> CohortCompute:
        """Every rank gets its batch (all of one size; ``data``, see :mod:`simdist.training.data_loading`),
        then computes it on its replica.

        Durations come from :meth:`ComputeModel.durations_s` — the same draws, from the same
        per-rank streams, as one ``compute`` per rank. Gradients are evaluated together the
        first time :meth:`CohortCompute.results` is read.
        """
        world, env = self.world, self.world.env
        start, batch_size = env.now, int(batches[0].size)
        ahead = self._epoch_end(start, self._owed_epoch_end(batches))  # the last epoch's validation, checkpoint
        waits = self._get_batches(start + ahead, batch_size, getattr(batches[0], "epoch", 0))
        waits = ahead + waits  # before each rank's forward/backward (0.0 + x is x: no epoch end changes nothing)
        start = start + waits  # when each rank's forward/backward starts
        if np.ndim(start) == 0:
            durations = world.compute_model.durations_s(self._rank_list, batch_size, start)
        else:  # the ranks start at different times: each rank's duration, as each would draw it
            durations = np.array([world.compute_model.duration_s(rank, batch_size, float(at))
                                  for rank, at in zip(self._rank_list, start)])
        ends = start + durations
        # each rank is free when its own compute request would fire (now + its whole time), as a rank's
        # own process sees it; that differs from ``ends`` by rounding when loading came first
        free = ends if np.ndim(waits) == 0 and waits == 0.0 else np.maximum(env.now + (waits + durations), ends)
        self._busy_until = free
        world.recorder.span_block(SpanBlock(self.ranks, "compute", "forward/backward",
                                            np.broadcast_to(start, ends.shape).astype(float), ends))
        source = world._gradient_source
        if getattr(source, "uniform", False):  # timing-only: one phantom gradient stands for every rank
            sources = [source(self._rank_list[0], replicas[0], batches[0])]
        elif hasattr(source, "many"):  # one gather of every rank's batch
            sources = source.many(self._rank_list, replicas, batches)
        else:
            sources = [source(rank, replica, batch) for rank, replica, batch in zip(self._rank_list, replicas, batches)]
        n = len(ends)
        cache: list[tuple[list[Any], list[float | None]]] = []

        def results() -> tuple[list[Any], list[float | None]]:
            if not cache:
                values = [resolve() for resolve in sources]
                grads, losses = [v[0] for v in values], [v[1] for v in values]
                cache.append((grads * n, losses * n) if len(values) == 1 else (grads, losses))
            return cache[0]

        event = env.event()
        env.timeout(float((waits + durations).max())).callbacks.append(lambda _event: event.succeed())
        return CohortCompute(event, start, durations, results, uniform=len(sources) == 1 and n > 1, free_s=free)

    def _get_batches(self, now_s: float, batch_size: int, epoch: Any) -> Any:
        """Every rank gets its batch (``data`` spans, as each rank's ``compute`` records them);
        the seconds each takes: 0.0, one float for all, or an array where they differ."""
        loading = self.world.data_loading
        if loading is None:
            return 0.0
        waits = loading.waits_s(self._rank_list, now_s, batch_size, epoch)
        if not np.any(waits > 0):
            return 0.0
        self.world.recorder.span_block(SpanBlock(self.ranks, "compute" if loading.serial else "wait", "data",
                                                 np.broadcast_to(now_s, waits.shape).astype(float), now_s + waits))
        return float(waits[0]) if np.all(waits == waits[0]) else waits

    def _owed_epoch_end(self, batches: Sequence[Any]) -> list[list[Any]] | None:
        """Per rank, the epoch-end work it owes before ``batches`` (None: none owed by anyone)."""
        epoch_end = self.world.epoch_end
        if epoch_end is None:
            return None
        schedule = epoch_end.schedule
        if schedule.owes_nothing_before(batches[0]):  # every step but an epoch's last: nothing to ask
            return None
        owed = [schedule.before_batch(rank, batch) for rank, batch in zip(self._rank_list, batches)]
        return owed if any(owed) else None

    def _epoch_end(self, now_s: float, owed: list[list[Any]] | None) -> Any:
        """Record the owed epoch-end work from ``now_s`` (validation, then checkpoint); its seconds
        per rank: 0.0, one float for all, or an array where ranks differ (the checkpoint's writer)."""
        if owed is None:
            return 0.0
        epoch_end = self.world.epoch_end
        at = np.full(len(self._rank_list), float(now_s))
        for kind in ("validation", "checkpoint"):
            seconds = np.array([sum(epoch_end.seconds(rank, task) for task in tasks if task.kind == kind)
                                for rank, tasks in zip(self._rank_list, owed)])
            doing = seconds > 0
            if doing.any():
                name = epoch_end.span_name(next(t for tasks in owed for t in tasks if t.kind == kind))
                self.world.recorder.span_block(SpanBlock(self.ranks[doing], "compute", name, at[doing],
                                                         at[doing] + seconds[doing]))
                at = at + seconds
        ahead = at - now_s
        return float(ahead[0]) if np.all(ahead == ahead[0]) else ahead

    def finish_epoch(self):
        """The epoch-end work every rank owes after the last epoch (a generator of SimPy events)."""
        epoch_end = self.world.epoch_end
        if epoch_end is None:
            return
        owed = [epoch_end.schedule.at_finish(rank) for rank in self._rank_list]
        ahead = self._epoch_end(self.world.env.now, owed if any(owed) else None)
        if np.any(np.asarray(ahead) > 0):
            yield self.world.env.timeout(float(np.max(ahead)))

    def busy(self, durations_s: Any, name: str, *, part: str | None = None,
             run: Callable[[], Any] | None = None) -> simpy.Event:
        """Every rank does its own work (``rt.busy``) for its entry of ``durations_s``, from when
        it became free (the end of its compute, or of the last collective); the event's value is
        ``run()`` and it fires when the last rank is done.

        Equal to each rank's ``busy`` when what follows is a collective (ranks still wait for the
        last one) or when the ranks started together with equal durations; an algorithm whose
        work differs by rank outside those cases does not run as a cohort.
        """
        name = work_span_name(name, part)
        value = run() if run is not None else None
        env = self.world.env
        starts = np.minimum(self._busy_until, env.now)
        ends = starts + np.broadcast_to(np.asarray(durations_s, dtype=float), starts.shape)
        self._busy_until = ends
        self.world.recorder.span_block(SpanBlock(self.ranks, "compute", name, starts, ends))
        return env.timeout(max(float(ends.max()) - env.now, 0.0), value)

    def allreduce(self, group: Group, tensors: Sequence[Any], *, algorithm: str | None = None) -> simpy.Event:
        """The blocking allreduce of every rank's tensor, started once the last rank has arrived.

        The event's value is the sum (one copy: every rank would get an equal one). Ranks that
        finished computing early wait, as their per-rank processes would.
        """
        self._check_group(group)
        world = self.world
        total = world.reduce_sum(list(tensors))
        nbytes = _largest_payload(tensors)
        done = world.env.event()
        world.env.process(self._collective(group, algorithm or world.default_collective, nbytes, total, done))
        return done

    def _collective(self, group: Group, algorithm: str, nbytes: int, total: Any, done: simpy.Event):
        world = self.world
        start = world.env.now
        yield from world.run_allreduce(algorithm, group.ranks, nbytes)
        end = world.env.now
        n = len(self.ranks)
        waited_from = np.minimum(self._busy_until, start)  # each rank waits from the end of its compute
        world.recorder.span_block(SpanBlock(self.ranks, "wait", "allreduce", waited_from, np.full(n, start)))
        world.recorder.span_block(SpanBlock(self.ranks, "comm", "allreduce", np.full(n, start), np.full(n, end),
                                            args={"bytes": int(nbytes), "group_size": group.size}))
        self._busy_until = np.full(n, end)
        done.succeed(total)

    def overlapped_allreduce(self, group: Group, computing: CohortCompute, ready_fractions: Sequence[float],
                             bucket_tensors: Callable[[int], Sequence[Any]], *,
                             algorithm: str | None = None) -> simpy.Event:
        """Bucket allreduces overlapped with ``computing``, on one communication stream.

        Reproduces, for every rank at once, the per-rank pattern: for each bucket ``k``, wait
        until ``ready_fractions[k]`` of the rank's compute has passed, wait for bucket k−1's
        allreduce, then start bucket k's (``iallreduce``); once compute is done, wait for every
        bucket in order. Bucket k's allreduce starts when the last rank has started it.
        ``bucket_tensors(k)`` gives every rank's tensor of bucket k. The event's value is the
        list of bucket sums; it fires when the last bucket is reduced.

        Under ``platform.progress: on_call`` a bucket's allreduce also waits until every rank
        is inside a runtime call (:mod:`.progress`): a rank is not before its compute has
        ended, so no bucket starts before the slowest rank's compute is done, and the buckets
        then run back to back — as the per-rank processes give.
        """
        self._check_group(group)
        done = self.world.env.event()
        self.world.env.process(self._overlapped(group, computing, list(ready_fractions), bucket_tensors,
                                                algorithm or self.world.default_collective, done))
        return done

    def _overlapped(self, group: Group, computing: CohortCompute, fractions: list[float],
                    bucket_tensors: Callable[[int], Sequence[Any]], algorithm: str, done: simpy.Event):
        world, env = self.world, self.world.env
        compute_end = computing.start_s + computing.durations_s
        # on_call: nothing moves before every rank has finished computing and waits
        earliest_s = float(computing.free_s.max()) if world.on_call is not None else -math.inf
        ops: list[tuple[float, float, dict[str, Any]]] = []
        sums = []
        joined = np.full(len(self.ranks), computing.start_s)  # each rank's own clock
        for k, fraction in enumerate(fractions):
            joined = np.maximum(joined, computing.start_s + fraction * computing.durations_s)  # bucket k is ready
            if ops:  # ... and bucket k-1 has been reduced
                start, end, args = ops[-1]
                joined = self._blocked(joined, np.maximum(joined, end), start, compute_end, args)
            start = max(float(joined.max()), earliest_s)
            if start > env.now:
                yield env.timeout(start - env.now)
            tensors = list(bucket_tensors(k))
            sums.append(world.reduce_sum(tensors))
            nbytes = _largest_payload(tensors)
            yield from world.run_allreduce(algorithm, group.ranks, nbytes)
            args = {"bytes": int(nbytes), "group_size": group.size, "nonblocking": True}  # as an iallreduce's
            ops.append((start, env.now, args))
            n = len(self.ranks)
            world.recorder.span_block(SpanBlock(self.ranks, "comm", "allreduce", np.full(n, start),
                                                np.full(n, env.now), blocking=False, args=args))
        waiting = np.maximum(joined, computing.free_s)  # compute done: wait for each bucket in turn
        for start, end, args in ops:
            waiting = self._blocked(waiting, np.maximum(waiting, end), start, compute_end, args)
        self._busy_until = waiting
        done.succeed(sums)

    def _blocked(self, since: np.ndarray, until: np.ndarray, started_s: float, compute_end: np.ndarray,
                 args: dict[str, Any]) -> np.ndarray:
        """Record each rank's time blocked on a collective from ``since`` to ``until``: time
        still computing is not waiting; ``wait`` until the collective started, ``comm`` (with the
        collective's span ``args``) after."""
        waited_from = np.minimum(np.maximum(since, compute_end), until)
        moving_from = np.minimum(np.maximum(waited_from, started_s), until)
        recorder = self.world.recorder
        recorder.span_block(SpanBlock(self.ranks, "wait", "allreduce", waited_from, moving_from))
        recorder.span_block(SpanBlock(self.ranks, "comm", "allreduce", moving_from, until, args=args))
        return until

    def _check_group(self, group: Group) -> None:
        if group.ranks != tuple(self._rank_list):
            raise SimulationError(f"a cohort of ranks {self._rank_list} can only reduce over all of them, "
                                  f"not over group {group.ranks}")

    def record_updates(self, *, step: int, version: int, staleness: int, batch_size: int,
                       losses: Sequence[float | None]) -> None:
        """One update row per rank, applied now (as each rank's ``record("update", ...)``)."""
        n = len(self.ranks)
        loss = None if all(v is None for v in losses) else np.array([math.nan if v is None else v for v in losses])
        block = UpdateBlock(self.world.env.now, self.ranks, step, version, staleness, np.full(n, batch_size), loss)
        self.world.record_update_block(block)


def _largest_payload(tensors: Sequence[Any]) -> int:
    """The largest payload in bytes (each distinct object sized once: cohorts repeat one phantom)."""
    return max(payload_nbytes(t) for t in {id(t): t for t in tensors}.values())
