"""Parser of nccl-tests output (``all_reduce_perf`` and the other ``*_perf`` tools).

The layout (nccl-tests ``src/common.cu``): a ``# nThread .. nGpus .. minBytes ..`` line,
``#  Rank  r Group g Pid p on HOST device d [bus] NAME`` lines, a two-line column header
(``size count type redop root time algbw busbw #wrong`` for out-of-place then in-place,
times in microseconds, bandwidths in GB/s = 1e9 B/s), one row per size, and a footer
``# Out of bounds values : ..`` / ``# Avg bus bandwidth : ..`` printed when the run ends.
A file without that footer was cut short and is refused.

Published outputs come in a few legitimate variants, all accepted:

* older nccl-tests (before the ``Group`` and ``root`` columns): rank lines
  ``#   Rank  r Pid p on HOST device d [bus] NAME`` and rows without ``root``, whose ``error``
  column holds the largest relative error instead of a count of wrong values;
* a launcher label on every line: ``srun --label`` (``0: ``, `` 0: ``) or Open MPI
  ``--tag-output`` (``[1,0]<stdout>:``). The label of the line carrying the column header
  names the stream the table is in; lines of other ranks' streams are left out;
* text that is not nccl-tests output around the table: a job log before the parameter line,
  NCCL and network-library messages before the column header (``NCCL version ..``,
  ``[host:pid] INFO ..``), NCCL's ``host:pid:tid [d] NCCL INFO ..`` debug lines between rows,
  anything after the footer. Before the column header nothing is taken as a row.

Which collective was run comes from ``# Collective test starting: NAME_perf`` (newer
versions), else from the file name, else from the ratio busbw/algbw (``2(n−1)/n`` for
allreduce, ``(n−1)/n``, or 1). The ratio also checks the rank count read from the rank lines.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from .collective_fit import COLLECTIVE_OPS
from .parsed import ParsedTrace, TraceError, shorten

__all__ = ["looks_like_nccl_tests", "parse_nccl_tests"]

# a launcher's label in front of each line: srun --label ("0: ", right-aligned) or Open MPI --tag-output
_LABEL = r"(?:[ \t]*\d+: |\[\d+,\d+\]<std(?:out|err)>: ?)"
_LABELLED = re.compile(rf"^({_LABEL})?(.*)$")
_PARAMS = re.compile(rf"^{_LABEL}?#\s*nThread\s+\d+\s+nGpus\s+\d+\s+minBytes", re.M)
_COLUMNS = re.compile(rf"^{_LABEL}?#\s+size\s+count\s+type\b.*\bbusbw\b", re.M)
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+"
                   r"\[[^\]]*\]\s+(.*)$")
_NCCL_LOG = re.compile(r"^\S+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|TRACE)\b")  # NCCL_DEBUG lines between rows
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\w+?)(?:_perf\w*)?\s*$", re.M)
_FOOTER = re.compile(r"^#\s*Avg bus bandwidth\s*:", re.M)
_NAME_IN_FILE = re.compile(r"(all_reduce|all_gather|alltoall|reduce_scatter|broadcast|sendrecv|hypercube|"
                           r"gather|scatter|reduce)(?:_perf)?", re.I)
_EXPECTED = "size count type redop [root] time algbw busbw #wrong, out-of-place then in-place"


def looks_like_nccl_tests(text: str) -> bool:
    """True when ``text`` has nccl-tests' parameter line or its column header."""
    return bool(_PARAMS.search(text) or _COLUMNS.search(text))


def _tool_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of the output stream the table is in, launcher labels removed.

    Without labels that is every line. With labels (``srun --label``, ``mpirun --tag-output``)
    it is the lines carrying the label of the column header's line (rank 0 prints the table);
    lines of other ranks and unlabelled lines of the job script are left out.
    """
    split = [(i, *_LABELLED.match(line).groups()) for i, line in enumerate(text.splitlines(), 1)]
    label = next((lab for _, lab, rest in split if _COLUMNS.match(rest) or _PARAMS.match(rest)), None)
    if label is None:
        return [(i, rest) for i, lab, rest in split if lab is None]
    return [(i, rest) for i, lab, rest in split if lab is not None and lab.strip() == label.strip()]


def _number(token: str) -> float:
    return float("nan") if token in ("N/A", "-") else float(token)


def _row(path: str, lineno: int, line: str) -> dict:
    tokens = line.split()
    try:
        if len(tokens) < 11:
            raise ValueError
        size, count = int(tokens[0]), int(tokens[1])
        tail = [_number(t) for t in tokens[-8:]]
        middle = tokens[2:-8]
        if not middle or not re.fullmatch(r"[A-Za-z_0-9]+", middle[0]) or middle[0].lstrip("-").isdigit():
            raise ValueError
        if not 0 < tail[0] < 1e12 or size < 0 or count < 0 or size > 2**53:  # time in us: finite, positive
            raise ValueError
        if any(math.isinf(v) or v < 0 for v in tail[:3] + tail[4:]):  # N/A is nan; inf or negative is corrupt
            raise ValueError
    except ValueError:
        raise TraceError(path, f"line {lineno}: expected an nccl-tests row ({_EXPECTED}), got "
                               f"{shorten(line)!r}; the file is truncated or not nccl-tests output") from None
    root = next((int(t) for t in middle[1:] if t.lstrip("-").isdigit()), -1)
    return {"size_bytes": size, "count": count, "type": middle[0], "redop": middle[1] if len(middle) > 1 else "",
            "root": root, "time_s": tail[0] * 1e-6, "algbw_GBps": tail[1], "busbw_GBps": tail[2],
            "wrong": tail[3], "inplace_time_s": tail[4] * 1e-6, "inplace_algbw_GBps": tail[5],
            "inplace_busbw_GBps": tail[6]}


def _op_name(path: str, text: str, ratio: float | None, n: int | None) -> tuple[str, str]:
    started = _STARTING.search(text)
    if started and started.group(1) in COLLECTIVE_OPS:
        return started.group(1), "the 'Collective test starting' line"
    named = _NAME_IN_FILE.search(Path(path).name)
    if named:
        return named.group(1).lower(), "the file name"
    if ratio is not None and n:
        for op in ("all_reduce", "all_gather", "broadcast"):
            if abs(COLLECTIVE_OPS[op].factor(n) - ratio) <= 0.03 * ratio:
                return op, "the busbw/algbw ratio (ambiguous among ops with the same ratio)"
    raise TraceError(path, "cannot tell which nccl-tests tool wrote this file (no 'Collective test starting' line, "
                           "no tool name such as all_reduce_perf in the file name); rename the file after the tool")


def _bus_ratio(table: pd.DataFrame) -> float | None:
    big = table[(table["algbw_GBps"] >= 1.0) & (table["busbw_GBps"] > 0)]
    return float(np.median(big["busbw_GBps"] / big["algbw_GBps"])) if len(big) else None


def parse_nccl_tests(path: str, text: str) -> ParsedTrace:
    """The table of an nccl-tests output file (InputError naming the file when it is not one)."""
    if not looks_like_nccl_tests(text):
        raise TraceError(path, f"not nccl-tests output (no '# nThread .. nGpus .. minBytes' line and no "
                               f"'# size count type .. busbw' header); first line: {shorten(text.splitlines()[0] if text.strip() else '(empty)')!r}")
    lines = _tool_lines(text)
    text = "\n".join(line for _, line in lines)
    ranks, rows, header, footer = [], [], False, False
    for lineno, line in lines:
        if not line.strip():
            continue
        if line.lstrip().startswith("#"):
            if m := _RANK.match(line):
                ranks.append((int(m.group(1)), m.group(2), m.group(3).strip()))
            header = header or bool(_COLUMNS.match(line))
            footer = footer or bool(_FOOTER.match(line))
            continue
        if not header or footer or _NCCL_LOG.match(line):
            continue  # a job log before the table, library messages, anything after the footer
        rows.append(_row(path, lineno, line))
    if not rows:
        raise TraceError(path, "nccl-tests header but no result rows; the file is truncated")
    if not footer:
        raise TraceError(path, f"truncated: the table stops after {rows[-1]['size_bytes']} B without nccl-tests' "
                               "'# Avg bus bandwidth' footer (the run did not finish or the file was cut)")
    table = pd.DataFrame(rows)
    if not table["size_bytes"].is_monotonic_increasing:
        raise TraceError(path, "message sizes are not increasing; several runs concatenated? split the file")
    hosts = list(dict.fromkeys(h for _, h, _ in ranks))
    n = len(ranks) or None
    ratio = _bus_ratio(table)
    op, op_source = _op_name(path, text, ratio, n)
    if n is None and ratio is not None and op == "all_reduce" and ratio < 2:
        n = int(round(2 / (2 - ratio)))
    if n and ratio is not None and abs(COLLECTIVE_OPS[op].factor(n) - ratio) > 0.03 * ratio:
        raise TraceError(path, f"busbw/algbw = {ratio:.3f} does not match {op} on {n} ranks "
                               f"({COLLECTIVE_OPS[op].factor(n):.3f}); wrong tool name or missing rank lines")
    per_node = Counter(h for _, h, _ in ranks)
    device = Counter(d for _, _, d in ranks).most_common(1)[0][0] if ranks else None
    meta = {"op": op, "op_from": op_source, "n_ranks": n, "nodes": len(hosts) or None, "hosts": hosts,
            "ranks_per_node": max(per_node.values()) if per_node else None, "device": device,
            "bus_ratio": ratio}
    where = f"{n} ranks on {len(hosts)} node(s)" if n else "rank count unknown"
    description = f"nccl-tests {op}_perf, {where}, {device or 'device unknown'}, {len(table)} sizes " \
                  f"{int(table['size_bytes'].iloc[0])} B - {int(table['size_bytes'].iloc[-1])} B"
    return ParsedTrace(path, "nccl-tests", op, description, table, meta)
