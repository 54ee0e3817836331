"""Sweep figures read from a sweep table (``sweep.csv``): speedup, efficiency and time to accuracy vs workers.

Every point is a mean over the seeds of its group (:mod:`simdist.aggregate`) with its 95 %
confidence interval as an error bar (none for a single seed), and speedup and efficiency are
measured against one common baseline (:mod:`simdist.speedup`, default the single-worker sync
point), named in the title, with the ideal dashed. Series differ by colour (Okabe–Ito),
marker and line style (:func:`simdist.plot_style.series_style`); series with the same values
everywhere are drawn once and named together (``asgd = dbs``), not hidden behind each other.
A group none of whose seeds reached the target accuracy is drawn as a hollow marker on a
dotted line at the top edge labelled "not reached"; one that reached in some seeds only is
marked ``k/n``. Worker counts are powers-of-two log axes with the counts as tick labels;
no axis shows an offset or scientific notation.

:func:`scaling_table` keeps the earlier measure, each algorithm against its own point with
the fewest workers, for callers that want it.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import NullLocator

from . import plot_style as style
from .aggregate import aggregate
from .plot_common import legend, new_axes
from .speedup import resolve_baselines, speedup_table

__all__ = ["scaling_table", "plot_speedup", "plot_efficiency", "plot_time_to_accuracy", "merge_identical"]

NOT_REACHED_Y = 0.94  # axes fraction of the "not reached" line
_REACHED_TOP = 0.85  # reached points stay below this axes fraction
_GREY = "0.35"
_DODGE = 0.02  # log2 units between neighbouring series at one worker count


def scaling_table(table: pd.DataFrame, *, group: str = "algorithm") -> pd.DataFrame:
    """Speedup and parallel efficiency per ``group``, each against its own point with the fewest workers.

    Speedup of a point = its ``throughput_samples_per_s`` over that of the group's point with
    the fewest workers, times that point's worker count (so a 1-worker baseline gives the usual
    T1/Tn). Efficiency = speedup / workers. Columns: ``group, workers, speedup, efficiency``.
    Seeds are averaged. Reports use :func:`simdist.speedup.speedup_table` (one common baseline).
    """
    data = table.copy()
    data["workers"] = pd.to_numeric(data["workers"], errors="coerce")
    data["throughput_samples_per_s"] = pd.to_numeric(data["throughput_samples_per_s"], errors="coerce")
    data = data.dropna(subset=["workers", "throughput_samples_per_s"])
    rows = []
    for name, part in data.groupby(group, sort=False):
        part = part.groupby("workers", as_index=False)["throughput_samples_per_s"].mean().sort_values("workers")
        base_n, base_rate = float(part["workers"].iloc[0]), float(part["throughput_samples_per_s"].iloc[0])
        for n, rate in zip(part["workers"], part["throughput_samples_per_s"]):
            speedup = rate / base_rate * base_n if base_rate > 0 else np.nan
            rows.append({group: name, "workers": int(n), "speedup": speedup, "efficiency": speedup / n})
    return pd.DataFrame(rows, columns=[group, "workers", "speedup", "efficiency"])


def merge_identical(frame: pd.DataFrame, columns: Sequence[str], *,
                    label: str = "label") -> list[tuple[str, pd.DataFrame]]:
    """``(name, rows)`` per distinct series of ``frame`` (grouped by ``label``): series whose
    ``columns`` hold the same values at every worker count are one entry named ``"a = b"``."""
    seen: dict[tuple, list[str]] = {}
    rows_of: dict[tuple, pd.DataFrame] = {}
    for name, rows in frame.groupby(label, sort=False):
        rows = rows.sort_values("workers")
        key = tuple(_fingerprint(rows[c]) for c in ("workers", *columns))
        seen.setdefault(key, []).append(str(name))
        rows_of.setdefault(key, rows)
    return [(" = ".join(names), rows_of[key]) for key, names in seen.items()]


def _fingerprint(values: pd.Series) -> tuple[str, ...]:
    return tuple("nan" if not np.isfinite(v) else f"{v:.9g}" for v in np.asarray(values, dtype=float))


def _labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """A ``label`` column: the series, with its condition where the sweep has several."""
    label = frame["series"].astype(str)
    with_condition = frame["condition"].astype(str) != ""
    return frame.assign(label=label.where(~with_condition, label + " [" + frame["condition"].astype(str) + "]"))


def _as_algorithm(table: pd.DataFrame, group: str) -> pd.DataFrame:
    return table if group == "algorithm" else table.assign(algorithm=table[group].astype(str))


_LABEL_GAP_PT = 9.0  # the least vertical distance between two line-end labels


def _dodge(workers: pd.Series, i: int) -> np.ndarray:
    """Worker counts nudged by a few per cent per series, so that error bars at one count stay apart."""
    return workers.to_numpy(dtype=float) * 2.0 ** (_DODGE * ((i % 5) - 2))


def _errorbars(ax: Axes, rows: pd.DataFrame, y: str, i: int, name: str) -> None:
    look = style.series_style(i)
    err = np.nan_to_num(rows[f"{y}_ci95"].to_numpy(dtype=float), nan=0.0)
    ax.errorbar(_dodge(rows["workers"], i), rows[y], yerr=err, capsize=3, elinewidth=1, markersize=5, label=name,
                **look)


def _end_labels(ax: Axes, ends: list[tuple[float, float, str, str]]) -> None:
    """Each series' name right of its last point (x, y, name, colour), in one column right of the
    rightmost point so that no name covers another series' marker, nudged apart vertically by at
    least :data:`_LABEL_GAP_PT` (a thin leader in the series' colour joins a nudged name to its
    point); the x axis is widened to make room. Lines are then named where they end, not in a legend."""
    if not ends:
        return
    low, high = ax.get_xlim()
    ax.set_xlim(low, high * 2.0 ** 0.9)  # room right of the last worker count (log2 axis)
    to_display, points_per_px = ax.transData, 72.0 / ax.figure.dpi
    column_px = max(float(to_display.transform((x, y))[0]) for x, y, _, _ in ends)
    placed: list[float] = []
    for x, y, name, color in sorted(ends, key=lambda e: e[1]):
        x_px, own_px = (float(v) for v in to_display.transform((x, y)))
        y_px = own_px
        if placed and (y_px - placed[-1]) * points_per_px < _LABEL_GAP_PT:
            y_px = placed[-1] + _LABEL_GAP_PT / points_per_px
        placed.append(y_px)
        dx_pt, dy_pt = (column_px - x_px) * points_per_px + 14.0, (y_px - own_px) * points_per_px
        leader = {"arrowstyle": "-", "color": color, "linewidth": 0.6, "shrinkA": 1, "shrinkB": 4, "relpos": (0.0, 0.5)}
        ax.annotate(name, (x, y), xytext=(dx_pt, dy_pt), textcoords="offset points", va="center", ha="left",
                    color=color, fontsize=style.FONT_SIZES["legend"], annotation_clip=False,
                    arrowprops=leader if abs(dy_pt) > 2.0 else None)


def _last_points(groups: list[tuple[str, pd.DataFrame]], y: str) -> list[tuple[float, float, str, str]]:
    """(workers, value, name, colour) of each series' point with the most workers."""
    ends = []
    for i, (name, rows) in enumerate(groups):
        last = rows.loc[rows["workers"].astype(float).idxmax()]
        ends.append((float(_dodge(pd.Series([last["workers"]]), i)[0]), float(last[y]), name,
                     style.series_style(i)["color"]))
    return ends


def _worker_axis(ax: Axes, workers: Sequence[int]) -> None:
    counts = sorted({int(w) for w in workers})
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(c) for c in counts])
    ax.xaxis.set_minor_locator(NullLocator())
    if len(counts) == 1:
        ax.set_xlim(counts[0] / 1.5, counts[0] * 1.5)
    ax.set_xlabel("workers")


def _log2_ticks(ax: Axes) -> None:
    """Powers of two as plain numbers (0.25, 0.5, 1, 2, ...) on a log2 y axis, no minor labels."""
    low, high = ax.get_ylim()
    ticks = [2.0**k for k in range(math.floor(math.log2(low)), math.ceil(math.log2(high)) + 1)
             if low <= 2.0**k <= high]
    if len(ticks) < 2:
        ticks = sorted({float(f"{v:.2g}") for v in np.geomspace(low, high, 4)})
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_ylim(low, high)


def _seeds_text(frame: pd.DataFrame) -> str:
    counts = sorted({int(n) for n in frame["n"]})
    if counts == [1]:
        return "1 seed per point, no interval"
    many = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"mean ± 95 % CI over {many} seeds"


def _baseline_text(table: pd.DataFrame, baseline: str | None, axes: Sequence[str] | None) -> str:
    labels = list(dict.fromkeys(b.label for b in resolve_baselines(table, baseline, axes).values()))
    return ", ".join(labels)


def _ideal(ax: Axes, scaled: pd.DataFrame, *, efficiency: bool) -> None:
    counts = np.array(sorted(scaled["workers"].unique()), dtype=float)
    for i, base in enumerate(sorted(scaled["baseline_workers"].unique())):
        label = "ideal" if scaled["baseline_workers"].nunique() == 1 else f"ideal from {base} workers"
        if efficiency:
            ax.axhline(1.0, linestyle="--", color=_GREY, linewidth=1, label=label if i == 0 else None)
        else:
            ax.plot(counts, counts / base, linestyle="--", color=_GREY, linewidth=1, label=label)


def plot_speedup(table: pd.DataFrame, ax: Axes | None = None, *, group: str = "algorithm", scaling: str = "strong",
                 baseline: str | None = None, axes: Sequence[str] | None = None) -> Axes:
    """Speedup vs workers against one common ``baseline`` (see module doc), with the ideal dashed."""
    with style.style_context():
        ax = ax if ax is not None else new_axes()
        data = _as_algorithm(table, group)
        scaled = _labelled(speedup_table(data, baseline, axes)).dropna(subset=["speedup"])
        groups = merge_identical(scaled, ("speedup", "speedup_ci95"))
        for i, (name, rows) in enumerate(groups):
            _errorbars(ax, rows, "speedup", i, name)
        if len(scaled):
            _ideal(ax, scaled, efficiency=False)
            _worker_axis(ax, scaled["workers"])
            ax.set_yscale("log", base=2)
            _log2_ticks(ax)
            _end_labels(ax, _last_points(groups, "speedup"))
        against = _baseline_text(data, baseline, axes)
        ax.set_ylabel(f"speedup (throughput / {against}'s)" if scaling == "strong" else
                      f"scaled speedup (throughput / {against}'s)")
        ax.set_title(f"{'Strong' if scaling == 'strong' else 'Weak'} scaling: speedup vs workers against "
                     f"{against} ({_seeds_text(scaled)})")
        legend(ax)
    return ax


def plot_efficiency(table: pd.DataFrame, ax: Axes | None = None, *, group: str = "algorithm",
                    scaling: str = "strong", baseline: str | None = None,
                    axes: Sequence[str] | None = None) -> Axes:
    """Parallel efficiency (speedup / (workers / baseline workers)) vs workers, with the ideal 1.0 dashed."""
    with style.style_context():
        ax = ax if ax is not None else new_axes()
        data = _as_algorithm(table, group)
        scaled = _labelled(speedup_table(data, baseline, axes)).dropna(subset=["efficiency"])
        groups = merge_identical(scaled, ("efficiency", "efficiency_ci95"))
        for i, (name, rows) in enumerate(groups):
            _errorbars(ax, rows, "efficiency", i, name)
        if len(scaled):
            _ideal(ax, scaled, efficiency=True)
            _worker_axis(ax, scaled["workers"])
            top = (scaled["efficiency"] + scaled["efficiency_ci95"].fillna(0.0)).max()
            ax.set_ylim(0.0, max(1.1, float(top) * 1.05))
            _end_labels(ax, _last_points(groups, "efficiency"))
        style.plain_axis(ax.yaxis)
        against = _baseline_text(data, baseline, axes)
        ax.set_ylabel("parallel efficiency (fraction)")
        ax.set_title(f"{'Strong' if scaling == 'strong' else 'Weak'} scaling: parallel efficiency against "
                     f"{against} ({_seeds_text(scaled)})")
        legend(ax)
    return ax


def _not_reached(ax: Axes, rows: pd.DataFrame, i: int) -> None:
    """Hollow markers on the "not reached" line for groups none of whose seeds reached the target."""
    never = rows[rows["reached"] == 0]
    if len(never):
        look = style.series_style(i)
        ax.plot(_dodge(never["workers"], i), np.full(len(never), NOT_REACHED_Y), transform=ax.get_xaxis_transform(),
                linestyle="none", marker=look["marker"], markersize=7, markerfacecolor="white",
                markeredgecolor=look["color"], markeredgewidth=1.5, clip_on=False)


def _not_reached_line(ax: Axes) -> None:
    """The dotted line at the top edge on which groups that never reached the target sit, labelled so."""
    ax.plot([0.0, 1.0], [NOT_REACHED_Y, NOT_REACHED_Y], transform=ax.transAxes, color=_GREY, linestyle=":",
            linewidth=1)
    ax.text(0.01, NOT_REACHED_Y + 0.015, "not reached", transform=ax.transAxes, ha="left", va="bottom",
            fontsize=style.FONT_SIZES["legend"], color=_GREY)


def _partly_reached(ax: Axes, rows: pd.DataFrame) -> None:
    """``k/n`` beside each group whose target was reached in some seeds only (its mean is of those)."""
    for _, row in rows[(rows["reached"] > 0) & (rows["reached"] < rows["n"])].iterrows():
        ax.annotate(f"{int(row['reached'])}/{int(row['n'])}", (float(row["x"]), row["time_to_accuracy_s"]),
                    xytext=(5, 4), textcoords="offset points", fontsize=style.FONT_SIZES["legend"])


def _target_text(table: pd.DataFrame) -> str:
    target = pd.to_numeric(table.get("target_accuracy", pd.Series(dtype=float)), errors="coerce").dropna()
    return f"{float(target.iloc[0]):.3g}" if len(target) else "?"


def plot_time_to_accuracy(table: pd.DataFrame, ax: Axes | None = None, *, group: str = "algorithm",
                          baseline: str | None = None, axes: Sequence[str] | None = None) -> Axes:
    """Virtual time to the target accuracy vs workers: mean ± 95 % CI over the seeds that reached it,
    "not reached" at the top edge, and the baseline's time as a dotted level (see module doc)."""
    with style.style_context():
        ax = ax if ax is not None else new_axes()
        data = _as_algorithm(table, group)
        summary = _labelled(aggregate(data, axes))
        reached = summary[summary["reached"] > 0]
        for i, (name, rows) in enumerate(merge_identical(summary, ("time_to_accuracy_s", "time_to_accuracy_s_ci95",
                                                                   "reached", "n"))):
            hit = rows[rows["reached"] > 0]
            if len(hit):
                _errorbars(ax, hit, "time_to_accuracy_s", i, name)
            else:
                ax.plot([], [], label=name, **style.series_style(i))
            _not_reached(ax, rows, i)
            _partly_reached(ax, rows.assign(x=_dodge(rows["workers"], i)))
        top = float((reached["time_to_accuracy_s"] + reached["time_to_accuracy_s_ci95"].fillna(0.0)).max()) \
            if len(reached) else 1.0
        _baseline_level(ax, summary, data, baseline, axes)
        if (summary["reached"] == 0).any():
            _not_reached_line(ax)
        ax.set_ylim(0.0, top / _REACHED_TOP)
        if len(summary):
            _worker_axis(ax, summary["workers"])
        target = _target_text(data)
        style.time_axis(ax.yaxis, f"virtual time to test accuracy ≥ {target}", top / _REACHED_TOP)
        ax.set_title(f"Time to accuracy {target} ({_seeds_text(summary)})")
        legend(ax)
    return ax


def _baseline_level(ax: Axes, summary: pd.DataFrame, table: pd.DataFrame, baseline: str | None,
                    axes: Sequence[str] | None) -> None:
    """The baseline's mean time to accuracy as a dotted horizontal line (one sweep condition only)."""
    chosen = list(resolve_baselines(table, baseline, axes).values())
    if len(chosen) != 1:
        return
    base = chosen[0]
    rows = summary[(summary["series"] == base.series) & (summary["workers"] == base.workers)]
    if len(rows) and rows["reached"].iloc[0] > 0:
        level = float(rows["time_to_accuracy_s"].iloc[0])
        ax.axhline(level, color=_GREY, linestyle="-.", linewidth=1,
                   label=f"baseline {base.label}: {style.format_duration(level)}")
