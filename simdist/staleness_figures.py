"""Staleness of many algorithms at many worker counts: small multiples, in versions and in seconds.

Staleness depends on the worker count as much as on the algorithm (asgd's mean is about N − 1),
so one overlaid histogram of seven algorithms at one size hides most of what a reader wants. Here
every worker count has its own panel, and each algorithm one box in it (quartiles, whiskers at
the 5th and 95th percentiles, the mean as a diamond); the bottom row gives the same updates'
staleness in seconds: versions times the run's mean time between model versions (its virtual
time over its steps), what a gradient's information is behind in time. Algorithms whose
staleness is the same update for update are drawn once and named together ("asgd = dbs").

:func:`staleness_points` reads one entry per (algorithm, workers) from result directories (seeds
pooled); :func:`plot_staleness_panels` draws them. ``simdist report`` includes the figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from . import plot_style as style
from .plot_common import numeric
from .result_files import LoadedResult

__all__ = ["StalenessPoint", "staleness_points", "plot_staleness_panels"]

PANEL_WIDTH_IN, PANEL_HEIGHT_IN = 2.4, 2.2
WHISKERS = (5, 95)  # percentiles


@dataclass(frozen=True)
class StalenessPoint:
    """The applied updates' staleness of one algorithm at one worker count (seeds pooled)."""

    algorithm: str  # or another label of the runs (a compare variant's)
    workers: int
    versions: np.ndarray  # staleness of each applied update, in model versions
    seconds_per_version: float  # the runs' virtual time over their steps (mean over seeds)

    @property
    def seconds(self) -> np.ndarray:
        return self.versions * self.seconds_per_version


def staleness_points(runs: Sequence[LoadedResult], labels: Sequence[str] | None = None) -> list[StalenessPoint]:
    """One :class:`StalenessPoint` per (label, workers) of ``runs``, their seeds pooled, in first-seen order.

    ``labels``: what names each run's box (default its algorithm; ``simdist compare`` gives its
    variants' labels, so that two variants of one algorithm stay apart).
    """
    grouped: dict[tuple[str, int], list[LoadedResult]] = {}
    for run, label in zip(runs, labels if labels is not None else [r.algorithm for r in runs]):
        if run.n_workers is not None:
            grouped.setdefault((label, run.n_workers), []).append(run)
    points = []
    for (algorithm, workers), group in grouped.items():
        versions = np.concatenate([numeric(r.steps, "staleness")["staleness"].dropna().to_numpy() for r in group])
        paces = [float(r.summary["virtual_time_s"]) / float(r.summary["steps"]) for r in group
                 if r.summary.get("steps") and r.summary.get("virtual_time_s") is not None]
        if versions.size:
            points.append(StalenessPoint(algorithm, workers, versions, float(np.mean(paces)) if paces else 0.0))
    return points


def _merged(points: list[StalenessPoint]) -> list[tuple[str, StalenessPoint]]:
    """(label, point) with points whose staleness is identical update for update drawn once, named together."""
    out: list[tuple[list[str], StalenessPoint]] = []
    for point in points:
        same = next((entry for entry in out if np.array_equal(entry[1].versions, point.versions)
                     and entry[1].seconds_per_version == point.seconds_per_version), None)
        if same is None:
            out.append(([point.algorithm], point))
        else:
            same[0].append(point.algorithm)
    return [(" = ".join(names), point) for names, point in out]


def _boxes(ax: Axes, entries: list[tuple[str, StalenessPoint]], seconds: bool, colors: dict[str, str]) -> None:
    values = [point.seconds if seconds else point.versions for _, point in entries]
    positions = np.arange(1, len(values) + 1)
    ax.boxplot(values, positions=positions, whis=WHISKERS, showfliers=False, widths=0.6,
               medianprops={"color": style.TEXT_COLOR}, boxprops={"color": style.TEXT_COLOR},
               whiskerprops={"color": style.TEXT_COLOR}, capprops={"color": style.TEXT_COLOR})
    for position, value, (_, point) in zip(positions, values, entries):
        ax.plot([position], [float(np.mean(value))], marker="D", linestyle="none", color=colors[point.algorithm],
                markersize=4)
    ax.set_xticks(positions, [label for label, _ in entries], rotation=45, ha="right")


def plot_staleness_panels(points: Sequence[StalenessPoint], title: str) -> Figure | None:
    """Small multiples: a column per worker count, staleness in versions (top) and seconds (bottom)."""
    points = list(points)
    if not points:
        return None
    counts = sorted({p.workers for p in points})
    fig = Figure(figsize=(max(4.0, PANEL_WIDTH_IN * len(counts)), 2 * PANEL_HEIGHT_IN + 0.9), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, len(counts), squeeze=False)
    extent_s = max(float(p.seconds.max()) for p in points)
    algorithms = list(dict.fromkeys(p.algorithm for p in points))  # one colour per algorithm in every panel
    colors = {a: style.SERIES_COLORS[i % len(style.SERIES_COLORS)] for i, a in enumerate(algorithms)}
    for column, workers in enumerate(counts):
        entries = _merged([p for p in points if p.workers == workers])
        top, bottom = axes[0][column], axes[1][column]
        _boxes(top, entries, seconds=False, colors=colors)
        _boxes(bottom, entries, seconds=True, colors=colors)
        top.set_title(f"{workers} worker{'s' if workers != 1 else ''}")
        style.integer_axis(top.yaxis, "staleness (versions)" if column == 0 else None)
        style.time_axis(bottom.yaxis, "staleness", extent_s if extent_s > 0 else 1.0)
        if column:
            bottom.yaxis.set_label_text("")
        top.tick_params(labelbottom=False)
    fig.suptitle(title, fontsize=style.FONT_SIZES["title"])
    return fig
