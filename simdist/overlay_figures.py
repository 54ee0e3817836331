"""Several runs on one axes: accuracy against virtual time or steps, staleness distributions, time per step.

:func:`overlay_accuracy` and :func:`overlay_staleness` put several loaded runs
(:class:`~simdist.result_files.LoadedResult`) on one axes, a line per run labelled by its
algorithm (with its workers, then its folder, where labels would repeat), each in its own colour,
marker and line style; :func:`plot_comparison` writes, for ``simdist compare``, the accuracy of
its variants against time and steps (overlaid up to :data:`MAX_OVERLAID` variants, a panel per
variant beyond: :mod:`simdist.accuracy_figures`; a variant is named by its folder, its label), the
staleness of
every variant as small multiples (:mod:`simdist.staleness_figures`) and where each variant's step
goes (:mod:`simdist.ledger_figures`), as PNG and SVG, each titled with the scenario the
variants share.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from . import plot_style as style
from .accuracy_figures import plot_accuracy_panels
from .ledger_figures import ledger_bars
from .plot_common import legend, new_axes, new_figure, numeric, run_labels, save_figure, staleness_edges
from .result_files import LoadedResult
from .staleness_figures import plot_staleness_panels, staleness_points

__all__ = ["MAX_OVERLAID", "overlay_accuracy", "overlay_staleness", "plot_comparison", "variant_labels"]

MAX_OVERLAID = 3  # runs whose accuracy curves still read on one axes; more get a panel each


def overlay_accuracy(loaded_list: Sequence[LoadedResult], ax: Axes | None = None, *, x: str = "time_s") -> Axes:
    """Mean test accuracy of several runs on one axes, one line per run, against virtual time
    (``x="time_s"``) or global steps (``x="step"``: equal steps compare the math, not the speed)."""
    ax = ax if ax is not None else new_axes()
    extent = 0.0
    for i, (loaded, label) in enumerate(zip(loaded_list, run_labels(loaded_list))):
        evals = numeric(loaded.evals, x, "test_accuracy").dropna()
        if evals.empty:
            continue
        mean = evals.groupby(x)["test_accuracy"].mean()
        ax.plot(mean.index, mean.to_numpy(), markersize=3, label=label, **style.series_style(i))
        extent = max(extent, float(mean.index.max()))
    if x == "time_s":
        style.time_axis(ax.xaxis, "virtual time", extent)
    else:
        style.integer_axis(ax.xaxis, "global step (model updates)")
    ax.set_ylabel("test accuracy (fraction)")
    ax.set_title("Test accuracy vs " + ("virtual time" if x == "time_s" else "steps"))
    legend(ax)
    return ax


def overlay_staleness(loaded_list: Sequence[LoadedResult], ax: Axes | None = None) -> Axes:
    """Staleness distributions of several runs on one axes (fraction of each run's updates)."""
    ax = ax if ax is not None else new_axes()
    values = [numeric(loaded.steps, "staleness")["staleness"].dropna().to_numpy() for loaded in loaded_list]
    present = [v for v in values if v.size]
    if present:
        edges = staleness_edges(np.concatenate(present))
        for v, label in zip(values, run_labels(loaded_list)):
            if v.size:
                ax.hist(v, bins=edges, histtype="step", linewidth=1.5,
                        weights=np.full(v.size, 1.0 / v.size), label=label)
    ax.set_xlabel("staleness (model versions)")
    ax.set_ylabel("fraction of updates")
    ax.set_title("Staleness distribution")
    legend(ax)
    return ax


def plot_comparison(loaded_list: Sequence[LoadedResult], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Several runs' figures into ``out_dir``: accuracy vs time and vs steps overlaid, staleness as a box per
    run in a panel per worker count, and where each run's step goes."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    scenario, labels = _scenario_name(loaded_list), variant_labels(loaded_list)
    for name, x in (("compare_accuracy_vs_time", "time_s"), ("compare_accuracy_vs_step", "step")):
        with style.style_context():
            fig = _accuracy_figure(loaded_list, labels, x, scenario)
            if fig is not None:
                written += save_figure(fig, out / name)
    with style.style_context():  # staleness: a box per variant, a panel per worker count (no overlaid histograms)
        panels = plot_staleness_panels(staleness_points(loaded_list, labels),
                                       f"{scenario}Staleness by variant and worker count")
        if panels is not None:
            written += save_figure(style.finish_axes(panels), out / "compare_staleness")
    ledgers = {label: r.ledger[r.ledger["rank"].isin([int(w) for w in r.workers["worker"]])]
               for r, label in zip(loaded_list, labels) if r.ledger is not None and not r.ledger.empty}
    if ledgers:  # where each variant's step goes, its workers' mean step stacked by ledger part
        with style.style_context():
            fig, ax = new_figure()
            ledger_bars(ledgers, ax, title=f"{scenario}Where a worker's step goes, by variant")
            written += save_figure(style.finish_axes(fig), out / "compare_time_per_step")
    return written


def variant_labels(loaded_list: Sequence[LoadedResult]) -> list[str]:
    """Each run's folder name (a ``simdist compare`` variant's label) where they are distinct, else
    :func:`~simdist.plot_common.run_labels`."""
    names = [r.path.name for r in loaded_list]
    return names if len(set(names)) == len(names) else run_labels(loaded_list)


def _accuracy_figure(loaded_list: Sequence[LoadedResult], labels: Sequence[str], x: str,
                     scenario: str) -> Figure | None:
    """Accuracy of every variant against ``x``: overlaid for at most :data:`MAX_OVERLAID` runs, else a
    panel per run (:mod:`simdist.accuracy_figures`); None when no run evaluated."""
    if not any(len(r.evals) for r in loaded_list):
        return None
    what = "test accuracy vs " + ("virtual time" if x == "time_s" else "steps")
    if len(loaded_list) > MAX_OVERLAID:
        return plot_accuracy_panels(loaded_list, f"{scenario}{what}, by variant", labels, x=x)
    fig, ax = new_figure()
    overlay_accuracy(loaded_list, ax, x=x)
    ax.set_title(f"{scenario}{what}")
    return style.finish_axes(fig)


def _scenario_name(loaded_list: Sequence[LoadedResult]) -> str:
    """``"name: "``, the scenario the variants share (a variant's own name ends in ``-<its folder>``), or ""."""
    names = set()
    for loaded in loaded_list:
        scenario = loaded.manifest.get("scenario")
        name = str(scenario.get("name") or "") if isinstance(scenario, dict) else ""
        names.add(name.removesuffix(f"-{loaded.path.name}"))
    return f"{names.pop()}: " if len(names) == 1 and "" not in names else ""
