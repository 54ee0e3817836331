"""Physical quantities of platform files: units at the edge, SI floats inside, physical ranges.

Each annotated type parses a string with units (``"200Gbps"``, ``"1.5us"``) or an SI number
and refuses values outside what any real hardware has (a misplaced unit, not a machine).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator

from ..units import parse_bandwidth, parse_flops, parse_time

__all__ = ["Seconds", "LatencySeconds", "Interval", "BytesPerSecond", "FlopsPerSecond", "MAX_DEVICES",
           "MAX_LATENCY_S", "MIN_BANDWIDTH_BPS", "MAX_BANDWIDTH_BPS", "MIN_CPUS", "MIN_INTERVAL_S", "MAX_INTERVAL_S"]


MAX_DEVICES = 1 << 20  # a million ranks: beyond any cluster a scenario can describe today
MAX_LATENCY_S = 60.0  # slower than any link, a misplaced unit
MIN_BANDWIDTH_BPS, MAX_BANDWIDTH_BPS = 1.0, 1e15  # 1 B/s .. 1 PB/s (no link is faster)
MIN_FLOPS, MAX_FLOPS = 1e6, 1e18  # 1 MFLOP/s .. 1 EFLOP/s per device
MIN_CPUS = 0.01  # the CPU share granularity of docker --cpus and cgroups


def _within(parse, low: float, high: float, example: str):
    """``parse`` and then check ``low <= value <= high`` (the physical range of the quantity)."""
    def check(value):
        x = parse(value)
        if x <= 0:
            raise ValueError(f"must be greater than zero, got {value!r}")
        if not low <= x <= high:
            raise ValueError(f"must be between {low:g} and {high:g} {example}, got {value!r}")
        return x
    return check


def _time_between(low: float, high: float):
    def check(value):
        x = parse_time(value)
        if not low <= x <= high:
            raise ValueError(f"must be between {low:g} s and {high:g} s, got {value!r}")
        return x
    return check


Seconds = Annotated[float, BeforeValidator(parse_time)]
LatencySeconds = Annotated[float, BeforeValidator(_time_between(0.0, MAX_LATENCY_S))]
MIN_INTERVAL_S, MAX_INTERVAL_S = 1e-9, 1e9  # 1 ns (below, a timer stalls a clock of seconds) .. 30 years
Interval = Annotated[float, BeforeValidator(_time_between(MIN_INTERVAL_S, MAX_INTERVAL_S))]
BytesPerSecond = Annotated[float, BeforeValidator(_within(parse_bandwidth, MIN_BANDWIDTH_BPS, MAX_BANDWIDTH_BPS,
                                                          "bytes/s (1Bps .. 1PBps)"))]
FlopsPerSecond = Annotated[float, BeforeValidator(_within(parse_flops, MIN_FLOPS, MAX_FLOPS, "FLOP/s"))]
