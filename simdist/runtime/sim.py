"""SimRuntime: the Runtime seam over SimPy, with virtual time.

Every rank's process runs in this one Python process, in virtual-time order, so what one
worker reads from another is exactly what it would have seen at that instant: staleness is
real, not sampled. Time advances only by events: compute takes the compute model's
duration, messages and collectives become flows on the platform's links, and the real
tensor math in between costs no virtual time.

:class:`SimWorld` holds the shared state of one simulation (environment, network, mailboxes,
collectives in progress, the recorder); :class:`SimRuntime` is one rank's view of it. Each
algorithm generator is driven by :meth:`SimWorld.spawn`, which hands it the values of the
requests it yields and records, per rank, the time spent blocked in communication (``comm``
once data moves, ``wait`` while peers have not arrived yet). What a rank waits on is a
:mod:`.requests` object. The world's work is split by kind: a rank's own work on its device in
:mod:`.sim_compute`, point-to-point messages in :mod:`.sim_messages`, collectives (matched
across ranks and run on the links) in :mod:`.sim_collectives`. Under
``platform.progress: on_call`` the driver also tells :mod:`.progress` when a rank is inside a
runtime call, which non-blocking collectives and rendezvous messages wait for. With
``platform.calls`` the driver's own turn after each request costs the rank CPU
(:meth:`~.sim_compute.ComputeExecution.runtime_call`).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Generator, Iterable

import numpy as np
import simpy

from ..errors import SimulationError
from ..platform.compute import ComputeModel
from ..platform.network import NETWORK_MODELS
from ..platform.topology import Platform
from ..recorder import Recorder, UpdateBlock
from .base import Group, Ranks
from .group import GroupRuntime, drive_group
from .lanes import LaneSet
from .collectives import FIDELITIES
from .payloads import Deferred
from .progress import OnCallProgress
from .requests import ComputeRequest, Request, SendRequest
from .sim_collectives import CollectiveExecution
from .environment import CountingEnvironment
from .sim_compute import ComputeExecution
from .sim_messages import MessageExecution

__all__ = ["SimWorld", "SimRuntime", "Request", "ComputeRequest", "SendRequest"]


GradientSource = Callable[[int, Any, Any], Callable[[], tuple[Any, float | None]]]


class SimWorld(ComputeExecution, MessageExecution, CollectiveExecution):
    """Shared state of one simulation: its environment and recorder, and how rank processes are driven
    (compute: :mod:`.sim_compute`; messages: :mod:`.sim_messages`; collectives: :mod:`.sim_collectives`)."""

    def __init__(self, platform: Platform, compute: ComputeModel, recorder: Recorder, *,
                 gradient_source: GradientSource, fidelity: str = "analytic", default_collective: str = "ring",
                 network_model: str = "max-min"):
        if fidelity not in FIDELITIES:
            raise ValueError(f"unknown collective fidelity {fidelity!r}; known: {', '.join(FIDELITIES)}")
        self.env = CountingEnvironment()  # counts what it schedules: a driver tells a stall without SimPy's queue
        self.platform = platform
        self.compute_model = compute
        self.recorder = recorder
        self.network = NETWORK_MODELS.get(network_model)(self.env, platform.links)
        self.fidelity = fidelity
        self.default_collective = default_collective
        self._gradient_source = gradient_source
        self.update_listeners: list[Callable[[dict[str, Any]], None]] = []
        self.crashed: set[int] = set()  # ranks of crashed nodes (simdist.faults): never resumed again
        self.crash_possible = False  # set when the run schedules node crashes (rules out lockstep groups)
        self.network_exclusive = False  # set when lockstep lanes are all the traffic and links never change
        self.dropped: dict[str, dict[int, int]] = {"messages": {}, "bytes": {}, "gradients": {}}  # per rank
        self._groups: dict[tuple[tuple[int, ...], str], Group] = {}  # (ranks, name) -> the one Group (group())
        self.lanes: LaneSet | None = None  # lockstep lanes, where the workers run as such (spawn_lanes)
        self._init_collectives()
        self._init_messages()
        self._init_compute()
        # platform.progress: on_call tracks who is inside a runtime call; async (None) lets everything move
        self.on_call = OnCallProgress(self.env) if platform.spec.progress == "on_call" else None

    def group(self, ranks: Iterable[int], name: str = "") -> Group:
        """The group of ``ranks``: one object for all members that name the same ranks, so that
        their collectives share one :class:`Ranks` (hashed once, compared by identity)."""
        key = (tuple(map(int, ranks)), name)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = Group(Ranks(key[0]), name)
        return group

    def runtime(self, rank: int) -> "SimRuntime":
        if not 0 <= rank < self.platform.size:
            raise SimulationError(f"rank {rank} does not exist (platform has {self.platform.size})")
        return SimRuntime(self, rank)

    # -- driving algorithm processes ----------------------------------------------------

    def spawn(self, rank: int, generator: Generator) -> simpy.Process:
        """Run ``generator`` as rank ``rank``'s process; returns the SimPy process."""
        return self.env.process(self._drive(rank, generator))

    @property
    def lockstep_supported(self) -> bool:
        """Whether ranks can move as one lockstep group with the same results as one process each."""
        return self.lockstep_obstacle() is None

    def lockstep_obstacle(self) -> str | None:
        """Why ranks cannot move as one lockstep group here (None: nothing stops them).

        Node cores that are shared (a rank's compute rate depends on what the ranks sharing its
        cores do at each instant), nodes that may crash (a crash stops some ranks mid-step),
        epoch-end work that sets some ranks' loader workers apart, runtime calls that cost
        CPU (``platform.calls``, a collective's first call after compute priced cold or from a
        table timed after compute), which a group's requests do not make one by one, and a
        real run's waiting loop (``messages.wait_loop``), whose tests are each rank's own.
        """
        if self._cores is not None:
            return "node cores are shared (platform.node.cores): each rank's rate depends on the others'"
        if self.platform.spec.calls is not None:
            return "the runtime's turns between requests cost CPU (platform.calls): each rank pays its own"
        if self.message_costs is not None and self.message_costs.send_overhead_after_compute is not None:
            return ("a rank's first call after compute is priced cold (messages.send_overhead_after_compute): "
                    "each rank pays its own")
        if self.message_costs is not None and (self.message_costs.send_overhead_after_wait
                                               or self.message_costs.send_overhead_per_byte_after_wait):
            return ("a rank's first send after a wait is priced by how long it waited "
                    "(messages.send_overhead_after_wait): each rank waits its own")
        if self.message_costs is not None and self.message_costs.wait_loop is not None:
            return ("blocked ranks notice a message or a collective's last arrival at their own loop's next test "
                    "(messages.wait_loop)")
        collectives = self.platform.spec.collectives
        if collectives is not None and any(t.after_compute for t in collectives.tables):
            return ("a collective every member calls right after compute is priced from its table timed so "
                    "(collectives.tables after_compute): each rank's state decides")
        if self.crash_possible:
            return "nodes may crash (faults.node_crash): a crash stops some ranks mid-step"
        if self._epoch_end_splits_loaders():
            return "only some ranks' epoch-end work (the checkpoint's writer) delays their loader workers"
        return None

    def _epoch_end_splits_loaders(self) -> bool:
        """Whether only some ranks' epoch-end work (the checkpoint's writer) would set their loader
        workers' clocks apart, which a group's shared loader state cannot follow."""
        loading = self.data_loading
        return (self.epoch_end is not None and self.epoch_end.schedule.differs_by_rank()
                and loading is not None and not loading.serial)

    def spawn_lanes(self, lanes: Iterable[tuple[Iterable[int], Callable[[Any], Generator]]], *,
                    apart: bool = False) -> dict[int, simpy.Process]:
        """Run each lane's algorithm generator for all its ranks as a lockstep group (:mod:`.group`;
        collectives joining lanes: :mod:`.lanes`); ``generator_of`` makes a lane's generator from its
        runtime. ``apart``: the members' clocks may differ when they start computing. Returns
        each rank's process (its lane's)."""
        groups, makers = [], []
        for ranks, generator_of in lanes:
            groups.append(GroupRuntime(self, list(ranks), apart=apart))
            makers.append(generator_of)
        self.lanes = LaneSet(self, groups)
        processes = {}
        for group, generator_of in zip(groups, makers):
            process = self.env.process(drive_group(group, generator_of(group)))
            processes.update({int(rank): process for rank in group.ranks})
        return processes

    def _drive(self, rank: int, generator: Generator):
        value: Any = None
        on_call, calls = self.on_call, self.platform.spec.calls
        turn_after_compute: bool | None = None  # the runtime's turn owed before the algorithm runs on
        waited_s = 0.0  # how long the rank was blocked on the request it turns after
        after_work = False  # whether that request was the rank's own work (busy)
        while True:
            if calls is not None and turn_after_compute is not None:  # platform.calls: the driver's CPU
                turn = self.runtime_call(rank, turn_after_compute, waited_s, after_work)
                if turn is not None:
                    yield turn
                    if rank in self.crashed:  # the node died during the runtime's turn
                        return
            try:
                request = generator.send(value)
            except StopIteration:
                yield from self._finish_epoch(rank)
                if on_call is not None:
                    on_call.finished(rank)
                return
            if not isinstance(request, Request):
                raise SimulationError(f"rank {rank} yielded {request!r}; algorithms may only yield runtime requests")
            if request.finished:  # returns at once: no time passes, nothing to account
                value, turn_after_compute, waited_s, after_work = request.ready_value, False, 0.0, False
                continue
            waited_from = self.env.now
            # a blocking receive starts once the rank's send calls have returned: their CPU first
            spending = self.spend_owed_cpu(rank) if request.kind == "comm" and request.name == "recv" else None
            if on_call is not None and request.kind == "comm":  # inside a runtime call while it waits
                on_call.wait(rank, request)
                value = yield request.event
                on_call.resumed(rank)
            else:
                value = yield request.event
            if spending is not None and not spending.processed:
                yield spending
            if rank in self.crashed:  # the node died while this rank waited: it never runs again
                if request.kind == "compute":
                    self._count_drop("gradients", rank, 1)
                return
            waited_s = 0.0
            if request.kind == "compute":
                value = request.partial_result()
            elif request.kind == "comm":
                waited_s = self._account_blocking(rank, request, waited_from)
                self.waited(rank, waited_s)
            turn_after_compute, after_work = request.kind == "compute", request.kind == "busy"

    def _finish_epoch(self, rank: int):
        """The epoch-end work a rank owes after its last epoch, before its process ends."""
        if self.epoch_end is None:
            return
        for task in self.epoch_end.schedule.at_finish(rank):
            yield self.busy(rank, self.epoch_end.seconds(rank, task), self.epoch_end.span_name(task)).event

    def crash(self, node: int, ranks: Iterable[int]) -> None:
        """The node's ranks stop now: not resumed again; their undelivered mail is dropped."""
        for rank in ranks:
            self.crashed.add(rank)
            if self.on_call is not None:
                self.on_call.left(rank)
            for message in self._mailboxes[rank]:
                self._count_drop("messages", rank, 1)
                self._count_drop("bytes", rank, message.nbytes)
            self._mailboxes[rank].clear()
        self.recorder.event("node_crash", time_s=self.env.now, rank=-1, node=node,
                            ranks=",".join(str(r) for r in ranks))

    def _count_drop(self, what: str, rank: int, amount: float) -> None:
        counts = self.dropped[what]
        counts[rank] = counts.get(rank, 0) + amount

    def _account_blocking(self, rank: int, request: Request, waited_from: float) -> float:
        """Record a blocking request's wait and its data phase; how long the rank was blocked on it
        (not computing)."""
        now = self.env.now
        waited_from = min(max(waited_from, self._compute_until.get(rank, 0.0)), now)  # computing is not waiting
        started = request.started_s if request.started_s is not None else now
        moving_from = min(max(waited_from, started), now)
        self.recorder.span(rank, "wait", request.name, waited_from, moving_from)
        self.recorder.span(rank, "comm", request.name, moving_from, now, **request.span_args)
        return now - waited_from

    # -- records ---------------------------------------------------------------------

    def record_update_block(self, block: UpdateBlock) -> None:
        """Updates of a lockstep group: recorded as one block; listeners hear its first row (every
        row of a block has the same step; the first is the earliest, made now)."""
        self.recorder.update_block(block)
        if self.update_listeners:
            row = dict(time_s=float(np.min(block.time_s)), worker=int(block.workers[0]), step=block.step, version=block.version,
                       staleness=block.staleness, batch_size=int(block.batch_size[0]),
                       loss=None if block.loss is None else float(block.loss.max()))  # NaN propagates: divergence shows
            for listener in self.update_listeners:
                listener(row)

    def record(self, rank: int, kind: str, fields: dict[str, Any]) -> None:
        for key, value in fields.items():  # a value a message brought unevaluated (a pushed loss) is read now
            if type(value) is Deferred:
                fields[key] = value.value
        if kind == "update":
            row = self.recorder.update(time_s=self.env.now, **fields)
            for listener in self.update_listeners:
                listener(row)
        else:
            self.recorder.event(kind, time_s=self.env.now, rank=rank, **fields)


class SimRuntime:
    """One rank's view of a :class:`SimWorld` (implements :class:`~simdist.runtime.base.Runtime`).

    ``compute(replica, batch)``, ``busy(duration_s, name="busy")``, ``inference(samples,
    run=None, name="inference")``, ``send(dst, payload, tag=0)``, ``recv(src=ANY, tag=ANY)``
    and ``poll(src=ANY, tag=ANY)`` are the world's own methods with this rank bound: they run
    once or twice per message, and a forwarding method per call was a measurable share of a
    parameter-server replay.
    """

    def __init__(self, world: SimWorld, rank: int):
        self.world = world
        self.rank = rank
        self.world_size = world.platform.size
        self.compute = partial(world.compute, rank)
        self.busy = partial(world.busy, rank)
        self.inference = partial(world.inference, rank)
        self.send = partial(world.send, rank)
        self.recv = partial(world.recv, rank)
        self.poll = partial(world.poll, rank)

    def now(self) -> float:
        return self.world.env.now

    def allreduce(self, group: Group, tensor: Any, *, algorithm: str | None = None) -> Request:
        return self.world.collective(self.rank, "allreduce", group, tensor, algorithm=algorithm)

    def iallreduce(self, group: Group, tensor: Any, *, algorithm: str | None = None) -> Request:
        return self.world.collective(self.rank, "allreduce", group, tensor, algorithm=algorithm, blocking=False)

    def broadcast(self, group: Group, tensor: Any, root: int) -> Request:
        return self.world.collective(self.rank, "broadcast", group, tensor, root=root)

    def allgather(self, group: Group, tensor: Any) -> Request:
        return self.world.collective(self.rank, "allgather", group, tensor)

    def barrier(self, group: Group) -> Request:
        return self.world.collective(self.rank, "barrier", group, None)

    def group(self, ranks: Iterable[int], name: str = "") -> Group:
        return self.world.group(ranks, name)

    def record(self, kind: str, *, run_wide: bool = False, **fields: Any) -> None:
        self.world.record(self.rank, kind, fields)
