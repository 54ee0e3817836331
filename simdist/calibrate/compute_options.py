"""The options of ``simdist calibrate compute``, the model zoo it times and the batch sizes it
times a scenario's model at, without torch.

Kept apart from :mod:`simdist.calibrate.compute_profile` so that building the command line
(``simdist --help``, ``simdist list``) does not import torch; the profile module re-exports
these names.

With ``--scenario`` the batch sizes come from the scenario (:func:`scenario_batch_range`,
:func:`spread_batch_sizes`): the batches its algorithm can run — the per-worker
``workload.batch_size``, or for an algorithm that rescales batches (DBS-SGD) every batch
from its ``b_min`` to its ``b_max`` — widened by :data:`SPREAD` each way and cut into
geometrically spaced sizes, at least :data:`MIN_FIT_SIZES` of them, so that the fit shows
whether ``t0 + t1 * batch`` holds around them.
"""

from __future__ import annotations

import argparse
import math
from types import MappingProxyType
from typing import Any

__all__ = ["DEFAULT_BATCH_SIZES", "ZOO", "STATISTICS", "SPREAD", "MIN_FIT_SIZES", "FIT_TOLERANCE", "add_arguments",
           "scenario_batch_range", "spread_batch_sizes"]

DEFAULT_BATCH_SIZES = (8, 16, 32, 64, 128, 256, 400, 512)
ZOO = MappingProxyType({"mlp": ("digits", {}), "cnn": ("digits", {})})  # model → (dataset, model options)
STATISTICS = MappingProxyType({"median": 50, "p25": 25, "min": 0})  # per-size value → percentile
SPREAD = 2.0  # a scenario's batch range is timed from 1/SPREAD of its smallest to SPREAD x its largest batch
MIN_FIT_SIZES = 4  # fewest batch sizes a scenario's line is fitted on
FIT_TOLERANCE = 0.05  # relative error beyond which a batch size is reported as not fitted by the line
_SPREAD_POINTS = 6  # geometrically spaced sizes across the widened range (plus the scenario's own)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``simdist calibrate compute`` (shared with ``python -m``)."""
    parser.add_argument("--out", help="profile file to write (default calibration/profiles/<device key>.yaml; "
                                      "with --scenario calibration/profiles/scenarios/<scenario file stem>."
                                      "<device key>.yaml, apart from the shipped profiles every scenario reads)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"),
                        help="where to time the step (default cpu; auto = cuda when present)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads while timing (default 1)")
    parser.add_argument("--repeats", type=int, default=100,
                        help="timed steps per batch size; the median is kept (default 100)")
    parser.add_argument("--rounds", type=int, default=10, help="round-robin passes over the sizes (default 10)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before timing (default 5)")
    parser.add_argument("--allocator", default="steady", choices=("steady", "default"),
                        help="steady (default): keep glibc from returning step buffers to the OS between steps "
                             "(no page-fault storms); default: leave malloc as it is")
    parser.add_argument("--statistic", default="median", choices=tuple(STATISTICS),
                        help="per-size value the line is fitted to (default median; p25 or min on a host whose "
                             "speed comes and goes with other tenants)")
    parser.add_argument("--batch-sizes",
                        help=f"comma-separated batch sizes (default {','.join(map(str, DEFAULT_BATCH_SIZES))}; "
                             f"with --scenario: the batches the scenario's algorithm runs, from 1/{SPREAD:g} of the "
                             f"smallest to {SPREAD:g}x the largest, at least {MIN_FIT_SIZES} sizes)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--models", help=f"comma-separated zoo models with their default options, timed on their "
                                       f"calibration datasets (default {','.join(ZOO)})")
    what.add_argument("--scenario", metavar="SCENARIO.yaml",
                      help="time exactly this scenario's model (name and options, dataset input shape, optimizer) "
                           "at the batch sizes its algorithm runs, under the profile key its devices look up; "
                           "list the file written under the scenario's compute.profiles to use it")


def scenario_batch_range(scenario: Any) -> tuple[int, int, str]:
    """``(smallest, largest, field)``: the batch sizes a validated scenario's workers compute.

    An algorithm whose config rescales batches (``b_min`` and ``effective_b_max(base)``, as
    DBS-SGD's does) runs any batch in that range; every other algorithm runs the scenario's
    ``workload.batch_size`` (the short last batch of an epoch aside). ``field`` names where
    the range comes from, for messages.
    """
    base = scenario.workload.batch_size
    config = scenario.algorithm_config()
    b_max = getattr(config, "effective_b_max", None)
    b_min = getattr(config, "b_min", None)
    if callable(b_max) and isinstance(b_min, int):
        return min(b_min, base), max(int(b_max(base)), base), "algorithm.b_min..algorithm.b_max"
    return base, base, "workload.batch_size"


def spread_batch_sizes(smallest: int, largest: int, base: int, points: int = _SPREAD_POINTS) -> list[int]:
    """Sorted batch sizes to time for batches in ``[smallest, largest]`` around ``base``.

    ``points`` geometrically spaced sizes from ``smallest / SPREAD`` (at least 1) to
    ``largest * SPREAD``, plus ``smallest``, ``base`` and ``largest`` themselves; consecutive
    sizes from the bottom are added while fewer than :data:`MIN_FIT_SIZES` are distinct
    (batch 1: 1, 2, 3, 4).
    """
    low, high = max(1, math.floor(smallest / SPREAD)), max(1, math.ceil(largest * SPREAD))
    ratio = (high / low) ** (1 / max(1, points - 1))
    sizes = {round(low * ratio ** k) for k in range(points)} | {low, high, smallest, base, largest}
    extra = low
    while len(sizes) < MIN_FIT_SIZES:
        sizes.add(extra)
        extra += 1
    return sorted(sizes)
