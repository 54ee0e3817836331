"""How the network sweeps time an operation: a probe per size, then round-robin batches, medians kept.

Shared by the MPI library's sweep (:mod:`.mpi_worker`) and the runtime's (:mod:`.runtime_sweep`),
so both measure alike. Imports only NumPy: MPI ranks start fast.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["repetitions", "sweep", "entering_together", "after_step_sweep", "AFTER_STEP_SIZES", "pair_repetitions",
           "logp_overheads", "drained_overheads", "cache_evictor", "cache_flush_bytes"]


def cache_flush_bytes(cache_dir: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """Twice the largest CPU cache the OS reports (64 MiB when it reports none), at most 1 GiB:
    enough written bytes to evict a buffer from every level."""
    sizes = []
    for entry in (os.listdir(cache_dir) if os.path.isdir(cache_dir) else ()):
        try:
            with open(os.path.join(cache_dir, entry, "size")) as handle:
                text = handle.read().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return min(2 * max(sizes), 1 << 30) if sizes else 64 << 20


def cache_evictor(nbytes: int | None = None) -> Callable[[], None]:
    """A call that writes ``nbytes`` (default :func:`cache_flush_bytes`) of a buffer of its own, so
    that what a timed call touches next comes from memory, as it does after a training step's
    compute has filled the caches with its own data."""
    buffer = np.zeros(nbytes or cache_flush_bytes(), dtype=np.uint8)

    def evict() -> None:
        np.add(buffer, 1, out=buffer)

    return evict


def repetitions(probe_s: float, budget_s: float, batches: int, lo: int = 2, hi: int = 100_000) -> int:
    """Operations per timed batch so that ``batches`` batches take about ``budget_s``, given one took ``probe_s``."""
    return int(min(hi, max(lo, budget_s / batches / max(probe_s, 1e-7))))


def sweep(sizes: Sequence[int], timed, decide_reps, budget_s: float, batches: int) -> list[dict]:
    """Probe every size, then ``batches`` round-robin passes over the sizes (one batch each).

    ``timed(size, n)`` runs ``n`` operations of ``size`` bytes and returns seconds per
    operation; ``decide_reps(size, probe_s)`` turns a probe into a repetition count every
    rank agrees on. Spreading a size's batches over the whole sweep means a burst of other
    work on the machine hits one batch of many sizes, not every batch of a few: the median
    stays clean.
    """
    reps = {}
    for size in sizes:
        timed(size, 2)
        reps[size] = decide_reps(size, min(timed(size, 1) for _ in range(3)))
    samples: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(batches):
        for size in sizes:
            samples[size].append(timed(size, reps[size]))
    return [{"size_bytes": int(size), "median_s": float(np.median(v)), "min_s": float(min(v)), "max_s": float(max(v)),
             "reps": reps[size], "batches": batches} for size, v in samples.items()]


def entering_together(call: Callable[[], None], barrier: Callable[[], None], n: int) -> float:
    """Seconds this rank spent in ``n`` calls of a collective, each timed from a ``barrier`` the
    ranks leave together. Back to back, a rank enters each call when it left the last one: on
    ranks that outnumber their cores the ranks leave at different times, and the early ones
    sleep in the runtime's waiting loop until the last comes, so a small collective's time is
    their arrival skew and wake-ups (4 ranks on 2 cores, simdist's runtime: 5.1 ms per 4-B
    allreduce back to back, 1.0 ms entering together). The simulator models both apart (the
    ranks' own arrivals, ``messages.wait_loop``): a table holds the collective alone."""
    total = 0.0
    for _ in range(n):
        barrier()
        start = time.perf_counter()
        call()
        total += time.perf_counter() - start
    return total


# sizes of the collective timed right after a training step: every power of 4 from 4 B to 4 MiB
# (each timed call costs a step, so the table is sparser than the warm sweep's powers of 2)
AFTER_STEP_SIZES = tuple(4 ** k for k in range(1, 12))


def after_step_sweep(sizes: Sequence[int], call: Callable[[int], None], step: Callable[[], None],
                     barrier: Callable[[], None], slowest: Callable[[float], float], rounds: int) -> list[dict]:
    """A collective timed as a training step calls it: right after the step, every rank together.

    Each round runs, for every size in turn, ``step`` (the scenario's forward, backward and
    optimizer step) on every rank, ``barrier`` so the ranks enter together (their arrival
    skew is not the collective's: the simulator models it apart), then one ``call(size)``
    timed; ``slowest`` turns a rank's time into the slowest rank's (every rank gets it). The
    median over ``rounds`` rounds is kept per size. Round-robin over the sizes, as
    :func:`sweep`, so a burst on the host hits one round of many sizes.
    """
    samples: dict[int, list[float]] = {int(size): [] for size in sizes}
    for _ in range(rounds):
        for size in samples:
            step()
            samples[size].append(slowest(entering_together(lambda: call(size), barrier, 1)))
    return [{"size_bytes": size, "median_s": float(np.median(v)), "min_s": float(min(v)), "max_s": float(max(v)),
             "rounds": rounds} for size, v in samples.items()]


def pair_repetitions(comm: Any, peer: int, probe_s: float, budget_s: float, batches: int, tag: int) -> int:
    """A ping-pong's repetitions, decided by rank 0 from its round-trip probe and sent to ``peer``
    (``comm``: any communicator with pickling ``send``/``recv``)."""
    if comm.Get_rank() == 0:
        reps = repetitions(2 * probe_s, budget_s, batches)
        comm.send(reps, dest=peer, tag=tag)
        return reps
    return comm.recv(source=0, tag=tag)


def logp_overheads(comm: Any, peer: int, post: Callable[[], Any], settle: Callable[[list], None],
                   receive: Callable[[], None], *, count: int, size: int, tag: int,
                   before_each: Callable[[], None] | None = None) -> dict[str, float] | None:
    """LogP overheads between rank 0 and ``peer``, as Culler et al. measure them (rank 0 sends).

    Rank 0 ``post()``s ``count`` small messages, timing each call (``send_overhead_s``: how long
    posting one keeps the sender) and the whole stream (``gap_s`` per message), then
    ``settle``s what the posts returned. ``peer`` sleeps until all have arrived, then times each
    ``receive()`` of a message already there (``recv_overhead_s``). Medians; None on ``peer``.
    ``comm`` carries the control messages (pickling ``send``/``recv``). ``before_each`` runs
    untimed before every timed call on both ranks (a :func:`cache_evictor`: calls with cold
    caches); the stream's gap then includes it and is not kept.
    """
    if comm.Get_rank() == 0:
        posts, handles = [], []
        stream_start = time.perf_counter()
        for _ in range(count):
            if before_each is not None:
                before_each()
            start = time.perf_counter()
            handles.append(post())
            posts.append(time.perf_counter() - start)
        stream_s = time.perf_counter() - stream_start
        comm.send(None, dest=peer, tag=tag)  # before settling: a rendezvous send completes only once received
        settle(handles)
        recv_s = comm.recv(source=peer, tag=tag + 1)
        timed = {"send_overhead_s": float(np.median(posts)), "recv_overhead_s": recv_s, "size_bytes": size,
                 "messages": count}
        return timed if before_each is not None else {**timed, "gap_s": stream_s / count}
    comm.recv(source=0, tag=tag)
    time.sleep(0.05)  # every message has arrived: a receive now only takes it in
    receives = []
    for _ in range(count):
        if before_each is not None:
            before_each()
        start = time.perf_counter()
        receive()
        receives.append(time.perf_counter() - start)
    comm.send(float(np.median(receives)), dest=0, tag=tag + 1)
    return None


ARRIVAL_PAUSE_S = 0.002  # the receiver's pause after a message's notice: it has arrived (or announced itself)


def drained_overheads(comm: Any, peer: int, post: Callable[[], Any], settle: Callable[[list], None],
                      receive: Callable[[], None], *, count: int, size: int, tag: int) -> dict[str, float] | None:
    """Send and receive overheads between rank 0 and ``peer``, each message taken in before the next is posted.

    That is a run's state: a step's messages are received before the next step sends again, so
    the library has nothing else pending and a buffered send reuses the space the last one
    freed. A stream of large messages that nobody takes in (:func:`logp_overheads`) is another
    state: every copy goes to buffer space not used before and every call looks at all the
    sends still pending. On this project's 2-core host a 1 MiB send through simdist's runtime
    costs 0.44–0.83 ms in such a stream and 0.18 ms drained; a run's 340 KB sends cost 0.2–0.36
    ms, right after a forward/backward. Rank 0 times each ``post()``, tells ``peer``,
    ``settle``s it and waits for ``peer`` to have timed its ``receive()`` (after
    :data:`ARRIVAL_PAUSE_S`: the message is there). Medians; None on ``peer``.
    """
    if comm.Get_rank() == 0:
        posts = []
        for _ in range(count):
            start = time.perf_counter()
            handle = post()
            posts.append(time.perf_counter() - start)
            comm.send(None, dest=peer, tag=tag)
            settle([handle])
            comm.recv(source=peer, tag=tag + 1)
        recv_s = comm.recv(source=peer, tag=tag + 2)
        return {"send_overhead_s": float(np.median(posts)), "recv_overhead_s": recv_s, "size_bytes": size,
                "messages": count, "drained": True}
    receives = []
    for _ in range(count):
        comm.recv(source=0, tag=tag)
        time.sleep(ARRIVAL_PAUSE_S)
        start = time.perf_counter()
        receive()
        receives.append(time.perf_counter() - start)
        comm.send(None, dest=0, tag=tag + 1)
    comm.send(float(np.median(receives)), dest=0, tag=tag + 2)
    return None
