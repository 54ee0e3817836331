"""Parser of OSU micro-benchmark output (``osu_latency``, ``osu_bw``, ``osu_bibw``, collectives).

The layout (OMB 5.x–7.x): a title ``# OSU MPI[-CUDA] <Name> Test v<version>``, optional
comment lines (``# Datatype: ..``, ``# Window size ..``), a column header ``# Size  <metric>``
and one row of numbers per message size in bytes. Latencies are microseconds; bandwidths MB/s
(1e6 B/s). OSU prints no footer, so a file cut inside a row (missing columns, or no final
newline) is refused as truncated.

Each row gets ``time_s``, the time of one message of that size as the simulator models it:

* ``osu_latency`` — half the ping-pong round trip (one-way latency);
* ``osu_bw`` — ``size / bandwidth`` (streaming: a window of messages in flight);
* ``osu_bibw`` — ``size / (bandwidth / 2)`` per direction;
* collectives (``Allreduce Latency`` ...) — the average latency of one call.

The number of processes is not in OSU's output; collective fits take it as an option.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from .parsed import ParsedTrace, TraceError, shorten

__all__ = ["looks_like_osu", "parse_osu", "OSU_COLLECTIVES"]

_TITLE = re.compile(r"^#\s*OSU\s+(?:MPI|OpenSHMEM|UPC\+\+|UPC|NCCL)(?:[-_ ]?(?:CUDA|ROCm|OpenACC))?\s+(.+?)\s+Test"
                    r"(?:\s+v?([\d.]+))?\s*$", re.I)
_HEADER = re.compile(r"^#\s*Size\b", re.I)
# OSU test title (lower case, without "latency") → nccl-tests-style op name
OSU_COLLECTIVES = {"allreduce": "all_reduce", "allgather": "all_gather", "reduce_scatter": "reduce_scatter",
                   "reduce-scatter": "reduce_scatter", "alltoall": "alltoall", "all-to-all personalized exchange":
                   "alltoall", "broadcast": "broadcast", "bcast": "broadcast", "reduce": "reduce",
                   "gather": "gather", "scatter": "scatter"}


def looks_like_osu(text: str) -> bool:
    """True when the first non-empty line is an OSU title."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    return bool(_TITLE.match(first.strip()))


def _kind(title: str) -> tuple[str, str | None]:
    name = title.lower().strip()
    if name == "latency":
        return "p2p_latency", None
    if name == "bandwidth":
        return "p2p_bw", None
    if name in ("bi-directional bandwidth", "bidirectional bandwidth"):
        return "p2p_bibw", None
    base = re.sub(r"\s*latency$", "", name).strip()
    if base in OSU_COLLECTIVES:
        return "collective", OSU_COLLECTIVES[base]
    return "other", None


def _columns(header: str) -> list[str]:
    return [c.strip() for c in re.split(r"\s{2,}", header.lstrip("#").strip()) if c.strip()]


def _rows(path: str, lines: list[tuple[int, str]], ncols: int) -> list[list[float]]:
    rows = []
    for lineno, line in lines:
        tokens = line.split()
        try:
            values = [float(t) for t in tokens]
            if len(values) != ncols or not all(math.isfinite(v) and v >= 0 for v in values) or values[0] > 2**53:
                raise ValueError
        except ValueError:
            raise TraceError(path, f"line {lineno}: expected {ncols} finite non-negative numbers (size and the header's columns), got "
                                   f"{shorten(line)!r}; the file is truncated or not OSU output") from None
        rows.append(values)
    return rows


def parse_osu(path: str, text: str) -> ParsedTrace:
    """The table of an OSU micro-benchmark output file (InputError naming the file when it is not one)."""
    lines = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip()]
    title = _TITLE.match(lines[0][1].strip()) if lines else None
    if not title:
        first = lines[0][1] if lines else "(empty)"
        raise TraceError(path, f"not OSU micro-benchmark output (first line should be '# OSU MPI <name> Test vX'); "
                               f"got {shorten(first)!r}")
    header = next(((i, line) for i, line in lines if _HEADER.match(line)), None)
    if header is None:
        raise TraceError(path, "OSU title but no '# Size ...' column header; the file is truncated")
    columns = _columns(header[1])
    body = [(i, line) for i, line in lines if i > header[0] and not line.lstrip().startswith("#")]
    if not body:
        raise TraceError(path, "OSU header but no result rows; the file is truncated")
    if not text.endswith("\n"):
        raise TraceError(path, f"truncated: the last line {shorten(body[-1][1])!r} has no line end "
                               "(the run did not finish or the file was cut)")
    values = _rows(path, body, len(columns))
    table = pd.DataFrame(values, columns=["size_bytes", *columns[1:]])
    table["size_bytes"] = table["size_bytes"].astype("int64")
    if not table["size_bytes"].is_monotonic_increasing:
        raise TraceError(path, "message sizes are not increasing; several runs concatenated? split the file")
    kind, op = _kind(title.group(1))
    metric = columns[1]
    table["time_s"] = _message_time_s(table, kind, metric)
    meta = {"test": title.group(1), "version": title.group(2), "op": op, "metric": metric}
    description = f"OSU {title.group(1)} test v{title.group(2) or '?'}, {len(table)} sizes " \
                  f"{int(table['size_bytes'].iloc[0])} B - {int(table['size_bytes'].iloc[-1])} B"
    return ParsedTrace(path, "osu", kind, description, table, meta)


def _message_time_s(table: pd.DataFrame, kind: str, metric: str) -> pd.Series:
    value = table[metric].astype(float)
    unit = metric.lower()
    if "mb/s" in unit:
        per_direction = value / 2 if kind == "p2p_bibw" else value
        return table["size_bytes"] / (per_direction * 1e6)
    if "(us)" in unit or "latency" in unit:
        return value * 1e-6
    return pd.Series([float("nan")] * len(table))
