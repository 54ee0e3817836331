"""Figures read from results (never from a re-run): one import path for all of them.

Each kind of figure lives in its own module; this one gathers their public names, so that
``from simdist.plots import ...`` keeps working, and draws a result directory's figures:

================================  ===================================================================
:mod:`simdist.run_figures`        the figures of one run (:data:`FIGURES`): loss, accuracy,
                                  staleness, iteration times, batch sizes, time per step
:mod:`simdist.timeline_figure`    the per-rank timeline of one run, read from ``trace.json``
:mod:`simdist.ledger_figures`     where a step's time goes: ledger parts stacked, per rank or per run
:mod:`simdist.staleness_figures`  staleness per algorithm and worker count (sweep reports, compare)
:mod:`simdist.accuracy_figures`   test accuracy of many runs, a panel each (sweep reports, compare)
:mod:`simdist.overlay_figures`    a few runs on one axes; ``simdist compare``'s figures
:mod:`simdist.scaling_figures`    a sweep's speedup, efficiency and time to accuracy against workers
:mod:`simdist.plot_common`        a figure on the Agg canvas; PNG + SVG saved reproducibly
:mod:`simdist.plot_style`         the shared look: palette, markers, units, no axis offsets
================================  ===================================================================

Figures are :class:`matplotlib.figure.Figure` objects bound to the Agg canvas, never pyplot:
nothing is displayed, no global backend is switched and no figure registry grows. The same
result directory gives byte-identical PNG and SVG files.
"""

from __future__ import annotations

import os
from pathlib import Path

from .accuracy_figures import plot_accuracy_panels
from .outdir import staged_dir
from .overlay_figures import overlay_accuracy, overlay_staleness, plot_comparison
from .result_files import PLOTS_DIR, load_result_dir
from .ledger_figures import ledger_bars, ledger_panels
from .run_figures import FIGURES, MAX_BOXES, figure, plot_tables
from .scaling_figures import plot_efficiency, plot_speedup, plot_time_to_accuracy, scaling_table
from .timeline_figure import MAX_SPANS_PER_RANK, MAX_TIMELINE_RANKS, MIN_SPAN_PX

__all__ = [
    "FIGURES",
    "MAX_BOXES",
    "MAX_SPANS_PER_RANK",
    "MAX_TIMELINE_RANKS",
    "MIN_SPAN_PX",
    "plot_result_dir",
    "plot_tables",
    "figure",
    "ledger_bars",
    "ledger_panels",
    "overlay_accuracy",
    "plot_accuracy_panels",
    "overlay_staleness",
    "plot_comparison",
    "scaling_table",
    "plot_speedup",
    "plot_efficiency",
    "plot_time_to_accuracy",
]


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
