"""Results over seeds: each sweep point's mean, spread and 95 % confidence interval, and whether two differ.

A sweep may run every point under several seeds (a ``seed`` axis: the seed drives model
initialisation, data order and compute noise, so noise draws are seeds too). One seed is one
sample; this module turns ``sweep.csv`` into one row per *group*, the points that differ only
in their seed, and never keeps the best seed:

* the columns' roles (:func:`column_roles`): seed axes (``seed`` or a dotted key ending in
  ``.seed``); the algorithm and its variants (``algorithm.*`` axes: the *series*); the worker
  count, with the axes that move with it (every worker count has one value of them, as
  ``workload.batch_size`` in strong scaling); and the remaining axes, the *condition* (a
  learning rate, a network) under which algorithms are compared;
* :func:`aggregate`: per group ``n`` (seeds), ``reached`` (seeds whose run reached the target
  accuracy; ``time_to_accuracy_s`` is a mean over those only, never with "never reached"
  averaged away) and, for each of :data:`METRICS`, the mean, the sample standard deviation
  (``_std``) and the half-width of the 95 % confidence interval (``_ci95``);
* :func:`compare_samples`: whether two groups' per-seed values can be told apart.

The interval is Student's t: mean ± t(0.975, n-1)·s/√n, undefined (NaN) for one seed. The t
quantiles for 1..30 degrees of freedom are the standard table's (NIST/SEMATECH e-Handbook of
Statistical Methods, §1.3.6.7.2, here to four decimals); above 30 the Cornish–Fisher expansion
of the t quantile in the normal one (Abramowitz and Stegun, *Handbook of Mathematical
Functions*, 26.7.5; error below 2e-6 from 31 on), which tends to the normal limit 1.96.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pandas as pd

from .metrics import SUMMARY_KEYS

__all__ = ["CONFIDENCE", "METRICS", "Estimate", "Roles", "Comparison", "t_quantile", "estimate", "ratio_estimate",
           "column_roles", "groups", "seed_index", "column", "text", "aggregate", "compare_samples"]

CONFIDENCE = 0.95
METRICS = ("time_to_accuracy_s", "throughput_samples_per_s", "mean_iteration_s", "final_test_accuracy",
           "best_test_accuracy", "mean_staleness")
# t(0.975, df) for df = 1 .. 30 (two-sided 95 %)
_T_975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
          2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
          2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)
_Z_975 = 1.959963984540054  # the normal limit
_NOT_AXES = frozenset({"point", "key", *SUMMARY_KEYS})
_SAME_AS_SUMMARY = frozenset({"algorithm.name", "axis.algorithm.name", "axis.workers"})
_RTOL_IDENTICAL = 1e-9  # per-seed values this close are the same number (float noise of summed times)


def t_quantile(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (see module doc); NaN below 1."""
    if df < 1:
        return math.nan
    if df <= len(_T_975):
        return _T_975[df - 1]
    z = _Z_975
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


@dataclass(frozen=True)
class Estimate:
    """A mean over ``n`` samples, their standard deviation and the 95 % interval's half-width."""

    n: int
    mean: float
    std: float
    half_width: float  # NaN when the interval is undefined (one sample)

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in the interval (False when it is undefined)."""
        return bool(self.low <= value <= self.high)

    def overlaps(self, other: Estimate) -> bool:
        """Whether the two intervals share a point (False when either is undefined)."""
        return bool(self.low <= other.high and other.low <= self.high)


def estimate(values: Sequence[float] | np.ndarray | pd.Series) -> Estimate:
    """Mean, sample standard deviation (n-1) and t interval of the finite ``values``."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return Estimate(0, math.nan, math.nan, math.nan)
    if n == 1:
        return Estimate(1, float(x[0]), math.nan, math.nan)
    std = float(np.std(x, ddof=1))
    return Estimate(n, float(np.mean(x)), std, t_quantile(n - 1) * std / math.sqrt(n))


def ratio_estimate(num: Estimate, den: Estimate) -> Estimate:
    """``num.mean / den.mean`` with a delta-method interval, for samples that cannot be paired.

    se(R)² ≈ (s_a²/n_a + R²·s_b²/n_b) / b̄², with min(n_a, n_b) - 1 degrees of freedom (the
    smaller sample's: conservative); the interval is undefined when either side has one sample.
    """
    if not (num.n and den.n) or den.mean == 0:
        return Estimate(min(num.n, den.n), math.nan, math.nan, math.nan)
    ratio = num.mean / den.mean
    if num.n < 2 or den.n < 2:
        return Estimate(min(num.n, den.n), ratio, math.nan, math.nan)
    se = math.sqrt(num.std**2 / num.n + ratio**2 * den.std**2 / den.n) / abs(den.mean)
    df = min(num.n, den.n) - 1
    return Estimate(min(num.n, den.n), ratio, se, t_quantile(df) * se)


@dataclass(frozen=True)
class Roles:
    """What each axis column of a sweep table is (see module doc)."""

    seeds: tuple[str, ...]
    series: tuple[str, ...]
    tied: tuple[str, ...]
    conditions: tuple[str, ...]


def _axes_of(table: pd.DataFrame, axes: Sequence[str] | None) -> list[str]:
    """The axis columns: ``axes`` where given (sweep.json's, as dotted keys), else every column
    that is neither ``point``/``key`` nor a summary column."""
    if axes is None:
        return [c for c in table.columns if c not in _NOT_AXES]
    columns = [f"axis.{a}" if a in _NOT_AXES else a for a in axes]
    return [c for c in columns if c in table.columns]


def _is_seed(column: str) -> bool:
    return column.split(".")[-1] == "seed"


def _moves_with_workers(table: pd.DataFrame, column: str) -> bool:
    return bool((text(table[column]).groupby(text(table["workers"])).nunique() <= 1).all())


def column_roles(table: pd.DataFrame, axes: Sequence[str] | None = None) -> Roles:
    """Seed, series (algorithm variant), worker-tied and condition columns of ``table``."""
    columns = [c for c in _axes_of(table, axes) if c not in _SAME_AS_SUMMARY]
    seeds = tuple(c for c in columns if _is_seed(c))
    rest = [c for c in columns if c not in seeds]
    series = tuple(c for c in rest if c.removeprefix("axis.").split(".")[0] == "algorithm")
    rest = [c for c in rest if c not in series]
    tied = tuple(c for c in rest if _moves_with_workers(table, c))
    return Roles(seeds, series, tied, tuple(c for c in rest if c not in tied))


def _label(row: pd.Series, columns: Sequence[str], varying: set[str]) -> str:
    return ", ".join(f"{c.removeprefix('axis.')}={_show(row[c])}" for c in columns if c in varying)


def _show(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "–" if isinstance(value, float) and math.isnan(value) else str(value)


def text(values: pd.Series) -> pd.Series:
    """Cells as the text a label shows: ``0`` for 0.0, ``–`` where missing (an axis a listed point
    does not set), so that missing values group together instead of being dropped."""
    return values.map(_show).astype(object)


def groups(table: pd.DataFrame, roles: Roles) -> Iterator[tuple[dict[str, object], pd.DataFrame]]:
    """``({algorithm, series, workers, condition}, rows)`` for each group of points that differ
    only in their seed, in the table's order. ``series`` names the algorithm and its varying
    variant axes (``nsoftsync (algorithm.n=2)``), ``condition`` the varying condition axes."""
    data = table.assign(workers=pd.to_numeric(table["workers"], errors="coerce"))
    varying = {c for c in (*roles.series, *roles.conditions) if text(data[c]).nunique() > 1}
    keys = ["algorithm", *roles.series, *roles.conditions, "workers"]
    for _, rows in data.groupby([text(data[k]) for k in keys], sort=False):
        first = rows.iloc[0]
        variant = _label(first, roles.series, varying)
        yield ({"algorithm": str(first["algorithm"]),
                "series": f"{first['algorithm']} ({variant})" if variant else str(first["algorithm"]),
                "workers": int(first["workers"]), "condition": _label(first, roles.conditions, varying)}, rows)


def seed_index(rows: pd.DataFrame, roles: Roles) -> pd.Index:
    """The rows' seeds as one label each (``"0"``, ``"0|3"`` for two seed axes); positions without a seed axis."""
    if not roles.seeds:
        return pd.Index([str(i) for i in range(len(rows))])
    return pd.Index(rows[list(roles.seeds)].apply(text).agg("|".join, axis=1))


def column(rows: pd.DataFrame, name: str) -> np.ndarray:
    """The column ``name`` as floats (NaN where empty or not a number; all NaN when absent)."""
    if name not in rows:
        return np.full(len(rows), np.nan)
    return pd.to_numeric(rows[name], errors="coerce").to_numpy(dtype=float)


def aggregate(table: pd.DataFrame, axes: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per group (see module doc): ``algorithm, series, workers, condition, n, reached,
    target_accuracy`` and ``<metric>, <metric>_std, <metric>_ci95`` for each of :data:`METRICS`."""
    roles = column_roles(table, axes)
    out = []
    for key, rows in groups(table, roles):
        row: dict[str, object] = {**key, "n": len(rows)}
        row["reached"] = int(np.isfinite(column(rows, "time_to_accuracy_s")).sum())
        target = column(rows, "target_accuracy")
        row["target_accuracy"] = float(target[np.isfinite(target)][0]) if np.isfinite(target).any() else math.nan
        for metric in METRICS:
            est = estimate(column(rows, metric))
            row.update({metric: est.mean, f"{metric}_std": est.std, f"{metric}_ci95": est.half_width})
        out.append(row)
    columns = ["algorithm", "series", "workers", "condition", "n", "reached", "target_accuracy",
               *(f"{m}{s}" for m in METRICS for s in ("", "_std", "_ci95"))]
    return pd.DataFrame(out, columns=columns)


@dataclass(frozen=True)
class Comparison:
    """How the per-seed values of ``a`` relate to ``b``.

    ``verdict``: ``"identical"`` (the same values), ``"lower"`` / ``"higher"`` (``a`` below or
    above ``b``, told apart), ``"overlap"`` (cannot be told apart) or ``"unknown"`` (a single
    seed: no interval). ``difference``: the paired mean difference a - b, or a's mean minus b's.
    """

    verdict: str
    difference: Estimate
    paired: bool


def compare_samples(a: pd.Series, b: pd.Series) -> Comparison:
    """Tell ``a`` and ``b`` (finite values indexed by seed label) apart at 95 %.

    When both hold the same seeds the comparison is paired: the interval of the per-seed
    differences a - b either contains 0 (``overlap``) or not. Otherwise each side's own
    interval is computed and the two either overlap or not; overlapping intervals is the
    stricter test (two means can differ while their intervals overlap), so "cannot be told
    apart" then errs towards caution.
    """
    a, b = a.astype(float), b.astype(float)
    paired = len(a) > 0 and len(a) == len(b) and set(a.index) == set(b.index)
    if paired:
        diff = a - b.reindex(a.index)
        same = np.allclose(a, b.reindex(a.index), rtol=_RTOL_IDENTICAL, atol=0.0)
        est = estimate(diff)
        if same:
            return Comparison("identical", est, True)
        if est.n < 2:
            return Comparison("unknown", est, True)
        return Comparison("overlap" if est.contains(0.0) else ("lower" if est.mean < 0 else "higher"), est, True)
    ea, eb = estimate(a), estimate(b)
    est = Estimate(min(ea.n, eb.n), ea.mean - eb.mean, math.nan, math.nan)
    if ea.n < 2 or eb.n < 2:
        return Comparison("unknown", est, False)
    return Comparison("overlap" if ea.overlaps(eb) else ("lower" if ea.mean < eb.mean else "higher"), est, False)
