"""The options of ``simdist calibrate compute`` and the model zoo it times, without torch.

Kept apart from :mod:`simdist.calibrate.compute_profile` so that building the command line
(``simdist --help``, ``simdist list``) does not import torch; the profile module re-exports
these names.
"""

from __future__ import annotations

import argparse
from types import MappingProxyType

__all__ = ["DEFAULT_BATCH_SIZES", "ZOO", "STATISTICS", "add_arguments"]

DEFAULT_BATCH_SIZES = (8, 16, 32, 64, 128, 256, 400, 512)
ZOO = MappingProxyType({"mlp": ("digits", {}), "cnn": ("digits", {})})  # model → (dataset, model options)
STATISTICS = MappingProxyType({"median": 50, "p25": 25, "min": 0})  # per-size value → percentile


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``simdist calibrate compute`` (shared with ``python -m``)."""
    parser.add_argument("--out", help="profile file to write (default calibration/profiles/<device key>.yaml)")
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
    parser.add_argument("--batch-sizes", default=",".join(map(str, DEFAULT_BATCH_SIZES)),
                        help="comma-separated batch sizes (default %(default)s)")
    parser.add_argument("--models", default=",".join(ZOO), help="comma-separated zoo models (default %(default)s)")
