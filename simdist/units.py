"""Quantities with units, parsed once at the edge into SI floats.

Inside simdist every quantity is a float in SI units whose name says the unit
(``latency_s``, ``bandwidth_Bps``, ``payload_bytes``, ``peak_flops``). Scenario and
platform files may write ``"200Gbps"``, ``"25GBps"``, ``"1.5us"``, ``"40GiB"`` or
``"19.5TFLOPS"``; the parsers here turn those into floats and reject anything else with a
message that says what would have been accepted.

Conventions: ``b``/``bit`` is a bit and ``B`` a byte; decimal prefixes (k, M, G, T, P)
are powers of 1000 and binary prefixes (Ki, Mi, Gi, Ti) powers of 1024. Bandwidths are
returned in bytes per second, so ``"200Gbps"`` is 25e9.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "parse_time",
    "parse_size",
    "parse_bandwidth",
    "parse_flops",
    "format_time",
    "format_bytes",
]

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}

_NUMBER = r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*"
_PREFIX = r"(?P<prefix>Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P)?"


def _number_or_string(value: object, what: str, example: str) -> tuple[float | None, str]:
    if isinstance(value, bool):
        raise ValueError(f"expected {what} like {example}, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value), ""
    if not isinstance(value, str):
        raise ValueError(f"expected {what} like {example}, got {type(value).__name__}")
    return None, value.strip()


def _scale(prefix: str | None) -> float:
    if not prefix:
        return 1.0
    return _BINARY[prefix] if prefix in _BINARY else _DECIMAL[prefix]


def _finite_non_negative(x: float, text: object, what: str) -> float:
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{what} must be a finite non-negative number, got {text!r}")
    return x


def parse_time(value: object) -> float:
    """Seconds from ``"1.5us"``, ``"2 ms"``, ``"3s"``, ``"1h"`` or a plain number of seconds."""
    number, text = _number_or_string(value, "a time", "'1.5us', '2ms' or '3s'")
    if number is not None:
        return _finite_non_negative(number, value, "a time")
    m = re.fullmatch(_NUMBER + r"(?P<unit>s|ms|us|µs|ns|min|h)?", text)
    if not m:
        raise ValueError(f"expected a time like '1.5us', '2ms' or '3s' (units: s, ms, us, ns, min, h), got {value!r}")
    return _finite_non_negative(float(m["num"]) * _TIME[m["unit"] or "s"], value, "a time")


def parse_size(value: object) -> float:
    """Bytes from ``"40GiB"``, ``"25MB"``, ``"512KiB"``, ``"8Gb"`` (bits) or a number of bytes."""
    number, text = _number_or_string(value, "a size", "'40GiB', '25MB' or '512KiB'")
    if number is not None:
        return _finite_non_negative(number, value, "a size")
    m = re.fullmatch(_NUMBER + _PREFIX + r"(?P<unit>B|b|bit|bits|byte|bytes)?", text)
    if not m:
        raise ValueError(f"expected a size like '40GiB', '25MB' or '512KiB', got {value!r}")
    per_unit = 0.125 if m["unit"] in ("b", "bit", "bits") else 1.0
    return _finite_non_negative(float(m["num"]) * _scale(m["prefix"]) * per_unit, value, "a size")


def parse_bandwidth(value: object) -> float:
    """Bytes per second from ``"200Gbps"`` (bits), ``"25GBps"``, ``"25GB/s"`` or a number in B/s."""
    number, text = _number_or_string(value, "a bandwidth", "'200Gbps' or '25GBps'")
    if number is not None:
        return _finite_non_negative(number, value, "a bandwidth")
    m = re.fullmatch(_NUMBER + _PREFIX + r"(?P<unit>bps|bit/s|b/s|Bps|B/s|byte/s)", text)
    if not m:
        raise ValueError(
            f"expected a bandwidth like '200Gbps' (bits/s) or '25GBps' / '25GB/s' (bytes/s), got {value!r}"
        )
    per_unit = 0.125 if m["unit"] in ("bps", "bit/s", "b/s") else 1.0
    return _finite_non_negative(float(m["num"]) * _scale(m["prefix"]) * per_unit, value, "a bandwidth")


def parse_flops(value: object) -> float:
    """Floating-point operations per second from ``"19.5TFLOPS"``, ``"312 TFLOP/s"`` or a number."""
    number, text = _number_or_string(value, "a compute rate", "'19.5TFLOPS'")
    if number is not None:
        return _finite_non_negative(number, value, "a compute rate")
    m = re.fullmatch(_NUMBER + r"(?P<prefix>k|K|M|G|T|P)?(?P<unit>FLOPS|FLOP/s|flops|flop/s)", text)
    if not m:
        raise ValueError(f"expected a compute rate like '19.5TFLOPS' or '312TFLOP/s', got {value!r}")
    return _finite_non_negative(float(m["num"]) * _scale(m["prefix"]), value, "a compute rate")


def format_time(seconds: float) -> str:
    """Human-readable time with a sensible unit (for messages and plot labels)."""
    for unit, scale in (("h", 3600.0), ("min", 60.0), ("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g}{unit}"
    return f"{seconds / 1e-9:.3g}ns"


def format_bytes(n: float) -> str:
    """Human-readable byte count with a binary prefix."""
    for unit, scale in (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}B"
