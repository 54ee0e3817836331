"""Where the time goes: a step's ledger parts stacked, for one run's ranks or for many runs.

The time ledger (:mod:`simdist.ledger`) cuts every rank's step into named parts (data,
forward/backward, pack, communication CPU and wire time, waiting, unpack, update, evaluation,
checkpoint). :func:`ledger_bars` stacks each part's mean seconds per step into one bar per label
(a rank of one run, or an algorithm), every part in its fixed colour and hatch from
:data:`simdist.plot_style.PART_STYLES`; :func:`ledger_panels` draws such bars in small multiples,
one panel per worker count, each bar an algorithm, for sweep reports and ``simdist compare``.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from . import plot_style as style
from .ledger import PARTS
from .plot_common import new_axes

__all__ = ["ledger_bars", "ledger_panels", "used_parts"]

PANEL_WIDTH_IN, PANEL_HEIGHT_IN = 2.6, 3.4


def used_parts(ledgers: Mapping[str, pd.DataFrame]) -> list[str]:
    """The ledger parts that take any time in any of ``ledgers``, in the ledger's order."""
    return [part for part in PARTS if any(float(rows[part].mean()) > 0 for rows in ledgers.values() if len(rows))]


def ledger_bars(ledgers: Mapping[str, pd.DataFrame], ax: Axes | None = None, *, title: str = "",
                parts: list[str] | None = None, legend: bool = True) -> Axes:
    """One stacked bar per label: the mean seconds per step of every ledger part with any time."""
    ax = ax if ax is not None else new_axes()
    means = {label: rows[list(PARTS)].mean() for label, rows in ledgers.items()}
    parts = parts if parts is not None else used_parts(ledgers)
    bottom = np.zeros(len(means))
    for part in parts:
        heights = np.array([m[part] for m in means.values()])
        ax.bar(list(means), heights, bottom=bottom, label=part.replace("_", " "), **style.PART_STYLES.get(part, {}))
        bottom += heights
    style.time_axis(ax.yaxis, "mean time per step", float(np.max(bottom, initial=0.0)) or 1.0)
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=45 if len(means) > 4 else 0)
    if legend and parts:
        ax.legend(fontsize=style.FONT_SIZES["legend"], loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax


def ledger_panels(groups: Mapping[int, Mapping[str, pd.DataFrame]], title: str) -> Figure | None:
    """Small multiples: a panel per worker count (``groups``: workers -> {algorithm: its workers' ledger rows}),
    each a stacked bar per algorithm, one legend for all, every part in the same colour everywhere."""
    groups = {workers: ledgers for workers, ledgers in sorted(groups.items()) if ledgers}
    if not groups:
        return None
    parts = used_parts({f"{w} {label}": rows for w, ledgers in groups.items() for label, rows in ledgers.items()})
    fig = Figure(figsize=(max(4.0, PANEL_WIDTH_IN * len(groups) + 1.6), PANEL_HEIGHT_IN), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(groups), squeeze=False)[0]
    for ax, (workers, ledgers) in zip(axes, groups.items()):
        ledger_bars(ledgers, ax, title=f"{workers} worker{'s' if workers != 1 else ''}", parts=parts, legend=False)
        ax.tick_params(axis="x", labelrotation=45)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=style.FONT_SIZES["legend"])
    fig.suptitle(title, fontsize=style.FONT_SIZES["title"])
    return fig
