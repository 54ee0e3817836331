"""The ``link_utilisation`` figure of a run: how busy the links were over virtual time.

Read from ``link_usage.csv`` (:mod:`simdist.link_outputs`): one line per link kind, the mean
utilisation over that kind's links that carried traffic, and thin lines for the
:data:`BUSIEST` links that moved the most bytes. Utilisation is per time bin (bytes / nominal
bandwidth x bin width), drawn as steps over the bins; a bin without a row was idle (0).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from . import plot_style as style
from .link_outputs import busiest_links, kind_means
from .plot_common import figure_title, legend, new_figure, numeric
from .result_files import LoadedResult

__all__ = ["draw_link_utilisation", "BUSIEST"]

BUSIEST = 4  # single links drawn beside the per-kind means


def draw_link_utilisation(loaded: LoadedResult) -> Figure | None:
    """The figure (module doc); None where the run kept no link usage or no link was used."""
    table = loaded.link_usage
    if table is None or table.empty:
        return None
    if "link" not in table or "kind" not in table:
        return None
    values = numeric(table, "start_s", "end_s", "bytes", "utilisation", "flows")
    table = values.assign(link=table["link"].astype(str), kind=table["kind"].astype(str)).dropna(
        subset=["start_s", "end_s", "utilisation"])
    if table.empty:
        return None
    starts = np.unique(table["start_s"].to_numpy())
    end_s = float(table["end_s"].max())
    fig, ax = new_figure()
    colors = style.SERIES_COLORS
    kinds = kind_means(table)
    for i, (kind, per_bin) in enumerate(kinds.items()):
        _steps(ax, starts, end_s, per_bin["utilisation"], label=f"{kind}: mean of {per_bin.attrs['links']} links",
               linewidth=1.8, color=colors[i % len(colors)])
    for j, link in enumerate(busiest_links(table, BUSIEST)):
        rows = table[table["link"] == link].set_index("start_s")["utilisation"]
        _steps(ax, starts, end_s, rows, label=f"link {link}", linewidth=0.8, linestyle="--",
               color=colors[(len(kinds) + j) % len(colors)])
    style.time_axis(ax.xaxis, "virtual time", end_s)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("utilisation (fraction of nominal bandwidth)")
    ax.set_title(figure_title(loaded, "link utilisation vs virtual time"))
    legend(ax)
    return fig


def _steps(ax, starts: np.ndarray, end_s: float, values: pd.Series, **kwargs) -> None:
    """``values`` (indexed by bin start) as steps over every bin, 0 where a bin has no value."""
    y = values.reindex(starts, fill_value=0.0).to_numpy()
    ax.step(np.append(starts, end_s), np.append(y, y[-1]), where="post", **kwargs)
