"""Figures of a run, read from its result directory (never from a re-run).

:func:`plot_tables` draws, from a :class:`~simdist.result_files.LoadedResult`, each as PNG and SVG:

``loss_vs_time``      training loss per update (raw, faint, and a moving average) and test
                      loss (mean over the evaluated workers) against virtual time
``accuracy_vs_time``  test accuracy of each evaluated worker against virtual time, with the
                      target as a dashed line
``staleness_hist``    how many updates had each staleness
``timeline``          one row per rank, compute / comm / wait spans coloured, read from
                      ``trace.json``; long runs show only their first seconds (at most
                      :data:`MAX_SPANS_PER_RANK` spans per rank, :data:`MAX_TIMELINE_RANKS` rows)
``time_per_step``     where the time goes: each rank's mean step stacked by ledger part
                      (``ledger.csv``: forward/backward, comm wire and CPU, wait, update ...)

A figure whose data is absent (timing-only runs have no loss; no evaluations; no updates;
no trace) is skipped, not an error; :func:`figure` returns one of them unsaved (the Python
API's ``Result.plot``). :func:`overlay_accuracy` and :func:`overlay_staleness`
put several runs on one axes for sweep reports.

The per-run figures share the look of :mod:`simdist.plot_style` (Okabe–Ito colours, time
axes in the unit that fits the run, integer ticks for counted quantities, no axis offsets),
are titled with the scenario's name and what they show, and describe degenerate data rather
than draw it as noise: iteration times that are all equal are one marked value ("every
iteration took 117 µs"), a staleness that is the same for every update (sync: 0) is said in
words. The same result directory gives byte-identical PNG and SVG files.

Figures are :class:`matplotlib.figure.Figure` objects bound to the Agg canvas here, never
pyplot: nothing is displayed, no global backend is switched and no figure registry grows.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from . import plot_style as style
from .outdir import staged_dir
from .result_files import PLOTS_DIR, LoadedResult, load_result_dir
from .tracefile import read_trace_spans

__all__ = [
    "FIGURES",
    "MAX_SPANS_PER_RANK",
    "MAX_TIMELINE_RANKS",
    "plot_result_dir",
    "plot_tables",
    "figure",
    "overlay_accuracy",
    "overlay_staleness",
    "plot_comparison",
    "scaling_table",
    "plot_speedup",
    "plot_efficiency",
    "plot_time_to_accuracy",
]

FIGURES = ("loss_vs_time", "accuracy_vs_time", "staleness_hist", "iteration_times", "batch_size_vs_time", "timeline",
           "time_per_step")
MAX_SPANS_PER_RANK = 2000
MAX_BOXES = 48  # workers above which iteration times are drawn as quantile bands
MAX_TIMELINE_RANKS = 256
FORMATS = ("png", "svg")
KIND_COLORS = style.KIND_COLORS
MIN_SPAN_PX = 1.0  # timeline spans are drawn at least this wide, in pixels of the saved PNG
_KIND_LABELS = {"compute": "compute", "comm": "communication", "wait": "waiting"}
_TIMELINE_WIDTH_IN = 10.0
_TIMELINE_AXES_FRACTION = 0.5  # of the figure's width, at most (the rest: rank labels, legend)
_FEW_LEVELS = 3  # iteration times with at most this many distinct values (4 digits) are listed in words
_RASTERIZE_ABOVE = 5000  # artists with more points than this are rasterized in SVG
_TIME_LABEL = "virtual time"


def plot_result_dir(path: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """Draw the figures of the result directory ``path`` into ``out_dir`` (default ``path/plots``).

    The folder is drawn whole and moved into place; it replaces only an earlier figures
    folder (:mod:`simdist.outdir`). Returns the files written, under ``out_dir``.
    """
    loaded = load_result_dir(path)
    out = Path(out_dir) if out_dir is not None else loaded.path / PLOTS_DIR
    with staged_dir(out, kind="plots", regenerate=True) as tmp:
        written = plot_tables(loaded, tmp)
    return [out / p.relative_to(tmp) for p in written]


def plot_tables(loaded: LoadedResult, out_dir: str | os.PathLike[str]) -> list[Path]:
    """Draw every figure whose data ``loaded`` has into ``out_dir``; returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with style.style_context():
        for name in FIGURES:
            fig = figure(loaded, name)
            if fig is not None:
                written += _save(fig, out / name)
    return written


def figure(loaded: LoadedResult, name: str) -> Figure | None:
    """The figure ``name`` (one of :data:`FIGURES`) of ``loaded``, unsaved; None where its data is absent."""
    draw = {"loss_vs_time": _draw_loss, "accuracy_vs_time": _draw_accuracy, "staleness_hist": _draw_staleness,
            "iteration_times": _draw_iteration_times, "batch_size_vs_time": _draw_batch_sizes,
            "timeline": _draw_timeline, "time_per_step": _draw_ledger}
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
                     title=_figure_title(loaded, "where a step's time goes"))
    for bars in ax.containers:  # each part in its own colour, the timeline's for compute, comm and wait
        look = style.PART_STYLES.get(str(bars.get_label()).replace(" ", "_"), {})
        for patch in bars:
            patch.set(**look)
    if ax.get_legend() is not None:
        ax.legend(fontsize=style.FONT_SIZES["legend"], loc="upper left", bbox_to_anchor=(1.01, 1.0))
    heights = np.sum([[patch.get_height() for patch in bars] for bars in ax.containers], axis=0)
    style.time_axis(ax.yaxis, "mean time per step (virtual)", float(np.max(heights, initial=0.0)))
    ax.set_xlabel("rank")
    return ax.figure


def ledger_bars(ledgers: dict[str, pd.DataFrame], ax: Axes | None = None, *, title: str = "") -> Axes:
    """One stacked bar per label: the mean seconds per step of every ledger part with any time."""
    from .ledger import PARTS

    ax = ax if ax is not None else _new_axes()
    means = {label: rows[list(PARTS)].mean() for label, rows in ledgers.items()}
    used = [part for part in PARTS if any(m[part] > 0 for m in means.values())]
    bottom = np.zeros(len(means))
    for part in used:
        heights = np.array([m[part] for m in means.values()])
        ax.bar(list(means), heights, bottom=bottom, label=part.replace("_", " "))
        bottom += heights
    ax.set_ylabel("seconds per step (mean)")
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=45 if len(means) > 8 else 0)
    _legend(ax)
    return ax


def overlay_accuracy(loaded_list: Sequence[LoadedResult], ax: Axes | None = None, *, x: str = "time_s") -> Axes:
    """Mean test accuracy of several runs on one axes, one line per run, against virtual time
    (``x="time_s"``) or global steps (``x="step"``: equal steps compare the math, not the speed)."""
    ax = ax if ax is not None else _new_axes()
    for loaded, label in zip(loaded_list, _run_labels(loaded_list)):
        evals = _numeric(loaded.evals, x, "test_accuracy").dropna()
        if evals.empty:
            continue
        mean = evals.groupby(x)["test_accuracy"].mean()
        ax.plot(mean.index, mean.to_numpy(), marker="o", markersize=3, label=label)
    ax.set_xlabel("virtual time (s)" if x == "time_s" else "global step (model updates)")
    ax.set_ylabel("test accuracy (fraction)")
    ax.set_title("Test accuracy vs " + ("virtual time" if x == "time_s" else "steps"))
    _legend(ax)
    return ax


def overlay_staleness(loaded_list: Sequence[LoadedResult], ax: Axes | None = None) -> Axes:
    """Staleness distributions of several runs on one axes (fraction of each run's updates)."""
    ax = ax if ax is not None else _new_axes()
    values = [_numeric(loaded.steps, "staleness")["staleness"].dropna().to_numpy() for loaded in loaded_list]
    present = [v for v in values if v.size]
    if present:
        edges = _staleness_edges(np.concatenate(present))
        for v, label in zip(values, _run_labels(loaded_list)):
            if v.size:
                ax.hist(v, bins=edges, histtype="step", linewidth=1.5,
                        weights=np.full(v.size, 1.0 / v.size), label=label)
    ax.set_xlabel("staleness (model versions)")
    ax.set_ylabel("fraction of updates")
    ax.set_title("Staleness distribution")
    _legend(ax)
    return ax


def plot_comparison(loaded_list: Sequence[LoadedResult], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Overlays of several runs (accuracy vs time and vs steps, staleness) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    drawers = (("compare_accuracy_vs_time", lambda ax: overlay_accuracy(loaded_list, ax, x="time_s")),
               ("compare_accuracy_vs_step", lambda ax: overlay_accuracy(loaded_list, ax, x="step")),
               ("compare_staleness", lambda ax: overlay_staleness(loaded_list, ax)))
    has_evals = any(len(r.evals) for r in loaded_list)
    has_steps = any(len(r.steps) for r in loaded_list)
    for name, draw in drawers:
        if (name.startswith("compare_accuracy") and not has_evals) or (name == "compare_staleness" and not has_steps):
            continue
        fig, ax = _new_figure()
        draw(ax)
        written += _save(fig, out / name)
    return written


# --------------------------------------------------------------------------- one figure each


def _draw_loss(loaded: LoadedResult) -> Figure | None:
    train = _numeric(loaded.steps, "time_s", "loss").dropna().sort_values("time_s", kind="stable")
    test = _numeric(loaded.evals, "time_s", "test_loss").dropna()
    if train.empty and test.empty:
        return None
    fig, ax = _new_figure()
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
    style.time_axis(ax.xaxis, _TIME_LABEL, _max(train["time_s"], test["time_s"]))
    ax.set_ylabel("loss")
    ax.set_title(_figure_title(loaded, "loss vs virtual time"))
    _legend(ax)
    return fig


def _draw_accuracy(loaded: LoadedResult) -> Figure | None:
    evals = _numeric(loaded.evals, "time_s", "worker", "test_accuracy").dropna()
    if evals.empty:
        return None
    fig, ax = _new_figure()
    by_worker = evals.sort_values("time_s", kind="stable").groupby("worker", sort=True)
    for i, (worker, rows) in enumerate(by_worker):
        ax.plot(rows["time_s"], rows["test_accuracy"], label=f"worker {int(worker)}", **style.series_style(i))
    target = loaded.summary.get("target_accuracy")
    if target is not None:
        ax.axhline(float(target), color=style.OKABE_ITO["black"], linestyle="--", linewidth=1,
                   label=f"target {float(target):g}")
    style.time_axis(ax.xaxis, _TIME_LABEL, _max(evals["time_s"]))
    ax.set_ylabel("test accuracy (fraction)")
    ax.set_title(_figure_title(loaded, "test accuracy vs virtual time"))
    _legend(ax)
    return fig


def _draw_staleness(loaded: LoadedResult) -> Figure | None:
    """Updates per staleness; a run whose updates all have one staleness (sync: 0) says so."""
    staleness = _numeric(loaded.steps, "staleness")["staleness"].dropna().to_numpy()
    if staleness.size == 0:
        return None
    fig, ax = _new_figure()
    color = style.SERIES_COLORS[0]
    integer = bool(np.all(np.mod(staleness, 1) == 0))
    if integer and np.ptp(staleness) <= 100:
        values, counts = np.unique(staleness.astype(np.int64), return_counts=True)
        ax.bar(values, counts, width=0.8, color=color)
        low, high = int(values.min()), int(values.max())
        ax.set_xlim(low - 0.6, max(high, low + 2) + 0.6)  # room for the empty neighbours of one bar
    else:
        ax.hist(staleness, bins=_staleness_edges(staleness), color=color, edgecolor="white")
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
    ax.set_title(_figure_title(loaded, what))
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
    steps = _numeric(loaded.steps, "time_s", "worker").dropna()
    intervals = _iteration_intervals(steps) if len(steps) else {}
    if not intervals:
        return None
    fig, ax = _new_figure()
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
        _legend(ax)
        what = _iteration_summary(every)
    # from zero: the spread reads against the whole iteration, and float noise never fills the axis
    upper_s = only_s * 1.5 if only_s is not None else float(every.max()) * 1.15
    ax.set_ylim(0.0, upper_s)
    style.time_axis(ax.yaxis, "iteration time (virtual)", upper_s)
    style.integer_axis(ax.xaxis, "worker (rank)")
    ax.set_title(_figure_title(loaded, what))
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
    steps = _numeric(loaded.steps, "time_s", "worker", "batch_size").dropna()
    if not len(steps) or steps.groupby("worker")["batch_size"].nunique().max() <= 2:
        return None  # constant batches (the last batch of an epoch may be smaller)
    fig, ax = _new_figure()
    for i, (worker, rows) in enumerate(steps.groupby("worker", sort=True)):
        look = style.series_style(i)
        ax.step(rows["time_s"], rows["batch_size"], where="post", label=f"worker {int(worker)}", linewidth=1,
                color=look["color"], linestyle=look["linestyle"])
    style.time_axis(ax.xaxis, _TIME_LABEL, _max(steps["time_s"]))
    style.integer_axis(ax.yaxis, "batch size (samples)")
    ax.set_title(_figure_title(loaded, "batch size over virtual time"))
    _legend(ax)
    return fig


def _draw_timeline(loaded: LoadedResult) -> Figure | None:
    """One row per rank: compute, comm and wait spans in their colours; spans narrower than a
    pixel are widened to :data:`MIN_SPAN_PX` so that short communications stay visible."""
    if not loaded.trace_path.is_file():
        return None
    spans, labels = read_trace_spans(loaded.trace_path)
    if spans.empty:
        return None
    ranks = sorted(set(spans["rank"]) | set(labels))
    shown = ranks[:MAX_TIMELINE_RANKS]
    spans, horizon_s = _first_spans(spans[spans["rank"].isin(shown)])
    row_of = {rank: i for i, rank in enumerate(shown)}
    fig = Figure(figsize=(_TIMELINE_WIDTH_IN, float(np.clip(1.2 + 0.3 * len(shown), 3.0, 14.0))),
                 layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    end_s = max(float(spans["end_s"].max()), float(loaded.summary.get("virtual_time_s") or 0.0))
    end_s = horizon_s if horizon_s is not None else end_s
    min_width_s = end_s * MIN_SPAN_PX / (_TIMELINE_WIDTH_IN * style.DPI * _TIMELINE_AXES_FRACTION)
    present = set(spans["kind"])
    for kind in _kind_order(present):
        color = style.KIND_COLORS.get(kind, style.OTHER_COLOR)
        for blocking, (low, high) in ((True, (-0.42, 0.2)), (False, (0.25, 0.42))):
            rows = spans[(spans["kind"] == kind) & (spans["blocking"] == blocking)]
            if not rows.empty:
                bars = _bars(rows, row_of, low, high, color, alpha=1.0 if blocking else 0.6, min_width_s=min_width_s)
                ax.add_collection(bars, autolim=False)  # limits are set below
    ax.set_xlim(0.0, end_s)
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.grid(False, axis="y")
    step = max(1, len(shown) // 48)
    ax.set_yticks(range(0, len(shown), step))
    ax.set_yticklabels([labels.get(r, f"rank {r}") for r in shown[::step]], fontsize=7 if len(shown) > 16 else 8)
    style.time_axis(ax.xaxis, _TIME_LABEL, end_s)
    what = "what each rank does over virtual time"
    if len(shown) < len(ranks):
        what += f" (ranks {shown[0]}..{shown[-1]} of {len(ranks)})"
    if horizon_s is not None:
        what += f", first {style.format_duration(horizon_s)}"
    ax.set_title(_figure_title(loaded, what))
    ax.legend(handles=_timeline_handles(spans, present), loc="upper left", bbox_to_anchor=(1.01, 1.0),
              title=f"spans (at least {MIN_SPAN_PX:g} px wide)", title_fontsize=style.FONT_SIZES["legend"])
    return fig


def _kind_order(kinds: set[str]) -> list[str]:
    """Drawing order: long compute spans first, short comm spans last (on top)."""
    known = [k for k in ("compute", "wait", "comm") if k in kinds]
    return known + sorted(kinds - set(known))


def _timeline_handles(spans: pd.DataFrame, present: set[str]) -> list[Patch]:
    """A legend entry for compute, comm and wait, saying "none" for a kind the run never did."""
    handles = []
    for kind in ("compute", "comm", "wait", *sorted(present - {"compute", "comm", "wait"})):
        label = _KIND_LABELS.get(kind, kind) + ("" if kind in present else " (none)")
        handles.append(Patch(color=style.KIND_COLORS.get(kind, style.OTHER_COLOR), label=label))
    if (~spans["blocking"]).any():
        handles.append(Patch(color=style.KIND_COLORS["comm"], alpha=0.6, label="non-blocking\n(thin bar)"))
    return handles


# --------------------------------------------------------------------------- helpers


def _first_spans(spans: pd.DataFrame) -> tuple[pd.DataFrame, float | None]:
    """At most MAX_SPANS_PER_RANK spans per rank, cut at a common time horizon if any rank overflows."""
    spans = spans.sort_values(["rank", "start_s"], kind="stable")
    position = spans.groupby("rank").cumcount()
    overflow = spans[position == MAX_SPANS_PER_RANK]
    if overflow.empty:
        return spans, None
    horizon_s = float(overflow["start_s"].min())
    kept = spans[(position < MAX_SPANS_PER_RANK) & (spans["start_s"] < horizon_s)]
    return kept.assign(end_s=kept["end_s"].clip(upper=horizon_s)), horizon_s


def _bars(rows: pd.DataFrame, row_of: dict[int, int], low: float, high: float, color: str,
          alpha: float, min_width_s: float = 0.0) -> PolyCollection:
    x0 = rows["start_s"].to_numpy()
    x1 = np.maximum(rows["end_s"].to_numpy(), x0 + min_width_s)
    y = rows["rank"].map(row_of).to_numpy(dtype=float)
    verts = np.stack(
        [np.column_stack([x0, y + low]), np.column_stack([x0, y + high]),
         np.column_stack([x1, y + high]), np.column_stack([x1, y + low])], axis=1)
    return PolyCollection(verts, facecolors=color, edgecolors="none", alpha=alpha,
                          rasterized=len(rows) > _RASTERIZE_ABOVE)


def _staleness_edges(values: np.ndarray) -> np.ndarray:
    low, high = float(np.min(values)), float(np.max(values))
    if high - low <= 100 and np.all(np.mod(values, 1) == 0):
        return np.arange(low, high + 2) - 0.5
    return np.histogram_bin_edges(values, bins=100)


def _numeric(table: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """The named columns as floats (missing columns are all-NaN), so empty CSVs plot as empty."""
    return pd.DataFrame(
        {c: pd.to_numeric(table[c], errors="coerce") if c in table else pd.Series(np.nan, index=table.index)
         for c in columns},
        index=table.index,
    ).astype(float)


def _run_title(loaded: LoadedResult) -> str:
    n = loaded.n_workers
    return loaded.algorithm if n is None else f"{loaded.algorithm}, {n} worker{'s' if n != 1 else ''}"


def _figure_title(loaded: LoadedResult, what: str) -> str:
    """``"quickstart (sync, 4 workers): what"``: the scenario's name, the run, what the figure shows."""
    scenario = loaded.manifest.get("scenario")
    name = scenario.get("name") if isinstance(scenario, dict) else None
    return f"{name} ({_run_title(loaded)}): {what}" if name else f"{_run_title(loaded)}: {what}"


def _max(*columns: pd.Series) -> float:
    """The largest finite value of the columns (0 when there is none): a time axis' extent."""
    values = np.concatenate([np.asarray(c, dtype=float) for c in columns])
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else 0.0


def _run_labels(loaded_list: Sequence[LoadedResult]) -> list[str]:
    labels = [r.algorithm for r in loaded_list]
    if len(set(labels)) < len(labels):
        labels = [_run_title(r) for r in loaded_list]
    if len(set(labels)) < len(labels):
        labels = [f"{label} [{r.path.name}]" for label, r in zip(labels, loaded_list)]
    return labels


def _new_figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _new_axes() -> Axes:
    return _new_figure()[1]


def _legend(ax: Axes) -> None:
    handles, _ = ax.get_legend_handles_labels()
    if 0 < len(handles) <= 12:
        ax.legend(fontsize=8)


def _save(fig: Figure, stem: Path) -> list[Path]:
    """``stem.png`` and ``stem.svg`` at a fixed DPI with no dates or versions in them: the same
    figure gives the same bytes (:mod:`simdist.plot_style`)."""
    paths = []
    with matplotlib.rc_context(style.SAVE_RC):  # stable SVG element ids
        for fmt in FORMATS:
            path = stem.with_suffix(f".{fmt}")
            fig.savefig(path, format=fmt, dpi=style.DPI, metadata=style.save_metadata(fmt))
            fig.set_layout_engine("none")  # laid out once by the first save; keep it for the rest
            paths.append(path)
    return paths


# --------------------------------------------------------------------------- sweeps (read sweep.csv)


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
    ax = ax if ax is not None else _new_axes()
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
    _legend(ax)
    return ax


def plot_efficiency(table: pd.DataFrame, ax: Axes | None = None, *, group: str = "algorithm",
                    scaling: str = "strong") -> Axes:
    """Parallel efficiency (speedup / workers) vs workers, with the ideal 1.0 dashed."""
    ax = ax if ax is not None else _new_axes()
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
    _legend(ax)
    return ax


def plot_time_to_accuracy(table: pd.DataFrame, ax: Axes | None = None, *, group: str = "algorithm") -> Axes:
    """Time-to-accuracy bars: one group of bars per worker count, a bar per ``group`` value.

    Points that never reached the target get a hatched stub marked "not reached"; the target
    accuracy is stated on the axis.
    """
    ax = ax if ax is not None else _new_axes()
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
    _legend(ax)
    return ax
