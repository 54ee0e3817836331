"""Parser of collective timings a user measured with their own tools, written as a CSV.

The layout (docs/calibration.md, "Collective timings from a CSV")::

    # allreduce and broadcast on 8 GPUs of one node, measured with our harness
    collective, ranks, nodes, algorithm, bytes, time_us
    allreduce,  8,     1,     ring,      1KiB,  12.5
    allreduce,  8,     1,     ring,      1MiB,  48.0
    broadcast,  8,     1,     ,          1KiB,  9.1
    broadcast,  8,     1,     ,          1MiB,  30.2

* Blank lines and lines starting with ``#`` are skipped; the first other line is the header.
  Fields are comma-separated (CSV quoting allowed); spaces around a field are ignored, and so
  is the case of column names. A UTF-8 byte-order mark (spreadsheet exports) is ignored.
* Required columns: ``collective`` (``allreduce``/``all_reduce``, ``broadcast``/``bcast``,
  ``allgather``/``all_gather``), ``ranks`` (a whole number >= 2), ``bytes`` or its alias
  ``size_bytes`` (a whole number of bytes >= 1 or a size such as ``64KiB``: the buffer per rank
  of an allreduce or a broadcast, each rank's contribution to an allgather), and exactly one
  time column:

  - ``time_s`` / ``time_us``: seconds / microseconds per operation, finite and > 0;
  - ``busbw_GBps``: nccl-tests' bus bandwidth in 1e9 B/s (``PERFORMANCE.md`` of nccl-tests),
    turned into ``time = factor * bytes / (busbw * 1e9)`` with ``factor`` ``2(n-1)/n`` for
    allreduce, 1 for broadcast and ``n-1`` for allgather (nccl-tests counts an allgather's
    whole output ``n * bytes`` times ``(n-1)/n``; ``bytes`` here is per rank).
* Optional columns: ``nodes`` (a whole number from 1 to ``ranks``; empty: unknown),
  ``algorithm`` (``ring``, ``tree`` ...; empty: whatever the library chose), ``dtype``
  (default ``float32``). Any other column is ignored and listed in ``meta["ignored_columns"]``.
* Rows with the same ``(collective, ranks, nodes, algorithm)`` form one table, in file order:
  at least two rows, sizes strictly increasing (:func:`~simdist.platform.cost_spec.table_row_problem`,
  the rule the platform loader applies to ``collectives.tables``).

The parsed table has one row per CSV row, in file order, with the columns ``collective``
(canonical name), ``ranks`` (int), ``nodes`` (pandas ``Int64``, ``<NA>`` where unknown),
``algorithm`` (``""`` where none), ``dtype``, ``size_bytes``, ``time_s`` (floats, SI) and
``line`` (the row's 1-based line in the file). Every problem is one line naming the line and
the column.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from typing import Callable, Iterator

import pandas as pd

from ..platform.cost_spec import MAX_TABLE_ROWS, canonical_op, table_row_problem
from ..platform.quantities import MAX_DEVICES
from ..units import parse_size
from .parsed import ParsedTrace, TraceError, shorten

__all__ = ["TIME_COLUMNS", "looks_like_collective_csv", "parse_collective_csv", "check_ranks"]

TIME_COLUMNS = ("time_s", "time_us", "busbw_GBps")
_SIZE_COLUMNS = ("bytes", "size_bytes")
_OPTIONAL = ("nodes", "algorithm", "dtype")
# bus bytes / per-rank bytes (nccl-tests PERFORMANCE.md, allgather's size per rank)
_BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "allreduce": lambda n: 2 * (n - 1) / n, "broadcast": lambda n: 1.0, "allgather": lambda n: float(n - 1)}
_INTEGER = re.compile(r"\+?\d{1,18}")
_MAX_SIZE_BYTES = 2**53  # exact in a float
_REQUIRED = "collective, ranks, bytes (or size_bytes) and one of time_s, time_us, busbw_GBps"


@dataclass(frozen=True)
class _Header:
    """Where each known column is (canonical name → field index) and how the file spells it."""

    index: dict[str, int]
    spelled: dict[str, str]
    time_column: str
    width: int
    ignored: list[str]


def _content_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of the lines that are neither blank nor ``#`` comments (lazily)."""
    for lineno, line in enumerate(io.StringIO(text.removeprefix("\ufeff")), 1):
        line = line.rstrip("\r\n")
        if line.strip() and not line.lstrip().startswith("#"):
            yield lineno, line


def _split(line: str) -> list[str]:
    return [field.strip() for field in next(csv.reader([line], skipinitialspace=True), [])]


def _fields(path: str, lineno: int, line: str) -> list[str]:
    try:
        return _split(line)
    except csv.Error as exc:
        raise TraceError(path, f"line {lineno}: not a CSV row ({shorten(str(exc))})") from None


def looks_like_collective_csv(text: str) -> bool:
    """True when the first line that is not a comment is a CSV header with ``collective`` and ``bytes``."""
    first = next(_content_lines(text), None)
    if first is None:
        return False
    try:
        names = {name.lower() for name in _split(first[1])}
    except csv.Error:
        return False
    return "collective" in names and any(name in names for name in _SIZE_COLUMNS)


def _header(path: str, lineno: int, fields: list[str]) -> _Header:
    where = f"line {lineno}: "
    lower = [name.lower() for name in fields]
    repeated = next((name for i, name in enumerate(lower) if name and name in lower[:i]), None)
    if repeated is not None:
        raise TraceError(path, f"{where}column {shorten(repeated)} appears twice in the header")
    sizes = [name for name in _SIZE_COLUMNS if name in lower]
    if len(sizes) > 1:
        raise TraceError(path, f"{where}the header has both bytes and size_bytes; keep one")
    missing = [name for name in ("collective", "ranks") if name not in lower] + ([] if sizes else ["bytes"])
    times = [name for name in TIME_COLUMNS if name.lower() in lower]
    if missing or len(times) != 1:
        problem = f"missing column {', '.join(missing)}" if missing else \
            "none of the time columns" if not times else f"both {' and '.join(times)}"
        raise TraceError(path, f"{where}collective CSV header has {problem}; required: {_REQUIRED}; the header "
                               f"has: {shorten(', '.join(fields) or '(nothing)')!r}")
    canonical = {name: name for name in ("collective", "ranks", *_OPTIONAL)} | {sizes[0]: "bytes"} | \
        {times[0].lower(): times[0]}
    index = {canonical[name]: i for i, name in enumerate(lower) if name in canonical}
    spelled = {canonical[name]: fields[i] for i, name in enumerate(lower) if name in canonical}
    ignored = [fields[i] for i, name in enumerate(lower) if name and name not in canonical]
    return _Header(index, spelled, times[0], len(fields), ignored)


# -- values: each parser raises ValueError saying what it expected -------------------------------------

def _whole(text: str, least: int, what: str) -> int:
    if not _INTEGER.fullmatch(text) or int(text) < least or int(text) > MAX_DEVICES:
        raise ValueError(f"expected {what}, a whole number from {least} to {MAX_DEVICES}")
    return int(text)


def _size_bytes(text: str) -> float:
    expected = "a whole number of bytes >= 1 or a size like '64KiB'"
    try:
        size = float(int(text)) if _INTEGER.fullmatch(text) else parse_size(text)
    except ValueError:
        raise ValueError(f"expected {expected}") from None
    if size < 1 or size != math.floor(size) or size > _MAX_SIZE_BYTES:
        raise ValueError(f"expected {expected} (at most 2**53)")
    return size


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("expected a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError("must be a finite number greater than zero")
    return value


def _time_s(time_column: str, value: float, op: str, ranks: int, size_bytes: float) -> float:
    if time_column == "time_us":
        return value * 1e-6
    if time_column == "busbw_GBps":
        return _BUS_FACTOR[op](ranks) * size_bytes / (value * 1e9)
    return value


def _row(path: str, lineno: int, fields: list[str], header: _Header) -> dict:
    if len(fields) != header.width:
        raise TraceError(path, f"line {lineno}: {len(fields)} fields, the header has {header.width}; "
                               f"got {shorten(', '.join(fields))!r}")

    def value(column: str, parse: Callable[[str], object]):
        text = fields[header.index[column]] if column in header.index else ""
        try:
            return parse(text)
        except ValueError as exc:
            raise TraceError(path, f"line {lineno}: column {header.spelled.get(column, column)}: {exc}, "
                                   f"got {shorten(text)!r}") from None

    try:
        op = canonical_op(shorten(fields[header.index["collective"]]))  # known names have no spaces
    except ValueError as exc:
        raise TraceError(path, f"line {lineno}: column {header.spelled['collective']}: {exc}") from None
    ranks = value("ranks", lambda t: _whole(t, 2, "the number of ranks"))
    nodes = value("nodes", lambda t: _whole(t, 1, "the number of nodes, or empty") if t else None)
    if nodes is not None and nodes > ranks:
        raise TraceError(path, f"line {lineno}: column {header.spelled['nodes']}: {nodes} nodes for {ranks} ranks; "
                               "nodes cannot exceed ranks")
    size = value("bytes", _size_bytes)
    measured = value(header.time_column, _positive)
    return {"collective": op, "ranks": ranks, "nodes": nodes, "algorithm": value("algorithm", str),
            "dtype": value("dtype", str) or "float32", "size_bytes": size,
            "time_s": _time_s(header.time_column, measured, op, ranks, size), "line": lineno}


# -- tables -------------------------------------------------------------------------------------------

def _table_name(key: tuple) -> str:
    op, ranks, nodes, algorithm = key
    where = f" over {nodes} node{'s' if nodes > 1 else ''}" if nodes is not None else ""
    return f"{op} on {ranks} ranks{where}" + (f" with algorithm {algorithm}" if algorithm else "")


def _tables(path: str, rows: list[dict], header: _Header) -> dict[tuple, list[dict]]:
    """The rows grouped by ``(collective, ranks, nodes, algorithm)``, each group checked as a cost table."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["collective"], row["ranks"], row["nodes"], row["algorithm"]), []).append(row)
    for key, members in groups.items():
        name = _table_name(key)
        problem = table_row_problem([r["size_bytes"] for r in members], [r["time_s"] for r in members])
        if problem is not None:
            i, field, message = problem
            column = header.spelled["bytes"] if field == "size" else header.spelled[header.time_column]
            context = f" (in the {name} table, whose previous row is line {members[i - 1]['line']})" \
                if i and field == "size" else ""
            raise TraceError(path, f"line {members[i]['line']}: column {column}: {message}{context}")
        if len(members) < 2:
            raise TraceError(path, f"line {members[0]['line']}: {name} has only one size; a table needs at least two")
        if len(members) > MAX_TABLE_ROWS:
            raise TraceError(path, f"line {members[MAX_TABLE_ROWS]['line']}: {name} has {len(members)} sizes; "
                                   f"a table holds at most {MAX_TABLE_ROWS}")
    return groups


def parse_collective_csv(path: str, text: str) -> ParsedTrace:
    """The rows of a collective-timings CSV (InputError naming the file, line and column when one is bad)."""
    lines = _content_lines(text)
    first = next(lines, None)
    if first is None:
        raise TraceError(path, "no CSV header (the file is empty or only comments); expected a header with "
                               f"{_REQUIRED}")
    header = _header(path, first[0], _fields(path, *first))
    rows = [_row(path, lineno, _fields(path, lineno, line), header) for lineno, line in lines]
    if not rows:
        raise TraceError(path, f"line {first[0]}: a collective CSV header but no rows; the file is truncated or empty")
    groups = _tables(path, rows, header)
    table = pd.DataFrame({
        "collective": [r["collective"] for r in rows], "ranks": pd.array([r["ranks"] for r in rows], dtype="int64"),
        "nodes": pd.array([r["nodes"] for r in rows], dtype="Int64"),
        "algorithm": [r["algorithm"] for r in rows], "dtype": [r["dtype"] for r in rows],
        "size_bytes": pd.array([r["size_bytes"] for r in rows], dtype="float64"),
        "time_s": pd.array([r["time_s"] for r in rows], dtype="float64"),
        "line": pd.array([r["line"] for r in rows], dtype="int64")})
    rank_counts = sorted({r["ranks"] for r in rows})
    meta = {"time_column": header.time_column, "size_column": header.spelled["bytes"],
            "collectives": sorted({r["collective"] for r in rows}), "ranks": rank_counts,
            "n_ranks": rank_counts[0] if len(rank_counts) == 1 else None,
            "tables": [{"collective": op, "ranks": n, "nodes": nodes, "algorithm": algorithm, "rows": len(members),
                        "first_line": members[0]["line"]} for (op, n, nodes, algorithm), members in groups.items()],
            "ignored_columns": header.ignored}
    description = f"collective CSV, {len(groups)} table(s) ({', '.join(meta['collectives'])}) on " \
                  f"{' / '.join(map(str, rank_counts))} ranks, {len(table)} rows, sizes " \
                  f"{int(table['size_bytes'].min())} B - {int(table['size_bytes'].max())} B"
    return ParsedTrace(path, "collective-csv", "collectives", description, table, meta)


def check_ranks(parsed: ParsedTrace, ranks: int) -> None:
    """InputError naming ``parsed``'s file unless every row was measured on ``ranks`` ranks (``--ranks``)."""
    named = sorted({int(n) for n in parsed.table["ranks"]})
    if named and named != [ranks]:
        words = ", ".join(map(str, named[:-1])) + " and " + str(named[-1]) if len(named) > 1 else str(named[0])
        raise TraceError(parsed.path, f"rows name {words} ranks but --ranks says {ranks}")
