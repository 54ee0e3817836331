"""A run as a Chrome / Perfetto timeline (the Trace Event Format, JSON object form).

Open ``trace.json`` in https://ui.perfetto.dev or ``chrome://tracing``. Layout:

* one process per node (``pid`` = node index, named ``node N``);
* one thread per rank (``tid`` = rank, named ``rank R (role, device)``), holding the
  rank's blocking spans as complete (``"X"``) events — ``cat`` is the span kind
  (``compute``, ``comm`` or ``wait``), ``name`` the span name, ``args`` the span's args;
* non-blocking communication on a separate thread per rank (``tid`` = 100000 + rank,
  named ``rank R async comm``), so it never overlaps the rank's blocking spans;
* each applied update as a thread-scoped instant event (``"i"``) named ``update`` on the
  producing worker's thread;
* each evaluation as a counter event (``"C"``) named ``test_accuracy`` in the evaluated
  worker's node, one series per worker;
* in a process named ``links``, counter tracks of link utilisation and flows over time: per
  link kind, and for the busiest links one each (:mod:`simdist.link_outputs`).

Times are microseconds (``ts``/``dur``), rounded to nanoseconds. Events are sorted by
``(ts, pid, tid, name)`` after the metadata events, so identical runs give identical files.
:func:`spans_from_trace` reads the spans back (plots use it to draw the timeline).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from .link_outputs import link_trace_events
from .metrics import SPANS_COLUMNS, jsonable

if TYPE_CHECKING:  # pragma: no cover - typing only
    from .run_result import RunResult

__all__ = ["ASYNC_TID_OFFSET", "chrome_trace", "write_chrome_trace", "spans_from_trace", "read_trace_spans",
           "span_events"]

ASYNC_TID_OFFSET = 100_000  # tid of a rank's non-blocking communication thread = offset + rank
_US = 1e6


def chrome_trace(result: RunResult) -> dict[str, Any]:
    """The Trace Event Format object for ``result`` (see module doc for the layout)."""
    node_of = {r.rank: r.node for r in result.ranks}
    async_ranks = sorted({s.rank for s in result.recorder.spans if not s.blocking})
    events = _span_events(result, node_of) + _update_events(result, node_of) + _eval_events(result, node_of)
    link_metadata, link_counters = link_trace_events(result)
    events += link_counters
    events.sort(key=lambda e: (e["ts"], e["pid"], e["tid"], e["name"]))
    return {
        "traceEvents": _metadata_events(result, async_ranks, node_of) + link_metadata + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "algorithm": result.algorithm,
            "seed": result.seed,
            "status": result.status,
            "virtual_time_s": jsonable(result.virtual_time_s),
            "timing_only": result.timing_only,
            "time_base": "virtual seconds x 1e6 (simulated runs) or wall seconds x 1e6 (real runs)",
        },
    }


def write_chrome_trace(result: RunResult, path: str | Path) -> Path:
    """Write :func:`chrome_trace` of ``result`` as compact JSON to ``path``."""
    path = Path(path)
    path.write_text(json.dumps(chrome_trace(result), separators=(",", ":"), allow_nan=False) + "\n")
    return path


def _metadata_events(result: RunResult, async_ranks: list[int], node_of: dict[int, int]) -> list[dict[str, Any]]:
    meta: list[dict[str, Any]] = []
    for node in sorted(set(node_of.values())):
        meta.append(_meta("process_name", node, 0, {"name": f"node {node}"}))
        meta.append(_meta("process_sort_index", node, 0, {"sort_index": node}))
    for info in sorted(result.ranks, key=lambda r: r.rank):
        label = f"rank {info.rank} ({info.role}, {info.device})"
        meta.append(_meta("thread_name", info.node, info.rank, {"name": label}))
        meta.append(_meta("thread_sort_index", info.node, info.rank, {"sort_index": 2 * info.rank}))
    for rank in async_ranks:
        pid, tid = node_of.get(rank, 0), ASYNC_TID_OFFSET + rank
        meta.append(_meta("thread_name", pid, tid, {"name": f"rank {rank} async comm"}))
        meta.append(_meta("thread_sort_index", pid, tid, {"sort_index": 2 * rank + 1}))
    return meta


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _us(seconds: float) -> float:
    return round(float(seconds) * _US, 3)


def _span_events(result: RunResult, node_of: dict[int, int]) -> list[dict[str, Any]]:
    events = []
    for s in result.recorder.spans:
        ts, end = _us(s.start_s), _us(s.end_s)
        events.append(
            {
                "name": s.name,
                "cat": s.kind,
                "ph": "X",
                "ts": ts,
                "dur": max(0.0, round(end - ts, 3)),
                "pid": node_of.get(s.rank, 0),
                "tid": s.rank if s.blocking else ASYNC_TID_OFFSET + s.rank,
                "args": {str(k): jsonable(v) for k, v in s.args.items()} if s.args else {},
            }
        )
    return events


def _update_events(result: RunResult, node_of: dict[int, int]) -> list[dict[str, Any]]:
    events = []
    for row in result.recorder.updates:
        worker = int(row["worker"])
        args = {str(k): jsonable(v) for k, v in row.items() if k not in ("time_s", "worker")}
        events.append(
            {"name": "update", "cat": "update", "ph": "i", "s": "t", "ts": _us(row["time_s"]),
             "pid": node_of.get(worker, 0), "tid": worker, "args": args}
        )
    return events


def _eval_events(result: RunResult, node_of: dict[int, int]) -> list[dict[str, Any]]:
    events = []
    for row in result.recorder.evals:
        accuracy = jsonable(row.get("test_accuracy"))
        if accuracy is None:
            continue
        worker = int(row["worker"])
        events.append(
            {"name": "test_accuracy", "cat": "eval", "ph": "C", "ts": _us(row["time_s"]),
             "pid": node_of.get(worker, 0), "tid": worker, "args": {f"worker {worker}": accuracy}}
        )
    return events


# --------------------------------------------------------------------------- reading back


def spans_from_trace(trace: dict[str, Any]) -> tuple[pd.DataFrame, dict[int, str]]:
    """The spans of a trace object as a table, and each rank's thread label.

    Returns ``(spans, labels)``: ``spans`` has the columns of
    :data:`simdist.metrics.SPANS_COLUMNS` (times in seconds, ``blocking`` False for the
    async-comm threads); ``labels`` maps rank → thread name (``"rank 3 (worker, cpu)"``).
    """
    rank, kind, name, start, end, blocking = [], [], [], [], [], []
    labels: dict[int, str] = {}
    for e in trace.get("traceEvents", []):
        ph = e.get("ph")
        if ph == "X":
            tid = int(e["tid"])
            is_async = tid >= ASYNC_TID_OFFSET
            rank.append(tid - ASYNC_TID_OFFSET if is_async else tid)
            kind.append(e.get("cat", ""))
            name.append(e.get("name", ""))
            start.append(float(e["ts"]) / _US)
            end.append((float(e["ts"]) + float(e.get("dur", 0.0))) / _US)
            blocking.append(not is_async)
        elif ph == "M" and e.get("name") == "thread_name" and int(e["tid"]) < ASYNC_TID_OFFSET:
            labels[int(e["tid"])] = str(e.get("args", {}).get("name", f"rank {e['tid']}"))
    spans = pd.DataFrame(
        {
            "rank": pd.Series(rank, dtype="int64"),
            "kind": pd.Series(kind, dtype=object),
            "name": pd.Series(name, dtype=object),
            "start_s": pd.Series(start, dtype=float),
            "end_s": pd.Series(end, dtype=float),
            "blocking": pd.Series(blocking, dtype=bool),
        },
        columns=list(SPANS_COLUMNS),
    )
    return spans, labels


def read_trace_spans(path: str | Path) -> tuple[pd.DataFrame, dict[int, str]]:
    """:func:`spans_from_trace` of the ``trace.json`` file at ``path``."""
    with open(path, encoding="utf-8") as fh:
        return spans_from_trace(json.load(fh))


def span_events(result_dir: str | Path) -> list[dict[str, Any]]:
    """The complete (``"X"``) events of ``result_dir/trace.json`` as written, ``args`` included:
    for readers that need the per-span fields a real run records (``cpu_s``, ``host_cpu_s``,
    ``bytes`` ...), which :func:`spans_from_trace` leaves out."""
    with open(Path(result_dir) / "trace.json", encoding="utf-8") as fh:
        data = json.load(fh)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X"]
