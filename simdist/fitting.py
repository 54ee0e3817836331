"""Fitters: straight lines in time, alpha–beta links, piecewise regimes, CPU contention.

Used by calibration (measurements → profiles and platforms) and by the simulator itself
(:mod:`simdist.runtime.collective_pricing` fits the model around a measured cost table).

Every fitter follows the scikit-learn contract (STYLE.md): the constructor only stores its
arguments, ``fit(...)`` returns ``self``, fitted values end in ``_``, ``predict`` and
``score`` (R² on the measured scale) work on new inputs, and ``export()`` turns the fit into
plain data for a calibration file.

* :class:`LinearTimeFit` — ``t = t0 + t1 · x`` (compute time against batch size).
* :class:`AlphaBetaFit` — ``t = α + S / B`` (one message of ``S`` bytes over a link of
  latency ``α`` and bandwidth ``B``; Hockney's model).
* :class:`PiecewiseAlphaBetaFit` — one alpha–beta line per message-size regime, the
  breakpoints found by dynamic programming (MPI eager/rendezvous switches, NCCL protocol and
  algorithm changes show as regimes).
* :class:`ContentionFit` — the slowdown of ``k`` ranks co-running on ``c`` cores against the
  processor-sharing law ``max(1, k/c)``, as one multiplicative contention factor.

Times spanning several decades (8 B to 8 GiB messages) are fitted by *relative* least
squares (each residual divided by its measurement), so the fit error that matters — the
error in percent at every size — is what is minimised. Latency and bandwidth are kept
physical: a negative intercept is refitted through the origin and a negative slope as a
flat line (infinite bandwidth: a pure latency regime).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["LinearTimeFit", "AlphaBetaFit", "PiecewiseAlphaBetaFit", "Regime", "ContentionFit", "weighted_line",
           "relative_errors", "r2_score", "check_fitted", "record_size_scores"]

_WEIGHTINGS = ("relative", "absolute")


def weighted_line(x: Sequence[float], y: Sequence[float], weighting: str = "relative",
                  nonnegative: bool = True) -> tuple[float, float]:
    """Intercept ``a`` and slope ``b`` of ``y ≈ a + b·x`` by weighted least squares.

    ``weighting="relative"`` weighs each point by ``1/y²`` (minimises relative errors);
    ``"absolute"`` is ordinary least squares. With ``nonnegative`` a negative intercept or
    slope is clamped to zero and the other coefficient refitted.
    """
    if weighting not in _WEIGHTINGS:
        raise ValueError(f"unknown weighting {weighting!r}; known: {', '.join(_WEIGHTINGS)}")
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape or xs.ndim != 1 or len(xs) < 2:
        raise ValueError("need two equally long 1-d sequences of at least two points")
    if np.ptp(xs) == 0:
        raise ValueError("fitting a line needs at least two different x values")
    if weighting == "relative" and np.any(ys <= 0):
        raise ValueError("relative weighting needs positive measurements")
    with np.errstate(all="ignore"):  # extreme values give non-finite coefficients, which check_fitted refuses
        w = 1.0 / ys**2 if weighting == "relative" else np.ones_like(ys)
        sw, swx, swy = w.sum(), (w * xs).sum(), (w * ys).sum()
        swxx, swxy = (w * xs * xs).sum(), (w * xs * ys).sum()
        det = sw * swxx - swx * swx
        a, b = (swxx * swy - swx * swxy) / det, (sw * swxy - swx * swy) / det
        if nonnegative and a < 0:
            a, b = 0.0, swxy / swxx
        if nonnegative and b < 0:
            a, b = swy / sw, 0.0
    return float(a), float(b)


def relative_errors(predicted: Sequence[float], measured: Sequence[float]) -> np.ndarray:
    """``predicted / measured − 1`` for each point."""
    with np.errstate(all="ignore"):  # a zero or extreme measurement gives inf, which the fit reports
        return np.asarray(predicted, dtype=float) / np.asarray(measured, dtype=float) - 1.0


def r2_score(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Coefficient of determination of ``predicted`` against ``measured`` (1 when they are equal)."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    with np.errstate(all="ignore"):  # extreme values overflow to inf: the score is then not a number
        total = float(np.sum((m - m.mean()) ** 2))
        residual = float(np.sum((m - p) ** 2))
    return 1.0 - residual / total if total > 0 else (1.0 if residual == 0 else 0.0)


def check_fitted(estimator, attribute: str) -> None:
    if not hasattr(estimator, attribute):
        raise RuntimeError(f"this {type(estimator).__name__} is not fitted yet; call fit() first")


class LinearTimeFit:
    """``t = t0 + t1 · x``: compute time against batch size (``x`` samples).

    Parameters: ``weighting`` — ``"relative"`` (default; every batch size counts by its
    error in percent) or ``"absolute"`` (ordinary least squares).

    Fitted: ``t0_s_``, ``t1_s_`` (seconds per sample), ``r2_``, ``residuals_s_``,
    ``relative_errors_``, ``n_samples_``.
    """

    def __init__(self, weighting: str = "relative"):
        self.weighting = weighting

    def fit(self, x: Sequence[float], t_s: Sequence[float]) -> "LinearTimeFit":
        xs, ts = np.asarray(x, dtype=float), np.asarray(t_s, dtype=float)
        self.t0_s_, self.t1_s_ = weighted_line(xs, ts, self.weighting, nonnegative=True)
        predicted = self.predict(xs)
        self.residuals_s_ = ts - predicted
        self.relative_errors_ = relative_errors(predicted, ts)
        self.r2_ = r2_score(predicted, ts)
        self.n_samples_ = len(xs)
        return self

    def predict(self, x: Sequence[float] | float) -> np.ndarray:
        check_fitted(self, "t0_s_")
        return self.t0_s_ + self.t1_s_ * np.asarray(x, dtype=float)

    def score(self, x: Sequence[float], t_s: Sequence[float]) -> float:
        """R² of the prediction at ``x`` against ``t_s``."""
        return r2_score(self.predict(x), t_s)

    def export(self) -> dict:
        check_fitted(self, "t0_s_")
        return {"t0_s": self.t0_s_, "t1_s": self.t1_s_, "r2": self.r2_,
                "max_relative_error": float(np.max(np.abs(self.relative_errors_))),
                "residuals_s": [float(r) for r in self.residuals_s_]}


class AlphaBetaFit:
    """``t = α + S / B``: one message of ``S`` bytes (Hockney's latency–bandwidth model).

    Parameters: ``weighting`` (``"relative"`` default, or ``"absolute"``).

    Fitted: ``latency_s_`` (α), ``bandwidth_Bps_`` (B; ``inf`` in a pure latency regime),
    ``r2_``, ``relative_errors_``, ``sizes_bytes_`` (the sizes it was fitted on).
    """

    def __init__(self, weighting: str = "relative"):
        self.weighting = weighting

    def fit(self, sizes_bytes: Sequence[float], times_s: Sequence[float]) -> "AlphaBetaFit":
        s, t = np.asarray(sizes_bytes, dtype=float), np.asarray(times_s, dtype=float)
        a, b = weighted_line(s, t, self.weighting, nonnegative=True)
        self.latency_s_ = a
        self.bandwidth_Bps_ = 1.0 / b if b > 0 else math.inf
        self.sizes_bytes_ = s
        predicted = self.predict(s)
        self.relative_errors_ = relative_errors(predicted, t)
        self.r2_ = r2_score(predicted, t)
        return self

    def predict(self, sizes_bytes: Sequence[float] | float) -> np.ndarray:
        check_fitted(self, "latency_s_")
        return self.latency_s_ + np.asarray(sizes_bytes, dtype=float) / self.bandwidth_Bps_

    def score(self, sizes_bytes: Sequence[float], times_s: Sequence[float]) -> float:
        return r2_score(self.predict(sizes_bytes), times_s)

    def export(self) -> dict:
        check_fitted(self, "latency_s_")
        return {"latency_s": self.latency_s_,
                "bandwidth_Bps": None if math.isinf(self.bandwidth_Bps_) else self.bandwidth_Bps_,
                "r2": self.r2_, "max_relative_error": float(np.max(np.abs(self.relative_errors_)))}


@dataclass(frozen=True)
class Regime:
    """One message-size range of a piecewise fit: sizes from ``from_bytes`` (inclusive) on."""

    from_bytes: float
    to_bytes: float  # the largest size measured in this regime
    fit: AlphaBetaFit

    def export(self) -> dict:
        return {"from_bytes": int(self.from_bytes), "to_bytes": int(self.to_bytes), **self.fit.export()}


class PiecewiseAlphaBetaFit:
    """One alpha–beta line per contiguous message-size range.

    Parameters:

    * ``max_segments`` — at most this many regimes (default 3).
    * ``min_points`` — every regime holds at least this many sizes (default 3).
    * ``tolerance`` — the fewest regimes whose worst relative error is at most this are
      kept (default 0.05); if no count reaches it, the count with the smallest worst error.
    * ``breakpoints`` — fixed regime starts in bytes instead of searching (e.g. ``[65536]``).
    * ``weighting`` — as :class:`AlphaBetaFit`.

    Fitted: ``regimes_`` (list of :class:`Regime`), ``breakpoints_bytes_`` (start of every
    regime but the first), ``relative_errors_``, ``max_relative_error_``, ``r2_``.
    The breakpoints are searched by dynamic programming over the sorted sizes, minimising
    the sum of squared relative residuals for each number of regimes.
    """

    def __init__(self, max_segments: int = 3, min_points: int = 3, tolerance: float = 0.05,
                 breakpoints: Sequence[float] | None = None, weighting: str = "relative"):
        self.max_segments = max_segments
        self.min_points = min_points
        self.tolerance = tolerance
        self.breakpoints = breakpoints
        self.weighting = weighting

    def fit(self, sizes_bytes: Sequence[float], times_s: Sequence[float]) -> "PiecewiseAlphaBetaFit":
        order = np.argsort(np.asarray(sizes_bytes, dtype=float), kind="stable")
        s = np.asarray(sizes_bytes, dtype=float)[order]
        t = np.asarray(times_s, dtype=float)[order]
        if len(s) < 2:
            raise ValueError("a piecewise fit needs at least two sizes")
        bounds = self._fixed_bounds(s) if self.breakpoints is not None else self._searched_bounds(s, t)
        self.regimes_ = [Regime(s[i], s[j - 1], AlphaBetaFit(self.weighting).fit(s[i:j], t[i:j]))
                         for i, j in zip(bounds[:-1], bounds[1:])]
        self.breakpoints_bytes_ = [float(r.from_bytes) for r in self.regimes_[1:]]
        return record_size_scores(self, s, t)

    # -- breakpoints ----------------------------------------------------------------

    def _fixed_bounds(self, s: np.ndarray) -> list[int]:
        starts = sorted({int(np.searchsorted(s, b, side="left")) for b in self.breakpoints})
        bounds = [0] + [i for i in starts if 0 < i < len(s)] + [len(s)]
        for i, j in zip(bounds[:-1], bounds[1:]):
            if j - i < 2 or s[j - 1] == s[i]:
                raise ValueError(f"the regime starting at {s[i]:.0f} B holds fewer than two different sizes; "
                                 "move or drop that breakpoint")
        return bounds

    def _searched_bounds(self, s: np.ndarray, t: np.ndarray) -> list[int]:
        n, m = len(s), max(2, self.min_points)
        segments = max(1, min(self.max_segments, n // m))
        cost = self._segment_costs(s, t, m)
        # best[k][j]: least cost of splitting s[:j] into k regimes; back[k][j]: where the last one starts
        best = np.full((segments + 1, n + 1), np.inf)
        back = np.zeros((segments + 1, n + 1), dtype=int)
        best[0][0] = 0.0
        for k in range(1, segments + 1):
            for j in range(k * m, n + 1):
                for i in range((k - 1) * m, j - m + 1):
                    c = best[k - 1][i] + cost.get((i, j), np.inf)
                    if c < best[k][j]:
                        best[k][j], back[k][j] = c, i
        candidates = []
        for k in range(1, segments + 1):
            if not np.isfinite(best[k][n]):
                continue
            bounds = [n]
            for kk in range(k, 0, -1):
                bounds.append(back[kk][bounds[-1]])
            bounds.reverse()
            worst = max(self._worst(s[i:j], t[i:j]) for i, j in zip(bounds[:-1], bounds[1:]))
            candidates.append((k, worst, bounds))
            if worst <= self.tolerance:
                return bounds
        return min(candidates, key=lambda c: (c[1], c[0]))[2]

    def _segment_costs(self, s: np.ndarray, t: np.ndarray, m: int) -> dict[tuple[int, int], float]:
        cost = {}
        for i in range(len(s)):
            for j in range(i + m, len(s) + 1):
                if s[j - 1] == s[i]:
                    continue
                a, b = weighted_line(s[i:j], t[i:j], self.weighting)
                r = (a + b * s[i:j] - t[i:j]) / (t[i:j] if self.weighting == "relative" else 1.0)
                cost[(i, j)] = float(np.sum(r * r))
        return cost

    def _worst(self, s: np.ndarray, t: np.ndarray) -> float:
        a, b = weighted_line(s, t, self.weighting)
        return float(np.max(np.abs((a + b * s) / t - 1.0)))

    # -- use ------------------------------------------------------------------------

    def regime(self, size_bytes: float) -> Regime:
        """The regime a message of ``size_bytes`` falls in (the first/last one outside the range)."""
        check_fitted(self, "regimes_")
        chosen = self.regimes_[0]
        for regime in self.regimes_:
            if size_bytes >= regime.from_bytes:
                chosen = regime
        return chosen

    def predict(self, sizes_bytes: Sequence[float] | float) -> np.ndarray:
        check_fitted(self, "regimes_")
        s = np.asarray(sizes_bytes, dtype=float)
        flat = np.array([float(self.regime(x).fit.predict(x)) for x in s.reshape(-1)])
        return flat.reshape(s.shape)

    def score(self, sizes_bytes: Sequence[float], times_s: Sequence[float]) -> float:
        return r2_score(self.predict(sizes_bytes), times_s)

    def export(self) -> dict:
        check_fitted(self, "regimes_")
        return {"regimes": [r.export() for r in self.regimes_], "r2": self.r2_,
                "max_relative_error": self.max_relative_error_}


class ContentionFit:
    """Slowdown of ``k`` ranks co-running on ``c`` cores against processor sharing.

    Processor sharing (the simulator's CPU model) predicts a rank's mean step time
    ``t(k, c) = t_alone · max(1, k/c)``. Caches, memory bandwidth and context switches add
    to that; this fit measures how much, as one factor ``φ``:
    ``t(k, c) = t_alone · max(1, k/c) · φ`` for ``k ≥ 2`` (``φ = 1``: the assumption holds).
    ``φ`` is the geometric mean of measured / processor-sharing slowdowns (least squares in
    log space).

    Fitted: ``contention_factor_`` (φ), ``undersubscribed_factor_`` / ``oversubscribed_factor_``
    (the same mean over ``k ≤ c`` and over ``k > c`` only; ``nan`` without such points),
    ``ratios_`` (measured / processor-sharing slowdown per point), ``r2_`` (of the fitted
    model on the times), ``processor_sharing_r2_`` (of plain processor sharing, φ = 1).
    """

    def fit(self, ranks: Sequence[int], cores: Sequence[int], times_s: Sequence[float],
            alone_s: Sequence[float]) -> "ContentionFit":
        k, c = np.asarray(ranks, dtype=float), np.asarray(cores, dtype=float)
        t, t1 = np.asarray(times_s, dtype=float), np.asarray(alone_s, dtype=float)
        if not (k.shape == c.shape == t.shape == t1.shape) or k.ndim != 1:
            raise ValueError("ranks, cores, times_s and alone_s must be equally long 1-d sequences")
        if np.any(k < 1) or np.any(c < 1) or np.any(t <= 0) or np.any(t1 <= 0):
            raise ValueError("ranks and cores must be >= 1 and times positive")
        shared = k >= 2
        if not np.any(shared):
            raise ValueError("measure at least one configuration with two or more co-running ranks")
        self.ratios_ = (t / t1) / np.maximum(1.0, k / c)
        log_ratio = np.log(self.ratios_)
        self.contention_factor_ = float(np.exp(log_ratio[shared].mean()))
        under, over = shared & (k <= c), k > c
        self.undersubscribed_factor_ = float(np.exp(log_ratio[under].mean())) if np.any(under) else math.nan
        self.oversubscribed_factor_ = float(np.exp(log_ratio[over].mean())) if np.any(over) else math.nan
        self.r2_ = r2_score(self.predict(k, c, t1), t)
        self.processor_sharing_r2_ = r2_score(t1 * np.maximum(1.0, k / c), t)
        return self

    def predict(self, ranks: Sequence[int], cores: Sequence[int], alone_s: Sequence[float] | float) -> np.ndarray:
        check_fitted(self, "contention_factor_")
        k, c = np.asarray(ranks, dtype=float), np.asarray(cores, dtype=float)
        factor = np.where(k >= 2, self.contention_factor_, 1.0)
        return np.asarray(alone_s, dtype=float) * np.maximum(1.0, k / c) * factor

    def score(self, ranks: Sequence[int], cores: Sequence[int], times_s: Sequence[float],
              alone_s: Sequence[float]) -> float:
        return r2_score(self.predict(ranks, cores, alone_s), times_s)

    def export(self) -> dict:
        check_fitted(self, "contention_factor_")

        def finite(x: float) -> float | None:
            return None if math.isnan(x) else x

        return {"contention_factor": self.contention_factor_,
                "undersubscribed_factor": finite(self.undersubscribed_factor_),
                "oversubscribed_factor": finite(self.oversubscribed_factor_),
                "r2": self.r2_, "processor_sharing_r2": self.processor_sharing_r2_}


def record_size_scores(fit: Any, sizes_bytes: np.ndarray, times_s: np.ndarray) -> Any:
    """Store a size→time fit's data and scores (``sizes_bytes_``, ``times_s_``,
    ``relative_errors_``, ``max_relative_error_``, ``r2_``) from its own ``predict``; returns ``fit``."""
    predicted = fit.predict(sizes_bytes)
    fit.sizes_bytes_, fit.times_s_ = sizes_bytes, times_s
    fit.relative_errors_ = relative_errors(predicted, times_s)
    fit.max_relative_error_ = float(np.max(np.abs(fit.relative_errors_)))
    fit.r2_ = r2_score(predicted, times_s)
    return fit
