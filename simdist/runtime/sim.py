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
:mod:`.requests` object; collectives are matched and run by :mod:`.sim_collectives`. Under
``platform.progress: on_call`` the driver also tells :mod:`.progress` when a rank is inside a
runtime call, which non-blocking collectives and rendezvous messages wait for.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Generator, Iterable

import simpy

from ..errors import SimulationError
from ..ledger import work_span_name
from ..platform.compute import ComputeModel
from ..platform.network import NETWORK_MODELS, FlowNetwork
from ..platform.topology import Link, Platform
from ..recorder import Recorder, UpdateBlock
from ..training.replica import sent_copy
from .base import ANY, Group, Message
from .cohort import CohortProcess, CohortRuntime
from .collectives import FIDELITIES
from .progress import OnCallProgress
from .requests import ComputeRequest, ReadyReceive, Request, SendRequest
from .sim_collectives import CollectiveExecution

__all__ = ["SimWorld", "SimRuntime", "Request", "ComputeRequest", "SendRequest"]


@dataclass(eq=False)
class _RecvWaiter:
    src: int
    tag: int
    request: Request


@dataclass(frozen=True)
class _CoreSharing:
    """Shared cores as a flow network: per rank its route (CPU-share cap, then its core pool if
    it has one) and its pool (None: the rank's cpus are its own)."""

    network: FlowNetwork
    routes: list[tuple[Link, ...]]
    pools: list[Link | None]


GradientSource = Callable[[int, Any, Any], Callable[[], tuple[Any, float | None]]]


class SimWorld(CollectiveExecution):
    """Shared state of one simulation."""

    def __init__(self, platform: Platform, compute: ComputeModel, recorder: Recorder, *,
                 gradient_source: GradientSource, fidelity: str = "analytic", default_collective: str = "ring",
                 network_model: str = "max-min"):
        if fidelity not in FIDELITIES:
            raise ValueError(f"unknown collective fidelity {fidelity!r}; known: {', '.join(FIDELITIES)}")
        self.env = simpy.Environment()
        self.platform = platform
        self.compute_model = compute
        self.recorder = recorder
        self.network = NETWORK_MODELS.get(network_model)(self.env, platform.links)
        self.fidelity = fidelity
        self.default_collective = default_collective
        self._gradient_source = gradient_source
        self._mailboxes: dict[int, list[Message]] = {r: [] for r in range(platform.size)}
        self._recv_waiters: dict[int, list[_RecvWaiter]] = {r: [] for r in range(platform.size)}
        self.update_listeners: list[Callable[[dict[str, Any]], None]] = []
        self._compute_until: dict[int, float] = {}
        self._cores = self._core_sharing(platform)
        self._computing_in_pool: dict[int, int] = {}  # core pool (link index) -> its ranks computing now
        self.crashed: set[int] = set()  # ranks of crashed nodes (simdist.faults): never resumed again
        self.crash_possible = False  # set when the run schedules node crashes (rules out cohorts)
        self.network_exclusive = False  # set when one cohort is all the traffic and links never change
        self.dropped: dict[str, dict[int, int]] = {"messages": {}, "bytes": {}, "gradients": {}}  # per rank
        self._init_collectives()
        self._next_injection_s: dict[int, float] = {}  # rank -> earliest time its next message may leave
        self._cpu_owed_s: dict[int, float] = {}  # rank -> send overhead not yet charged to its CPU
        self.data_loading: Any = None  # what a batch costs before compute (simdist.training.data_loading); None: free
        self.epoch_end: Any = None  # validation and checkpoint at epoch ends (simdist.training.epoch_end); None: none
        # platform.progress: on_call tracks who is inside a runtime call; async (None) lets everything move
        self.on_call = OnCallProgress(self.env) if platform.spec.progress == "on_call" else None

    def _core_sharing(self, platform: Platform) -> _CoreSharing | None:
        """Processor sharing of node cores: a flow network of rank caps and core pools (one per
        node with ``node.cores``, one per set and node with ``node.core_sets``)."""
        node = platform.spec.node
        if not node.shares_cores:
            return None
        sets = [(node.cores, list(range(node.devices)))] if node.core_sets is None else \
            [(core_set.cores, core_set.devices) for core_set in node.core_sets]
        links: list[Link] = []
        pool_of: dict[int, Link] = {}
        for n in range(platform.spec.nodes):
            for k, (cores, local_ranks) in enumerate(sets):
                pool = Link(len(links), f"n{n}.cores{k}", "cores", 0.0, cores)
                links.append(pool)
                pool_of.update({n * node.devices + local: pool for local in local_ranks})
        routes, pools = [], []
        for device in platform.devices:
            cap = Link(len(links), f"rank{device.rank}.cpus", "cpu-share", 0.0, device.cpus or 1.0)
            links.append(cap)
            pool = pool_of.get(device.rank)
            routes.append((cap, pool) if pool is not None else (cap,))
            pools.append(pool)
        return _CoreSharing(FlowNetwork(self.env, links), routes, pools)

    def runtime(self, rank: int) -> "SimRuntime":
        if not 0 <= rank < self.platform.size:
            raise SimulationError(f"rank {rank} does not exist (platform has {self.platform.size})")
        return SimRuntime(self, rank)

    # -- driving algorithm processes ----------------------------------------------------

    def spawn(self, rank: int, generator: Generator) -> simpy.Process:
        """Run ``generator`` as rank ``rank``'s process; returns the SimPy process."""
        return self.env.process(self._drive(rank, generator))

    @property
    def cohort_supported(self) -> bool:
        """Whether ranks can move as one cohort with the same results as one process each.

        Not when node cores are shared (a rank's compute rate depends on what the ranks sharing
        its cores do at each instant) or when nodes may crash (a crash stops some ranks mid-step).
        """
        return self._cores is None and not self.crash_possible and not self._epoch_end_splits_loaders()

    def _epoch_end_splits_loaders(self) -> bool:
        """Whether only some ranks' epoch-end work (the checkpoint's writer) would set their loader
        workers' clocks apart, which a cohort's shared loader state cannot follow."""
        loading = self.data_loading
        return (self.epoch_end is not None and self.epoch_end.schedule.differs_by_rank()
                and loading is not None and not loading.serial)

    def spawn_cohort(self, ranks: Iterable[int], process: CohortProcess) -> simpy.Process:
        """Run a cohort process for ``ranks`` moving in lockstep (see :mod:`.cohort`); its
        requests are SimPy events, so SimPy drives it directly."""
        cohort = CohortRuntime(self, list(ranks))
        return self.env.process(self._drive_cohort(cohort, process(cohort)))

    @staticmethod
    def _drive_cohort(cohort: CohortRuntime, generator: Generator):
        yield from generator
        yield from cohort.finish_epoch()

    def _drive(self, rank: int, generator: Generator):
        value: Any = None
        on_call = self.on_call
        while True:
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
                value = request.ready_value
                continue
            waited_from = self.env.now
            if on_call is not None and request.kind == "comm":  # inside a runtime call while it waits
                on_call.wait(rank, request)
                value = yield request.event
                on_call.resumed(rank)
            else:
                value = yield request.event
            if rank in self.crashed:  # the node died while this rank waited: it never runs again
                if request.kind == "compute":
                    self._count_drop("gradients", rank, 1)
                return
            if request.kind == "compute":
                value = request.partial_result()
            elif request.kind == "comm":
                self._account_blocking(rank, request, waited_from)

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

    def _account_blocking(self, rank: int, request: Request, waited_from: float) -> None:
        now = self.env.now
        waited_from = min(max(waited_from, self._compute_until.get(rank, 0.0)), now)  # computing is not waiting
        started = request.started_s if request.started_s is not None else now
        moving_from = min(max(waited_from, started), now)
        self.recorder.span(rank, "wait", request.name, waited_from, moving_from)
        self.recorder.span(rank, "comm", request.name, moving_from, now)

    # -- compute ---------------------------------------------------------------------

    def compute(self, rank: int, replica: Any, batch: Any) -> ComputeRequest:
        """The rank gets its batch (``data``: loading it, or waiting for its loader workers), then
        runs forward/backward on it; the request's value is the gradient."""
        env, start = self.env, self.env.now
        batch_size = int(batch.size)
        if self._cores is not None:
            return self._shared_compute(rank, replica, batch)
        owed = self._owed_cpu_s(rank)
        if owed > 0:  # the CPU finishes its sends' overhead first
            self.recorder.span(rank, "comm", "message overhead", start, start + owed)
            start += owed
        epoch_end_s = self._epoch_end_work(rank, self._owed_epoch_end(rank, batch), start)
        start += epoch_end_s
        loading = self.data_loading
        load_s = 0.0 if loading is None else loading.wait_s(rank, start, batch_size, getattr(batch, "epoch", 0))
        if load_s > 0:  # loading is the rank's own work; waiting for loader workers leaves it idle
            self.recorder.span(rank, "compute" if loading.serial else "wait", "data", start, start + load_s)
            start += load_s
        duration = self.compute_model.duration_s(rank, batch_size, start)
        # the timer is the request's event; the waiting rank reads the gradient (``_drive``)
        request = ComputeRequest("compute", "forward/backward", env.timeout(owed + epoch_end_s + load_s + duration), start,
                                 duration_s=duration, env=env, resolve=self._gradient_source(rank, replica, batch), batch_size=batch_size,
                                 grad_like=getattr(replica, "params", None))
        self._compute_until[rank] = start + duration
        if self.on_call is not None:
            self.on_call.computing(rank, request.event)
        self.recorder.span(rank, "compute", "forward/backward", start, start + duration, batch_size=batch_size)
        return request

    def _shared_compute(self, rank: int, replica: Any, batch: Any) -> ComputeRequest:
        """Compute as work on the rank's shared cores; its duration emerges from the sharing.

        Epoch-end work owed and loading the batch first (``loader_workers: 0``) are work on the
        same cores; waiting for loader workers is not (their own cores are not part of the
        pool). ``at_fraction`` uses the durations estimated at the start (the rank's fair share then).
        """
        env, start = self.env, self.env.now
        batch_size = int(batch.size)
        cpus = self.platform.devices[rank].cpus or 1.0
        work = self.compute_model.work_core_s(rank, batch_size, start) + self._owed_cpu_s(rank) * cpus
        rate = self._enter_pool(rank)
        stages = [(self.epoch_end.span_name(task), self.epoch_end.seconds(rank, task) * cpus)
                  for task in self._owed_epoch_end(rank, batch)]
        load_core_s, wait_s = self._batch_cost(rank, batch, start)
        if load_core_s > 0:
            stages.append(("data", load_core_s))
        estimate = work / rate
        request = ComputeRequest("compute", "forward/backward", env.event(),
                                 start + sum(core_s for _, core_s in stages) / rate + wait_s,
                                 duration_s=estimate, env=env, resolve=self._gradient_source(rank, replica, batch),
                                 batch_size=batch_size, grad_like=getattr(replica, "params", None))
        self._compute_until[rank] = request.started_s + estimate
        if self.on_call is not None:
            self.on_call.computing(rank, request.event)

        def forward_backward() -> None:
            begin = env.now

            def finish() -> None:
                self._leave_pool(rank)
                self._compute_until[rank] = env.now
                if request._result is None:
                    request.started_s, request.duration_s = begin, env.now - begin
                self.recorder.span(rank, "compute", "forward/backward", begin, env.now, batch_size=batch_size)
                request.event.succeed(request.partial_result())

            self._work_on_cores(rank, work, finish)

        def get_batch() -> None:
            if wait_s > 0:  # the loader workers have not finished its batch yet
                self.recorder.span(rank, "wait", "data", env.now, env.now + wait_s)
                env.timeout(wait_s).callbacks.append(lambda _event: forward_backward())
            else:
                forward_backward()

        self._stages_on_cores(rank, stages, forward_backward if load_core_s > 0 else get_batch)
        return request

    def _stages_on_cores(self, rank: int, stages: list[tuple[str, float]], then: Callable[[], None]) -> None:
        """Work ``stages`` (span name, core-seconds) one after another on the rank's shared cores, each
        recorded as a compute span; ``then()`` after the last."""
        if not stages:
            then()
            return
        (name, core_s), rest = stages[0], stages[1:]
        begin = self.env.now

        def done() -> None:
            self.recorder.span(rank, "compute", name, begin, self.env.now)
            self._stages_on_cores(rank, rest, then)

        self._work_on_cores(rank, core_s, done)

    def _owed_epoch_end(self, rank: int, batch: Any) -> list:
        """The epoch-end work (:mod:`simdist.training.epoch_end`) ``rank`` owes before ``batch``."""
        return [] if self.epoch_end is None else self.epoch_end.schedule.before_batch(rank, batch)

    def _epoch_end_work(self, rank: int, tasks: list, start_s: float) -> float:
        """Record ``tasks`` as the rank's compute spans from ``start_s``; their seconds in all."""
        at = start_s
        for task in tasks:
            seconds = self.epoch_end.seconds(rank, task)
            self.recorder.span(rank, "compute", self.epoch_end.span_name(task), at, at + seconds)
            at += seconds
        return at - start_s

    def _batch_cost(self, rank: int, batch: Any, now_s: float) -> tuple[float, float]:
        """Getting ``batch`` on ``rank``: (its loading work in core-seconds, seconds waiting for loader workers)."""
        loading = self.data_loading
        if loading is None:
            return 0.0, 0.0
        if loading.serial:
            return loading.load_core_s(rank, int(batch.size)), 0.0
        return 0.0, loading.wait_s(rank, now_s, int(batch.size), getattr(batch, "epoch", 0))

    def _work_on_cores(self, rank: int, work_core_s: float, finish: Callable[[], None]) -> None:
        """Do ``work_core_s`` on the rank's cores, shared with whatever else runs there; ``finish()`` when done."""
        self._cores.network.transfer_then(self._cores.routes[rank], work_core_s, finish, latency_s=0.0)

    def _enter_pool(self, rank: int) -> float:
        """Count ``rank`` as computing on its cores; its rate (cores) if nothing else changes."""
        cap, pool = self.platform.devices[rank].cpus or 1.0, self._cores.pools[rank]
        if pool is None:
            return cap
        busy = self._computing_in_pool.get(pool.index, 0) + 1
        self._computing_in_pool[pool.index] = busy
        return min(cap, pool.bandwidth_Bps / busy)

    def _leave_pool(self, rank: int) -> None:
        pool = self._cores.pools[rank]
        if pool is not None:
            self._computing_in_pool[pool.index] -= 1

    def busy(self, rank: int, duration_s: float, name: str = "busy", value: Any = None, *,
             part: str | None = None, run: Callable[[], Any] | None = None) -> Request:
        """The rank computes something other than forward/backward (a server's update) for ``duration_s``.

        With shared node cores (``node.cores``) the work competes for them as compute does:
        ``duration_s`` is its time alone on the rank's CPU share. Waiting on it gives ``value``,
        or ``run()`` (the work's math, done now). ``part``: its ledger part (see
        :func:`~simdist.ledger.work_span_name`).
        """
        name = work_span_name(name, part)
        if run is not None:
            value = run()
        start, owed = self.env.now, self._owed_cpu_s(rank)
        duration_s = max(0.0, float(duration_s)) + owed
        if self._cores is not None and duration_s > 0:
            return self._shared_busy(rank, duration_s, name, value)
        if owed > 0:  # the CPU finishes its sends' overhead first, as before a compute
            self.recorder.span(rank, "comm", "message overhead", start, start + owed)
        self.recorder.span(rank, "compute", name, start + owed, start + duration_s)
        self._compute_until[rank] = max(self._compute_until.get(rank, 0.0), start + duration_s)
        request = Request("busy", name, self.env.timeout(duration_s, value), start)
        if self.on_call is not None:
            self.on_call.computing(rank, request.event)
        return request

    def inference(self, rank: int, samples: int, run: Callable[[], Any] | None = None,
                  name: str = "inference") -> Request:
        """A forward pass over ``samples`` samples (an algorithm's own evaluation), as busy work.

        ``run()`` (the evaluation's math) is called now; waiting on the request gives its
        result once the forward time of the compute model has passed.
        """
        value = run() if run is not None else None
        return self.busy(rank, self.compute_model.forward_s(rank, int(samples)), name, value)

    def _shared_busy(self, rank: int, duration_s: float, name: str, value: Any = None) -> Request:
        """Busy work on the rank's shared cores; its duration emerges from the sharing."""
        env, start, device = self.env, self.env.now, self.platform.devices[rank]
        request = Request("busy", name, env.event(), start)
        if self.on_call is not None:
            self.on_call.computing(rank, request.event)
        self._enter_pool(rank)
        self._compute_until[rank] = max(self._compute_until.get(rank, 0.0), start + duration_s)

        def finish() -> None:
            self._leave_pool(rank)
            self._compute_until[rank] = max(self._compute_until.get(rank, 0.0), env.now)
            self.recorder.span(rank, "compute", name, start, env.now)
            request.event.succeed(value)

        self._work_on_cores(rank, duration_s * (device.cpus or 1.0), finish)
        return request

    # -- point to point ----------------------------------------------------------------

    def send(self, src: int, dst: int, payload: Any, tag: int = 0) -> Request:
        if not 0 <= dst < self.platform.size:
            raise SimulationError(f"rank {src} sends to rank {dst}, which does not exist")
        data, nbytes = sent_copy(payload)
        sent = self.env.now
        request = SendRequest(self.env, sent)
        if self.on_call is not None:
            self.on_call.called(src)

        def deliver() -> None:
            self._deliver(Message(src, dst, tag, data, nbytes, sent, self.env.now))
            request.delivered()

        route = self.platform.route(src, dst)
        if self.message_costs is None:
            self.network.transfer_then(route, nbytes, deliver, src=src, dst=dst)
        else:
            self._send_with_costs(src, dst, route, nbytes, deliver)
        return request

    def _send_with_costs(self, src: int, dst: int, route, nbytes: int, deliver: Callable[[], None]) -> None:
        """A message paying LogGP costs (``platform.messages``) around its links.

        The sender injects it once its previous message is ``max(g, o_s)`` behind, spends
        ``o_s`` of CPU on it (charged to its next compute, :meth:`_owed_cpu_s`), a message above
        the eager limit pays the rendezvous handshake, and the receiver spends ``o_r`` before
        the message is in its mailbox. Under ``progress: on_call`` a message above the eager
        limit goes only once the receiver answers the handshake (:mod:`.progress`).
        """
        costs, now = self.message_costs, self.env.now
        inject_s = max(now, self._next_injection_s.get(src, 0.0))
        self._next_injection_s[src] = inject_s + max(costs.gap, costs.send_overhead)
        self._cpu_owed_s[src] = self._cpu_owed_s.get(src, 0.0) + costs.send_overhead
        delay_s = inject_s - now + costs.send_overhead + costs.handshake_s(nbytes) + \
            self.platform.route_latency_s(src, dst)
        if costs.recv_overhead > 0:
            def arrived() -> None:
                self.env.timeout(costs.recv_overhead).callbacks.append(lambda _event: deliver())
        else:
            arrived = deliver
        if self.on_call is not None and costs.eager_limit is not None and nbytes > costs.eager_limit:
            self.on_call.answer(dst, lambda: self.network.transfer_then(route, nbytes, arrived, src=src, dst=dst,
                                                                         latency_s=delay_s))
            return
        self.network.transfer_then(route, nbytes, arrived, src=src, dst=dst, latency_s=delay_s)

    def _owed_cpu_s(self, rank: int) -> float:
        """CPU time the rank's sends took since its last compute (LogGP ``o_s``), now paid."""
        return self._cpu_owed_s.pop(rank, 0.0) if self._cpu_owed_s else 0.0

    @staticmethod
    def _matches(message: Message, src: int, tag: int) -> bool:
        return (src == ANY or message.src == src) and (tag == ANY or message.tag == tag)

    def _deliver(self, message: Message) -> None:
        if message.dst in self.crashed:  # the bytes crossed the links; nobody is there to read them
            self._count_drop("messages", message.dst, 1)
            self._count_drop("bytes", message.dst, message.nbytes)
            return
        waiters = self._recv_waiters[message.dst]
        for i, waiter in enumerate(waiters):
            if self._matches(message, waiter.src, waiter.tag):
                del waiters[i]
                waiter.request.started_s = message.sent_s
                waiter.request.event.succeed(message)
                return
        self._mailboxes[message.dst].append(message)

    def poll(self, rank: int, src: int = ANY, tag: int = ANY) -> Message | None:
        if self.on_call is not None:
            self.on_call.called(rank)
        box = self._mailboxes[rank]
        for i, message in enumerate(box):
            if self._matches(message, src, tag):
                return box.pop(i)
        return None

    def recv(self, rank: int, src: int = ANY, tag: int = ANY) -> Request:
        message = self.poll(rank, src, tag)
        if message is not None:
            return ReadyReceive(self.env, message)
        request = Request("comm", "recv", self.env.event())
        self._recv_waiters[rank].append(_RecvWaiter(src, tag, request))
        return request

    # -- records ---------------------------------------------------------------------

    def record_update_block(self, block: UpdateBlock) -> None:
        """Updates of a cohort: recorded as one block; listeners hear its first row (every row
        of a block has the same time and step)."""
        self.recorder.update_block(block)
        if self.update_listeners:
            row = dict(time_s=block.time_s, worker=int(block.workers[0]), step=block.step, version=block.version,
                       staleness=block.staleness, batch_size=int(block.batch_size[0]),
                       loss=None if block.loss is None else float(block.loss.max()))  # NaN propagates: divergence shows
            for listener in self.update_listeners:
                listener(row)

    def record(self, rank: int, kind: str, fields: dict[str, Any]) -> None:
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
        return Group(tuple(int(r) for r in ranks), name)

    def record(self, kind: str, **fields: Any) -> None:
        self.world.record(self.rank, kind, fields)
