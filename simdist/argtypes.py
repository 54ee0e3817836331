"""argparse ``type=`` functions for numeric options, so a bad number stops the command at once.

argparse turns the :class:`argparse.ArgumentTypeError` these raise into a one-line usage
error naming the option (exit status 2), before any work starts.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable

__all__ = ["int_between", "positive_float"]


def int_between(low: int, high: int | None = None) -> Callable[[str], int]:
    """A ``type=`` accepting integers in ``[low, high]`` (no upper bound when ``high`` is None)."""
    allowed = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}")
        return value

    return parse


def positive_float(text: str) -> float:
    """A ``type=`` accepting finite numbers above zero (seconds, core counts, tolerances)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value
