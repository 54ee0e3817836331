"""Work on a rank's device in a simulation: forward/backward, its own busy work, epoch-end work.

:class:`ComputeExecution` is the compute half of :class:`~simdist.runtime.sim.SimWorld` (a
mixin over its environment, platform, compute model and recorder). A rank's forward/backward
takes the compute model's duration; before it the rank pays what it owes: the CPU overhead of
its sends (``message overhead``), the last epoch's validation pass and checkpoint
(:mod:`simdist.training.epoch_end`) and getting its batch (``data``:
:mod:`simdist.training.data_loading`). An algorithm's own work (``busy``) and its
evaluations (``inference``) are charged the same way, and so is the runtime's turn between two
of a rank's requests (``runtime call``, ``platform.calls``: :meth:`ComputeExecution.runtime_call`).

Where a node's CPU ranks share cores (``node.cores``, ``node.core_sets``), all of that is work
on a flow network of core pools (processor sharing, :class:`_CoreSharing`): a rank's duration
emerges from what else runs on its cores at each instant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import simpy

from ..ledger import CALL_SPAN, OVERHEAD_SPAN, work_span_name
from ..platform.network import FlowNetwork
from ..platform.topology import Link, Platform
from .payloads import computed
from .requests import ComputeRequest, Request
from .time_slices import TimeSlices
from .wake_runs import WakeRuns

__all__ = ["ComputeExecution"]


@dataclass(frozen=True)
class _CoreSharing:
    """Shared cores as a flow network: per rank its route (CPU-share cap, then its core pool if
    it has one) and its pool (None: the rank's cpus are its own)."""

    network: FlowNetwork
    routes: list[tuple[Link, ...]]
    pools: list[Link | None]
    co_run: dict[int, Any]  # core pool (link index) -> its node's ``co_run`` (absent: none)


class ComputeExecution:
    """The compute of :class:`~simdist.runtime.sim.SimWorld`: each rank's own work on its device."""

    def _init_compute(self) -> None:
        self._compute_until: dict[int, float] = {}
        self._cores = self._core_sharing(self.platform)
        cores = self._cores  # a woken rank runs ahead of its running core-mates (node.co_run.wake_run_s)
        self._wake = None if cores is None else WakeRuns(self.env, cores.network, cores.routes, cores.pools,
                                                          cores.co_run)
        # ranks that outnumber their cores take turns in time slices (node.co_run.slice_s)
        self._slices = None if cores is None else TimeSlices(self.env, cores.network, cores.routes, cores.pools,
                                                              cores.co_run)
        self._computing_in_pool: dict[int, int] = {}  # core pool (link index) -> its ranks computing now
        self._pieces_of: dict[int, int] = {}  # rank -> its pieces of work on shared cores now (they may overlap)
        self._co_run_windows: dict[int, float | None] = {}  # core pool -> the co-run factor applied to it now
        self.data_loading: Any = None  # what a batch costs before compute (simdist.training.data_loading); None: free
        self.epoch_end: Any = None  # validation and checkpoint at epoch ends (simdist.training.epoch_end); None: none

    def _core_sharing(self, platform: Platform) -> _CoreSharing | None:
        """Processor sharing of node cores: a flow network of rank caps and core pools (one per
        node with ``node.cores``, one per set and node with ``node.core_sets``)."""
        spec = platform.spec
        if not any(spec.node_at(n).shares_cores for n in range(spec.nodes)):
            return None
        links: list[Link] = []
        pool_of: dict[int, Link] = {}
        co_run: dict[int, Any] = {}
        for n in range(spec.nodes):
            node, first = spec.node_at(n), spec.first_rank(n)
            for k, (cores, local_ranks) in enumerate(node.core_pools()):
                pool = Link(len(links), f"n{n}.cores{k}", "cores", 0.0, cores)
                links.append(pool)
                pool_of.update({first + local: pool for local in local_ranks})
                if node.co_run is not None:
                    co_run[pool.index] = node.co_run
        routes, pools = [], []
        for device in platform.devices:
            cap = Link(len(links), f"rank{device.rank}.cpus", "cpu-share", 0.0, device.cpus or 1.0)
            links.append(cap)
            pool = pool_of.get(device.rank)
            routes.append((cap, pool) if pool is not None else (cap,))
            pools.append(pool)
        return _CoreSharing(FlowNetwork(self.env, links), routes, pools, co_run)

    def compute(self, rank: int, replica: Any, batch: Any) -> ComputeRequest:
        """The rank gets its batch (``data``: loading it, or waiting for its loader workers), then
        runs forward/backward on it; the request's value is the gradient."""
        env, start = self.env, self.env.now
        batch_size = int(batch.size)
        self._after_compute.add(rank)  # its next message call finds the caches full of this step's data
        self._waited_s.pop(rank, None)  # ... not those a wait before the step left
        if self._cores is not None:
            return self._shared_compute(rank, replica, batch)
        owed = self._owed_cpu_s(rank)
        if owed > 0:  # the CPU finishes its sends' overhead first
            self.recorder.span(rank, "comm", OVERHEAD_SPAN, start, start + owed)
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
        work = self.compute_model.work_core_s(rank, batch_size, start)
        rate = self._enter_pool(rank)
        owed = self._owed_cpu_s(rank)  # the CPU finishes its sends' overhead first
        stages = [(OVERHEAD_SPAN, owed * cpus)] if owed > 0 else []
        stages += [(self.epoch_end.span_name(task), self.epoch_end.seconds(rank, task) * cpus)
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
        recorded as a compute span (the sends' overhead as a comm span); ``then()`` after the last."""
        if not stages:
            then()
            return
        (name, core_s), rest = stages[0], stages[1:]
        begin = self.env.now

        def done() -> None:
            self.recorder.span(rank, _span_kind(name), name, begin, self.env.now)
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
        self._pieces_of[rank] = self._pieces_of.get(rank, 0) + 1
        if self._pieces_of[rank] == 1:  # the rank starts having work: who runs when is the pool's rule
            self._turns(rank).enter(rank)
        busy = self._computing_in_pool.get(pool.index, 0) + 1
        self._computing_in_pool[pool.index] = busy
        factor = self._co_running(pool, busy)
        return min(cap, pool.bandwidth_Bps / (factor or 1.0) / busy)

    def _leave_pool(self, rank: int) -> None:
        pool = self._cores.pools[rank]
        if pool is not None:
            self._pieces_of[rank] -= 1
            if not self._pieces_of[rank]:  # its last piece ended
                self._turns(rank).leave(rank)
            self._computing_in_pool[pool.index] -= 1
            self._co_running(pool, self._computing_in_pool[pool.index])

    def _turns(self, rank: int) -> TimeSlices | WakeRuns:
        """Who decides when ``rank`` runs on its shared pool beyond processor sharing: the time
        slices where the pool has them (its woken run included), else the woken-run rule."""
        return self._slices if self._slices.applies_to(rank) else self._wake

    def _co_running(self, pool: Link, busy: int) -> float | None:
        """The co-run slow-down of ``pool`` now that ``busy`` of its ranks compute (``node.co_run``):
        while two or more do, the pool's cores get through 1/factor of their work (caches, memory
        bandwidth, context switches: the oversubscribed factor when they outnumber the cores,
        else the undersubscribed one); alone a rank runs at full speed. Applied as a window on
        the pool's capacity, opened and closed as ranks start and stop computing; the factor
        now (None: none)."""
        co_run = self._cores.co_run.get(pool.index)
        if co_run is None:
            return None
        factor = None if busy < 2 else (co_run.oversubscribed_factor if busy > pool.bandwidth_Bps
                                        else co_run.undersubscribed_factor)
        factor = None if factor == 1.0 else factor
        current = self._co_run_windows.get(pool.index)
        if factor != current:
            if current is not None:
                self._cores.network.degrade([pool.index], 1.0 / current, active=False)
            if factor is not None:
                self._cores.network.degrade([pool.index], 1.0 / factor, active=True)
            self._co_run_windows[pool.index] = factor
        return factor

    def busy(self, rank: int, duration_s: float, name: str = "busy", value: Any = None, *,
             part: str | None = None, run: Callable[..., Any] | None = None, inputs: Sequence[Any] = (),
             lazy: bool = False) -> Request:
        """The rank computes something other than forward/backward (a server's update) for ``duration_s``.

        With shared node cores (``node.cores``) the work competes for them as compute does:
        ``duration_s`` is its time alone on the rank's CPU share. Waiting on it gives ``value``,
        or ``run(*inputs)`` (the work's math, done now; with ``lazy``, when first read if an
        input is not evaluated yet: :func:`~.payloads.computed`). ``part``: its ledger part (see
        :func:`~simdist.ledger.work_span_name`).
        """
        name = work_span_name(name, part)
        if run is not None:
            value = computed(run, inputs, lazy)
        start, owed, work_s = self.env.now, self._owed_cpu_s(rank), max(0.0, float(duration_s))
        if self._cores is not None and work_s + owed > 0:
            return self._shared_busy(rank, work_s, name, value, owed)
        end = start + (owed + work_s)  # as the timeout below ends
        if owed > 0:  # the CPU finishes its sends' overhead first, as before a compute
            self.recorder.span(rank, "comm", OVERHEAD_SPAN, start, start + owed)
        self.recorder.span(rank, "compute", name, start + owed, end)
        self._compute_until[rank] = max(self._compute_until.get(rank, 0.0), end)
        request = Request("busy", name, self.env.timeout(owed + work_s, value), start)
        if self.on_call is not None:
            self.on_call.computing(rank, request.event)
        return request

    def spend_owed_cpu(self, rank: int) -> simpy.Event | None:
        """The CPU the rank's message calls still owe, spent now (a ``message overhead`` span), as a
        rank about to block on a receive does: its send calls return before it can wait. An
        event that fires when it is spent; None when nothing is owed."""
        return self._cpu_now(rank, self._owed_cpu_s(rank), OVERHEAD_SPAN)

    def runtime_call(self, rank: int, after_compute: bool, waited_s: float = 0.0,
                     after_work: bool = False) -> simpy.Event | None:
        """The runtime's turn between two of the rank's requests (``platform.calls``), spent now as
        the rank's own work (a ``runtime call`` span); the first after a forward/backward at its
        cold-cache cost, one right after a blocking wait of ``waited_s`` at what a turn costs
        after such a wait, one right after the rank's own work (``after_work``) at what it costs
        then. An event that fires when it is done; None without ``calls``."""
        calls = self.platform.spec.calls
        if calls is None:
            return None
        return self._cpu_now(rank, calls.seconds(after_compute, waited_s, after_work), CALL_SPAN)

    def _cpu_now(self, rank: int, seconds: float, name: str) -> simpy.Event | None:
        """``seconds`` of the rank's CPU from now (on its shared cores where it has them), recorded as
        span ``name``; an event that fires when done, None when there is nothing to do."""
        if seconds <= 0:
            return None
        env, start = self.env, self.env.now
        if self._cores is None:
            self.recorder.span(rank, _span_kind(name), name, start, start + seconds)
            self._compute_until[rank] = max(self._compute_until.get(rank, 0.0), start + seconds)
            return env.timeout(seconds)
        done = env.event()
        self._enter_pool(rank)

        def finish() -> None:
            self._leave_pool(rank)
            self._compute_until[rank] = max(self._compute_until.get(rank, 0.0), env.now)
            done.succeed()

        self._stages_on_cores(rank, [(name, seconds * (self.platform.devices[rank].cpus or 1.0))], finish)
        return done

    def inference(self, rank: int, samples: int, run: Callable[[], Any] | None = None,
                  name: str = "inference") -> Request:
        """A forward pass over ``samples`` samples (an algorithm's own evaluation), as busy work.

        ``run()`` (the evaluation's math) is called now; waiting on the request gives its
        result once the forward time of the compute model has passed.
        """
        value = run() if run is not None else None
        return self.busy(rank, self.compute_model.forward_s(rank, int(samples)), name, value)

    def _shared_busy(self, rank: int, duration_s: float, name: str, value: Any = None, owed_s: float = 0.0) -> Request:
        """Busy work on the rank's shared cores, after ``owed_s`` of its sends' overhead; its duration
        emerges from the sharing."""
        env, start, device = self.env, self.env.now, self.platform.devices[rank]
        request = Request("busy", name, env.event(), start)
        if self.on_call is not None:
            self.on_call.computing(rank, request.event)
        self._enter_pool(rank)
        self._compute_until[rank] = max(self._compute_until.get(rank, 0.0), start + owed_s + duration_s)
        cpus = device.cpus or 1.0

        def finish() -> None:
            self._leave_pool(rank)
            self._compute_until[rank] = max(self._compute_until.get(rank, 0.0), env.now)
            request.event.succeed(value)

        stages = ([(OVERHEAD_SPAN, owed_s * cpus)] if owed_s > 0 else []) + [(name, duration_s * cpus)]
        self._stages_on_cores(rank, stages, finish)
        return request


def _span_kind(name: str) -> str:
    """The span kind of CPU work named ``name``: a message call's overhead is communication."""
    return "comm" if name == OVERHEAD_SPAN else "compute"
