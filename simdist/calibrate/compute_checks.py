"""Checks of ``calibrate compute``'s arguments, and of what it measured before a file is written.

:func:`checked_options` turns the parsed batch sizes and models into lists (the defaults where
not given) or a ValueError naming what is allowed, before anything is timed;
:func:`check_slope` refuses a profile whose time does not grow with the batch (the simulator's
profile loader refuses ``t1 = 0``); :func:`allocator_setting` applies ``--allocator`` and says
what the profile records about it.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from .compute_options import DEFAULT_BATCH_SIZES, ZOO
from .timed_steps import steady_allocator

__all__ = ["checked_options", "check_slope", "allocator_setting"]


def _batch_size_list(text: str) -> list[int]:
    try:
        return [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise ValueError(f"--batch-sizes must be comma-separated integers, got {text!r}") from None


def checked_options(args: argparse.Namespace) -> tuple[list[int], list[str]]:
    """Batch sizes and models of parsed ``args`` (the defaults where not given); ValueError naming what
    is allowed. With ``--scenario`` the models list is empty and the batch sizes are the ones given, if any."""
    scenario = getattr(args, "scenario", None)
    if args.batch_sizes is not None:
        batch_sizes = _batch_size_list(args.batch_sizes)
        if len(set(batch_sizes)) < 2 or min(batch_sizes) < 1:
            raise ValueError("--batch-sizes needs at least two different positive sizes")
    else:
        batch_sizes = [] if scenario else list(DEFAULT_BATCH_SIZES)
    models = [] if scenario else [m for m in (args.models or ",".join(ZOO)).split(",") if m]
    unknown = [m for m in models if m not in ZOO]
    if unknown or not (models or scenario):
        raise ValueError(f"--models must be among {', '.join(ZOO)}, got {args.models!r}")
    if args.threads < 1 or args.repeats < 1 or args.warmup < 0 or args.rounds < 1:
        raise ValueError("--threads, --repeats and --rounds must be positive, --warmup >= 0")
    return batch_sizes, models


def allocator_setting(args: argparse.Namespace) -> str:
    """Apply ``--allocator`` (steady: :func:`steady_allocator`); what the profile records as its allocator."""
    return "glibc mmap/trim thresholds raised (steady)" if args.allocator == "steady" and steady_allocator() \
        else "default"


def check_slope(profiles: dict[str, dict], batch_sizes: Sequence[int]) -> None:
    """A ValueError naming the models whose step time does not grow with the batch (t1 = 0)."""
    flat = [name for name, p in profiles.items() if not p["t1_s"] > 0]
    if flat:
        raise ValueError(f"the step time of {', '.join(flat)} does not grow with the batch size over "
                         f"{list(batch_sizes)} (t1 = 0); widen --batch-sizes or raise --repeats")
