"""Test accuracy of many runs against virtual time or steps: small multiples, a panel per run.

Seven algorithms' accuracy curves on one axes cross and hide each other: an asynchronous run
that diverges at 16 workers covers the others near the bottom, and a legend of seven colours
has to be matched by eye. Here every run has its own panel, its curve drawn in its own colour,
marker and line style, and every other run's curve faint grey behind it, so each panel reads
alone and still compares with the rest. The panels share both axes; time is in the one unit that
fits the longest run (:mod:`simdist.plot_style`); the target accuracy is a dashed line in every
panel. Runs whose curves are the same evaluation for evaluation are drawn once and named together
("asgd = nsoftsync").

``simdist report`` draws it for each algorithm's largest point (:mod:`simdist.report`).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from . import plot_style as style
from .plot_common import numeric, run_labels
from .result_files import LoadedResult

__all__ = ["AccuracyCurve", "accuracy_curves", "plot_accuracy_panels"]

PANEL_WIDTH_IN, PANEL_HEIGHT_IN = 2.3, 1.9
MAX_COLUMNS = 4
_CONTEXT_COLOR = "0.82"  # the other runs' curves behind a panel's own
_X_LABELS = {"time_s": "virtual time", "step": "global step (model updates)"}

AccuracyCurve = tuple[str, pd.Series]  # (name, mean test accuracy indexed by time_s or step)


def accuracy_curves(runs: Sequence[LoadedResult], labels: Sequence[str] | None = None, *,
                    x: str = "time_s") -> list[AccuracyCurve]:
    """``(name, curve)`` per run with evaluations: the mean over evaluated workers of the test
    accuracy at each ``x`` (``"time_s"`` or ``"step"``). Runs whose curves are identical are one
    entry named ``"a = b"``; ``labels`` name the runs (default: :func:`~simdist.plot_common.run_labels`)."""
    names: dict[tuple, list[str]] = {}
    curves: dict[tuple, pd.Series] = {}
    for run, label in zip(runs, labels if labels is not None else run_labels(runs)):
        evals = numeric(run.evals, x, "test_accuracy").dropna()
        if evals.empty:
            continue
        curve = evals.groupby(x)["test_accuracy"].mean()
        key = (tuple(np.round(curve.index.to_numpy(float), 12)), tuple(np.round(curve.to_numpy(float), 9)))
        names.setdefault(key, []).append(label)
        curves.setdefault(key, curve)
    return [(" = ".join(names[key]), curves[key]) for key in names]


def _grid(n: int) -> tuple[int, int]:
    columns = min(n, MAX_COLUMNS)
    return math.ceil(n / columns), columns


def _panel(ax: Axes, curves: list[AccuracyCurve], i: int, target: float | None) -> None:
    """Panel ``i``: the other curves grey, the target dashed, then curve ``i`` in its series style."""
    for j, (_, other) in enumerate(curves):
        if j != i:
            ax.plot(other.index, other.to_numpy(), color=_CONTEXT_COLOR, linewidth=0.9, zorder=1)
    if target is not None:
        ax.axhline(target, color=style.TEXT_COLOR, linestyle="--", linewidth=0.8, zorder=2)
        if i == 0:  # said once: the line is the same in every panel
            ax.annotate(f"target {target:g}", (1.0, target), xycoords=("axes fraction", "data"), xytext=(-2, -3),
                        textcoords="offset points", ha="right", va="top", color=style.TEXT_COLOR,
                        fontsize=style.FONT_SIZES["tick"])
    name, curve = curves[i]
    look = style.series_style(i)
    ax.plot(curve.index, curve.to_numpy(), markersize=3, linewidth=1.4, zorder=3, **look)
    ax.set_title(name, color=look["color"], fontsize=style.FONT_SIZES["label"])


def _target(runs: Sequence[LoadedResult]) -> float | None:
    """The target accuracy the runs share, if they name one."""
    targets = {float(t) for r in runs if (t := r.summary.get("target_accuracy")) is not None}
    return targets.pop() if len(targets) == 1 else None


def plot_accuracy_panels(runs: Sequence[LoadedResult], title: str, labels: Sequence[str] | None = None, *,
                         x: str = "time_s") -> Figure | None:
    """A panel per run (identical runs merged) of its mean test accuracy against ``x`` (``"time_s"``
    or ``"step"``), the other runs grey behind it, the shared target dashed; None without evaluations."""
    curves = accuracy_curves(runs, labels, x=x)
    if not curves:
        return None
    rows, columns = _grid(len(curves))
    fig = Figure(figsize=(PANEL_WIDTH_IN * columns + 0.4, PANEL_HEIGHT_IN * rows + 0.5), layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.subplots(rows, columns, sharex=True, sharey=True, squeeze=False)
    target = _target(runs)
    for i, ax in enumerate(grid.flat):
        if i >= len(curves):
            ax.set_visible(False)
            continue
        _panel(ax, curves, i, target)
    extent = max(float(np.nanmax(c.index.to_numpy(float))) for _, c in curves)
    first = grid.flat[0]
    if x == "time_s":  # shared axes share their locator and formatter
        style.time_axis(first.xaxis, _X_LABELS[x], extent)
    else:
        style.integer_axis(first.xaxis, _X_LABELS[x])
    first.set_ylim(bottom=min(0.0, first.get_ylim()[0]))
    x_label = first.get_xlabel()
    for i, ax in enumerate(grid.flat[:len(curves)]):
        last_in_column = i + columns >= len(curves)
        ax.set_xlabel(x_label if last_in_column else "")
        ax.tick_params(labelbottom=last_in_column)
        ax.set_ylabel("test accuracy" if i % columns == 0 else "")
    fig.suptitle(title, fontsize=style.FONT_SIZES["title"])
    return style.finish_axes(fig)
