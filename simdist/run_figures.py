"""The figures of one run, read from its result directory (never from a re-run).

:func:`plot_tables` draws, from a :class:`~simdist.result_files.LoadedResult`, each as PNG and SVG:

``loss_vs_time``        training loss per update (raw, faint, and a moving average) and test
                        loss (mean over the evaluated workers) against virtual time
``accuracy_vs_time``    test accuracy of each evaluated worker against virtual time, with the
                        target as a dashed line
``staleness_hist``      how many updates had each staleness
``iteration_times``     each worker's time between consecutive applied gradients
``batch_size_vs_time``  each worker's batch size, drawn only when batch sizes change
``timeline``            one row per rank, compute / comm / wait spans (:mod:`simdist.timeline_figure`)
``time_per_step``       where the time goes: each rank's mean step stacked by ledger part
                        (``ledger.csv``: forward/backward, comm wire and CPU, wait, update ...)
``link_utilisation``    each link kind's mean utilisation and the busiest links' over virtual
                        time (``link_usage.csv``, :mod:`simdist.link_figures`)

A figure whose data is absent (timing-only runs have no loss; no evaluations; no updates;
no trace) is skipped, not an error; :func:`figure` returns one of them unsaved (the Python
API's ``Result.plot``).

The figures share the look of :mod:`simdist.plot_style` (Okabe–Ito colours, time axes in the
unit that fits the run, integer ticks for counted quantities, no axis offsets), are titled
with the scenario's name and what they show, and describe degenerate data rather than draw it
as noise: iteration times that are all equal are one marked value ("every iteration took
117 µs"), a staleness that is the same for every update (sync: 0) is said in words.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from . import plot_style as style
from .ledger_figures import ledger_bars
from .link_figures import draw_link_utilisation
from .plot_common import figure_title, largest, legend, new_figure, numeric, save_figure, staleness_edges
from .result_files import LoadedResult
from .timeline_figure import draw_timeline

__all__ = ["FIGURES", "MAX_BOXES", "plot_tables", "figure", "ledger_bars"]

FIGURES = ("loss_vs_time", "accuracy_vs_time", "staleness_hist", "staleness_vs_time", "iteration_times",
           "batch_size_vs_time", "timeline", "time_per_step", "link_utilisation")
MAX_BOXES = 48  # workers above which iteration times are drawn as quantile bands
_FEW_LEVELS = 3  # iteration times with at most this many distinct values (4 digits) are listed in words
_RASTERIZE_ABOVE = 5000  # artists with more points than this are rasterized in SVG
_TIME_LABEL = "virtual time"
RUNNING_MEAN_UPDATES = 50  # the staleness-over-time figure's running mean


def plot_tables(loaded: LoadedResult, out_dir: str | os.PathLike[str]) -> list[Path]:
    """Draw every figure whose data ``loaded`` has into ``out_dir``; returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with style.style_context():
        for name in FIGURES:
            fig = figure(loaded, name)
            if fig is not None:
                written += save_figure(fig, out / name)
    return written


def figure(loaded: LoadedResult, name: str) -> Figure | None:
    """The figure ``name`` (one of :data:`FIGURES`) of ``loaded``, unsaved; None where its data is absent."""
    draw = {"loss_vs_time": _draw_loss, "accuracy_vs_time": _draw_accuracy, "staleness_hist": _draw_staleness,
            "staleness_vs_time": _draw_staleness_over_time,
            "iteration_times": _draw_iteration_times, "batch_size_vs_time": _draw_batch_sizes,
            "timeline": draw_timeline, "time_per_step": _draw_ledger, "link_utilisation": draw_link_utilisation}
    if name not in draw:
        raise ValueError(f"unknown figure {name!r}; known: {', '.join(FIGURES)}")
    with style.style_context():
        fig = draw[name](loaded)
    return None if fig is None else style.finish_axes(fig)


def _draw_ledger(loaded: LoadedResult) -> Figure | None:
    """Where the time goes: each rank's mean step, stacked by ledger part (simdist.ledger)."""
    ledger = loaded.ledger
    if ledger is None or ledger.empty:
        return None
    ax = ledger_bars({f"rank {int(rank)}": rows for rank, rows in ledger.groupby("rank")},
                     title=figure_title(loaded, "where a step's time goes"))
    ax.set_xlabel("rank")
    return ax.figure


def _draw_loss(loaded: LoadedResult) -> Figure | None:
    train = numeric(loaded.steps, "time_s", "loss").dropna().sort_values("time_s", kind="stable")
    test = numeric(loaded.evals, "time_s", "test_loss").dropna()
    if train.empty and test.empty:
        return None
    fig, ax = new_figure()
    train_color, test_color = style.SERIES_COLORS[0], style.SERIES_COLORS[1]
    if not train.empty:
        t, loss = train["time_s"].to_numpy(), train["loss"].to_numpy()
        window = int(np.clip(len(loss) // 50, 1, 500))
        smooth = pd.Series(loss).rolling(window, min_periods=1).mean().to_numpy()
        big = len(loss) > _RASTERIZE_ABOVE
        if window > 1:
            ax.plot(t, loss, color=train_color, alpha=0.25, linewidth=0.6, rasterized=big, label="training loss")
        ax.plot(t, smooth, color=train_color, linewidth=1.6, rasterized=big,
                label=f"training loss, mean of {window} updates" if window > 1 else "training loss")
    if not test.empty:
        mean = test.groupby("time_s")["test_loss"].mean()
        ax.plot(mean.index, mean.to_numpy(), color=test_color, marker="s", label="test loss (mean over workers)")
    else:
        style.note(ax, "no test evaluations in this run", x=0.98, y=0.96, ha="right", va="top")
    style.time_axis(ax.xaxis, _TIME_LABEL, largest(train["time_s"], test["time_s"]))
    ax.set_ylabel("loss")
    ax.set_title(figure_title(loaded, "loss vs virtual time"))
    legend(ax)
    return fig


def _draw_accuracy(loaded: LoadedResult) -> Figure | None:
    evals = numeric(loaded.evals, "time_s", "worker", "test_accuracy").dropna()
    if evals.empty:
        return None
    fig, ax = new_figure()
    by_worker = evals.sort_values("time_s", kind="stable").groupby("worker", sort=True)
    for i, (worker, rows) in enumerate(by_worker):
        ax.plot(rows["time_s"], rows["test_accuracy"], label=f"worker {int(worker)}", **style.series_style(i))
    target = loaded.summary.get("target_accuracy")
    if target is not None:
        ax.axhline(float(target), color=style.OKABE_ITO["black"], linestyle="--", linewidth=1,
                   label=f"target {float(target):g}")
    style.time_axis(ax.xaxis, _TIME_LABEL, largest(evals["time_s"]))
    ax.set_ylabel("test accuracy (fraction)")
    ax.set_title(figure_title(loaded, "test accuracy vs virtual time"))
    legend(ax)
    return fig


def _draw_staleness(loaded: LoadedResult) -> Figure | None:
    """Updates per staleness; a run whose updates all have one staleness (sync: 0) says so."""
    staleness = numeric(loaded.steps, "staleness")["staleness"].dropna().to_numpy()
    if staleness.size == 0:
        return None
    fig, ax = new_figure()
    color = style.SERIES_COLORS[0]
    integer = bool(np.all(np.mod(staleness, 1) == 0))
    if integer and np.ptp(staleness) <= 100:
        values, counts = np.unique(staleness.astype(np.int64), return_counts=True)
        ax.bar(values, counts, width=0.8, color=color)
        low, high = int(values.min()), int(values.max())
        ax.set_xlim(low - 0.6, max(high, low + 2) + 0.6)  # room for the empty neighbours of one bar
    else:
        ax.hist(staleness, bins=staleness_edges(staleness), color=color, edgecolor="white")
    if integer:
        style.integer_axis(ax.xaxis)
    style.integer_axis(ax.yaxis)
    ax.set_xlabel("staleness (model versions behind)")
    ax.set_ylabel("updates")
    only = style.constant_value(staleness, rtol=0.0)
    if only is not None:
        style.note(ax, f"{loaded.algorithm}: every update has staleness {only:g} ({staleness.size} updates)",
                   x=0.98, y=0.96, ha="right", va="top")
        what = f"staleness of {staleness.size} updates"
    else:
        what = f"staleness of {staleness.size} updates (mean {float(np.mean(staleness)):.3g})"
    ax.set_title(figure_title(loaded, what))
    return fig


def _draw_staleness_over_time(loaded: LoadedResult) -> Figure | None:
    """Each applied update's staleness against virtual time, with a running mean over
    :data:`RUNNING_MEAN_UPDATES` updates; a run that never varies says so (sync: 0 throughout)."""
    steps = numeric(loaded.steps, "time_s", "staleness").dropna().sort_values("time_s", kind="stable")
    if steps.empty:
        return None
    fig, ax = new_figure()
    time_s, staleness = steps["time_s"].to_numpy(), steps["staleness"].to_numpy()
    only = style.constant_value(staleness, rtol=0.0)
    ax.plot(time_s, staleness, linestyle="none", marker="o", markersize=2, alpha=0.35, color=style.SERIES_COLORS[0],
            label="an update", rasterized=len(steps) > _RASTERIZE_ABOVE)
    if only is None:
        window = min(RUNNING_MEAN_UPDATES, len(staleness))
        running = pd.Series(staleness).rolling(window, min_periods=1).mean().to_numpy()
        ax.plot(time_s, running, color=style.SERIES_COLORS[1], label=f"mean of the last {window} updates")
        ax.legend(loc="upper left")
        what = f"staleness over time (mean {float(np.mean(staleness)):.3g})"
    else:
        style.note(ax, f"{loaded.algorithm}: every update has staleness {only:g} ({staleness.size} updates)",
                   x=0.98, y=0.96, ha="right", va="top")
        what = "staleness over time"
    style.integer_axis(ax.yaxis, "staleness (model versions behind)")
    ax.set_ylim(bottom=min(-0.5, float(staleness.min()) - 0.5), top=max(float(staleness.max()) + 1.0, 1.0))
    style.time_axis(ax.xaxis, _TIME_LABEL, largest(steps["time_s"]) or 1.0)
    ax.set_title(figure_title(loaded, what))
    return fig


def _iteration_intervals(steps: pd.DataFrame) -> dict[int, np.ndarray]:
    """Per worker, the virtual time between its consecutive applied gradients."""
    out: dict[int, np.ndarray] = {}
    for worker, rows in steps.groupby("worker", sort=True):
        times = np.sort(rows["time_s"].to_numpy(dtype=float))
        if len(times) > 1:
            out[int(worker)] = np.diff(times)
    return out


def _draw_iteration_times(loaded: LoadedResult) -> Figure | None:
    """Distribution of each worker's iteration time (box per worker): equal boxes = balanced workers.
    When every iteration of every worker took the same time, one marked value says how long."""
    steps = numeric(loaded.steps, "time_s", "worker").dropna()
    intervals = _iteration_intervals(steps) if len(steps) else {}
    if not intervals:
        return None
    fig, ax = new_figure()
    workers = sorted(intervals)
    every = np.concatenate([intervals[w] for w in workers])
    only_s = style.constant_value(every)
    if only_s is not None:
        _draw_constant_iterations(ax, workers, only_s, every.size)
        what = f"every iteration took {style.format_duration(only_s)}"
    elif len(workers) <= MAX_BOXES:
        boxes = ax.boxplot([intervals[w] for w in workers], positions=workers, patch_artist=True, widths=0.6,
                           flierprops={"marker": "o", "markersize": 3, "markerfacecolor": "none",
                                       "markeredgecolor": style.OKABE_ITO["black"]})
        for box in boxes["boxes"]:
            box.set(facecolor=style.OKABE_ITO["sky_blue"], edgecolor=style.OKABE_ITO["black"], linewidth=0.8)
        for median in boxes["medians"]:
            median.set(color=style.OKABE_ITO["black"], linewidth=1.2)
        ax.set_xlim(workers[0] - 0.6, workers[-1] + 0.6)
        what = _iteration_summary(every)
    else:  # a box per worker is unreadable (and slow to draw) for hundreds of workers: draw the quantiles
        quantiles = np.array([np.percentile(intervals[w], [5, 25, 50, 75, 95]) for w in workers])
        band = style.OKABE_ITO["sky_blue"]
        ax.fill_between(workers, quantiles[:, 0], quantiles[:, 4], color=band, alpha=0.35, label="5-95 %")
        ax.fill_between(workers, quantiles[:, 1], quantiles[:, 3], color=band, alpha=0.8, label="25-75 %")
        ax.plot(workers, quantiles[:, 2], color=style.OKABE_ITO["black"], linewidth=1, label="median")
        legend(ax)
        what = _iteration_summary(every)
    # from zero: the spread reads against the whole iteration, and float noise never fills the axis
    upper_s = only_s * 1.5 if only_s is not None else float(every.max()) * 1.15
    ax.set_ylim(0.0, upper_s)
    style.time_axis(ax.yaxis, "iteration time (virtual)", upper_s)
    style.integer_axis(ax.xaxis, "worker (rank)")
    ax.set_title(figure_title(loaded, what))
    return fig


def _iteration_summary(intervals_s: np.ndarray) -> str:
    """What the iteration times are, in words: their few distinct values with counts (a sync run
    whose last batch of an epoch is smaller: "904 × 118 µs, 52 × 100 µs"), else the median."""
    values, counts = np.unique(np.asarray([float(f"{v:.4g}") for v in intervals_s]), return_counts=True)
    if len(values) <= _FEW_LEVELS:
        order = np.argsort(-counts, kind="stable")
        return "iteration times: " + ", ".join(f"{counts[i]} × {style.format_duration(values[i])}" for i in order)
    return f"iteration time per worker (median {style.format_duration(float(np.median(intervals_s)))})"


def _draw_constant_iterations(ax: Axes, workers: list[int], iteration_s: float, n_iterations: int) -> None:
    """One marked value per worker on a line at the common iteration time, the number in the label."""
    label = f"every iteration took {style.format_duration(iteration_s)} ({n_iterations} iterations)"
    ax.axhline(iteration_s, color=style.OKABE_ITO["blue"], linewidth=1.0, linestyle="--")
    ax.plot(workers, np.full(len(workers), iteration_s), linestyle="none", marker="o", markersize=6,
            color=style.OKABE_ITO["blue"], label=label)
    ax.set_xlim(workers[0] - 0.6, workers[-1] + 0.6)
    ax.legend(loc="lower right")


def _draw_batch_sizes(loaded: LoadedResult) -> Figure | None:
    """Batch size of each worker's gradients over virtual time; drawn only when batch sizes change."""
    steps = numeric(loaded.steps, "time_s", "worker", "batch_size").dropna()
    if not len(steps) or steps.groupby("worker")["batch_size"].nunique().max() <= 2:
        return None  # constant batches (the last batch of an epoch may be smaller)
    fig, ax = new_figure()
    for i, (worker, rows) in enumerate(steps.groupby("worker", sort=True)):
        look = style.series_style(i)
        ax.step(rows["time_s"], rows["batch_size"], where="post", label=f"worker {int(worker)}", linewidth=1,
                color=look["color"], linestyle=look["linestyle"])
    style.time_axis(ax.xaxis, _TIME_LABEL, largest(steps["time_s"]))
    style.integer_axis(ax.yaxis, "batch size (samples)")
    ax.set_title(figure_title(loaded, "batch size over virtual time"))
    legend(ax)
    return fig
