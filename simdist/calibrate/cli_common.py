"""What the ``simdist calibrate`` sub-commands share: reading size and list options, and
printing measured-versus-predicted tables.

The network and trace commands both print a table of measured times against each fitted
prediction, with a line naming the size ranges a prediction misses; keeping these helpers
here leaves :mod:`simdist.calibrate.cli` with the handlers and the parser only. Option
errors are :class:`~simdist.errors.InputError` naming the option.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..errors import InputError
from ..units import format_bytes, format_time, parse_size

__all__ = ["option_size", "option_ints", "signed_percent", "print_size_table", "misfit_line", "table_note"]


def option_size(text: str, option: str) -> float:
    """A size option (``"64KiB"``) in bytes; a bad one is an InputError naming ``option``."""
    try:
        return float(parse_size(text))
    except ValueError as exc:
        raise InputError(str(exc), source=option) from None


def option_ints(text: str, option: str) -> list[int]:
    """A comma-separated list of positive integers; a bad one is an InputError naming ``option``."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"expected comma-separated integers, got {text!r}", source=option) from None
    if not values or min(values) < 1:
        raise InputError(f"expected positive integers, got {text!r}", source=option)
    return values


def signed_percent(x: float) -> str:
    """A relative error as a signed percentage (``+1.5%``); empty for None or NaN."""
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.1f}%"


def print_size_table(rows: list[dict], predictions: Sequence[str]) -> None:
    """Print measured time and each prediction with its error per size, then each prediction's misfit line."""
    header = f"{'size':>10} {'measured':>10}" + "".join(f" {p:>12} {'err':>7}" for p in predictions)
    print(header)
    for r in rows:
        line = f"{format_bytes(r['size_bytes']):>10} {format_time(r['measured_s']):>10}"
        for p in predictions:
            line += f" {format_time(r[f'{p}_s']):>12} {signed_percent(r[f'{p}_error']):>7}"
        print(line)
    for p in predictions:
        print(misfit_line(rows, p))


def misfit_line(rows: list[dict], prediction: str, tolerance: float = 0.05) -> str:
    """Which size ranges ``prediction`` misses by more than ``tolerance``, or that it fits them all."""
    ranges, start, worst = [], None, 0.0
    for i, r in enumerate(rows):
        error = r[f"{prediction}_error"]
        off = error is not None and not math.isnan(error) and abs(error) > tolerance
        if off:
            start = i if start is None else start
            worst = max(worst, abs(error))
        if start is not None and (not off or i == len(rows) - 1):
            end = i if off else i - 1
            first, last = format_bytes(rows[start]["size_bytes"]), format_bytes(rows[end]["size_bytes"])
            ranges.append(first if start == end else f"{first}-{last}")
            start = None
    if not ranges:
        return f"  {prediction}: within {tolerance:.0%} at every size"
    return f"  {prediction}: cannot fit {', '.join(ranges)} within {tolerance:.0%} (worst {worst:.1%})"


def table_note(table: dict) -> str:
    """One line describing a collective cost table and where it goes in the overlay."""
    rows = table["rows"]
    where = f", {table['nodes']} node(s)" if table.get("nodes") else ""
    where += ", right after a training step" if table.get("after_compute") else ""
    return (f"cost table: {table['op']} on {table['ranks']} ranks{where}, {len(rows)} sizes "
            f"{format_bytes(rows[0][0])} - {format_bytes(rows[-1][0])} -> collectives.tables (the simulator prices "
            "this collective from it)")
