"""The ``timeline`` figure of a run: what each rank does over virtual time, read from ``trace.json``.

One row per rank; computation, communication and waiting spans in their own colours
(:data:`simdist.plot_style.KIND_COLORS`), non-blocking communication as a thin bar above the
row. Spans narrower than a pixel are widened to :data:`MIN_SPAN_PX` so that short messages
stay visible. Long runs show only their first seconds: at most :data:`MAX_SPANS_PER_RANK`
spans per rank, cut at a common horizon, and at most :data:`MAX_TIMELINE_RANKS` rows.
The legend says "(none)" for a kind the run never did (a balanced sync run never waits).

A run of many iterations is drawn twice: an overview strip of everything shown, with the
zoomed window shaded, above a zoom on a representative window — :data:`ZOOM_ITERATIONS` steady
iterations of the first rank after :data:`WARMUP_ITERATIONS` warm-up ones — with a scale bar, so
that a step's compute, communication and waiting are wide enough to read.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar

from . import plot_style as style
from .plot_common import figure_title
from .result_files import LoadedResult
from .tracefile import read_trace_spans

__all__ = ["MAX_SPANS_PER_RANK", "MAX_TIMELINE_RANKS", "MIN_SPAN_PX", "WARMUP_ITERATIONS", "ZOOM_ITERATIONS",
           "draw_timeline", "zoom_window"]

MAX_SPANS_PER_RANK = 2000
MAX_TIMELINE_RANKS = 256
MIN_SPAN_PX = 1.0  # timeline spans are drawn at least this wide, in pixels of the saved PNG
_KIND_LABELS = {"compute": "compute", "comm": "communication", "wait": "waiting"}
_TIMELINE_WIDTH_IN = 10.0
_TIMELINE_AXES_FRACTION = 0.5  # of the figure's width, at most (the rest: rank labels, legend)
_RASTERIZE_ABOVE = 5000  # artists with more points than this are rasterized in SVG
_TIME_LABEL = "virtual time"
WARMUP_ITERATIONS, ZOOM_ITERATIONS = 2, 3  # the zoom: after this many iterations, this many of them
_OVERVIEW_HEIGHT_IN = 1.1


def draw_timeline(loaded: LoadedResult) -> Figure | None:
    """One row per rank: compute, comm and wait spans in their colours; spans narrower than a
    pixel are widened to :data:`MIN_SPAN_PX` so that short communications stay visible. With
    enough iterations, an overview strip of the whole above a zoom on a steady window."""
    if not loaded.trace_path.is_file():
        return None
    spans, labels = read_trace_spans(loaded.trace_path)
    if spans.empty:
        return None
    ranks = sorted(set(spans["rank"]) | set(labels))
    shown = ranks[:MAX_TIMELINE_RANKS]
    spans, horizon_s = _first_spans(spans[spans["rank"].isin(shown)])
    end_s = max(float(spans["end_s"].max()), float(loaded.summary.get("virtual_time_s") or 0.0))
    end_s = horizon_s if horizon_s is not None else end_s
    window = zoom_window(spans, end_s)
    rows_in = float(np.clip(1.2 + 0.3 * len(shown), 3.0, 14.0))
    fig = Figure(figsize=(_TIMELINE_WIDTH_IN, rows_in + (_OVERVIEW_HEIGHT_IN if window else 0.0)), layout="constrained")
    FigureCanvasAgg(fig)
    if window is not None:
        overview, ax = fig.subplots(2, 1, height_ratios=[_OVERVIEW_HEIGHT_IN, rows_in])
        _draw_spans(overview, spans, shown, 0.0, end_s)
        overview.axvspan(*window, color=style.TEXT_COLOR, alpha=0.15, linewidth=0)
        overview.set_yticks([])
        style.time_axis(overview.xaxis, "whole run (shaded: the zoom below), virtual time", end_s)
        start_s, stop_s = window
    else:
        ax = fig.add_subplot()
        start_s, stop_s = 0.0, end_s
    _draw_spans(ax, spans, shown, start_s, stop_s)
    step = max(1, len(shown) // 48)
    ax.set_yticks(range(0, len(shown), step))
    ax.set_yticklabels([labels.get(r, f"rank {r}") for r in shown[::step]], fontsize=7 if len(shown) > 16 else 8)
    style.time_axis(ax.xaxis, _TIME_LABEL, stop_s)
    if window is not None:
        _scale_bar(ax, start_s, stop_s)
    what = "what each rank does over virtual time"
    if len(shown) < len(ranks):
        what += f" (ranks {shown[0]}..{shown[-1]} of {len(ranks)})"
    if horizon_s is not None:
        what += f", first {style.format_duration(horizon_s)}"
    if window is not None:
        what += f"; zoom: iterations {WARMUP_ITERATIONS + 1}-{WARMUP_ITERATIONS + ZOOM_ITERATIONS} of rank {shown[0]}"
    (fig.axes[0]).set_title(figure_title(loaded, what))
    ax.legend(handles=_timeline_handles(spans, set(spans["kind"])), loc="upper left", bbox_to_anchor=(1.01, 1.0),
              title=f"spans (at least {MIN_SPAN_PX:g} px wide)", title_fontsize=style.FONT_SIZES["legend"])
    return fig


def zoom_window(spans: pd.DataFrame, end_s: float) -> tuple[float, float] | None:
    """A representative window: from the start of the first shown rank's forward/backward number
    WARMUP_ITERATIONS + 1 to that of number WARMUP_ITERATIONS + ZOOM_ITERATIONS + 1 (or the end);
    None when the run has too few iterations for a zoom to show more than the whole."""
    first = spans["rank"].min()
    starts = np.sort(spans[(spans["rank"] == first) & (spans["kind"] == "compute")
                           & (spans["name"] == "forward/backward")]["start_s"].to_numpy())
    if starts.size < WARMUP_ITERATIONS + ZOOM_ITERATIONS + 2:
        return None
    begin = float(starts[WARMUP_ITERATIONS])
    stop = float(starts[WARMUP_ITERATIONS + ZOOM_ITERATIONS])
    return (begin, min(stop, end_s)) if stop > begin else None


def _draw_spans(ax, spans: pd.DataFrame, shown: list[int], start_s: float, stop_s: float) -> None:
    """Every kind's spans between ``start_s`` and ``stop_s`` on ``ax``, a row per shown rank."""
    row_of = {rank: i for i, rank in enumerate(shown)}
    inside = spans[(spans["end_s"] > start_s) & (spans["start_s"] < stop_s)]
    min_width_s = (stop_s - start_s) * MIN_SPAN_PX / (_TIMELINE_WIDTH_IN * style.DPI * _TIMELINE_AXES_FRACTION)
    for kind in _kind_order(set(inside["kind"])):
        color = style.KIND_COLORS.get(kind, style.OTHER_COLOR)
        for blocking, (low, high) in ((True, (-0.42, 0.2)), (False, (0.25, 0.42))):
            rows = inside[(inside["kind"] == kind) & (inside["blocking"] == blocking)]
            if not rows.empty:
                bars = _bars(rows, row_of, low, high, color, alpha=1.0 if blocking else 0.6, min_width_s=min_width_s)
                ax.add_collection(bars, autolim=False)  # limits are set below
    ax.set_xlim(start_s, stop_s)
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.grid(False, axis="y")


def _scale_bar(ax, start_s: float, stop_s: float) -> None:
    """A bar of a round duration (1, 2 or 5 x 10^k, about a fifth of the window) right of the zoom,
    under the legend, where it covers no span and no tick."""
    target = (stop_s - start_s) / 5
    magnitude = 10.0 ** np.floor(np.log10(target))
    length = max(m * magnitude for m in (1, 2, 5) if m * magnitude <= target)
    bar = AnchoredSizeBar(ax.transData, length, f"scale: {style.format_duration(length)}", "lower left",
                          bbox_to_anchor=(1.02, 0.0), bbox_transform=ax.transAxes, borderpad=0.0, sep=3,
                          frameon=False, size_vertical=0, color=style.TEXT_COLOR, label_top=True,
                          fontproperties={"size": style.FONT_SIZES["legend"]})
    bar.size_bar.get_children()[0].set_linewidth(3)
    ax.add_artist(bar)


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
