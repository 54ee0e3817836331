"""MPIRuntime: the Runtime seam over MPI, with wall-clock time (one OS process per rank).

The same algorithm generators the simulator drives are driven here by
:class:`~simdist.real.driver.MPIDriver` (what it waits on: :mod:`.requests`),
which turns each yielded request into MPI calls and records wall-clock spans into a
:class:`~simdist.recorder.Recorder` with the simulator's schema:

* ``compute`` fetches the batch's tensors out of the dataset (a ``data`` span) and runs the
  real forward/backward at the call, synchronously (its request is already complete when
  yielded; ``at_fraction`` therefore gives no overlap);
* ``send``/``recv``/``poll`` are point-to-point messages (:mod:`.messages`: an mpi4py ``pkl5``
  communicator, buffered sends that complete at the call, matched probes; each message's
  ``comm`` spans and the ``message overhead`` span of its calls, ledger ``comm_cpu``);
* collectives run non-blocking (``Iallreduce``, ``Ibcast``, ``Iallgather``) on a
  communicator per group made with ``Create_group`` at the group's first collective; a tiny
  ``Iallreduce(MAX)`` of arrival times beside each one tells when the last member arrived
  (``wait`` before it, ``comm`` after). Once every member has arrived the data phase is one
  blocking ``Waitall``: it cannot deadlock then, and polling it from Python between sleeps
  would stretch every protocol round trip by a sleep. The call up to the posted requests
  (converting the tensor) is a ``message overhead`` span (``comm_cpu``). While the rank computes with a
  non-blocking collective outstanding, a helper thread (:class:`~.progress.Progress`) tests it every
  millisecond, so that it overlaps the compute as the algorithm means it to (MPI moves it only
  inside MPI calls; a ring allreduce of a few steps is done well inside one forward/backward).
  Testing every 200 µs took 8.7 % of a forward/backward's CPU in that thread (dcs3gd, 4 ranks
  on 2 cores), every millisecond 3.6 %. Collective ``comm`` spans record ``bytes``,
  ``group_size`` (and ``nonblocking``);
* ``busy`` costs nothing extra: the work it models (a server's update) is real here.

Which progress the MPI library itself gives (the simulator's ``platform.progress``) is probed
once at start-up (:func:`~.progress.probe_progress`, about 0.1 s): an ``Iallreduce`` of 4 MiB posted,
20 ms of compute with no MPI call, then ``Wait``, three times. A wait about as long as the
allreduce alone means it moved only inside the wait (``on_call``: MPICH 5.0.2 by default);
one near zero, that it moved meanwhile (``async``: the same MPICH with
``MPIR_CVAR_ASYNC_PROGRESS=1``). Rank 0 records the figures as an ``mpi_progress`` event
(``events.csv``), with whether this runtime's own helper thread was on (it makes the run's
overlap ``async`` whatever the library does).

Waiting: until the awaited peer has arrived, a wait is a test loop that also watches a
control communicator, so a rank can be told to stop (step limit reached elsewhere, every
worker done) while blocked. A rank with a core to itself spins for a while before it sleeps
between tests; a rank sharing its cores with other ranks (ranks > cores) sleeps at once, and
the longer it waits the longer it sleeps between tests (50 µs doubling up to 1 ms; back to
50 µs while a message it sent is in flight), so waiting ranks leave the cores to the computing
ones — what the simulator's processor sharing assumes.
Sleeping 50 µs at a time costs 12 % of a core and wakes the rank 6,000 times a second, each
wake-up taking the core from its computing core-mate; a parameter server on a worker's core
slowed that worker's forward/backwards by 27 % so. At 1 ms: 3 % and 900 wake-ups. A message
that comes while the rank sleeps waits for its next test, about half a sleep on average: a
part of the message cost the pilot calibrates (:mod:`.pilot`).

Half-precision tensors are reduced in float32 and cast back; bfloat16 moves as int16 bits
otherwise.

CPU accounting (:class:`CpuClock`): every span carries ``host_cpu_s``, the rank's CPU
seconds so far spent neither computing nor waiting — the algorithm's own tensor work
(optimizer steps, averaging, payload handling, receiving a message that was already there)
and the driver's — and compute spans carry
their own ``cpu_s`` and ``other_threads_cpu_s``, the CPU the rank's other threads (the
progress thread, MPI's copies in it) took meanwhile: on a shared core that is taken from the
computing ranks. :mod:`.validate` calibrates the simulation's per-step host cost from them.
"""

from __future__ import annotations

import time
import zlib
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from ..errors import SimulationError
from ..ledger import OVERHEAD_SPAN, work_span_name
from ..recorder import Recorder
from ..runtime.base import ANY, GradResult, Group, Message
from ..runtime.payloads import payload_nbytes
from .messages import PointToPoint
from .progress import Progress, probe_progress
from .requests import CollectiveRequest, ComputeRequest, Done, RecvRequest, Request, SendRequest

__all__ = ["MPIWorld", "MPIRuntime", "CpuClock", "CTL_STOP", "CTL_DONE"]

CTL_STOP, CTL_DONE = 1, 2
_PROGRESS_S = 1e-3  # how often outstanding non-blocking collectives are tested during a compute


class CpuClock:
    """One rank's thread CPU time split into compute, waiting and host work (the rest)."""

    def __init__(self):
        self.start_s = time.thread_time()
        self.compute_s = 0.0
        self.wait_s = 0.0

    def host_s(self) -> float:
        """CPU seconds spent on neither compute nor waiting since the clock started."""
        return time.thread_time() - self.start_s - self.compute_s - self.wait_s


def _as_numpy(tensor: torch.Tensor, reduce: bool) -> tuple[np.ndarray, Any]:
    """A contiguous numpy copy of ``tensor`` and the function turning a same-shaped array back."""
    t = tensor.detach().contiguous()
    dtype = t.dtype
    if dtype in (torch.float16, torch.bfloat16):
        if reduce:
            return t.float().numpy().copy(), lambda a: torch.from_numpy(a).to(dtype)
        if dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().copy(), lambda a: torch.from_numpy(a).view(torch.bfloat16)
    return t.numpy().copy(), torch.from_numpy


class MPIWorld(PointToPoint):
    """Shared state of one rank's process in a real run: communicators, clock, recorder."""

    def __init__(self, comm, recorder: Recorder, *, gradient, workers: Iterable[int],
                 stop_steps: int | None = None, time_limit_s: float | None = None, spin: bool = True,
                 progress: bool = True, probe: bool = True, fetch: Callable[[Any], Any] | None = None,
                 epoch_end: Any = None):
        from mpi4py import MPI
        from mpi4py.util import pkl5

        self.MPI = MPI
        self.comm = pkl5.Intracomm(comm.Dup())  # algorithm messages, tensors out of band
        self.ctl = comm.Dup()  # stop / done notices and the final gather
        self._create = comm.Dup()  # Create_group traffic
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.recorder = recorder
        # (replica, batch) -> (flat grad, loss); with ``fetch`` (batch -> its tensors, timed as ``data``) the
        # gradient takes what fetch returned instead of the batch
        self.gradient = gradient
        self.fetch = fetch
        self.epoch_end = epoch_end  # simdist.training.epoch_end.EpochEndRunner, or None: no epoch-end work
        self.last_replica: Any = None  # the replica this rank last computed on (its epoch-end work's state)
        self.workers = tuple(workers)
        self.spin = spin  # this rank has a core to itself: waiting may spin
        self.stop_steps = stop_steps
        self.time_limit_s = time_limit_s
        self.step_limit_hit = False
        self.stop_reason: str | None = None
        self.done_workers: set[int] = set()
        self._comms: dict[tuple[int, ...], Any] = {}
        self._init_messages()
        self._notices: list = []  # fire-and-forget control notices stay referenced until complete
        self._collectives: list = []
        threaded = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        self.progress = Progress(self, _PROGRESS_S) if threaded and progress else None
        # the library's own progress mode, before the clock starts; None when not probed
        self.progress_probe = dict(probe_progress(comm), progress_thread=self.progress is not None) if probe else None
        if self.progress_probe is not None and self.rank == 0:
            recorder.event("mpi_progress", time_s=0.0, rank=0, **self.progress_probe)
        self.restart_clock()

    def pending_collectives(self) -> list["CollectiveRequest"]:
        """Non-blocking collectives issued and not yet completed."""
        return [r for r in self._collectives if not r.done and not r.blocking]

    def restart_clock(self) -> None:
        """Time 0 of the run (and of its CPU accounting) is now, on every rank (collective)."""
        self.comm.Barrier()
        self.t0 = self.comm.bcast(time.perf_counter(), root=0)  # CLOCK_MONOTONIC: one clock per host
        self.cpu = CpuClock()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    # -- groups -------------------------------------------------------------------------

    def comm_for(self, group: Group):
        comm = self._comms.get(group.ranks)
        if comm is None:
            if self.rank not in group:
                raise SimulationError(f"rank {self.rank} uses group {group.ranks} it is not a member of")
            mpi_group = self._create.Get_group().Incl(list(group.ranks))
            tag = zlib.crc32(repr(group.ranks).encode()) % 32000
            comm = self._comms[group.ranks] = self._create.Create_group(mpi_group, tag)
            mpi_group.Free()
        return comm

    # -- collectives ------------------------------------------------------------------------

    def collective(self, kind: str, group: Group, tensor: Any, root: int | None = None,
                   blocking: bool = True) -> CollectiveRequest:
        MPI = self.MPI
        comm = self.comm_for(group)
        arrival, latest = np.array([self.now()]), np.zeros(1)
        requests = [comm.Iallreduce(arrival, latest, MPI.MAX)]
        if kind == "barrier":
            finish, keep = (lambda: None), ()
        elif kind == "allreduce":
            send, back = _as_numpy(tensor, reduce=True)
            recv = np.empty_like(send)
            requests.append(comm.Iallreduce(send, recv, MPI.SUM))
            finish, keep = (lambda: back(recv)), (send,)
        elif kind == "broadcast":
            buf, back = _as_numpy(tensor, reduce=False)
            requests.append(comm.Ibcast(buf, root=group.index(root)))
            finish, keep = (lambda: back(buf)), ()
        elif kind == "allgather":
            if isinstance(tensor, torch.Tensor):
                send, back = _as_numpy(tensor, reduce=False)
                recv = np.empty((group.size,) + send.shape, dtype=send.dtype)
                requests.append(comm.Iallgather(send, recv))
                finish, keep = (lambda: [back(recv[i].copy()) for i in range(group.size)]), (send,)
            else:  # plain numbers (an accuracy)
                send = np.array([float(tensor)])
                recv = np.empty(group.size)
                requests.append(comm.Iallgather(send, recv))
                finish, keep = (lambda: [float(v) for v in recv]), (send,)
        else:
            raise SimulationError(f"unknown collective {kind!r}")
        request = CollectiveRequest(kind, requests, latest, finish, (arrival, keep))
        request.blocking, request.issued_s = blocking, float(arrival[0])
        request.span_args = {"bytes": int(payload_nbytes(tensor)) if isinstance(tensor, torch.Tensor) else 0,
                             "group_size": group.size, **({} if blocking else {"nonblocking": True})}
        self._collectives.append(request)  # buffers must outlive the operation, even one abandoned at a stop
        self._collectives = [r for r in self._collectives if not r.done]
        # the whole call (converting the tensor, posting the operations) is this rank's CPU time in the collective
        self.span("comm", OVERHEAD_SPAN, request.issued_s, self.now())
        return request

    # -- control ---------------------------------------------------------------------------

    def check_control(self) -> None:
        MPI = self.MPI
        status = MPI.Status()
        while self.ctl.iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):
            what = self.ctl.recv(source=status.Get_source(), tag=status.Get_tag())
            if status.Get_tag() == CTL_STOP:
                self.stop_reason = self.stop_reason or what
            else:
                self.done_workers.add(status.Get_source())

    def notify_all(self, tag: int, what: Any) -> None:
        for dst in range(self.size):
            if dst != self.rank:
                self._notices.append(self.ctl.isend(what, dest=dst, tag=tag))

    def finished(self) -> bool:
        return self.stop_reason is not None or set(self.workers) <= self.done_workers

    def epoch_end_work(self, tasks: list) -> None:
        """Do this rank's owed epoch-end work (validation pass, checkpoint) for real, each timed as a span."""
        for task in tasks:
            start, cpu = self.now(), time.thread_time()
            self.epoch_end.perform(self.rank, task, self.last_replica)
            self.cpu.compute_s += time.thread_time() - cpu  # timed apart: not host work between calls
            self.span("compute", self.epoch_end.span_name(task), start, self.now())

    def span(self, kind: str, name: str, start_s: float, end_s: float, **args: Any) -> None:
        """A span of this rank, stamped with its host CPU so far (see :class:`CpuClock`)."""
        self.recorder.span(self.rank, kind, name, start_s, end_s, host_cpu_s=self.cpu.host_s(), **args)

    def record(self, rank: int, kind: str, fields: dict[str, Any]) -> None:
        if kind == "update":
            self.recorder.update(time_s=self.now(), **fields)
            if self.stop_steps is not None and int(fields["step"]) >= self.stop_steps:
                self.step_limit_hit = True
        else:
            self.recorder.event(kind, time_s=self.now(), rank=rank, **fields)


class MPIRuntime:
    """One rank's view of an :class:`MPIWorld` (implements :class:`~simdist.runtime.base.Runtime`)."""

    def __init__(self, world: MPIWorld, rank: int):
        if rank != world.rank:
            raise SimulationError(f"an MPI process is rank {world.rank}; it cannot act as rank {rank}")
        self.world = world
        self.rank = rank
        self.world_size = world.size

    def now(self) -> float:
        return self.world.now()

    def compute(self, replica: Any, batch: Any) -> ComputeRequest:
        """Fetch the batch's tensors (a ``data`` span, the simulator's data loading) and run the
        forward/backward on them (the ``forward/backward`` span), at the call."""
        world = self.world
        if world.epoch_end is not None:  # the last epoch's validation and checkpoint come first
            world.epoch_end_work(world.epoch_end.schedule.before_batch(self.rank, batch))
            world.last_replica = replica
        inputs, start = batch, self.now()
        if world.fetch is not None:  # the forward/backward starts where the data span ends (the ledger's step)
            fetch_cpu = time.thread_time()
            inputs = world.fetch(batch)
            fetched_s = self.now()
            world.cpu.compute_s += time.thread_time() - fetch_cpu  # timed as data: not the per-step host work
            world.span("compute", "data", start, fetched_s)
            start = fetched_s
        cpu, process_cpu = time.thread_time(), time.process_time()
        if world.progress is not None:
            with world.progress.during():
                grad, loss = world.gradient(replica, inputs)
        else:
            grad, loss = world.gradient(replica, inputs)
        cpu = time.thread_time() - cpu
        others = max(0.0, time.process_time() - process_cpu - cpu)
        end = self.now()
        world.cpu.compute_s += cpu
        world.span("compute", "forward/backward", start, end, batch_size=int(batch.size), cpu_s=cpu,
                   other_threads_cpu_s=others)
        return ComputeRequest(GradResult(grad, loss, int(batch.size), start, end))

    def busy(self, duration_s: float, name: str = "busy", *, part: str | None = None,
             run: Callable[..., Any] | None = None, inputs: Sequence[Any] = (), lazy: bool = False) -> Request:
        """``run(*inputs)`` timed as the algorithm's own work (``duration_s`` is the simulator's model
        of it). Inputs are values already (``lazy`` changes nothing here)."""
        name = work_span_name(name, part)
        if run is None:
            return Done("busy", name, self.now())  # the work is done for real in the caller, untimed
        world = self.world
        start, cpu = self.now(), time.thread_time()
        value = run(*inputs)
        world.cpu.compute_s += time.thread_time() - cpu  # timed apart: not host work between calls
        world.span("compute", name, start, self.now())
        return Done("busy", name, start, value)

    def inference(self, samples: int, run: Callable[[], Any] | None = None, name: str = "inference") -> Request:
        """``run()`` timed as compute (no ``cpu_s``: compute profiles are fitted to forward/backwards only)."""
        world = self.world
        start, cpu = self.now(), time.thread_time()
        value = run() if run is not None else None
        cpu = time.thread_time() - cpu
        world.cpu.compute_s += cpu
        world.span("compute", name, start, self.now(), samples=int(samples), inference_cpu_s=cpu)
        return Done("compute", name, start, value)

    def send(self, dst: int, payload: Any, tag: int = 0, *, handover: bool = False) -> SendRequest:
        """A buffered send: the payload is serialised at the call, so handing it over saves nothing here."""
        return self.world.send(dst, payload, tag)

    def recv(self, src: int = ANY, tag: int = ANY) -> RecvRequest:
        return RecvRequest(self.world, self.rank, src, tag)

    def poll(self, src: int = ANY, tag: int = ANY) -> Message | None:
        """An arrived message, taken in at the call (a ``message overhead`` span: LogGP's ``o_r``), or None."""
        start = self.now()
        message = self.world.poll(self.rank, src, tag)
        if message is not None:
            self.world.span("comm", OVERHEAD_SPAN, start, self.now())
        return message

    def allreduce(self, group: Group, tensor: Any, *, algorithm: str | None = None) -> CollectiveRequest:
        return self.world.collective("allreduce", group, tensor)

    def iallreduce(self, group: Group, tensor: Any, *, algorithm: str | None = None) -> CollectiveRequest:
        return self.world.collective("allreduce", group, tensor, blocking=False)

    def broadcast(self, group: Group, tensor: Any, root: int) -> CollectiveRequest:
        return self.world.collective("broadcast", group, tensor, root=root)

    def allgather(self, group: Group, tensor: Any) -> CollectiveRequest:
        return self.world.collective("allgather", group, tensor)

    def barrier(self, group: Group) -> CollectiveRequest:
        return self.world.collective("barrier", group, None)

    def group(self, ranks: Iterable[int], name: str = "") -> Group:
        return Group(tuple(int(r) for r in ranks), name)

    def record(self, kind: str, *, run_wide: bool = False, **fields: Any) -> None:
        self.world.record(self.rank, kind, fields)
