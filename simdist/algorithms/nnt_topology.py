"""Logical layouts of nnt's workers: a ring or a 2-D torus, their neighbours and hop distances.

Workers are numbered 0..N−1 (worker order, not ranks). A **ring** links worker i to
i − 1 and i + 1 (mod N): two distinct neighbours, so it needs N ≥ 3. A **grid** is a
rows × cols torus in row-major order (worker i sits at row i // cols, column i % cols);
each worker has four distinct neighbours — up, down, left, right, wrapping around — so
both sides must be at least 3 (N ≥ 9). Smaller layouts would make a worker its own
neighbour or count one neighbour twice, and are refused with an :class:`InputError`.

Hop distance is the number of neighbour links between two workers: on a ring
``min(d, N − d)`` with ``d = |a − b|``; on a torus the sum of that per axis. Information
that travels one hop per step reaches the farthest worker from worker 0 after
``N // 2`` (ring) or ``rows // 2 + cols // 2`` (grid) hops (:meth:`Layout.eccentricity`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Literal, Sequence

from ..errors import InputError

__all__ = ["Topology", "Layout", "make_layout", "most_square_shape", "ring_neighbours", "grid_neighbours",
           "ring_distance", "grid_distance", "bfs_hops"]

Topology = Literal["ring", "grid"]


def ring_neighbours(n: int) -> tuple[tuple[int, ...], ...]:
    """Each worker's (left, right) neighbours on a ring of ``n`` (no check of n)."""
    return tuple(((i - 1) % n, (i + 1) % n) for i in range(n))


def grid_neighbours(rows: int, cols: int) -> tuple[tuple[int, ...], ...]:
    """Each worker's (up, down, left, right) neighbours on a rows × cols torus, row-major."""
    out = []
    for i in range(rows * cols):
        r, c = divmod(i, cols)
        out.append((((r - 1) % rows) * cols + c, ((r + 1) % rows) * cols + c,
                    r * cols + (c - 1) % cols, r * cols + (c + 1) % cols))
    return tuple(out)


def ring_distance(n: int, a: int, b: int) -> int:
    """Hops between workers ``a`` and ``b`` on a ring of ``n``."""
    d = abs(a - b) % n
    return min(d, n - d)


def grid_distance(rows: int, cols: int, a: int, b: int) -> int:
    """Hops between workers ``a`` and ``b`` on a rows × cols torus (row-major numbering)."""
    (ra, ca), (rb, cb) = divmod(a, cols), divmod(b, cols)
    return ring_distance(rows, ra, rb) + ring_distance(cols, ca, cb)


def bfs_hops(neighbours: Sequence[Sequence[int]], source: int) -> list[int]:
    """Hops from ``source`` to every worker along neighbour links (breadth-first search)."""
    hops = [-1] * len(neighbours)
    hops[source] = 0
    queue = deque([source])
    while queue:
        here = queue.popleft()
        for there in neighbours[here]:
            if hops[there] < 0:
                hops[there] = hops[here] + 1
                queue.append(there)
    return hops


def most_square_shape(n: int) -> tuple[int, int]:
    """(rows, cols) with rows · cols = n, rows ≤ cols and rows as large as possible."""
    rows = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return rows, n // rows


@dataclass(frozen=True)
class Layout:
    """Workers on a ring or a torus: who neighbours whom, and how far apart they are."""

    topology: Topology
    n_workers: int
    shape: tuple[int, int] | None  # grid: (rows, cols)
    neighbours: tuple[tuple[int, ...], ...]

    def hops(self, a: int, b: int) -> int:
        if self.topology == "ring":
            return ring_distance(self.n_workers, a, b)
        rows, cols = self.shape
        return grid_distance(rows, cols, a, b)

    def eccentricity(self, source: int = 0) -> int:
        """Hops from ``source`` to the farthest worker."""
        return max(self.hops(source, b) for b in range(self.n_workers))


def make_layout(topology: Topology, n_workers: int, grid_shape: Sequence[int] | None = None) -> Layout:
    """The layout of ``n_workers`` on ``topology``; an InputError for layouts that are too small.

    ``grid_shape`` (rows, cols) must multiply to ``n_workers``; by default the most square
    factorisation is used.
    """
    if topology == "ring":
        if n_workers < 3:
            raise InputError(f"nnt's ring needs at least 3 workers (two distinct neighbours each), got "
                             f"{n_workers}; use 3 or more workers", field="workers")
        return Layout("ring", n_workers, None, ring_neighbours(n_workers))
    if topology != "grid":
        raise InputError(f"unknown nnt topology {topology!r}; known: ring, grid", field="algorithm.topology")
    if grid_shape is not None:
        rows, cols = (int(x) for x in grid_shape)
        if rows * cols != n_workers:
            raise InputError(f"grid_shape {rows}x{cols} holds {rows * cols} workers, but the run has {n_workers}",
                             field="algorithm.grid_shape")
        if min(rows, cols) < 3:
            raise InputError(f"an nnt grid needs at least 3x3 workers (four distinct neighbours each), got "
                             f"{rows}x{cols}", field="algorithm.grid_shape")
    else:
        rows, cols = most_square_shape(n_workers)
        if rows < 3:
            raise InputError(f"an nnt grid needs at least 3x3 workers (four distinct neighbours each); {n_workers} "
                             f"workers form at best a {rows}x{cols} torus; use a count with both factors >= 3 "
                             f"(9, 12, 15, 16, ...) or topology: ring", field="algorithm.topology")
    return Layout("grid", n_workers, (rows, cols), grid_neighbours(rows, cols))
