"""Per-step times of one run, read from any of its measured files: (rank, step) → seconds.

What :mod:`simdist.calibrate.noise_fit` fits the compute-noise model to. Formats (``auto``
tells them apart):

* simdist ``trace.json`` (simulated or a real MPI run: the same schema) — every rank's
  forward/backward spans in order; ``pid`` is the rank's node, ``args.batch_size`` its batch;
  a span still running when the run stopped is left out;
* simdist ``steps.csv`` — per worker, the time between its consecutive updates (the first
  from the run's start); this includes communication and waiting;
* PyTorch profiler traces, one file per rank — device compute time per ``ProfilerStep``
  (:mod:`.torch_trace`), the rank and world size from ``distributedInfo``;
* a CSV with header ``rank,step,time_s`` and optionally ``node`` (any labels), any order;
* a compute profile written by ``simdist calibrate compute`` (its model's ``timed_steps``: every
  timed training step in the order it ran, one rank, batch sizes varying round-robin): the
  host's own step-to-step noise, measured by the microbenchmark without running any job.

The result is complete or refused: a non-positive or non-finite time, a rank missing between
the lowest and highest (or below a profiler trace's world size), a rank without a step another
rank has, fewer than :data:`MIN_STEPS` steps, an unknown CSV column, or a rank on two nodes is
an :class:`~simdist.errors.InputError` naming the file and the field.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..errors import InputError
from .parsed import shorten

__all__ = ["NOISE_FORMATS", "MIN_STEPS", "StepTimes", "read_step_times"]

NOISE_FORMATS = ("simdist-trace", "simdist-steps", "torch-profiler", "csv", "compute-profile")
MIN_STEPS = 8
OTHER_WORK_BELOW = 0.2  # a step below this fraction of its rank's median did other work, not the same work faster
_CSV_COLUMNS = ("rank", "step", "time_s")


@dataclass
class StepTimes:
    """Seconds of every step of every rank: ``times_s[i, k]`` is rank ``ranks[i]``'s step ``steps[k]``."""

    paths: list[str]
    format: str
    times_s: np.ndarray
    ranks: np.ndarray
    steps: np.ndarray
    nodes: np.ndarray  # node index of each rank (its own index when the input does not say)
    nodes_known: bool
    batches: np.ndarray | None = None  # batch size of each step, where the input records it
    notes: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return ", ".join(self.paths)


# -- reading ------------------------------------------------------------------------------

def _number(value: Any, path: str, where: str, *, positive: bool = True) -> float:
    """``value`` as a finite float (> 0 when ``positive``), or an InputError naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(f"must be a number, got {shorten(repr(value))}", source=path, field=where)
    try:
        x = float(value)
    except ValueError:
        raise InputError(f"must be a number, got {shorten(repr(value))}", source=path, field=where) from None
    if not math.isfinite(x):
        raise InputError(f"must be a finite number, got {value!r}", source=path, field=where)
    if positive and x <= 0:
        raise InputError(f"must be greater than zero (a step takes time), got {value!r}", source=path, field=where)
    return x


def _integer(value: str, path: str, where: str) -> int:
    try:
        x = int(value)
    except (TypeError, ValueError):
        raise InputError(f"must be a non-negative integer, got {shorten(repr(value))}", source=path,
                         field=where) from None
    if x < 0:
        raise InputError(f"must be a non-negative integer, got {value!r}", source=path, field=where)
    return x


def _rows_simdist_trace(path: str, data: dict) -> tuple[list[tuple], str]:
    from ..tracefile import ASYNC_TID_OFFSET

    events = data["traceEvents"]
    spans = [(i, e) for i, e in enumerate(events) if isinstance(e, dict) and e.get("ph") == "X"]
    compute = [(i, e) for i, e in spans if e.get("cat") == "compute"]
    if any(e.get("name") == "forward/backward" for _, e in compute):
        compute = [(i, e) for i, e in compute if e.get("name") == "forward/backward"]
    end_us = max((_number(e.get("ts"), path, f"traceEvents[{i}].ts", positive=False)
                  + _number(e.get("dur", 0.0), path, f"traceEvents[{i}].dur", positive=False) for i, e in spans),
                 default=0.0)
    rows = []
    for i, e in compute:
        rank = _integer(e.get("tid"), path, f"traceEvents[{i}].tid")
        if rank >= ASYNC_TID_OFFSET:
            continue
        ts = _number(e.get("ts"), path, f"traceEvents[{i}].ts", positive=False)
        dur = _number(e.get("dur"), path, f"traceEvents[{i}].dur")
        if ts + dur >= end_us - 1e-3:
            continue  # still running when the run stopped: not a whole forward/backward
        batch = (e.get("args") or {}).get("batch_size")
        rows.append((rank, ts, dur * 1e-6, _integer(e.get("pid"), path, f"traceEvents[{i}].pid"),
                     float(batch) if isinstance(batch, (int, float)) and not isinstance(batch, bool) else np.nan))
    rows.sort(key=lambda r: (r[0], r[1]))
    counts: dict[int, int] = {}
    out = []
    for rank, _ts, seconds, node, batch in rows:
        step = counts[rank] = counts.get(rank, -1) + 1
        out.append((rank, step, seconds, node, batch))
    algorithm = (data.get("otherData") or {}).get("algorithm", "?")
    return out, f"simdist trace.json ({algorithm}): forward/backward spans"


def _rows_steps_csv(path: str, text: str) -> tuple[list[tuple], str]:
    reader = list(csv.reader(io.StringIO(text)))
    header = reader[0]
    where_time, where_worker = header.index("time_s"), header.index("worker")
    last: dict[int, float] = {}
    counts: dict[int, int] = {}
    out = []
    for line, row in enumerate(reader[1:], 2):
        if not row:
            continue
        if len(row) != len(header):
            raise InputError(f"line {line}: {len(row)} fields, the header has {len(header)}", source=path,
                             field="time_s")
        worker = _integer(row[where_worker], path, f"line {line}: worker")
        t = _number(row[where_time], path, f"line {line}: time_s", positive=False)
        previous = last.get(worker, 0.0)
        seconds = _number(t - previous, path, f"line {line}: time_s (worker {worker}'s time since its previous update)")
        last[worker] = t
        counts[worker] = counts.get(worker, -1) + 1
        out.append((worker, counts[worker], seconds, np.nan, np.nan))
    return out, "simdist steps.csv: time between a worker's updates (compute, communication and waiting)"


def _rows_torch(path: str, data: dict) -> tuple[list[tuple], str, dict]:
    from .torch_trace import parse_torch_trace

    parsed = parse_torch_trace(path, data)
    out = []
    for step, seconds in zip(parsed.table["step"], parsed.table["compute_s"]):
        out.append((0, int(step), _number(seconds, path, f"ProfilerStep#{step}.compute_s"), np.nan, np.nan))
    return out, f"PyTorch profiler trace ({parsed.meta['device']}): device compute time per step", parsed.meta


def _rows_csv(path: str, text: str) -> tuple[list[tuple], str]:
    reader = list(csv.reader(io.StringIO(text)))
    header = [h.strip() for h in reader[0]]
    unknown = [h for h in header if h not in (*_CSV_COLUMNS, "node")]
    missing = [c for c in _CSV_COLUMNS if c not in header]
    if unknown or missing or len(set(header)) != len(header):
        what = f"unknown column {unknown[0]!r}" if unknown else \
            f"missing column {missing[0]!r}" if missing else "a column named twice"
        raise InputError(f"{what}; the header must name rank, step, time_s and optionally node", source=path,
                         field="header")
    col = {name: header.index(name) for name in header}
    nodes: dict[str, int] = {}
    out = []
    for line, row in enumerate(reader[1:], 2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise InputError(f"{len(row)} fields, the header has {len(header)}", source=path, field=f"line {line}")
        node = np.nan
        if "node" in col:
            name = row[col["node"]].strip()
            if not name:
                raise InputError("is empty", source=path, field=f"line {line}: node")
            node = nodes.setdefault(name, len(nodes))
        out.append((_integer(row[col["rank"]], path, f"line {line}: rank"),
                    _integer(row[col["step"]], path, f"line {line}: step"),
                    _number(row[col["time_s"]], path, f"line {line}: time_s"), node, np.nan))
    return out, "CSV of seconds per rank and step"


def _rows_compute_profile(path: str, text: str) -> tuple[list[tuple], str]:
    import yaml

    from ..yamlio import safe_load_limited

    try:
        document = safe_load_limited(text)  # a user's file: the project's safe-YAML rules
    except yaml.YAMLError as exc:
        raise InputError(f"not a YAML compute profile ({shorten(str(exc))})", source=path) from None
    models = document.get("models") if isinstance(document, dict) else None
    timed = {name: m["timed_steps"] for name, m in (models or {}).items() if isinstance(m, dict) and "timed_steps" in m}
    if len(timed) != 1:
        found = f"{len(timed)} models with timed_steps" + (f" ({', '.join(sorted(timed))})" if timed else "")
        raise InputError(f"holds {found}; fit one model's steps: a profile of calibrate compute --scenario holds "
                         "one (a profile from before timed steps were recorded holds none: measure it again)",
                         source=path, field="models")
    (name, steps), = timed.items()
    where = f"models.{name}.timed_steps"
    if not isinstance(steps, dict) or not isinstance(steps.get("batch"), list) or \
            not isinstance(steps.get("seconds"), list) or len(steps["batch"]) != len(steps["seconds"]):
        raise InputError("must hold the lists batch and seconds, of the same length", source=path, field=where)
    out = [(0, k, _number(t, path, f"{where}.seconds[{k}]"), np.nan,
            float(_integer(b, path, f"{where}.batch[{k}]")))
           for k, (b, t) in enumerate(zip(steps["batch"], steps["seconds"]))]
    return out, (f"compute profile ({document.get('device', '?')}, model {name}): the microbenchmark's timed "
                 "steps in the order they ran")


def _looks_like_compute_profile(text: str) -> bool:
    return "\nmodels:" in f"\n{text}" and "timed_steps:" in text


def _detect(path: str, kind: str, content: Any) -> str:
    from .simdist_trace import looks_like_simdist_trace, looks_like_steps_csv
    from .torch_trace import looks_like_torch_trace

    if kind == "json":
        if looks_like_simdist_trace(content):
            return "simdist-trace"
        if looks_like_torch_trace(content):
            return "torch-profiler"
    elif looks_like_steps_csv(content):
        return "simdist-steps"
    elif _looks_like_compute_profile(content):
        return "compute-profile"
    else:
        first = next((line for line in content.splitlines() if line.strip()), "")
        if {c.strip() for c in first.split(",")} >= {"rank", "step"}:
            return "csv"  # its header is checked column by column
    raise InputError("not a file of per-step times; expected a simdist trace.json or steps.csv, a PyTorch "
                     "profiler trace, a CSV with header rank,step,time_s[,node], or a compute profile with "
                     "timed_steps", source=path)


def _read_file(path: str, fmt: str) -> tuple[pd.DataFrame, str, str, int | None, int | None]:
    """The file's rows, its format, a description, and the rank and rank count it declares (None: not)."""
    from .traces import read_input

    kind, content = read_input(path)
    name = _detect(path, kind, content) if fmt == "auto" else fmt
    if (kind == "json") != (name in ("simdist-trace", "torch-profiler")):
        raise InputError(f"not {name} input (found {'JSON' if kind == 'json' else 'text'})", source=path)
    meta: dict = {}
    if name == "simdist-trace":
        rows, description = _rows_simdist_trace(path, content)
    elif name == "torch-profiler":
        rows, description, meta = _rows_torch(path, content)
    elif name == "simdist-steps":
        rows, description = _rows_steps_csv(path, content)
    elif name == "compute-profile":
        rows, description = _rows_compute_profile(path, content)
    else:
        rows, description = _rows_csv(path, content)
    table = pd.DataFrame(rows, columns=["rank", "step", "time_s", "node", "batch"])
    rank, world = (v if isinstance(v, int) and not isinstance(v, bool) else None
                   for v in (meta.get("rank"), meta.get("world_size")))
    if rank is not None:
        table["rank"] = rank
    return table, name, description, rank, world


def read_step_times(paths: Sequence[str], fmt: str = "auto", *, ranks_per_node: int | None = None,
                    skip: int = 0, steps: int | None = None) -> StepTimes:
    """Every rank's step times from ``paths`` (one run), complete and checked.

    Refused, naming the file and field: a non-positive or non-finite time, a rank missing
    between the lowest and highest, a rank without a step another rank has (``steps`` fits the
    first ``steps`` steps of every rank, after leaving out ``skip`` warm-up steps).
    """
    tables, formats, notes, declared = [], set(), [], set()
    for index, path in enumerate(paths):
        table, name, description, rank, world = _read_file(str(path), fmt)
        if world is not None:
            declared.add(world)
        if name == "torch-profiler" and rank is None:
            table["rank"] = index  # no distributedInfo.rank: the file's place in the list
        tables.append(table.assign(file=str(path)))
        formats.add(name)
        notes.append(f"{path}: {description}, {table['rank'].nunique()} rank(s), {len(table)} steps")
    where = ", ".join(str(p) for p in paths)
    if len(formats) > 1:
        raise InputError(f"the files are in different formats ({', '.join(sorted(formats))}); fit one run's files "
                         "of one format", source=where)
    table = pd.concat(tables, ignore_index=True)
    duplicate = table.duplicated(["rank", "step"])
    if duplicate.any():
        row = table[duplicate].iloc[0]
        raise InputError(f"rank {row['rank']} step {row['step']} appears twice", source=row["file"], field="step")
    if len(declared) == 1:
        world = declared.pop()
        absent = sorted(set(range(world)) - set(int(r) for r in table["rank"].unique()))
        if absent:
            raise InputError(f"rank {absent[0]} is missing: the run had {world} ranks (distributedInfo.world_size); "
                             "give one trace per rank", source=where, field="rank")
    return _complete(table, where, formats.pop(), notes, ranks_per_node, skip, steps)


def _complete(table: pd.DataFrame, where: str, fmt: str, notes: list[str], ranks_per_node: int | None,
              skip: int, steps: int | None) -> StepTimes:
    if table.empty:
        raise InputError("holds no step times", source=where)
    ranks = np.sort(table["rank"].unique())
    absent = sorted(set(range(int(ranks[0]), int(ranks[-1]) + 1)) - set(int(r) for r in ranks))
    if absent:
        raise InputError(f"rank {absent[0]} is missing (ranks {ranks[0]}..{ranks[-1]} appear); every rank of the run "
                         "must be in the input", source=where, field="rank")
    first = table.groupby("rank")["step"].transform("min")
    table = table[table["step"] >= first + skip]
    if table.empty:
        raise InputError(f"no steps left after --skip {skip}", source="--skip")
    lowest = int(table["step"].min())
    if steps is not None:
        table = table[table["step"] < lowest + steps]
    wanted = np.arange(lowest, int(table["step"].max()) + 1)
    times = table.pivot(index="rank", columns="step", values="time_s").reindex(index=ranks, columns=wanted)
    gaps = np.argwhere(times.isna().to_numpy())
    if len(gaps):
        rank, step = int(ranks[gaps[0][0]]), int(wanted[gaps[0][1]])
        raise InputError(f"rank {rank} has no step {step} (steps {wanted[0]}..{wanted[-1]} appear); every rank needs "
                         "every step: --steps N fits the first N steps of each rank", source=where, field="step")
    if len(wanted) < MIN_STEPS:
        raise InputError(f"{len(wanted)} steps per rank; fitting noise needs at least {MIN_STEPS}", source=where,
                         field="step")
    nodes, known = _nodes(table, ranks, where, ranks_per_node)
    batches = table.pivot(index="rank", columns="step", values="batch").reindex(index=ranks, columns=wanted).to_numpy()
    _refuse_other_work(times, batches, where)
    return StepTimes(where.split(", "), fmt, times.to_numpy(dtype=float), ranks, wanted, nodes, known,
                     None if np.isnan(batches).all() else np.nan_to_num(batches, nan=-1.0), notes)


def _refuse_other_work(times: pd.DataFrame, batches: np.ndarray, where: str) -> None:
    """Refuse a step far faster than its rank's median at its batch size (:data:`OTHER_WORK_BELOW`):
    noise slows the same work down or speeds it up by tens of percent, so such a step did other
    work (an epoch's last, partial batch; a span cut off where the run stopped) and would be
    fitted as enormous noise."""
    values, groups = times.to_numpy(dtype=float), np.nan_to_num(batches, nan=-1.0)  # -1: batch not known
    for i, rank in enumerate(times.index):
        row = values[i]
        for size in np.unique(groups[i]):
            members = groups[i] == size
            median = float(np.median(row[members]))
            fast = np.flatnonzero(members & (row < OTHER_WORK_BELOW * median))
            if len(fast):
                step = times.columns[fast[0]]
                raise InputError(
                    f"rank {rank} step {step} took {row[fast[0]]:.3g} s, {row[fast[0]] / median:.1%} of the rank's median "
                    f"{median:.3g} s: not the same work as its other steps (a partial batch, or a span cut off where "
                    "the run stopped); leave it out (--steps N fits the first N steps)", source=where, field="time_s")


def _nodes(table: pd.DataFrame, ranks: np.ndarray, where: str, ranks_per_node: int | None) -> tuple[np.ndarray, bool]:
    by_rank = table.groupby("rank")["node"].agg(["min", "max"]).reindex(ranks)
    if by_rank["min"].notna().all():
        if ranks_per_node is not None:
            raise InputError("the input names each rank's node; leave out --ranks-per-node", source="--ranks-per-node")
        moved = by_rank.index[by_rank["min"] != by_rank["max"]]
        if len(moved):
            raise InputError(f"rank {moved[0]} appears on two nodes", source=where, field="node")
        return np.unique(by_rank["min"].to_numpy(), return_inverse=True)[1], True
    if ranks_per_node is not None:
        return (ranks - ranks[0]) // ranks_per_node, True
    return np.arange(len(ranks)), False
