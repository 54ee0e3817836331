"""MPI sweep run under ``mpiexec`` by ``simdist calibrate network`` (ping-pong, LogP overheads, allreduce).

    mpiexec -n 2 python -m simdist.calibrate.mpi_worker --out sweep.json [--sizes 0,1,..] [--budget-s 0.25]

Rank 0 ping-pongs with one peer of each link class — the first rank on its own host
(``intra``) and the first on another host (``inter``) — and measures the LogP send and
receive overheads and the gap of small messages with it (:func:`_overheads`), the same
overheads of 1 MiB messages, whose difference per byte is LogGOPS's ``O``, and the small
messages' again with cold caches (:func:`_cold_overheads`), while the other ranks wait; then all
ranks run ``MPI_Allreduce`` and ``MPI_Bcast`` (from rank 0) on float32 buffers, and with
``--after-compute`` the allreduce once more right after the scenario's training step, entering
together (:func:`_allreduce_after_step`); with ``--path runtime`` rank 0 then times its
host work right after idling (:func:`_after_idle`) and the runtime driver's turn between two
requests, with warm caches and with cold ones (:func:`_calls`). Every size gets two warm-up
operations and a probe (the fastest of three) that sets its repetition count so the size takes about
``budget_s``; then ``batches`` round-robin passes over all sizes time one batch of each (a
batch's time over its repetitions, halved for a round trip, is one sample). The median of a
size's samples is kept with their min and max. Collective samples are the slowest rank's
time of a batch (MPI_MAX), each call timed from a barrier the ranks leave together. The ranks
outside a ping-pong sleep while they wait for it (:func:`quiet_barrier`), so that on shared
cores they do not slow the pair down.

Rank 0 writes one JSON document; this module imports only mpi4py and numpy, so ranks start fast.
``--path runtime`` times the same operations through simdist's MPI runtime instead
(:mod:`.runtime_sweep`, which imports torch).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .sweep_timing import (AFTER_STEP_SIZES, after_step_sweep, cache_evictor, cache_flush_bytes, drained_overheads,
                           entering_together, logp_overheads, pair_repetitions, repetitions, sweep)

__all__ = ["DEFAULT_SIZES", "main"]

DEFAULT_SIZES = tuple([0] + [2**k for k in range(23)])  # 0 B, 1 B ... 4 MiB
_TAG = 7


def _pingpong(comm, peer: int, sizes: Sequence[int], budget_s: float, batches: int) -> list[dict]:
    """One-way times (half the round trip) between rank 0 and ``peer``."""
    rank = comm.Get_rank()
    buf = np.zeros(max(sizes) if sizes else 1, dtype=np.uint8)

    def timed(size: int, n: int) -> float:
        view = buf[:size]
        start = time.perf_counter()
        for _ in range(n):
            if rank == 0:
                comm.Send([view, size], dest=peer, tag=_TAG)
                comm.Recv([view, size], source=peer, tag=_TAG)
            else:
                comm.Recv([view, size], source=0, tag=_TAG)
                comm.Send([view, size], dest=0, tag=_TAG)
        return (time.perf_counter() - start) / (2 * n)

    def decide(size: int, probe_s: float) -> int:
        return pair_repetitions(comm, peer, probe_s, budget_s, batches, _TAG + 1)

    return sweep(sizes, timed, decide, budget_s, batches)


PER_BYTE_SIZE, PER_BYTE_MESSAGES = 1 << 20, 64  # the large messages whose overheads give the per-byte slope
COLD_MESSAGES = 64  # small messages timed with cold caches (each after a write of twice the largest cache)


def _overheads(comm, peer: int, count: int = 2000, size: int = 8,
               before_each: Callable[[], None] | None = None, drained: bool = False) -> dict[str, float] | None:
    """LogP overheads of ``Isend`` (the call returns once the eager message is buffered) and of a
    ``Recv`` of a message already there, between rank 0 and ``peer`` (:func:`.sweep_timing.logp_overheads`;
    ``drained``: each message taken in before the next, :func:`.sweep_timing.drained_overheads`)."""
    buf = np.zeros(size, dtype=np.uint8)
    calls = dict(post=lambda: comm.Isend([buf, size], dest=peer, tag=_TAG + 2),
                 settle=lambda requests: [request.Wait() for request in requests],
                 receive=lambda: comm.Recv([buf, size], source=0, tag=_TAG + 2), count=count, size=size, tag=_TAG + 3)
    if drained:
        return drained_overheads(comm, peer, **calls)
    return logp_overheads(comm, peer, **calls, before_each=before_each)


def cold_state(after_compute: str | None) -> tuple[Callable[[], None], dict[str, Any]]:
    """What runs, untimed, before each call timed with cold caches, and how the document says so.

    In a training step the first call after the forward/backward finds the caches full of the
    step's data. With ``after_compute`` (a scenario file) that is what runs: one forward,
    backward and optimizer step of the scenario's workload at its batch size, on the CPU.
    Without, a :func:`.sweep_timing.cache_evictor` writes twice the largest cache the OS
    reports: a bound, colder than a small model's step leaves a host with a large L3.
    """
    if after_compute is None:
        evicted = cache_flush_bytes()
        return cache_evictor(evicted), {"evicted_bytes": evicted}
    from .compute_scenario import plan_scenario  # imports torch: only when asked for (one thread: OMP_NUM_THREADS)
    from .timed_steps import cpu_training_step

    target = plan_scenario(after_compute, "cpu")
    step = cpu_training_step(target.workload, target.scenario.workload.batch_size)
    step()  # the first step allocates what the others reuse
    return step, {"after_compute": target.scenario.name, "batch_size": int(target.scenario.workload.batch_size)}


def _cold_overheads(overheads_of, peer: int, cold: tuple[Callable[[], None], dict[str, Any]]) -> dict[str, Any] | None:
    """The overheads of small messages again, each call with cold caches (``cold``'s call runs
    before it on both ranks, :func:`cold_state`): the library's code and state then come from
    memory (the overlay's ``*_overhead_after_compute``)."""
    before_each, described = cold
    timed = overheads_of(peer, count=COLD_MESSAGES, size=8, before_each=before_each)
    return None if timed is None else {**timed, **described}


def _per_byte_overheads(overheads_of, peer: int) -> dict[str, Any] | None:
    """The overheads of large messages and, as their ``baseline``, of small ones, each message
    taken in before the next is posted, as in a run (:func:`.sweep_timing.drained_overheads`):
    the rise per byte between the two is LogGOPS ``O`` (:func:`.overlay.per_byte_overheads`)."""
    small = overheads_of(peer, count=PER_BYTE_MESSAGES, size=8, drained=True)
    large = overheads_of(peer, count=PER_BYTE_MESSAGES, size=PER_BYTE_SIZE, drained=True)
    return None if large is None else {**large, "baseline": small}


CALL_TURNS, COLD_CALL_TURNS = 2000, 64  # driver turns timed with warm caches, and each after a cache flush


def _calls(calls_of, comm, cold: tuple[Callable[[], None], dict[str, Any]]) -> dict[str, Any] | None:
    """The runtime driver's turn between two requests on rank 0 (the platform's ``calls``), warm
    and each after ``cold``'s call (as right after a forward/backward, :func:`cold_state`),
    while the other ranks wait; None on them. Last in the sweep: a driver that ends announces
    its rank done to the others."""
    timed = None
    if comm.Get_rank() == 0:
        before_each, described = cold
        warm = calls_of(CALL_TURNS)
        after = calls_of(COLD_CALL_TURNS, before_each)
        timed = {"overhead_s": warm["overhead_s"], "turns": warm["turns"],
                 "overhead_after_compute_s": after["overhead_s"], "cold_turns": after["turns"], **described}
    quiet_barrier(comm)
    return timed


def _after_idle(runtime_path, comm, hosts: list[str], after_compute: str | None,
                cold: tuple[Callable[[], None], dict[str, Any]]) -> dict[str, Any] | None:
    """Rank 0's turn, update and send right after waiting, woken by its nearest peer
    (:mod:`.idle_sweep`), which runs ``cold``'s training step meanwhile where it is one (a
    scenario given), while the other ranks wait; the document on rank 0, None elsewhere."""
    from .idle_sweep import after_idle, idle_update

    peers = _peers(hosts)
    peer, rank, timed = peers.get("intra", peers.get("inter")), comm.Get_rank(), None
    step = None if after_compute is None else (cold[0], f"training steps of {after_compute}")
    if rank in (0, peer):
        timed = after_idle(runtime_path, peer, idle_update(after_compute), busy=step)
    quiet_barrier(comm)
    return timed


def _allreduce(comm, sizes: Sequence[int], budget_s: float, batches: int) -> list[dict]:
    """Time per MPI_Allreduce of float32 buffers: the slowest rank's, each after a barrier."""
    from mpi4py import MPI

    return _library_collective(comm, lambda send, recv: comm.Allreduce(send, recv, op=MPI.SUM), sizes, budget_s,
                               batches)


def _broadcast(comm, sizes: Sequence[int], budget_s: float, batches: int) -> list[dict]:
    """Time per MPI_Bcast of a float32 buffer from rank 0: the slowest rank's, each after a barrier."""
    return _library_collective(comm, lambda send, _recv: comm.Bcast(send, root=0), sizes, budget_s, batches)


def _library_collective(comm, call, sizes: Sequence[int], budget_s: float, batches: int) -> list[dict]:
    from mpi4py import MPI

    counts = sorted({s // 4 for s in sizes if s >= 4})
    buffers = {c: (np.ones(c, dtype=np.float32), np.empty(c, dtype=np.float32)) for c in counts}

    def timed(size: int, n: int) -> float:
        send, recv = buffers[size // 4]
        return comm.allreduce(entering_together(lambda: call(send, recv), comm.Barrier, n), op=MPI.MAX) / n

    def decide(size: int, probe_s: float) -> int:
        return repetitions(probe_s, budget_s, batches)  # the same everywhere: the probe is an allreduce result

    return sweep([4 * c for c in counts], timed, decide, budget_s, batches)


def _library_allreduce_after_step(comm, sizes: Sequence[int], step: Callable[[], None], rounds: int) -> list[dict]:
    """MPI_Allreduce of float32 buffers right after ``step`` on every rank, entering together."""
    from mpi4py import MPI

    buffers = {s: (np.ones(s // 4, dtype=np.float32), np.empty(s // 4, dtype=np.float32)) for s in sizes if s >= 4}

    def call(size: int) -> None:
        send, recv = buffers[size]
        comm.Allreduce(send, recv, op=MPI.SUM)

    return after_step_sweep(sorted(buffers), call, step, comm.Barrier, lambda s: comm.allreduce(s, op=MPI.MAX), rounds)


AFTER_STEP_ROUNDS = 9  # rounds of the allreduce after a step, per size (each costs a training step)


def _allreduce_after_step(allreduce_after_of, comm, args: argparse.Namespace, sizes: Sequence[int],
                          cold: tuple[Callable[[], None], dict[str, Any]]) -> dict[str, Any] | None:
    """The allreduce right after the scenario's training step on every rank, at the powers of 4
    up to the sweep's largest size (``--after-compute``; None without one: a cache flush is not
    the state a run's collective finds)."""
    timed = [s for s in AFTER_STEP_SIZES if s <= max(sizes, default=0)]
    if args.after_compute is None or args.no_allreduce or comm.Get_size() < 2 or len(timed) < 2:
        return None
    step, described = cold
    return {"rows": allreduce_after_of(timed, step, AFTER_STEP_ROUNDS), **described}


@dataclass(frozen=True)
class _Operations:
    """What a sweep times, on the MPI library's calls or through simdist's runtime (``runtime``;
    the library has no driver: ``calls`` and ``runtime`` None)."""

    pingpong: Callable
    overheads: Callable
    allreduce: Callable
    broadcast: Callable
    allreduce_after_step: Callable
    calls: Callable | None
    runtime: Any


def _operations(comm, path: str) -> _Operations:
    if path == "runtime":
        from .runtime_sweep import RuntimePath  # imports torch and the runtime: only when asked for

        runtime = RuntimePath(comm)
        return _Operations(runtime.pingpong, runtime.overheads, runtime.allreduce, runtime.broadcast,
                           runtime.allreduce_after_step, runtime.calls, runtime)
    return _Operations((lambda peer, sizes, budget_s, batches: _pingpong(comm, peer, sizes, budget_s, batches)),
                       (lambda peer, **sizes: _overheads(comm, peer, **sizes)),
                       (lambda sizes, budget_s, batches: _allreduce(comm, sizes, budget_s, batches)),
                       (lambda sizes, budget_s, batches: _broadcast(comm, sizes, budget_s, batches)),
                       (lambda sizes, step, rounds: _library_allreduce_after_step(comm, sizes, step, rounds)),
                       None, None)


def quiet_barrier(comm, poll_s: float = 0.001) -> None:
    """A barrier that sleeps while it waits. The ranks outside a ping-pong wait here for it to end;
    MPI's blocking barrier would poll on their cores, and where ranks share cores that polling
    would be timed as part of the pair's messages."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(poll_s)


def _peers(hosts: list[str]) -> dict[str, int]:
    peers = {}
    same = [r for r in range(1, len(hosts)) if hosts[r] == hosts[0]]
    other = [r for r in range(1, len(hosts)) if hosts[r] != hosts[0]]
    if same:
        peers["intra"] = same[0]
    if other:
        peers["inter"] = other[0]
    return peers


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m simdist.calibrate.mpi_worker",
                                     description="MPI ping-pong and allreduce sweep (run under mpiexec).")
    parser.add_argument("--out", required=True, help="JSON file rank 0 writes")
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="message sizes in bytes")
    parser.add_argument("--budget-s", type=float, default=0.25, help="approximate seconds per size and sweep")
    parser.add_argument("--batches", type=int, default=7, help="timed batches per size (median kept)")
    parser.add_argument("--no-allreduce", action="store_true", help="skip the collective sweeps (allreduce, broadcast)")
    parser.add_argument("--path", choices=("mpi", "runtime"), default="mpi",
                        help="mpi: the MPI library's calls; runtime: simdist's MPI runtime (simdist.calibrate.runtime_sweep)")
    parser.add_argument("--after-compute", help="scenario file: calls timed with cold caches follow one training "
                                                "step of its workload (default: a write of twice the largest cache)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    hosts = comm.allgather(MPI.Get_processor_name() or socket.gethostname())
    started = time.perf_counter()
    ops = _operations(comm, args.path)
    cold_calls = cold_state(args.after_compute)
    pingpong = {}
    for link_class, peer in _peers(hosts).items():
        if rank in (0, peer):
            rows = ops.pingpong(peer, sizes, args.budget_s, args.batches)
            overheads = ops.overheads(peer)
            large = _per_byte_overheads(ops.overheads, peer)  # LogGOPS O: the slope
            cold = _cold_overheads(ops.overheads, peer, cold_calls)  # o_s, o_r of the first call after compute
            if rank == 0:
                overheads["large"], overheads["cold"] = large, cold
                pingpong[link_class] = {"peer": peer, "rows": rows, "overheads": overheads}
        quiet_barrier(comm)
    collectives = not args.no_allreduce and size >= 2
    allreduce = ops.allreduce(sizes, args.budget_s, args.batches) if collectives else []
    broadcast = ops.broadcast(sizes, args.budget_s, args.batches) if collectives else []
    allreduce_after = _allreduce_after_step(ops.allreduce_after_step, comm, args, sizes, cold_calls)
    idle = None if ops.runtime is None else _after_idle(ops.runtime, comm, hosts, args.after_compute, cold_calls)
    calls = None if ops.calls is None else _calls(ops.calls, comm, cold_calls)
    if rank == 0:
        wait_loop = None
        if args.path == "runtime":
            from .runtime_sweep import measure_wait_loop

            wait_loop = measure_wait_loop()
        document = {"ranks": size, "hosts": hosts, "path": args.path,
                    "mpi_library": MPI.Get_library_version().strip().splitlines()[0],
                    "mpi4py": __import__("mpi4py").__version__, "sizes": sizes, "budget_s": args.budget_s,
                    "batches": args.batches, "pingpong": pingpong, "allreduce": allreduce,
                    "broadcast": broadcast, "allreduce_after_compute": allreduce_after, "calls": calls,
                    "wait_loop": wait_loop, "after_idle": idle,
                    "elapsed_s": time.perf_counter() - started}
        with open(args.out, "w") as fh:
            json.dump(document, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
