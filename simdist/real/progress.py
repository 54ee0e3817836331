"""Progress of non-blocking collectives while a rank computes, in a helper thread.

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

__all__ = ["Progress"]


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
