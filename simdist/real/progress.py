"""Progress of non-blocking collectives while a rank computes, in a helper thread; and which
progress the MPI library itself gives (:func:`probe_progress`).

MPI moves a non-blocking operation only inside MPI calls. A rank inside a long
forward/backward makes none, so an ``iallreduce`` issued before it (dcs3gd) would not overlap
it at all: the data phase would start when the compute ends. Training frameworks run their
communication in a thread of its own for this reason; :class:`Progress` is the smallest
version of that: while :meth:`Progress.during` is open (one forward/backward) and a
non-blocking collective is outstanding, a daemon thread tests its MPI requests every
``period_s`` (torch releases the interpreter lock inside its kernels). It holds a lock while in
MPI, which the rank takes back before its own next MPI call, so the two threads never use a
request at once. Needs MPI initialised with ``MPI_THREAD_MULTIPLE`` (mpi4py's default).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

__all__ = ["Progress", "probe_progress"]

_PROBE_BYTES = 4 << 20  # the progress probe's allreduce: large enough to leave the eager protocol
_PROBE_COMPUTE_S = 20e-3  # ... its compute without MPI calls (at least twice the allreduce, at most 40 ms)
_PROBE_ROUNDS = 3  # ... and how often it is repeated (the host may be busy with other processes)


class Progress:
    """Tests ``world.pending_collectives()`` every ``period_s`` while a compute runs."""

    def __init__(self, world: Any, period_s: float):
        self._world, self._period_s = world, period_s
        self._lock, self._on = threading.Lock(), threading.Event()
        threading.Thread(target=self._run, name="mpi-progress", daemon=True).start()

    def _run(self) -> None:
        MPI = self._world.MPI
        while True:
            self._on.wait()
            with self._lock:
                if self._on.is_set():
                    for request in self._world.pending_collectives():
                        MPI.Request.Testall(request.mpi_requests())
            time.sleep(self._period_s)

    def during(self) -> "Progress":
        """A context: progress runs inside it when a non-blocking collective is outstanding."""
        return self

    def __enter__(self) -> None:
        if self._world.pending_collectives():
            self._on.set()

    def __exit__(self, *exc: Any) -> None:
        self._on.clear()
        with self._lock:  # the helper is out of MPI before the rank goes on
            pass


def probe_progress(comm) -> dict[str, Any]:
    """The progress mode the MPI library shows a non-blocking collective (collective over ``comm``).

    After a warm-up ``Iallreduce`` of :data:`_PROBE_BYTES`, :data:`_PROBE_ROUNDS` rounds each
    time one allreduce alone (post, then ``Wait``) and one posted before ``compute_s`` of
    compute that makes no MPI call (twice the first allreduce alone, 20 to 40 ms), whose
    ``Wait`` is timed. Per round both times are the slowest rank's; ``alone_s`` and
    ``wait_s`` are their smallest over the rounds (another process taking a core only ever
    lengthens one). ``observed`` is ``on_call`` when ``wait_s > alone_s / 4`` (the data moved
    inside the wait), else ``async`` (with a progress thread the wait is tens of
    microseconds); None on one rank (nothing to move).
    """
    from mpi4py import MPI

    figures: dict[str, Any] = {"observed": None, "probe_bytes": _PROBE_BYTES, "alone_s": None, "compute_s": None,
                               "wait_s": None, "library": MPI.Get_library_version().strip().splitlines()[0].strip()}
    if comm.Get_size() < 2:
        return figures
    probe = comm.Dup()
    try:
        send = np.ones(_PROBE_BYTES // 8)
        recv = np.empty_like(send)
        probe.Iallreduce(send, recv, MPI.SUM).Wait()  # connections and buffers set up
        alone, waits, compute_s = [], [], 0.0
        for _ in range(_PROBE_ROUNDS):
            probe.Barrier()
            start = time.perf_counter()
            probe.Iallreduce(send, recv, MPI.SUM).Wait()
            alone.append(probe.allreduce(time.perf_counter() - start, op=MPI.MAX))
            compute_s = compute_s or min(max(_PROBE_COMPUTE_S, 2.0 * alone[0]), 2.0 * _PROBE_COMPUTE_S)
            probe.Barrier()
            request = probe.Iallreduce(send, recv, MPI.SUM)
            until = time.perf_counter() + compute_s
            while time.perf_counter() < until:  # compute: no MPI call
                pass
            start = time.perf_counter()
            request.Wait()
            waits.append(probe.allreduce(time.perf_counter() - start, op=MPI.MAX))
    finally:
        probe.Free()
    alone_s, wait_s = min(alone), min(waits)
    figures.update(observed="on_call" if wait_s > 0.25 * alone_s else "async", alone_s=alone_s,
                   compute_s=compute_s, wait_s=wait_s)
    return figures
