"""Parsers of simdist's own run files: ``trace.json`` and ``steps.csv``.

Both runtimes write the same schema (:mod:`simdist.tracefile`, :mod:`simdist.results`), so a
real MPI run's files calibrate the simulator directly:

* ``trace.json`` — per rank: the forward/backward spans (with their ``batch_size``; spans
  still running when the run stopped end at the trace's last instant and are left out),
  the blocking communication spans by name and the waiting time. Compute spans at two or more
  batch sizes give that rank's ``t0 + t1 · batch`` (:class:`~simdist.fitting.LinearTimeFit`).
* ``steps.csv`` — one row per applied update; per worker the time between its updates
  (iteration time), batch sizes and staleness.

A simdist trace is told from other Chrome traces by ``otherData.time_base`` or its
``rank R (role, device)`` thread names.
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd

from ..recorder import UPDATE_COLUMNS
from ..tracefile import ASYNC_TID_OFFSET
from .parsed import ParsedTrace, TraceError, shorten

__all__ = ["looks_like_simdist_trace", "parse_simdist_trace", "looks_like_steps_csv", "parse_steps_csv"]

_RANK_LABEL = re.compile(r"^rank \d+ \(")


def looks_like_simdist_trace(data: Any) -> bool:
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        return False
    if isinstance(data.get("otherData"), dict) and "time_base" in data["otherData"]:
        return True
    return any(isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "thread_name"
               and _RANK_LABEL.match(str((e.get("args") or {}).get("name", ""))) for e in data["traceEvents"][:200])


def parse_simdist_trace(path: str, data: Any) -> ParsedTrace:
    """Per-rank compute/comm/wait figures of a simdist ``trace.json``."""
    if not looks_like_simdist_trace(data):
        raise TraceError(path, "not a simdist trace.json (no otherData.time_base and no 'rank R (...)' threads)")
    compute: dict[int, list[tuple[float, float]]] = defaultdict(list)
    comm: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    wait: dict[int, float] = defaultdict(float)
    spans = [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    try:
        end_us = max((float(e["ts"]) + float(e.get("dur", 0.0)) for e in spans), default=0.0)
    except (KeyError, TypeError, ValueError):
        raise TraceError(path, "malformed span event (ts/dur not numbers)") from None
    clipped = 0
    for e in spans:
        try:
            rank, dur_s = int(e["tid"]), float(e.get("dur", 0.0)) * 1e-6
        except (KeyError, TypeError, ValueError):
            raise TraceError(path, f"malformed span event {shorten(str(e))!r}") from None
        if rank >= ASYNC_TID_OFFSET:
            continue  # non-blocking communication overlaps other spans; not rank time
        kind = e.get("cat")
        if kind == "compute" and float(e["ts"]) + float(e.get("dur", 0.0)) >= end_us - 1e-3:
            clipped += 1  # cut off where the run stopped: not a whole forward/backward
            continue
        if kind == "compute":
            batch = (e.get("args") or {}).get("batch_size")
            compute[rank].append((float(batch) if batch is not None else float("nan"), dur_s))
        elif kind == "comm":
            comm[rank][str(e.get("name", "comm"))].append(dur_s)
        elif kind == "wait":
            wait[rank] += dur_s
    ranks = sorted(set(compute) | set(comm) | set(wait))
    if not ranks:
        raise TraceError(path, "simdist trace without compute, comm or wait spans")
    rows = [_rank_row(r, compute.get(r, []), comm.get(r, {}), wait.get(r, 0.0)) for r in ranks]
    other = data.get("otherData") or {}
    meta = {"algorithm": other.get("algorithm"), "time_base": other.get("time_base"), "ranks": len(ranks),
            "compute_spans": {r: compute.get(r, []) for r in ranks}, "compute_spans_cut_at_end": clipped}
    description = f"simdist trace.json ({other.get('algorithm', '?')}), {len(ranks)} ranks"
    return ParsedTrace(path, "simdist-trace", "ranks", description, pd.DataFrame(rows), meta)


def _rank_row(rank: int, compute: list[tuple[float, float]], comm: dict[str, list[float]], wait_s: float) -> dict:
    durations = [d for _, d in compute]
    return {"rank": rank, "compute_calls": len(compute),
            "compute_median_s": float(np.median(durations)) if durations else float("nan"),
            "compute_s": float(sum(durations)), "comm_calls": sum(len(v) for v in comm.values()),
            "comm_s": float(sum(sum(v) for v in comm.values())),
            "comm_by_name": ", ".join(f"{k}: {len(v)} x {np.median(v) * 1e3:.3g} ms" for k, v in sorted(comm.items())),
            "wait_s": wait_s}


def looks_like_steps_csv(text: str) -> bool:
    first = text.split("\n", 1)[0].strip()
    return first.split(",")[: len(UPDATE_COLUMNS)] == list(UPDATE_COLUMNS)


def parse_steps_csv(path: str, text: str) -> ParsedTrace:
    """Per-worker iteration times of a simdist ``steps.csv``."""
    if not looks_like_steps_csv(text):
        raise TraceError(path, f"not a simdist steps.csv (header must start with {','.join(UPDATE_COLUMNS)}); "
                               f"got {shorten(text.splitlines()[0] if text.strip() else '(empty)')!r}")
    reader = list(csv.reader(io.StringIO(text)))
    header, rows = reader[0], [r for r in reader[1:] if r]
    if not rows:
        raise TraceError(path, "steps.csv header but no rows; the file is truncated")
    if not text.endswith("\n"):
        raise TraceError(path, f"truncated: the last row {shorten(','.join(rows[-1]))!r} has no line end")
    for i, row in enumerate(rows, 2):
        if len(row) != len(header):
            raise TraceError(path, f"line {i}: {len(row)} fields, the header has {len(header)}; the file is truncated")
    try:
        table = pd.DataFrame(rows, columns=header)
        for column in ("time_s", "batch_size", "staleness"):
            table[column] = pd.to_numeric(table[column])
        table["worker"] = pd.to_numeric(table["worker"]).astype(int)
    except ValueError as exc:
        raise TraceError(path, f"non-numeric value in steps.csv ({shorten(str(exc))})") from None
    per_worker = []
    for worker, rows_w in table.sort_values("time_s").groupby("worker"):
        gaps = np.diff(rows_w["time_s"].to_numpy())
        per_worker.append({"worker": int(worker), "updates": len(rows_w),
                           "median_iteration_s": float(np.median(gaps)) if len(gaps) else float("nan"),
                           "mean_batch_size": float(rows_w["batch_size"].mean()),
                           "mean_staleness": float(rows_w["staleness"].mean()),
                           "samples_per_s": float(rows_w["batch_size"].sum() / rows_w["time_s"].max())
                           if rows_w["time_s"].max() > 0 else float("nan")})
    meta = {"updates": len(table), "workers": len(per_worker), "end_time_s": float(table["time_s"].max())}
    description = f"simdist steps.csv, {len(table)} updates from {len(per_worker)} workers"
    return ParsedTrace(path, "simdist-steps", "workers", description, pd.DataFrame(per_worker), meta)
