"""The verdict of ``simdist validate``: per figure, simulated against real, its error and pass or fail.

A validation summary (``validation.json``) holds a hundred figures; a person wants to know
whether the simulation predicted the run, and where it did not. The verdict keeps the figures
that decide it, each against the project's fidelity targets (docs/ledger.md):

* the iteration time's median |error| within :data:`TARGET_MEDIAN_PCT` and its 90th percentile
  within :data:`TARGET_P90_PCT` (per worker and iteration, the warm-up left out);
* the run's total time (shown, judged by the iteration figures above);
* every ledger part of at least :data:`LEDGER_SHARE_PCT` of the real step within
  :data:`LEDGER_PART_PCT` of the real part (smaller parts cannot move the step much and are
  listed without a verdict).

:func:`verdict_rows` gives the rows as data; :func:`print_verdict` draws them as a table.
"""

from __future__ import annotations

import sys
from typing import Any

from ..units import format_time

__all__ = ["TARGET_MEDIAN_PCT", "TARGET_P90_PCT", "LEDGER_SHARE_PCT", "LEDGER_PART_PCT", "verdict_rows",
           "overall", "print_verdict"]

TARGET_MEDIAN_PCT, TARGET_P90_PCT = 10.0, 20.0  # iteration time: median and p90 of |error|
LEDGER_SHARE_PCT, LEDGER_PART_PCT = 5.0, 15.0  # ledger parts of at least this share of the step, within this error


def _row(figure: str, real: Any, simulated: Any, error_pct: Any, target: str, passed: bool | None,
         unit: str = "s") -> dict[str, Any]:
    return {"figure": figure, "real": real, "simulated": simulated, "error_pct": error_pct, "target": target,
            "passed": passed, "unit": unit}


def verdict_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The deciding figures of a :func:`~simdist.validation.run.validate` summary, each with its verdict.

    ``passed`` is True or False where a target applies, None where the figure is shown only (or
    could not be measured: an error of None fails its target).
    """
    median, p90 = summary.get("median_abs_iteration_error_pct"), summary.get("p90_abs_iteration_error_pct")
    rows = [
        _row("iteration time, median |error|", None, None, median, f"<= {TARGET_MEDIAN_PCT:g} %",
             median is not None and median <= TARGET_MEDIAN_PCT, unit="%"),
        _row("iteration time, p90 |error|", None, None, p90, f"<= {TARGET_P90_PCT:g} %",
             p90 is not None and p90 <= TARGET_P90_PCT, unit="%"),
        _row("total time", summary.get("measured_total_s"), summary.get("predicted_total_s"),
             summary.get("total_time_error_pct"), "", None),
    ]
    for part in summary.get("ledger") or []:
        name, share, error = part["part"], part.get("share_pct"), part.get("error_pct")
        judged = name != "step" and share is not None and share >= LEDGER_SHARE_PCT
        target = f"within {LEDGER_PART_PCT:g} %" if judged else ""
        passed = (error is not None and abs(error) <= LEDGER_PART_PCT) if judged else None
        label = "step (ledger)" if name == "step" else f"{name} ({share:.0f} % of step)" if share is not None else name
        if name == "step" or judged or (part.get("measured_s") or 0.0) > 0 or (part.get("predicted_s") or 0.0) > 0:
            rows.append(_row(label, part.get("measured_s"), part.get("predicted_s"), error, target, passed))
    return rows


def overall(rows: list[dict[str, Any]]) -> bool:
    """Whether every judged figure passed."""
    return all(row["passed"] for row in rows if row["passed"] is not None)


def _seconds(value: Any) -> str:
    return "-" if value is None else format_time(float(value))


def _cells(row: dict[str, Any]) -> list[str]:
    error = "-" if row["error_pct"] is None else f"{row['error_pct']:+.1f} %"
    if row["unit"] == "%":  # the figure is itself an error
        error = "-" if row["error_pct"] is None else f"{row['error_pct']:.1f} %"
    verdict = {True: "pass", False: "FAIL", None: ""}[row["passed"]]
    return [row["figure"], _seconds(row["real"]), _seconds(row["simulated"]), error, row["target"], verdict]


def print_verdict(summary: dict[str, Any], json_path: str, console: Any = None) -> bool:
    """Print the verdict table (rich) and where the full summary is; returns :func:`overall`."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=None if sys.stdout.isatty() else 120)  # a log file gets whole rows
    rows = verdict_rows(summary)
    workers = summary.get("workers")
    title = f"{summary.get('algorithm')} on {workers} worker{'' if workers == 1 else 's'}: simulated against real"
    table = Table(title=title, title_justify="left")
    for column, justify in (("figure", "left"), ("real", "right"), ("simulated", "right"), ("error", "right"),
                            ("target", "left"), ("verdict", "left")):
        table.add_column(column, justify=justify, no_wrap=column == "figure")
    for row in rows:
        table.add_row(*_cells(row), style="red" if row["passed"] is False else None)
    console.print(table)
    passed = overall(rows)
    console.print(("every judged figure within its target" if passed else "some figures miss their target")
                  + f"; the full summary is in {json_path}")
    return passed
