"""Lockstep groups: many ranks running the same program, simulated by one generator.

Where workers are interchangeable — every one runs the same requests in the same order, on
equal state, and differs from the others only in how long its work takes — a thousand
ranks need not be a thousand SimPy processes. A :class:`GroupRuntime` is a
:class:`~simdist.runtime.base.Runtime` whose one algorithm generator (worker 0's, unchanged)
stands for every member: each request it yields is carried out for all members at once,
with their clocks, durations and waits as NumPy arrays.

* Every member has its own clock (when it is free). A member starts each request at its own
  clock, so members that computed for different times stay apart, as their own processes
  would. The generator itself moves at the earliest member's clock: an update recorded there
  is heard when the first member makes it, as it would be one rank at a time.
* ``compute`` draws each member's duration from its own noise stream at its own start (the
  same draws as one request per rank); ``busy`` charges each member from its clock.
* A collective over the whole group starts when the last member has called it (the largest
  clock; a non-blocking one under ``platform.progress: on_call`` at the first moment after
  that when every member is inside a call, :mod:`.group_progress`) and runs once on the
  links. Each member's wait and communication spans are its own.
* ``rt.rank`` is a :class:`GroupRank`: worker 0's rank, read by a record as every member's own
  rank. ``rt.now()`` and a result's ``start_s`` / ``end_s`` are arrays of the members' times,
  so that what an algorithm records from them is every member's own figure.
* Values: in timing-only runs one phantom stands for every member's tensor. In replay, a
  compute's gradient is a :class:`MemberTensor` (every member's own), which casts and slices
  member by member and which a collective sums; the group keeps one replica, which the
  algorithm's declaration (``lockstep = "always"``) says its workers keep equal.

The simulator forms a group only where this gives the same results as one process per rank
(:meth:`SimWorld.lockstep_obstacle`, the algorithm's ``lockstep`` declaration);
``tests/test_lockstep_group.py`` checks that equality on every result table. A request a
group cannot carry out for all its members (a message, a collective over part of them)
raises :class:`~simdist.errors.SimulationError`: an algorithm declaring itself lockstep must
not make one.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Generator, Iterable, Sequence

import numpy as np

from ..errors import SimulationError
from ..ledger import work_span_name
from ..recorder import SpanBlock, UpdateBlock
from .base import GradResult, Group
from .group_progress import InsideGate, OnCallGates
from .group_requests import (Allreduce, Busy, GroupCompute, GroupRank, GroupRequest, MemberTensor, delay_to,
                             member_values)
from .payloads import payload_nbytes

__all__ = ["GroupRank", "MemberTensor", "GroupRuntime", "drive_group"]


def _refusal(what: str) -> Callable[..., None]:
    """A Runtime call a lockstep group refuses: its members would diverge."""
    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise SimulationError(f"a lockstep group cannot {what}: its members would diverge (an algorithm that "
                              "does this must not declare its workers lockstep)")
    return refuse


class GroupRuntime:
    """A :class:`~simdist.runtime.base.Runtime` for one generator standing for ``ranks``.

    ``apart``: the members' clocks may differ when they start computing (the algorithm
    overlaps a collective with the next compute); each member then asks for its batch and its
    epoch-end work at its own time, rank by rank, instead of all together.
    """

    def __init__(self, world: Any, ranks: Sequence[int], *, apart: bool = False):
        self.world = world
        self.ranks = np.asarray(ranks, dtype=np.int64)
        self._rank_list = [int(r) for r in self.ranks]
        self.rank = GroupRank(self._rank_list[0])
        self.world_size = world.platform.size
        self.apart = apart
        self.clock = np.zeros(len(self.ranks))  # when each member is free
        self._compute_end = np.zeros(len(self.ranks))  # end of each member's latest forward/backward
        self._compute_free = np.zeros(len(self.ranks))  # when its request fired (its end, rounded as a timer's)
        self._gates = OnCallGates(world.env)  # on_call: non-blocking collectives waiting for every member in a call

    # -- time -------------------------------------------------------------------------------

    def now(self) -> np.ndarray:
        """Every member's own time (where it is in its program)."""
        return self.clock.copy()

    def until_earliest(self) -> Generator:
        """Move the generator on to the earliest member's clock."""
        env = self.world.env
        earliest = float(self.clock.min())
        if earliest > env.now:
            yield env.timeout(delay_to(env.now, earliest))

    def blocked(self, until: np.ndarray, started_s: Any, args: dict[str, Any], *, name: str = "allreduce") -> None:
        """Each member blocked on collective ``name`` from its clock to ``until``: time still
        computing is not waiting; ``wait`` until the collective started (one time, or each
        member's), ``comm`` (with its ``args``) after."""
        waited_from = np.minimum(np.maximum(self.clock, self._compute_end), until)
        moving_from = np.minimum(np.maximum(waited_from, started_s), until)
        if self._gates:  # the call each member entered (entering_call) ends: what on_call collectives wait for
            self._gates.ended(until)
        recorder = self.world.recorder
        recorder.span_block(SpanBlock(self.ranks, "wait", name, waited_from, moving_from, recorded_s=until))
        recorder.span_block(SpanBlock(self.ranks, "comm", name, moving_from, until, args=args, recorded_s=until))
        self.clock = until

    # -- compute ----------------------------------------------------------------------------

    def compute(self, replica: Any, batch: Any) -> GroupCompute:
        """Every member gets its batch (``data``) after its owed epoch-end work, then computes it
        on the group's replica; durations as each member's own request would draw them."""
        world = self.world
        batch_size = int(batch.size)
        batches = list(getattr(batch, "members", None) or [batch] * len(self._rank_list))
        if hasattr(batch, "asked_at"):  # each member asked for it now, at its own clock
            batch.asked_at(self.clock.copy(), lambda: world.env.now)
        epoch = getattr(batch, "epoch", 0)
        base, before = (self._apart_start if self.apart else self._together_start)(batches, batch_size, epoch)
        start = base + before  # when each member's forward/backward starts
        durations = world.compute_model.durations_s(self._rank_list, batch_size, start)
        ends = start + durations
        # each member is free when its own request would fire, base + (its time before + duration): that
        # differs from ``ends`` by rounding where epoch-end work or loading came first
        free = ends if np.ndim(before) == 0 and before == 0.0 else np.maximum(base + (before + durations), ends)
        world.recorder.span_block(SpanBlock(self.ranks, "compute", "forward/backward",
                                            np.broadcast_to(start, ends.shape).astype(float), ends))
        self._compute_end, self._compute_free = ends, free
        request = GroupCompute(self, start, durations, free, self._result(replica, batches, batch_size, start, ends))
        return request

    def _together_start(self, batches: list[Any], batch_size: int, epoch: Any) -> tuple[float, Any]:
        """Members that always start together, all asking at one time: that time, and the seconds
        before each member's forward/backward (epoch-end work, then its batch): 0.0, one float for
        all, or an array where they differ."""
        now = float(self.clock.max())
        ahead = self._epoch_end(np.full(len(self._rank_list), now), self._owed_epoch_end(batches))
        return now, ahead + self._get_batches(now + ahead, batch_size, epoch)  # 0.0 + x is x

    def _apart_start(self, batches: list[Any], batch_size: int, epoch: Any) -> tuple[np.ndarray, Any]:
        """Members each asking at its own clock: the clocks, and each member's seconds before its
        forward/backward (epoch-end work, then its batch, asked for rank by rank)."""
        base = self.clock.copy()
        before = self._epoch_end(base, self._owed_epoch_end(batches))
        return base, before + self._get_batches(base + before, batch_size, epoch)

    def _result(self, replica: Any, batches: list[Any], batch_size: int, start: Any, ends: np.ndarray) -> GradResult:
        source = self.world._gradient_source
        n = len(self._rank_list)
        if getattr(source, "uniform", False):  # timing-only: one phantom stands for every member's gradient
            resolve = source(self._rank_list[0], replica, batches[0])
        else:
            if hasattr(source, "many"):  # one gather of every member's batch
                sources = source.many(self._rank_list, [replica] * n, batches)
            else:
                sources = [source(rank, replica, batch) for rank, batch in zip(self._rank_list, batches)]

            def resolve() -> tuple[MemberTensor, np.ndarray]:
                values = [one() for one in sources]
                losses = np.array([math.nan if v[1] is None else v[1] for v in values])
                return MemberTensor([v[0] for v in values]), losses
        start_s = np.broadcast_to(start, ends.shape).astype(float)
        return GradResult(batch_size=batch_size, start_s=start_s, end_s=ends.copy(), resolve=resolve)

    def _get_batches(self, at_s: Any, batch_size: int, epoch: Any) -> Any:
        """Every member gets its batch, asking at ``at_s`` (one time for all, or each member's own);
        the seconds each takes: 0.0, one float for all, or an array where they differ.

        Loading on a rank's own cores takes the same time whenever it asks, so every member asks at
        once. Loader workers keep state: members that always ask together share one pipeline per
        figure (``waits_s``); members apart ask rank by rank, each at its own time."""
        loading = self.world.data_loading
        if loading is None:
            return 0.0
        if self.apart and not loading.serial:
            waits = np.array([loading.wait_s(rank, float(t), batch_size, epoch)
                              for rank, t in zip(self._rank_list, np.broadcast_to(at_s, self.ranks.shape))])
        else:  # together, members ask at one time (lockstep_obstacle: no epoch-end work sets them apart)
            waits = loading.waits_s(self._rank_list, float(np.max(at_s)), batch_size, epoch)
        if not np.any(waits > 0):
            return 0.0
        at = np.broadcast_to(np.asarray(at_s, dtype=float), waits.shape)
        self.world.recorder.span_block(SpanBlock(self.ranks, "compute" if loading.serial else "wait", "data",
                                                 at, at + waits))
        return float(waits[0]) if np.all(waits == waits[0]) else waits

    def _owed_epoch_end(self, batches: Sequence[Any]) -> list[list[Any]] | None:
        """Per member, the epoch-end work it owes before its batch (None: none owed by anyone)."""
        epoch_end = self.world.epoch_end
        if epoch_end is None:
            return None
        schedule = epoch_end.schedule
        if schedule.owes_nothing_before(batches[0]):  # every step but an epoch's last: nothing to ask
            return None
        owed = [schedule.before_batch(rank, batch) for rank, batch in zip(self._rank_list, batches)]
        return owed if any(owed) else None

    def _epoch_end(self, at_s: np.ndarray, owed: list[list[Any]] | None) -> Any:
        """Record the owed epoch-end work from each member's ``at_s`` (validation, then checkpoint);
        its seconds per member: 0.0, one float for all, or an array where members differ."""
        if owed is None:
            return 0.0
        epoch_end = self.world.epoch_end
        at = at_s.astype(float)
        for kind in ("validation", "checkpoint"):
            seconds = np.array([sum(epoch_end.seconds(rank, task) for task in tasks if task.kind == kind)
                                for rank, tasks in zip(self._rank_list, owed)])
            doing = seconds > 0
            if doing.any():
                name = epoch_end.span_name(next(t for tasks in owed for t in tasks if t.kind == kind))
                self.world.recorder.span_block(SpanBlock(self.ranks[doing], "compute", name, at[doing],
                                                         at[doing] + seconds[doing]))
                at = at + seconds
        ahead = at - at_s
        return float(ahead[0]) if np.all(ahead == ahead[0]) else ahead

    def finish_epoch(self) -> Generator:
        """The epoch-end work every member owes after the last epoch; the group's process ends
        when its last member is done, as the last of their own processes would."""
        epoch_end = self.world.epoch_end
        if epoch_end is not None:
            owed = [epoch_end.schedule.at_finish(rank) for rank in self._rank_list]
            self.clock = self.clock + self._epoch_end(self.clock, owed if any(owed) else None)
        if self._gates:  # a member whose process has ended is inside MPI_Finalize, which progresses everything
            self._gates.inside(self.clock, math.inf)
        env = self.world.env
        latest = float(self.clock.max())
        if latest > env.now:
            yield env.timeout(delay_to(env.now, latest))

    # -- a member's own work ----------------------------------------------------------------

    def busy(self, duration_s: float, name: str = "busy", *, part: str | None = None,
             run: Callable[..., Any] | None = None, inputs: Sequence[Any] = (), lazy: bool = False) -> Busy:
        """Every member does its own work for ``duration_s`` from its clock; the value is ``run(*inputs)``."""
        name = work_span_name(name, part)
        value = run(*inputs) if run is not None else None
        starts = self.clock
        self.clock = ends = starts + float(duration_s)
        self.world.recorder.span_block(SpanBlock(self.ranks, "compute", name, starts, ends))
        return Busy(value)

    # -- collectives ------------------------------------------------------------------------

    def group(self, ranks: Iterable[int], name: str = "") -> Group:
        return self.world.group(ranks, name)

    def allreduce(self, group: Group, tensor: Any, *, algorithm: str | None = None) -> Allreduce:
        """The blocking allreduce of every member's tensor."""
        return self._allreduce(group, tensor, algorithm, blocking=True)

    def iallreduce(self, group: Group, tensor: Any, *, algorithm: str | None = None) -> Allreduce:
        """The non-blocking allreduce of every member's tensor: yield it when the sum is needed."""
        return self._allreduce(group, tensor, algorithm, blocking=False)

    def broadcast(self, group: Group, tensor: Any, root: int) -> GroupRequest:
        """A broadcast joining lanes (:mod:`.lanes`): every member gets its root's tensor."""
        if tuple(group.ranks) == tuple(self._rank_list):
            raise SimulationError("a lockstep group cannot broadcast among its own members: they would diverge")
        return self._lanes(group).call(self, "broadcast", group, tensor, root=root)

    def _lanes(self, group: Group) -> Any:
        """The lanes a collective over another group joins; a group that is no lane has none."""
        if self.world.lanes is None:
            raise SimulationError(f"a lockstep group of ranks {self._rank_list[:4]}... can only reduce over all of "
                                  f"its members, not over group {group.name or group.ranks}")
        return self.world.lanes

    def _allreduce(self, group: Group, tensor: Any, algorithm: str | None, blocking: bool) -> GroupRequest:
        if tuple(group.ranks) != tuple(self._rank_list):
            if not blocking:
                raise SimulationError(f"a lockstep group of ranks {self._rank_list[:4]}... can only reduce "
                                      f"non-blocking over all of its members, not over group "
                                      f"{group.name or group.ranks}")
            return self._lanes(group).call(self, "allreduce", group, tensor, algorithm=algorithm)
        world = self.world
        tensors = member_values(tensor, len(self._rank_list))
        nbytes = max(payload_nbytes(t) for t in {id(t): t for t in tensors}.values())
        request = Allreduce(world.reduce_sum(tensors), nbytes, group.size, blocking)
        request.done = world.env.event()
        last_call_s = float(self.clock.max())
        if not blocking and world.on_call is not None:
            # on_call: a non-blocking collective starts at the first moment every member is inside a call,
            # which the calls the members make from now on tell (each member's, ahead of the run's clock)
            request.gate = self._gates.add(InsideGate(last_call_s, len(self._rank_list), world.env.event()))
        world.env.process(self._run_allreduce(request, group, algorithm or world.default_collective, last_call_s))
        return request

    def _run_allreduce(self, request: Allreduce, group: Group, algorithm: str, last_call_s: float):
        world, env = self.world, self.world.env
        start_s = last_call_s
        if last_call_s > env.now:  # the last member has not called it yet
            yield env.timeout(delay_to(env.now, last_call_s))
        gate = request.gate
        if gate is not None:
            if not gate.event.processed:
                yield gate.event
            start_s = gate.start_s
        # the exact instant, where the clock reached it through a timeout that may round by an ulp
        request.start_s = start_s
        yield from world.run_allreduce(algorithm, group.ranks, request.args["bytes"])
        request.end_s = env.now
        if not request.blocking:
            n = len(self._rank_list)
            world.recorder.span_block(SpanBlock(self.ranks, "comm", "allreduce", np.full(n, request.start_s),
                                                np.full(n, request.end_s), blocking=False, args=request.args))
        request.done.succeed()

    def entering_call(self) -> None:
        """Every member blocks on a communication request now, from when its compute's request
        fired, until the request ends (:meth:`blocked` tells when)."""
        if self._gates:
            self._gates.inside(np.maximum(self.clock, self._compute_free), math.inf)

    # -- records ----------------------------------------------------------------------------

    def record(self, kind: str, *, run_wide: bool = False, **fields: Any) -> None:
        """Every member's record, at its own clock: a :class:`GroupRank` field is each member's
        rank, an array of the members' length each member's entry. A ``run_wide`` event is the
        first member's only (the rank whose program the generator is)."""
        if run_wide:
            self.world.recorder.event(kind, time_s=float(self.clock[0]), rank=self._rank_list[0], **fields)
            return
        columns = {key: (self.ranks if isinstance(value, GroupRank) else value) for key, value in fields.items()}
        if kind == "update":
            self._record_updates(columns)
            return
        recorder = self.world.recorder
        for i, rank in enumerate(self._rank_list):
            recorder.event(kind, time_s=float(self.clock[i]), rank=rank,
                           **{key: (value[i] if isinstance(value, np.ndarray) else value)
                              for key, value in columns.items()})

    def _record_updates(self, columns: dict[str, Any]) -> None:
        n = len(self._rank_list)
        base = {key: columns.pop(key) for key in ("worker", "step", "version", "staleness", "batch_size", "loss")
                if key in columns}
        order = np.argsort(self.clock, kind="stable")  # rows in the order the members applied them

        def by_member(value: Any, dtype: Any = None) -> Any:
            return None if value is None else np.broadcast_to(np.asarray(value, dtype=dtype), (n,))[order]

        extra = {key: (value[order] if isinstance(value, np.ndarray) else value) for key, value in columns.items()}
        block = UpdateBlock(self.clock[order], by_member(base.get("worker", self.ranks)), base["step"],
                            base["version"], base["staleness"], by_member(base["batch_size"]),
                            by_member(base.get("loss"), float), extra=extra)
        self.world.record_update_block(block)

    # -- what a group cannot do for all its members -----------------------------------------

    send = _refusal("send a message")
    recv = _refusal("receive a message")
    poll = _refusal("poll for messages")
    inference = _refusal("run its own inference")
    allgather = _refusal("allgather")
    barrier = _refusal("wait at a barrier")


def drive_group(group: GroupRuntime, generator: Generator) -> Generator:
    """The SimPy process of a group: carries out each request the generator yields, for every member."""
    value: Any = None
    while True:
        try:
            request = generator.send(value)
        except StopIteration:
            break
        if not isinstance(request, GroupRequest):
            raise SimulationError(f"a lockstep group's generator yielded {request!r}; only its runtime's requests")
        value = yield from request.wait(group)
    yield from group.finish_epoch()
