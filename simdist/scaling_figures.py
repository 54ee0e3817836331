"""Sweep figures read from a sweep table (``sweep.csv``): speedup, efficiency, time to accuracy.

:func:`scaling_table` computes each algorithm's speedup and parallel efficiency against its
own point with the fewest workers; :func:`plot_speedup`, :func:`plot_efficiency` and
:func:`plot_time_to_accuracy` draw them against the worker count.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from .plot_common import legend, new_axes

__all__ = ["scaling_table", "plot_speedup", "plot_efficiency", "plot_time_to_accuracy"]


def scaling_table(table: pd.DataFrame, *, group: str = "algorithm") -> pd.DataFrame:
    """Speedup and parallel efficiency per ``group`` from a sweep table (``simdist sweep``'s sweep.csv).

    Speedup of a point = its ``throughput_samples_per_s`` over that of the group's point with
    the fewest workers, times that point's worker count (so a 1-worker baseline gives the usual
    T1/Tn): with a fixed global batch and epoch count (strong scaling) this is the ratio of
    run times; with a fixed per-worker batch (weak scaling) it is the scaled speedup.
    Efficiency = speedup / workers. Columns: ``group, workers, speedup, efficiency``.
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


def plot_speedup(table: pd.DataFrame, ax: Axes | None = None, *, group: str = "algorithm",
                 scaling: str = "strong") -> Axes:
    """Speedup vs workers, a line per ``group`` value, with the ideal (linear) speedup dashed."""
    ax = ax if ax is not None else new_axes()
    scaled = scaling_table(table, group=group)
    for name, part in scaled.groupby(group, sort=False):
        ax.plot(part["workers"], part["speedup"], marker="o", markersize=4, label=str(name))
    if len(scaled):
        n = np.array(sorted(scaled["workers"].unique()), dtype=float)
        ax.plot(n, n, linestyle="--", color="0.4", label="ideal")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xticks(n, [f"{int(v)}" for v in n])
    ax.set_xlabel("workers")
    ax.set_ylabel("speedup (throughput vs fewest workers)" if scaling == "strong" else "scaled speedup")
    ax.set_title(f"{'Strong' if scaling == 'strong' else 'Weak'} scaling: speedup vs workers")
    legend(ax)
    return ax


def plot_efficiency(table: pd.DataFrame, ax: Axes | None = None, *, group: str = "algorithm",
                    scaling: str = "strong") -> Axes:
    """Parallel efficiency (speedup / workers) vs workers, with the ideal 1.0 dashed."""
    ax = ax if ax is not None else new_axes()
    scaled = scaling_table(table, group=group)
    for name, part in scaled.groupby(group, sort=False):
        ax.plot(part["workers"], part["efficiency"], marker="o", markersize=4, label=str(name))
    if len(scaled):
        n = np.array(sorted(scaled["workers"].unique()), dtype=float)
        ax.axhline(1.0, linestyle="--", color="0.4", label="ideal")
        ax.set_xscale("log", base=2)
        ax.set_xticks(n, [f"{int(v)}" for v in n])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("workers")
    ax.set_ylabel("parallel efficiency (fraction)")
    ax.set_title(f"{'Strong' if scaling == 'strong' else 'Weak'} scaling: parallel efficiency")
    legend(ax)
    return ax


def plot_time_to_accuracy(table: pd.DataFrame, ax: Axes | None = None, *, group: str = "algorithm") -> Axes:
    """Time-to-accuracy bars: one group of bars per worker count, a bar per ``group`` value.

    Points that never reached the target get a hatched stub marked "not reached"; the target
    accuracy is stated on the axis.
    """
    ax = ax if ax is not None else new_axes()
    data = table.copy()
    data["workers"] = pd.to_numeric(data["workers"], errors="coerce")
    data["time_to_accuracy_s"] = pd.to_numeric(data["time_to_accuracy_s"], errors="coerce")
    names = list(dict.fromkeys(data[group]))
    counts = sorted(int(n) for n in data["workers"].dropna().unique())
    width = 0.8 / max(1, len(names))
    reached = data["time_to_accuracy_s"].dropna()
    stub = float(reached.max()) * 0.04 if len(reached) else 1.0
    for i, name in enumerate(names):
        part = data[data[group] == name].groupby("workers")["time_to_accuracy_s"].min()
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(counts))]
        values = [part.get(n, np.nan) for n in counts]
        color = f"C{i % 10}"
        ax.bar([x for x, v in zip(xs, values) if np.isfinite(v)], [v for v in values if np.isfinite(v)],
               width=width, color=color, label=str(name))
        missing = [x for x, v, n in zip(xs, values, counts) if not np.isfinite(v) and n in part.index]
        if missing:
            ax.bar(missing, [stub] * len(missing), width=width, color="none", edgecolor=color, hatch="///")
            for x in missing:
                ax.text(x, stub, "×", ha="center", va="bottom", fontsize=8, color=color)
    target = pd.to_numeric(data.get("target_accuracy", pd.Series(dtype=float)), errors="coerce").dropna()
    target_text = f"{float(target.iloc[0]):.3g}" if len(target) else "?"
    ax.set_xticks(range(len(counts)), [str(n) for n in counts])
    ax.set_xlabel("workers")
    ax.set_ylabel(f"virtual time to test accuracy ≥ {target_text} (s)")
    ax.set_title(f"Time to accuracy (target {target_text}; hatched × = not reached)")
    legend(ax)
    return ax
