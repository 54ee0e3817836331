"""How the network sweeps time an operation: a probe per size, then round-robin batches, medians kept.

Shared by the MPI library's sweep (:mod:`.mpi_worker`) and the runtime's (:mod:`.runtime_sweep`),
so both measure alike. Imports only NumPy: MPI ranks start fast.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["repetitions", "sweep"]


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
