"""The look of simdist's figures: palette, markers, font sizes and axis formatters.

Every per-run figure (:mod:`simdist.plots`) is drawn inside :func:`style_context` and
finished by :func:`finish_axes`, so that all of them share one look that survives being
printed in greyscale or read by a colour-blind reader, and so that no axis ever shows an
offset (``1e-13+1.04e-4``) or scientific notation:

* colours are the Okabe–Ito palette, chosen to stay distinct under the common forms of
  colour blindness (M. Okabe and K. Ito, "Color Universal Design (CUD): how to make figures
  and presentations that are friendly to colorblind people", 2008,
  https://jfly.uni-koeln.de/color/; recommended by B. Wong, "Points of view: Color
  blindness", Nature Methods 8:441, 2011);
* lines of several series differ by marker and line style too (:func:`series_style`);
* time axes are labelled in the one unit (ns, µs, ms, s, min or h) that fits the data's
  range (:func:`time_axis`), byte axes in B/KiB/MiB/GiB/TiB (:func:`bytes_axis`), rates in
  B/s .. TB/s (:func:`rate_axis`); the tick values are computed in that unit, so ticks
  fall on round numbers of it (a 25 ms run gets 0, 5, 10 ... ms);
* integer quantities (staleness in versions, workers, steps, samples) get integer ticks
  (:func:`integer_axis`).

The figures are written at a fixed DPI with no dates or software versions in the files
(:data:`SAVE_RC`, :func:`save_metadata`), so the same result gives the same bytes.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.ticker import Formatter, MaxNLocator, ScalarFormatter

__all__ = [
    "OKABE_ITO",
    "SERIES_COLORS",
    "MARKERS",
    "LINESTYLES",
    "KIND_COLORS",
    "OTHER_COLOR",
    "PART_STYLES",
    "DPI",
    "RC",
    "SAVE_RC",
    "style_context",
    "series_style",
    "save_metadata",
    "time_unit",
    "bytes_unit",
    "rate_unit",
    "format_duration",
    "format_size",
    "format_rate",
    "UnitLocator",
    "UnitFormatter",
    "time_axis",
    "bytes_axis",
    "rate_axis",
    "integer_axis",
    "plain_axis",
    "finish_axes",
    "note",
    "constant_value",
]

OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
}
# order of series: the darkest, most distinct hues first; yellow (weak on white) last
SERIES_COLORS = tuple(OKABE_ITO[c] for c in ("blue", "orange", "bluish_green", "vermillion", "reddish_purple",
                                            "sky_blue", "black", "yellow"))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", ":")
# what a rank does, in the timeline and wherever spans are coloured by kind
KIND_COLORS = {"compute": OKABE_ITO["blue"], "comm": OKABE_ITO["orange"], "wait": OKABE_ITO["reddish_purple"]}
OTHER_COLOR = OKABE_ITO["bluish_green"]
# the time ledger's parts (simdist.ledger.PARTS): compute, comm and wait keep their timeline
# colours; the two rarest parts reuse a hue with a hatch, as the palette has eight colours
PART_STYLES: dict[str, dict[str, Any]] = {
    "data": {"color": OKABE_ITO["sky_blue"]},
    "forward_backward": {"color": KIND_COLORS["compute"]},
    "pack": {"color": OKABE_ITO["bluish_green"]},
    "comm_cpu": {"color": OKABE_ITO["yellow"]},
    "comm_wire": {"color": KIND_COLORS["comm"]},
    "wait": {"color": KIND_COLORS["wait"]},
    "unpack": {"color": OKABE_ITO["vermillion"]},
    "update": {"color": OKABE_ITO["black"]},
    "eval": {"color": OKABE_ITO["sky_blue"], "hatch": "//", "edgecolor": "white"},
    "checkpoint": {"color": OKABE_ITO["bluish_green"], "hatch": "..", "edgecolor": "white"},
}
TEXT_COLOR = "#333333"

DPI = 150  # 7 x 4.2 in → 1050 x 630 px: sharp on screen, enough for a draft paper
FONT_SIZES = {"base": 9, "title": 10, "label": 9, "tick": 8, "legend": 8, "note": 9}

RC: dict[str, Any] = {
    "font.size": FONT_SIZES["base"],
    "axes.titlesize": FONT_SIZES["title"],
    "axes.labelsize": FONT_SIZES["label"],
    "xtick.labelsize": FONT_SIZES["tick"],
    "ytick.labelsize": FONT_SIZES["tick"],
    "legend.fontsize": FONT_SIZES["legend"],
    "legend.frameon": False,
    "axes.prop_cycle": matplotlib.cycler(color=SERIES_COLORS),
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "axes.axisbelow": True,
    "axes.formatter.useoffset": False,
    "axes.formatter.limits": (-99, 99),  # never scientific notation from the default formatter
    "lines.linewidth": 1.4,
    "lines.markersize": 4,
    "savefig.dpi": DPI,
    "svg.hashsalt": "simdist",  # stable SVG element ids
    "svg.fonttype": "path",  # text as paths: the same bytes whatever fonts the reader has
}
SAVE_RC: dict[str, Any] = {"svg.hashsalt": "simdist"}

TIME_UNITS = (("h", 3600.0), ("min", 60.0), ("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
_TIME_SWITCH = {"h": 2 * 3600.0, "min": 2 * 60.0}  # 90 s reads better as "90 s" than "1.5 min"
BYTE_UNITS = (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10), ("B", 1.0))
RATE_UNITS = (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3), ("B/s", 1.0))


@contextmanager
def style_context() -> Iterator[None]:
    """Matplotlib settings of simdist's figures for the artists created inside the block."""
    with matplotlib.rc_context(RC):
        yield


def series_style(i: int) -> dict[str, Any]:
    """Colour, marker and line style of the ``i``-th series of a figure (distinct in greyscale too)."""
    return {"color": SERIES_COLORS[i % len(SERIES_COLORS)], "marker": MARKERS[i % len(MARKERS)],
            "linestyle": LINESTYLES[(i // len(SERIES_COLORS)) % len(LINESTYLES)]}


def save_metadata(fmt: str) -> dict[str, Any]:
    """Metadata for ``savefig`` that leaves out dates and versions: equal inputs, equal bytes."""
    if fmt == "svg":
        return {"Date": None, "Creator": None}
    if fmt == "png":
        return {"Software": None}
    if fmt == "pdf":
        return {"CreationDate": None, "Producer": None, "Creator": None}
    return {}


# --------------------------------------------------------------------------- units


def _pick(units: Sequence[tuple[str, float]], magnitude: float, switch: dict[str, float] | None = None) -> tuple[str, float]:
    magnitude = abs(float(magnitude)) if math.isfinite(magnitude) else 0.0
    for name, scale in units:
        if magnitude >= (switch or {}).get(name, scale):
            return name, scale
    return units[-1] if magnitude > 0 else _zero_unit(units)


def _zero_unit(units: Sequence[tuple[str, float]]) -> tuple[str, float]:
    return next((u for u in units if u[1] == 1.0), units[-1])


def time_unit(magnitude_s: float) -> tuple[str, float]:
    """``(unit, seconds per unit)`` for times up to ``magnitude_s``: 2.5e-2 → ``("ms", 1e-3)``."""
    return _pick(TIME_UNITS, magnitude_s, _TIME_SWITCH)


def bytes_unit(magnitude_bytes: float) -> tuple[str, float]:
    """``(unit, bytes per unit)`` with a binary prefix: 3 * 2**20 → ``("MiB", 2**20)``."""
    return _pick(BYTE_UNITS, magnitude_bytes)


def rate_unit(magnitude_Bps: float) -> tuple[str, float]:
    """``(unit, bytes/s per unit)`` with a decimal prefix, as link speeds are quoted: 2.5e10 → GB/s."""
    return _pick(RATE_UNITS, magnitude_Bps)


def _three_digits(value: float) -> str:
    text = f"{value:.3g}"
    if "e" in text:  # 3 significant digits of a number ≥ 1000 in the largest unit: write it out
        text = f"{value:.0f}"
    return text


def format_duration(seconds: float) -> str:
    """``"104 µs"``, ``"25 ms"``, ``"3.5 min"``: three significant digits in the unit that fits.

    Like :func:`simdist.units.format_time`, with a space and ``µ`` for figure text.
    """
    unit, scale = time_unit(seconds)
    return f"{_three_digits(seconds / scale)} {unit}"


def format_size(n_bytes: float) -> str:
    """``"1.5 MiB"``: :func:`simdist.units.format_bytes` with a space, for figure text."""
    unit, scale = bytes_unit(n_bytes)
    return f"{_three_digits(n_bytes / scale)} {unit}"


def format_rate(Bps: float) -> str:
    """``"25 GB/s"``: a rate in bytes per second with a decimal prefix."""
    unit, scale = rate_unit(Bps)
    return f"{_three_digits(Bps / scale)} {unit}"


# --------------------------------------------------------------------------- axes


class UnitLocator(MaxNLocator):
    """Round ticks in a display unit: the data stay in SI, the ticks are chosen in ``unit = scale``
    (so minutes get ticks at whole minutes, not at multiples of 10 s)."""

    def __init__(self, scale: float, **kwargs: Any) -> None:
        super().__init__(**{"nbins": "auto", "steps": [1, 2, 2.5, 5, 10], **kwargs})
        self.scale = float(scale)

    def tick_values(self, vmin: float, vmax: float) -> np.ndarray:
        return np.asarray(super().tick_values(vmin / self.scale, vmax / self.scale)) * self.scale


class UnitFormatter(Formatter):
    """Tick labels as numbers in a display unit (the unit is in the axis label), with as many
    decimals as the ticks need and never an offset or an exponent."""

    def __init__(self, scale: float) -> None:
        self.scale = float(scale)
        self.decimals = 0

    def set_locs(self, locs: Sequence[float]) -> None:
        super().set_locs(locs)
        self.decimals = _decimals_for(np.asarray(locs, dtype=float) / self.scale)

    def __call__(self, x: float, pos: int | None = None) -> str:
        text = f"{x / self.scale:.{self.decimals}f}"
        return "0" if float(text) == 0 else text

    def get_offset(self) -> str:
        return ""


def _decimals_for(values: np.ndarray) -> int:
    """The fewest decimals (at most 6) that write every value exactly (to 1e-9 of its size)."""
    values = values[np.isfinite(values)]
    for decimals in range(7):
        if np.all(np.abs(np.round(values, decimals) - values) <= 1e-9 * np.maximum(1.0, np.abs(values))):
            return decimals
    return 6


def _unit_axis(axis: Axis, label: str, unit: str, scale: float) -> None:
    axis.set_major_locator(UnitLocator(scale))
    axis.set_major_formatter(UnitFormatter(scale))
    axis.set_label_text(f"{label} ({unit})")


def time_axis(axis: Axis, label: str, extent_s: float) -> str:
    """Label ``axis`` (holding seconds) in the time unit that fits ``extent_s`` (the largest
    value shown); returns the unit."""
    unit, scale = time_unit(extent_s)
    _unit_axis(axis, label, unit, scale)
    return unit


def bytes_axis(axis: Axis, label: str, extent_bytes: float) -> str:
    """Label ``axis`` (holding bytes) in B/KiB/MiB/GiB/TiB chosen from ``extent_bytes``."""
    unit, scale = bytes_unit(extent_bytes)
    _unit_axis(axis, label, unit, scale)
    return unit


def rate_axis(axis: Axis, label: str, extent_Bps: float) -> str:
    """Label ``axis`` (holding bytes per second) in B/s .. TB/s chosen from ``extent_Bps``."""
    unit, scale = rate_unit(extent_Bps)
    _unit_axis(axis, label, unit, scale)
    return unit


def integer_axis(axis: Axis, label: str | None = None) -> None:
    """Integer ticks written as integers, for counted quantities (versions, workers, steps, samples)."""
    axis.set_major_locator(MaxNLocator(integer=True))
    axis.set_major_formatter(UnitFormatter(1.0))
    if label is not None:
        axis.set_label_text(label)


def plain_axis(axis: Axis) -> None:
    """A plain number axis: the default formatter without offset or scientific notation."""
    formatter = axis.get_major_formatter()
    if isinstance(formatter, ScalarFormatter):
        formatter.set_useOffset(False)
        formatter.set_scientific(False)


def finish_axes(fig: Figure) -> Figure:
    """Last touches of every axes of ``fig``: tick label sizes fixed on the axes (so they hold
    whatever settings are in force when the figure is saved) and no offsets anywhere."""
    for ax in fig.axes:
        ax.tick_params(labelsize=FONT_SIZES["tick"])
        for axis in (ax.xaxis, ax.yaxis):
            plain_axis(axis)
    return fig


def note(ax: Axes, text: str, *, x: float = 0.5, y: float = 0.5, **kwargs: Any) -> Any:
    """A sentence drawn on the axes (axes coordinates): how degenerate data is described."""
    return ax.text(x, y, text, transform=ax.transAxes, ha=kwargs.pop("ha", "center"), va=kwargs.pop("va", "center"),
                   fontsize=FONT_SIZES["note"], color=TEXT_COLOR, wrap=True,
                   bbox={"boxstyle": "round,pad=0.4", "facecolor": "white", "edgecolor": "#bbbbbb"}, **kwargs)


def constant_value(values: np.ndarray, rtol: float = 1e-6) -> float | None:
    """The value of a series whose entries are all equal to within ``rtol`` of their size (float
    noise of summed times), else None. 1e-6 is far below the 3 digits a figure shows."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    low, high = float(values.min()), float(values.max())
    if high - low <= rtol * max(abs(low), abs(high)):
        return float(np.median(values))
    return None
