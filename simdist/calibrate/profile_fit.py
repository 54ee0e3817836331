"""The line ``t = t0 + t1 * batch`` of a compute profile and how well it fits.

:func:`fit_linear` fits the line (:class:`~simdist.fitting.LinearTimeFit`, relative least
squares: every batch size counts by its error in percent); :func:`fit_report` shows its
relative error at each measured batch size and the batch ranges it misses by more than
:data:`~simdist.calibrate.compute_options.FIT_TOLERANCE` (:func:`misfit_ranges`);
:func:`report_lines` is what ``calibrate compute`` prints after writing a profile, including
how a scenario picks its entry up.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import InputError
from ..fitting import LinearTimeFit
from .compute_options import FIT_TOLERANCE

__all__ = ["fit_linear", "misfit_ranges", "fit_report", "report_lines"]


def fit_linear(batch_sizes: Sequence[float], times_s: Sequence[float], weighting: str = "relative") -> dict:
    """``t = t0 + t1 * batch``: ``t0_s``, ``t1_s``, ``r2``, ``residuals_s`` (see :class:`LinearTimeFit`)."""
    if len(batch_sizes) < 2 or np.ptp(np.asarray(batch_sizes, dtype=float)) == 0:
        raise ValueError("fitting t0 + t1*batch needs at least two different batch sizes")
    fit = LinearTimeFit(weighting).fit(batch_sizes, times_s)
    return {"t0_s": fit.t0_s_, "t1_s": fit.t1_s_, "r2": fit.r2_, "residuals_s": [float(r) for r in fit.residuals_s_],
            "relative_errors": [float(e) for e in fit.relative_errors_],
            "max_relative_error": float(np.max(np.abs(fit.relative_errors_)))}


def misfit_ranges(batch_sizes: Sequence[int], relative_errors: Sequence[float],
                  tolerance: float = FIT_TOLERANCE) -> list[tuple[int, int]]:
    """Runs of consecutive measured batch sizes (sorted) where the line is off by more than ``tolerance``."""
    runs: list[tuple[int, int]] = []
    previous_bad = False
    for batch, error in sorted(zip(batch_sizes, relative_errors)):
        bad = not abs(error) <= tolerance  # a NaN error is a miss too
        if bad and previous_bad:
            runs[-1] = (runs[-1][0], int(batch))
        elif bad:
            runs.append((int(batch), int(batch)))
        previous_bad = bad
    return runs


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def fit_report(name: str, entry: dict, tolerance: float = FIT_TOLERANCE) -> list[str]:
    """Lines showing the fitted line of one profile entry against each measured batch size."""
    from ..units import format_time

    sizes = entry["batch_sizes"]
    measured = entry["statistic_s"] if "statistic_s" in entry else entry["median_s"]  # what the line was fitted to
    errors = entry.get("relative_errors") or [(entry["t0_s"] + entry["t1_s"] * b) / m - 1
                                              for b, m in zip(sizes, measured)]
    lines = [f"{name}: t = {format_time(entry['t0_s'])} + {format_time(entry['t1_s'])} * batch, R2 {entry['r2']:.4f} "
             f"on {len(sizes)} batch sizes ({entry.get('statistic', 'median')} per size); residual per batch size:",
             f"  {'batch':>7} {'measured':>10} {'fitted':>10} {'error':>7}"]
    for batch, time_s, error in zip(sizes, measured, errors):
        fitted = entry["t0_s"] + entry["t1_s"] * batch
        lines.append(f"  {batch:>7} {format_time(time_s):>10} {format_time(fitted):>10} {100 * error:>+6.1f}%")
    misses = misfit_ranges(sizes, errors, tolerance)
    if misses:
        worst = max(range(len(sizes)), key=lambda i: abs(errors[i]) if math.isfinite(errors[i]) else math.inf)
        lines.append(f"  the line cannot fit batch {', '.join(_span(a, b) for a, b in misses)} within "
                     f"{100 * tolerance:g}% (worst {100 * errors[worst]:+.1f}% at batch {sizes[worst]})")
    else:
        lines.append(f"  within {100 * tolerance:g}% at every measured batch size ({_span(min(sizes), max(sizes))})")
    return lines


def report_lines(path: Path, document: dict) -> list[str]:
    """What ``calibrate compute`` prints after writing ``document`` at ``path``: every fit's residuals
    and, for a scenario, how the scenario picks the entry up."""
    lines = [line for name, entry in document["models"].items() for line in fit_report(name, entry)]
    block = document.get("scenario")
    if not block:
        return lines
    scenario = Path(block["file"])
    low, high = block["batch_range"]
    lines.append(f"scenario {scenario}: model {block['model']!r} under profile key {block['profile_device']!r}, "
                 f"batch {low if low == high else f'{low}..{high}'} ({block['batch_range_from']})")
    listed = _listed_profiles(scenario)
    if any(os.path.realpath(p) == os.path.realpath(path) for p in listed):
        lines.append(f"{scenario} lists {path} under compute.profiles: its runs use this entry")
    else:
        relative = Path(os.path.relpath(os.path.realpath(path), os.path.realpath(scenario.parent))).as_posix()
        lines.append(f"to use it, list it in {scenario}: compute: {{profiles: [{relative}]}}")
    return lines


def _listed_profiles(scenario: Path) -> list[Path]:
    """The profile files a scenario lists (paths relative to its folder); none if it cannot be read now."""
    from ..scenario import load_scenario

    try:
        profiles = load_scenario(scenario).compute.profiles
    except InputError:
        return []
    return [scenario.parent / p for p in profiles]

