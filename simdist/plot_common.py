"""What every figure module shares: a figure bound to the Agg canvas, reproducible saving, columns as floats.

The figure modules (:mod:`simdist.run_figures`, :mod:`simdist.timeline_figure`,
:mod:`simdist.overlay_figures`, :mod:`simdist.scaling_figures`) draw on
:class:`matplotlib.figure.Figure` objects made by :func:`new_figure`, never on pyplot: nothing
is displayed, no global backend is switched and no figure registry grows. :func:`save_figure`
writes PNG and SVG at a fixed DPI with no dates or versions in them
(:mod:`simdist.plot_style`), so the same data gives the same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from . import plot_style as style
from .result_files import LoadedResult

__all__ = ["FORMATS", "new_figure", "new_axes", "save_figure", "legend", "numeric", "largest",
           "run_title", "figure_title", "run_labels", "staleness_edges"]

FORMATS = ("png", "svg")
FIGURE_SIZE_IN = (7, 4.2)
MAX_LEGEND_ENTRIES = 12


def new_figure() -> tuple[Figure, Axes]:
    """A 7 x 4.2 in figure on the Agg canvas with one axes, laid out when saved."""
    fig = Figure(figsize=FIGURE_SIZE_IN, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def new_axes() -> Axes:
    """The axes of a :func:`new_figure`: where a drawing function given no axes draws."""
    return new_figure()[1]


def legend(ax: Axes) -> None:
    """A legend when the axes has between one and :data:`MAX_LEGEND_ENTRIES` labelled artists."""
    handles, _ = ax.get_legend_handles_labels()
    if 0 < len(handles) <= MAX_LEGEND_ENTRIES:
        ax.legend(fontsize=8)


def save_figure(fig: Figure, stem: Path) -> list[Path]:
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


def numeric(table: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """The named columns as floats (missing columns are all-NaN), so empty CSVs plot as empty."""
    return pd.DataFrame(
        {c: pd.to_numeric(table[c], errors="coerce") if c in table else pd.Series(np.nan, index=table.index)
         for c in columns},
        index=table.index,
    ).astype(float)


def largest(*columns: pd.Series) -> float:
    """The largest finite value of the columns (0 when there is none): a time axis' extent."""
    values = np.concatenate([np.asarray(c, dtype=float) for c in columns])
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else 0.0


def run_title(loaded: LoadedResult) -> str:
    """``"sync, 4 workers"``: the algorithm and, when known, the worker count."""
    n = loaded.n_workers
    return loaded.algorithm if n is None else f"{loaded.algorithm}, {n} worker{'s' if n != 1 else ''}"


def figure_title(loaded: LoadedResult, what: str) -> str:
    """``"quickstart (sync, 4 workers): what"``: the scenario's name, the run, what the figure shows."""
    scenario = loaded.manifest.get("scenario")
    name = scenario.get("name") if isinstance(scenario, dict) else None
    return f"{name} ({run_title(loaded)}): {what}" if name else f"{run_title(loaded)}: {what}"


def run_labels(loaded_list: Sequence[LoadedResult]) -> list[str]:
    """Distinct legend labels of several runs: the algorithm, else with workers, else with the folder."""
    labels = [r.algorithm for r in loaded_list]
    if len(set(labels)) < len(labels):
        labels = [run_title(r) for r in loaded_list]
    if len(set(labels)) < len(labels):
        labels = [f"{label} [{r.path.name}]" for label, r in zip(labels, loaded_list)]
    return labels


def staleness_edges(values: np.ndarray) -> np.ndarray:
    """Histogram bin edges: one bin per integer over a range of at most 100, else 100 bins."""
    low, high = float(np.min(values)), float(np.max(values))
    if high - low <= 100 and np.all(np.mod(values, 1) == 0):
        return np.arange(low, high + 2) - 0.5
    return np.histogram_bin_edges(values, bins=100)
