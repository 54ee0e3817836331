"""Collective timings (nccl-tests, OSU, MPI sweeps) fitted to the simulator's collective model.

The simulator charges a ring allreduce of ``S`` bytes over ``n`` ranks
``2(n−1) · (α + S/(n·B))`` (:mod:`simdist.runtime.collectives`), where ``α`` and ``B`` are
the latency and bandwidth of the slowest hop of a ring step. Written with nccl-tests' *bus
bytes* ``f · S`` (``f = 2(n−1)/n`` for allreduce; busbw = algbw · f), that is

    t(S) = steps · α + f · S / B

— an alpha–beta line in bus bytes whose bandwidth is exactly nccl-tests' asymptotic
``busbw`` and whose intercept is ``steps`` per-hop latencies. :class:`CollectiveFit` fits that
line per message-size regime (:class:`~simdist.fitting.PiecewiseAlphaBetaFit`;
NCCL switches protocol — LL, LL128, Simple — and algorithm with size) and reports, per
regime, the per-hop latency and the bus bandwidth a platform link needs for the simulator to
reproduce the measurement.

The factors and step counts of the other nccl-tests tools follow nccl-tests'
``PERFORMANCE.md`` (bus bandwidth) and the ring algorithm (steps); only allreduce maps onto
the simulator's allreduce model, the others are reported for comparison.

:func:`simulated_allreduce_s` runs the simulator's own analytic cost (the same plan and
max-min rates as :mod:`simdist.runtime.sim`) on a platform mapping, so a fitted overlay can
be checked end to end against the table it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..fitting import PiecewiseAlphaBetaFit, Regime, check_fitted, record_size_scores, r2_score

__all__ = ["CollectiveOp", "COLLECTIVE_OPS", "collective_op", "CollectiveFit", "NcclAllreduceFit",
           "simulated_allreduce_s"]


@dataclass(frozen=True)
class CollectiveOp:
    """How one collective's time relates to its size ``S`` (nccl-tests' ``size`` column)."""

    name: str
    bus_factor: str  # "2(n-1)/n", "(n-1)/n" or "1"
    steps: str  # ring steps: "2(n-1)", "n-1" or "1"

    def factor(self, n: int) -> float:
        return {"2(n-1)/n": 2 * (n - 1) / n, "(n-1)/n": (n - 1) / n, "1": 1.0}[self.bus_factor]

    def step_count(self, n: int) -> int:
        return {"2(n-1)": 2 * (n - 1), "n-1": n - 1, "1": 1}[self.steps]


# nccl-tests PERFORMANCE.md, "Bus bandwidth"; AllGather/ReduceScatter/AlltoAll sizes are whole buffers
COLLECTIVE_OPS: dict[str, CollectiveOp] = {op.name: op for op in (
    CollectiveOp("all_reduce", "2(n-1)/n", "2(n-1)"),
    CollectiveOp("reduce_scatter", "(n-1)/n", "n-1"),
    CollectiveOp("all_gather", "(n-1)/n", "n-1"),
    CollectiveOp("alltoall", "(n-1)/n", "n-1"),
    CollectiveOp("gather", "(n-1)/n", "n-1"),
    CollectiveOp("scatter", "(n-1)/n", "n-1"),
    CollectiveOp("hypercube", "(n-1)/n", "n-1"),
    CollectiveOp("broadcast", "1", "n-1"),
    CollectiveOp("reduce", "1", "n-1"),
    CollectiveOp("sendrecv", "1", "1"),
)}


def collective_op(name: str) -> CollectiveOp:
    """The op called ``name`` (``allreduce`` and ``all_reduce`` both work)."""
    key = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
           "bcast": "broadcast"}.get(name, name)
    if key not in COLLECTIVE_OPS:
        raise ValueError(f"unknown collective {name!r}; known: {', '.join(COLLECTIVE_OPS)}")
    return COLLECTIVE_OPS[key]


class CollectiveFit:
    """Per-regime hop latency and bus bandwidth of a collective on ``n_ranks`` ranks.

    Parameters: ``op`` (an nccl-tests op name, default ``"all_reduce"``), ``n_ranks``,
    ``max_segments`` (default 4), ``min_points`` (3), ``tolerance`` (0.05),
    ``breakpoints`` (fixed regime starts in bytes of ``S``, or ``None`` to search).

    Fitted: ``regimes_`` (list of dicts: ``from_bytes``, ``to_bytes``, ``hop_latency_s``,
    ``bus_bandwidth_Bps``, ``total_latency_s``, ``max_relative_error``), ``relative_errors_``
    (per measured size), ``max_relative_error_``, ``r2_``, ``piecewise_`` (the underlying
    fit in bus bytes).
    """

    def __init__(self, op: str = "all_reduce", n_ranks: int = 2, max_segments: int = 4, min_points: int = 3,
                 tolerance: float = 0.05, breakpoints: Sequence[float] | None = None):
        self.op = op
        self.n_ranks = n_ranks
        self.max_segments = max_segments
        self.min_points = min_points
        self.tolerance = tolerance
        self.breakpoints = breakpoints

    def _spec(self) -> tuple[CollectiveOp, float, int]:
        if self.n_ranks < 2:
            raise ValueError(f"a collective needs at least two ranks, got n_ranks={self.n_ranks}")
        op = collective_op(self.op)
        return op, op.factor(self.n_ranks), op.step_count(self.n_ranks)

    def fit(self, sizes_bytes: Sequence[float], times_s: Sequence[float]) -> "CollectiveFit":
        _op, factor, steps = self._spec()
        s, t = np.asarray(sizes_bytes, dtype=float), np.asarray(times_s, dtype=float)
        breakpoints = None if self.breakpoints is None else [factor * b for b in self.breakpoints]
        self.piecewise_ = PiecewiseAlphaBetaFit(self.max_segments, self.min_points, self.tolerance,
                                                breakpoints).fit(factor * s, t)
        self.regimes_ = [self._regime(r, factor, steps) for r in self.piecewise_.regimes_]
        return record_size_scores(self, s, t)

    @staticmethod
    def _regime(regime: Regime, factor: float, steps: int) -> dict[str, Any]:
        bw = regime.fit.bandwidth_Bps_
        return {"from_bytes": int(round(regime.from_bytes / factor)), "to_bytes": int(round(regime.to_bytes / factor)),
                "hop_latency_s": regime.fit.latency_s_ / steps, "bus_bandwidth_Bps": None if np.isinf(bw) else bw,
                "total_latency_s": regime.fit.latency_s_,
                "max_relative_error": float(np.max(np.abs(regime.fit.relative_errors_)))}

    def regime(self, size_bytes: float) -> dict[str, Any]:
        """The fitted regime a collective of ``size_bytes`` falls in."""
        check_fitted(self, "piecewise_")
        _op, factor, _steps = self._spec()
        chosen = self.piecewise_.regime(factor * size_bytes)
        return self.regimes_[self.piecewise_.regimes_.index(chosen)]

    def predict(self, sizes_bytes: Sequence[float] | float) -> np.ndarray:
        check_fitted(self, "piecewise_")
        _op, factor, _steps = self._spec()
        return self.piecewise_.predict(factor * np.asarray(sizes_bytes, dtype=float))

    def predict_with(self, sizes_bytes: Sequence[float] | float, hop_latency_s: float,
                     bus_bandwidth_Bps: float) -> np.ndarray:
        """Times of this collective with one (latency, bandwidth) pair for every size."""
        _op, factor, steps = self._spec()
        return steps * hop_latency_s + factor * np.asarray(sizes_bytes, dtype=float) / bus_bandwidth_Bps

    def score(self, sizes_bytes: Sequence[float], times_s: Sequence[float]) -> float:
        return r2_score(self.predict(sizes_bytes), times_s)

    def export(self) -> dict:
        check_fitted(self, "piecewise_")
        op, factor, steps = self._spec()
        return {"op": op.name, "n_ranks": self.n_ranks, "bus_factor": factor, "ring_steps": steps,
                "model": f"t = {steps}*hop_latency + {factor:.6g}*S/bus_bandwidth per regime",
                "regimes": self.regimes_, "r2": self.r2_, "max_relative_error": self.max_relative_error_}


class NcclAllreduceFit(CollectiveFit):
    """:class:`CollectiveFit` of ``all_reduce`` (the op the simulator's allreduce model covers)."""

    def __init__(self, n_ranks: int = 2, max_segments: int = 4, min_points: int = 3, tolerance: float = 0.05,
                 breakpoints: Sequence[float] | None = None):
        super().__init__("all_reduce", n_ranks, max_segments, min_points, tolerance, breakpoints)


def simulated_allreduce_s(platform: dict[str, Any], sizes_bytes: Sequence[float], algorithm: str = "ring") -> np.ndarray:
    """The simulator's analytic allreduce time over every rank of ``platform`` (a platform mapping).

    Same cost as :mod:`simdist.runtime.sim` on an idle platform: for each step of the
    algorithm's plan, the slowest transfer's route latency + bytes / max-min rate.
    """
    from ..platform.network import max_min_rates
    from ..platform.spec import PlatformSpec
    from ..platform.topology import Platform
    from ..runtime.collectives import allreduce_plan

    plat = Platform(PlatformSpec.model_validate(platform))
    ranks = list(range(plat.size))
    capacity = [link.bandwidth_Bps for link in plat.links]
    out = []
    for size in np.asarray(sizes_bytes, dtype=float):
        total, costs = 0.0, {}
        for phase in allreduce_plan(algorithm, ranks, float(size), plat.node_of):
            for step in phase:
                if step not in costs:
                    routes = [plat.route(t.src, t.dst) for t in step]
                    rates = max_min_rates([[link.index for link in r] for r in routes], capacity)
                    costs[step] = max(sum(link.latency_s for link in r) + (t.nbytes / rate if t.nbytes else 0.0)
                                      for t, r, rate in zip(step, routes, rates))
                total += costs[step]
        out.append(total)
    return np.asarray(out)
