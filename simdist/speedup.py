"""Speedup and parallel efficiency against one common baseline, with 95 % confidence intervals.

Every algorithm of a sweep is measured against the same point, not against its own fewest
workers: by default the single-worker ``sync`` point (:data:`DEFAULT_BASELINE`), otherwise
the one named ``ALGORITHM@WORKERS`` (``asgd@2``) or ``ALGORITHM`` (at its fewest workers),
under each condition of the sweep (:mod:`simdist.aggregate`: the non-seed axes other than
the algorithm and the worker count).

* Speedup of a group = its throughput (samples per second of virtual time) over the
  baseline's: for the same number of samples this is the baseline's run time over the
  group's. Efficiency = speedup / (workers / baseline workers); the ideal is speedup =
  workers / baseline workers and efficiency 1.
* Intervals: when every seed of a group is also a seed of the baseline, the speedup is the
  mean of the per-seed ratios (paired: the same seed's data order and noise on both sides)
  with its t interval; otherwise the ratio of the means, with a delta-method interval
  (:func:`simdist.aggregate.ratio_estimate`).
* An explicit baseline that is not a point of the sweep is an :class:`~simdist.errors.InputError`
  naming ``--baseline`` and the points it may name. When the default has no point under a
  condition, the baseline falls back to ``sync`` at its fewest workers, else the first
  algorithm of the sweep at its fewest workers, and :attr:`Baseline.fallback` says why
  (the report prints it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from .aggregate import Estimate, column_roles, estimate, groups, ratio_estimate, seed_index
from .errors import InputError

__all__ = ["DEFAULT_BASELINE", "SPEEDUP_COLUMNS", "Baseline", "parse_baseline", "resolve_baselines", "speedup_table"]

DEFAULT_BASELINE = "sync@1"
SPEEDUP_COLUMNS = ("algorithm", "series", "workers", "condition", "baseline", "baseline_workers", "n", "paired",
                   "speedup", "speedup_ci95", "efficiency", "efficiency_ci95")


@dataclass(frozen=True)
class Baseline:
    """The point a condition's speedups are measured against; ``fallback`` says why, when it is
    not the baseline asked for."""

    series: str
    workers: int
    condition: str = ""
    fallback: str = ""

    @property
    def label(self) -> str:
        return f"{self.series}@{self.workers}"


def parse_baseline(spec: str) -> tuple[str, int | None]:
    """``"sync@1"`` → ``("sync", 1)``; ``"sync"`` → ``("sync", None)`` (its fewest workers)."""
    name, sep, workers = str(spec).rpartition("@") if "@" in str(spec) else (str(spec), "", "")
    if not name.strip() or (sep and not (workers.isdigit() and int(workers) >= 1)):
        raise InputError(f"baseline {spec!r} must be ALGORITHM or ALGORITHM@WORKERS with WORKERS >= 1, "
                         f"e.g. {DEFAULT_BASELINE}", source="--baseline")
    return name.strip(), int(workers) if sep else None


def _points(table: pd.DataFrame, roles) -> dict[str, list[tuple[str, str, int]]]:
    """Per condition, its (series, algorithm, workers) in table order."""
    found: dict[str, list[tuple[str, str, int]]] = {}
    for key, _ in groups(table, roles):
        found.setdefault(str(key["condition"]), []).append((str(key["series"]), str(key["algorithm"]),
                                                            int(key["workers"])))
    return found


def _match(points: list[tuple[str, str, int]], name: str, workers: int | None) -> list[tuple[str, int]]:
    series = list(dict.fromkeys(s for s, a, _ in points if name in (s, a)))
    out = []
    for s in series:
        counts = sorted(w for t, _, w in points if t == s)
        chosen = counts[0] if workers is None else workers
        if chosen in counts:
            out.append((s, chosen))
    return out


def _fallback(points: list[tuple[str, str, int]], condition: str) -> Baseline:
    algorithms = [a for _, a, _ in points]
    first = "sync" if "sync" in algorithms else algorithms[0]
    series, workers = _match(points, first, None)[0]
    why = f"the sweep has no single-worker sync point{f' under {condition}' if condition else ''}"
    return Baseline(series, workers, condition, why)


def resolve_baselines(table: pd.DataFrame, baseline: str | None = None,
                      axes: Sequence[str] | None = None) -> dict[str, Baseline]:
    """The baseline of each condition (``""`` when the sweep has no condition axes); see module doc."""
    roles = column_roles(table, axes)
    name, workers = parse_baseline(baseline or DEFAULT_BASELINE)
    chosen: dict[str, Baseline] = {}
    for condition, points in _points(table, roles).items():
        matches = _match(points, name, workers)
        if len(matches) == 1:
            chosen[condition] = Baseline(matches[0][0], matches[0][1], condition)
        elif baseline is None and not matches:
            chosen[condition] = _fallback(points, condition)
        else:
            known = ", ".join(dict.fromkeys(f"{s}@{w}" for s, _, w in points))
            where = f" under {condition}" if condition else ""
            problem = "names several series" if matches else "is not a point of this sweep"
            raise InputError(f"baseline {baseline or DEFAULT_BASELINE!r} {problem}{where}; name one of: {known}",
                             source="--baseline")
    return chosen


def _throughput(rows: pd.DataFrame, roles) -> pd.Series:
    values = pd.to_numeric(rows["throughput_samples_per_s"], errors="coerce").to_numpy(dtype=float)
    return pd.Series(values, index=seed_index(rows, roles))


def _speedup(mine: pd.Series, base: pd.Series) -> tuple[Estimate, bool]:
    """Paired per-seed ratios when every seed of ``mine`` is one seed of ``base``, else the ratio of means."""
    paired = (len(mine) > 0 and mine.index.is_unique and base.index.is_unique
              and set(mine.index) <= set(base.index))
    with np.errstate(divide="ignore", invalid="ignore"):
        if paired:
            return estimate((mine / base.reindex(mine.index)).to_numpy()), True
    return ratio_estimate(estimate(mine.to_numpy()), estimate(base.to_numpy())), False


def speedup_table(table: pd.DataFrame, baseline: str | None = None,
                  axes: Sequence[str] | None = None) -> pd.DataFrame:
    """Speedup and efficiency of every group against its condition's baseline, with 95 % half-widths.

    Columns: :data:`SPEEDUP_COLUMNS` (``baseline`` is the baseline's label, ``paired`` whether
    the interval comes from per-seed ratios).
    """
    roles = column_roles(table, axes)
    chosen = resolve_baselines(table, baseline, axes)
    found = list(groups(table, roles))
    base_rows = {(str(k["series"]), int(k["workers"]), str(k["condition"])): rows for k, rows in found}
    out = []
    for key, rows in found:
        base = chosen[str(key["condition"])]
        reference = _throughput(base_rows[(base.series, base.workers, base.condition)], roles)
        est, paired = _speedup(_throughput(rows, roles), reference)
        scale = base.workers / int(key["workers"])
        out.append({**key, "baseline": base.label, "baseline_workers": base.workers, "n": len(rows),
                    "paired": paired, "speedup": est.mean, "speedup_ci95": est.half_width,
                    "efficiency": est.mean * scale,
                    "efficiency_ci95": est.half_width * scale if math.isfinite(est.half_width) else math.nan})
    return pd.DataFrame(out, columns=list(SPEEDUP_COLUMNS))
