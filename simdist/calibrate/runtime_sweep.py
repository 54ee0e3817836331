"""The network sweep through simdist's own MPI runtime: what a message or allreduce costs a real run.

``simdist calibrate network`` times the MPI library by default (``MPI_Send``/``MPI_Recv``
ping-pong, ``MPI_Allreduce``): right for predicting a job whose communication is the library
itself. A job run by simdist's MPI runtime (:mod:`simdist.real.runtime`: ``simdist
validate``) pays more per operation: a point-to-point message is a pickled payload sent with
a buffered non-blocking send (a copy into the attached buffer) and taken in by a matched
probe and receive; an allreduce converts its tensor to a NumPy buffer, first agrees on the
ranks' arrival times (a one-element ``Iallreduce``), and is completed by the driver's test
loop (spinning, then sleeping). ``--path runtime`` times exactly that code path with the same
sweep as the library's (:mod:`.sweep_timing`: sizes, probe, round-robin batches, medians), so
the overlay it writes prices a simdist run's communication as the runtime does it, from a
microbenchmark, without running the job.

* ping-pong: rank 0 ``send``s a ``uint8`` tensor of the size to its peer and waits for it to
  come back (``recv`` through :class:`~simdist.real.driver.MPIDriver`); one-way time is half
  the round trip;
* LogP overheads: posting a small ``send`` (the sender's CPU until the call returns) and
  receiving one that has already arrived;
* allreduce and broadcast (from rank 0): the runtime's blocking collective of a float32 tensor,
  the slowest rank's time per operation, each entered together after a barrier
  (:func:`.sweep_timing.entering_together`);
* allreduce after a step (with ``--after-compute``): the same call right after the scenario's
  training step on every rank, the ranks entering together (:meth:`RuntimePath.allreduce_after_step`);
* the driver's turn between two requests (:meth:`RuntimePath.calls`), with warm and with cold
  caches: the platform's ``calls``.

The ranks wait as in a run: they spin only where :func:`~simdist.real.placement.rank_spins`
lets them (a core of their own), and MPI's progress thread runs where the library is threaded.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from .sweep_timing import (after_step_sweep, drained_overheads, entering_together, logp_overheads, pair_repetitions,
                           repetitions, sweep)

__all__ = ["RuntimePath"]

_TAG = 11


class RuntimePath:
    """The runtime's send, receive and allreduce on one rank, for the sweep's ``timed`` callables."""

    def __init__(self, comm: Any):
        import torch

        from ..real.placement import rank_spins
        from ..real.driver import MPIDriver
        from ..real.runtime import MPIRuntime, MPIWorld
        from ..recorder import Recorder

        self.torch = torch
        size = comm.Get_size()
        self.recorder = Recorder()
        self.world = MPIWorld(comm, self.recorder, gradient=None, workers=range(size), probe=False,
                              spin=rank_spins(comm.Get_rank(), size, None))
        self.driver = MPIDriver(self.world)
        self.rt = MPIRuntime(self.world, self.world.rank)
        self.everyone = self.rt.group(range(size), "world")

    def forget(self) -> None:
        """Drop the spans recorded so far: a sweep's own spans are not wanted (memory stays flat)."""
        self.recorder.spans.clear()

    def turn(self) -> Any:
        """A request of no work: yielded to the driver, what it times is the driver's turn."""
        return self.rt.busy(0.0, "update", run=_nothing)

    def pingpong(self, peer: int, sizes: Sequence[int], budget_s: float, batches: int) -> list[dict]:
        """One-way times (half the round trip) between rank 0 and ``peer`` through the runtime."""
        rt, driver, world = self.rt, self.driver, self.world
        rank = world.rank
        payloads = {size: self.torch.zeros(size, dtype=self.torch.uint8) for size in sizes}

        def timed(size: int, n: int) -> float:
            payload = payloads[size]
            start = time.perf_counter()
            for _ in range(n):
                if rank == 0:
                    rt.send(peer, payload, _TAG)
                    driver.wait(rt.recv(peer, _TAG))
                else:
                    driver.wait(rt.recv(0, _TAG))
                    rt.send(0, payload, _TAG)
            elapsed = (time.perf_counter() - start) / (2 * n)
            self.forget()
            return elapsed

        def decide(size: int, probe_s: float) -> int:
            return pair_repetitions(world.comm, peer, probe_s, budget_s, batches, _TAG + 1)

        return sweep(sizes, timed, decide, budget_s, batches)

    def overheads(self, peer: int, count: int = 2000, size: int = 8,
                  before_each: Callable[[], None] | None = None, drained: bool = False) -> dict[str, float] | None:
        """LogP overheads of the runtime's send and receive between rank 0 and ``peer`` (rank 0 sends;
        :func:`.sweep_timing.logp_overheads`; ``drained``: each message taken in before the next,
        :func:`.sweep_timing.drained_overheads`)."""
        rt, driver = self.rt, self.driver
        payload = self.torch.zeros(size, dtype=self.torch.uint8)
        calls = dict(post=lambda: rt.send(peer, payload, _TAG + 2),
                     settle=lambda _sends: self.forget(),  # buffered: complete at the call
                     receive=lambda: driver.wait(rt.recv(0, _TAG + 2)), count=count, size=size, tag=_TAG + 3)
        if drained:
            return drained_overheads(self.world.comm, peer, **calls)
        return logp_overheads(self.world.comm, peer, **calls, before_each=before_each)

    def allreduce(self, sizes: Sequence[int], budget_s: float, batches: int) -> list[dict]:
        """Time per runtime ``allreduce`` of a float32 tensor: the slowest rank's, each after a barrier."""
        return self._collective(lambda tensor: self.rt.allreduce(self.everyone, tensor), sizes, budget_s, batches)

    def broadcast(self, sizes: Sequence[int], budget_s: float, batches: int) -> list[dict]:
        """Time per runtime ``broadcast`` of a float32 tensor from rank 0: the slowest rank's, each after a barrier."""
        return self._collective(lambda tensor: self.rt.broadcast(self.everyone, tensor, 0), sizes, budget_s, batches)

    def _collective(self, call: Callable[[Any], Any], sizes: Sequence[int], budget_s: float,
                    batches: int) -> list[dict]:
        from mpi4py import MPI

        driver, world = self.driver, self.world
        counts = sorted({s // 4 for s in sizes if s >= 4})
        tensors = {c: self.torch.ones(c, dtype=self.torch.float32) for c in counts}

        def timed(size: int, n: int) -> float:
            tensor = tensors[size // 4]
            spent = entering_together(lambda: driver.wait(call(tensor)), world.ctl.Barrier, n)
            self.forget()
            return world.ctl.allreduce(spent, op=MPI.MAX) / n

        def decide(size: int, probe_s: float) -> int:
            return repetitions(probe_s, budget_s, batches)  # the probe is an allreduce result: the same everywhere

        return sweep([4 * c for c in counts], timed, decide, budget_s, batches)

    def allreduce_after_step(self, sizes: Sequence[int], step: Callable[[], None], rounds: int) -> list[dict]:
        """The runtime's blocking ``allreduce`` of a float32 tensor right after ``step`` on every
        rank, the ranks entering together (:func:`.sweep_timing.after_step_sweep`)."""
        from mpi4py import MPI

        rt, driver, world = self.rt, self.driver, self.world
        tensors = {s: self.torch.ones(s // 4, dtype=self.torch.float32) for s in sizes if s >= 4}

        def forget_then_step() -> None:  # the last call's spans dropped outside its timed window
            self.forget()
            step()

        return after_step_sweep(sorted(tensors), lambda size: driver.wait(rt.allreduce(self.everyone, tensors[size])),
                                forget_then_step, world.ctl.Barrier, lambda s: world.ctl.allreduce(s, op=MPI.MAX),
                                rounds)

    def calls(self, count: int, before_each: Callable[[], None] | None = None) -> dict[str, float]:
        """Median CPU-bound time of the driver's turn between two requests, on this rank alone.

        A generator yields ``count`` requests of no work (``busy`` with an empty ``run``) to the
        runtime's driver (:meth:`~simdist.real.driver.MPIDriver.drive`); each turn is timed from
        just before the request is made to the generator's resumption: the request's span
        recorded, the driver's stop check (a probe of the control communicator), its wait on a
        done request and the generator resumed. ``before_each`` runs untimed before every turn
        (a cache evictor: turns with cold caches). Drive only on one rank, while the others
        wait: a rank whose driver ends tells the others it is done.
        """
        turns = []

        def requests():
            for _ in range(count):
                if before_each is not None:
                    before_each()
                start = time.perf_counter()
                yield self.turn()
                turns.append(time.perf_counter() - start)

        self.driver.drive(requests())
        self.forget()
        return {"overhead_s": float(np.median(turns)), "turns": count}


def _nothing() -> None:
    return None


OVERSHOOT_SLEEPS = 200  # sleeps timed for the host's overshoot


def measure_wait_loop(sleeps: int = OVERSHOOT_SLEEPS) -> dict[str, float]:
    """The runtime's waiting loop (:mod:`simdist.real.driver`'s constants) and how much longer than
    asked its first sleep lasts on this host (the median of ``sleeps``)."""
    from ..real import driver

    late = []
    for _ in range(sleeps):
        start = time.perf_counter()
        time.sleep(driver.SLEEP_S)
        late.append(time.perf_counter() - start - driver.SLEEP_S)
    return {"first_sleep_s": driver.SLEEP_S, "max_sleep_s": driver.SLEEP_MAX_S, "spin_s": driver.SPIN_S,
            "sleep_overshoot_s": max(0.0, float(np.median(late))), "sleeps": sleeps}


def wait_loop_section(document: dict[str, Any]) -> dict[str, Any] | None:
    """``messages.wait_loop`` from a runtime-path sweep's measured loop (None without one)."""
    loop = document.get("wait_loop")
    if not loop:
        return None
    return {"first_sleep": loop["first_sleep_s"], "max_sleep": loop["max_sleep_s"], "spin": loop["spin_s"],
            "sleep_overshoot": loop["sleep_overshoot_s"],
            "source": (f"simdist's MPI runtime waiting loop (simdist/real/driver.py: first sleep, doubling to the "
                       f"longest where ranks share cores, spin where a rank has a core); overshoot: the median of "
                       f"{loop['sleeps']} sleeps of the first length on rank 0, less that length")}
