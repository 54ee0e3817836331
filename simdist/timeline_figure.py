"""The ``timeline`` figure of a run: what each rank does over virtual time, read from ``trace.json``.

One row per rank; computation, communication and waiting spans in their own colours
(:data:`simdist.plot_style.KIND_COLORS`), non-blocking communication as a thin bar above the
row. Spans narrower than a pixel are widened to :data:`MIN_SPAN_PX` so that short messages
stay visible. Long runs show only their first seconds: at most :data:`MAX_SPANS_PER_RANK`
spans per rank, cut at a common horizon, and at most :data:`MAX_TIMELINE_RANKS` rows.
The legend says "(none)" for a kind the run never did (a balanced sync run never waits).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from . import plot_style as style
from .plot_common import figure_title
from .result_files import LoadedResult
from .tracefile import read_trace_spans

__all__ = ["MAX_SPANS_PER_RANK", "MAX_TIMELINE_RANKS", "MIN_SPAN_PX", "draw_timeline"]

MAX_SPANS_PER_RANK = 2000
MAX_TIMELINE_RANKS = 256
MIN_SPAN_PX = 1.0  # timeline spans are drawn at least this wide, in pixels of the saved PNG
_KIND_LABELS = {"compute": "compute", "comm": "communication", "wait": "waiting"}
_TIMELINE_WIDTH_IN = 10.0
_TIMELINE_AXES_FRACTION = 0.5  # of the figure's width, at most (the rest: rank labels, legend)
_RASTERIZE_ABOVE = 5000  # artists with more points than this are rasterized in SVG
_TIME_LABEL = "virtual time"


def draw_timeline(loaded: LoadedResult) -> Figure | None:
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
    ax.set_title(figure_title(loaded, what))
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
