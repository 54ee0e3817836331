"""Parser of PyTorch profiler Chrome traces (``prof.export_chrome_trace``, Kineto layout).

What a trace gives per training step (``ProfilerStep#N`` annotations):

* ``compute_s`` — time the device computed: on GPU the union of the step's non-collective
  kernels (``cat: kernel``; a kernel belongs to the step whose CPU window holds its launch,
  matched by ``correlation``); on CPU the union of ``cpu_op`` spans outside collectives;
* ``comm_s`` — time collectives were in flight: NCCL kernels (``ncclKernel_*`` /
  ``ncclDevKernel_*``), the process-group spans ``gloo:*`` / ``nccl:*`` and ``c10d::*`` ops,
  as a union of intervals (overlapping calls count once);
* ``comm_calls`` and, when ``record_param_comms`` carries them, ``comm_bytes``.

Unions, not sums: DDP overlaps gradient buckets with backward, and streams run kernels
concurrently. A trace without ``ProfilerStep`` annotations is one step (step = -1). Gzipped
traces (``.json.gz``) are read transparently by :mod:`simdist.calibrate.traces`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Iterable

import pandas as pd

from .parsed import ParsedTrace, TraceError

__all__ = ["looks_like_torch_trace", "parse_torch_trace", "COMM_PATTERN"]

COMM_PATTERN = re.compile(r"^(gloo|nccl|mpi|ucc):|^ncclKernel|^ncclDevKernel|^c10d::|^record_param_comms$", re.I)
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_TORCH_CATS = {"cpu_op", "kernel", "user_annotation", "gpu_user_annotation", "cuda_runtime", "python_function",
               "gpu_memcpy", "gpu_memset", "cuda_driver"}
_DTYPE_BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Long": 8, "Byte": 1, "Char": 1}

Interval = tuple[float, float]


def looks_like_torch_trace(data: Any) -> bool:
    """True for a Chrome trace written by the PyTorch profiler."""
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        return False
    if "schemaVersion" in data or "deviceProperties" in data or "distributedInfo" in data:
        return True
    return any(isinstance(e, dict) and e.get("cat") in _TORCH_CATS for e in data["traceEvents"][:2000])


# -- intervals ---------------------------------------------------------------------------

def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, merged intervals."""
    merged: list[list[float]] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """Parts of the merged intervals ``a`` not covered by the merged intervals ``b``."""
    out = []
    for lo, hi in a:
        cur = lo
        for blo, bhi in b:
            if bhi <= cur or blo >= hi:
                continue
            if blo > cur:
                out.append((cur, blo))
            cur = max(cur, bhi)
        if cur < hi:
            out.append((cur, hi))
    return out


def covered(intervals: list[Interval], lo: float, hi: float) -> float:
    """Length of merged ``intervals`` inside ``[lo, hi]``."""
    return sum(max(0.0, min(h, hi) - max(l, lo)) for l, h in intervals)


# -- the trace ---------------------------------------------------------------------------

def _spans(events: list) -> list[dict]:
    spans = []
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e:
            try:
                ts, dur = float(e["ts"]), float(e.get("dur", 0.0))
            except (TypeError, ValueError):
                continue
            spans.append({**e, "ts": ts, "end": ts + dur})
    return spans


def _steps(spans: list[dict]) -> list[tuple[int, float, float]]:
    cpu = [(int(m.group(1)), s["ts"], s["end"]) for s in spans
           if s.get("cat") != "gpu_user_annotation" and (m := _STEP.match(str(s.get("name", ""))))]
    return sorted(cpu, key=lambda x: x[1])


def _step_of(ts: float, steps: list[tuple[int, float, float]]) -> int | None:
    for number, lo, hi in steps:
        if lo <= ts <= hi:
            return number
    return None


def _comm_bytes(span: dict) -> float | None:
    args = span.get("args") or {}
    nelems = args.get("In msg nelems") or args.get("Out msg nelems")
    size = _DTYPE_BYTES.get(str(args.get("dtype", "")), None)
    return float(nelems) * size if nelems and size else None


def _gpu_step_kernels(spans: list[dict], steps) -> dict[int | None, list[dict]]:
    launch = {s["args"]["correlation"]: s["ts"] for s in spans
              if s.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (s.get("args") or {})}
    by_step: dict[int | None, list[dict]] = defaultdict(list)
    for s in spans:
        if s.get("cat") == "kernel":
            when = launch.get((s.get("args") or {}).get("correlation"), s["ts"])
            by_step[_step_of(when, steps) if steps else -1].append(s)
    return by_step


def _rows_gpu(spans: list[dict], steps) -> list[dict]:
    kernels = _gpu_step_kernels(spans, steps)
    windows = steps or [(-1, min(s["ts"] for s in spans), max(s["end"] for s in spans))]
    rows = []
    for number, lo, hi in windows:
        mine = kernels.get(number, [])
        comm = [k for k in mine if COMM_PATTERN.search(str(k.get("name", "")))]
        compute = [k for k in mine if not COMM_PATTERN.search(str(k.get("name", "")))]
        rows.append(_row(number, lo, hi, union((k["ts"], k["end"]) for k in compute),
                         union((k["ts"], k["end"]) for k in comm), comm, None))
    return rows


def _rows_cpu(spans: list[dict], steps) -> list[dict]:
    windows = steps or [(-1, min(s["ts"] for s in spans), max(s["end"] for s in spans))]
    comm_spans = [s for s in spans if COMM_PATTERN.search(str(s.get("name", "")))
                  and s.get("cat") in ("cpu_op", "user_annotation")]
    comm_by_thread: dict[Any, list[Interval]] = defaultdict(list)
    for s in comm_spans:
        comm_by_thread[(s.get("pid"), s.get("tid"))].append((s["ts"], s["end"]))
    busy: list[Interval] = []
    ops_by_thread: dict[Any, list[Interval]] = defaultdict(list)
    for s in spans:
        if s.get("cat") == "cpu_op" and not COMM_PATTERN.search(str(s.get("name", ""))):
            ops_by_thread[(s.get("pid"), s.get("tid"))].append((s["ts"], s["end"]))
    for thread, ops in ops_by_thread.items():
        busy += subtract(union(ops), union(comm_by_thread.get(thread, [])))
    compute, comm = union(busy), union((s["ts"], s["end"]) for s in comm_spans)
    rows = []
    for number, lo, hi in windows:
        calls = [s for s in comm_spans if lo <= s["ts"] <= hi and not str(s.get("name", "")).startswith("c10d::")]
        rows.append(_row(number, lo, hi, compute, comm, calls, (lo, hi)))
    return rows


def _row(number, lo, hi, compute, comm, calls, clip) -> dict:
    cl, ch = clip if clip else (float("-inf"), float("inf"))
    sizes = [b for b in (_comm_bytes(c) for c in calls) if b is not None]
    return {"step": number, "start_s": lo * 1e-6, "duration_s": (hi - lo) * 1e-6,
            "compute_s": covered(compute, cl, ch) * 1e-6, "comm_s": covered(comm, cl, ch) * 1e-6,
            "comm_calls": len(calls), "comm_bytes": sum(sizes) if sizes else float("nan")}


def parse_torch_trace(path: str, data: Any) -> ParsedTrace:
    """Per-step compute and collective times of a PyTorch profiler trace (InputError if it is not one)."""
    if not looks_like_torch_trace(data):
        raise TraceError(path, "not a PyTorch profiler trace (a JSON object with 'traceEvents' and PyTorch's "
                               "'schemaVersion'/'deviceProperties' keys or cpu_op/kernel events)")
    spans = _spans(data["traceEvents"])
    if not spans:
        raise TraceError(path, "PyTorch profiler trace without any complete ('X') events; was profiling active?")
    steps = _steps(spans)
    on_gpu = any(s.get("cat") == "kernel" for s in spans)
    rows = _rows_gpu(spans, steps) if on_gpu else _rows_cpu(spans, steps)
    table = pd.DataFrame(rows)
    table["start_s"] -= min(s["ts"] for s in spans) * 1e-6  # from the first event of the trace
    info = data.get("distributedInfo") or {}
    devices = [d.get("name") for d in data.get("deviceProperties") or [] if isinstance(d, dict)]
    meta = {"device": devices[0] if devices else ("GPU (name not recorded)" if on_gpu else "CPU"),
            "on_gpu": on_gpu, "backend": info.get("backend"), "rank": info.get("rank"),
            "world_size": info.get("world_size"), "steps": len(table)}
    where = f"rank {info.get('rank')} of {info.get('world_size')} ({info.get('backend')})" if info else "no distributed info"
    description = f"PyTorch profiler trace, {meta['device']}, {where}, {len(table)} profiled step(s)"
    return ParsedTrace(path, "torch-profiler", "steps", description, table, meta)
