"""The figures of one run, computed from its :class:`~simdist.run_result.RunResult` alone.

Pure functions: a result goes in, a dict or a :class:`pandas.DataFrame` comes out; nothing
is cached and nothing is re-simulated. These are the numbers that ``summary.json`` and the
CSV tables of a result directory hold (see :mod:`simdist.results`).

Definitions of the summary figures (:data:`SUMMARY_KEYS`, ``None`` where not applicable):

``algorithm``, ``workers``
    the algorithm's registry name and the number of ranks whose role is ``worker``.
``virtual_time_s``
    simulated time at the end of the run (wall time for real runs).
``steps``
    number of distinct ``step`` values among the update rows, i.e. global model versions
    applied (a synchronous step in which every worker contributes counts once).
``samples``
    sum of ``batch_size`` over the update rows.
``epochs``
    epochs completed, as the run reported them (fractional for asynchronous algorithms).
``throughput_samples_per_s``
    ``samples / virtual_time_s``.
``mean_iteration_s``
    for each worker that produced updates, the mean interval between its consecutive
    update rows of its own computed gradients (``batch_size > 0``: rows of gradients it only
    received, as in nnt, do not count), the first interval measured from t = 0 (so it equals
    the worker's last such update time divided by their number); then the mean over workers.
``final_test_accuracy``
    mean test accuracy over the workers evaluated at the last evaluation time.
``best_test_accuracy``
    highest test accuracy of any evaluation.
``target_accuracy``
    the scenario's target, if it set one.
``time_to_accuracy_s``
    ``time_s`` of the first evaluation whose ``test_accuracy >= target_accuracy``;
    ``None`` if the target is never met or there is no target.
``mean_staleness``, ``p95_staleness``, ``max_staleness``
    over the update rows that define a staleness (empty cells are skipped); the 95th
    percentile by :func:`numpy.percentile` (linear).
``compute_fraction``
    total duration of blocking ``compute`` spans of worker ranks divided by
    ``workers × virtual_time_s``.
``comm_bytes``
    sum of ``bytes`` over all links.
``wall_time_s``, ``status``
    host seconds the run took and how it ended.

Floats are rounded to 12 significant digits so that ``summary.json`` is byte-stable;
integer figures stay integers; NaN and infinities become ``None``.
"""

from __future__ import annotations

import json

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .recorder import EVAL_COLUMNS, UPDATE_COLUMNS

if TYPE_CHECKING:  # pragma: no cover - typing only
    from .run_result import RunResult

__all__ = [
    "SUMMARY_KEYS",
    "STEPS_COLUMNS",
    "EVALS_COLUMNS",
    "WORKERS_COLUMNS",
    "LINKS_COLUMNS",
    "SPANS_COLUMNS",
    "summarize",
    "steps_table",
    "evals_table",
    "workers_table",
    "links_table",
    "spans_table",
    "round_sig",
    "jsonable",
]

SUMMARY_KEYS: tuple[str, ...] = (
    "algorithm",
    "workers",
    "virtual_time_s",
    "steps",
    "samples",
    "epochs",
    "throughput_samples_per_s",
    "mean_iteration_s",
    "final_test_accuracy",
    "best_test_accuracy",
    "target_accuracy",
    "time_to_accuracy_s",
    "mean_staleness",
    "p95_staleness",
    "max_staleness",
    "compute_fraction",
    "comm_bytes",
    "wall_time_s",
    "status",
)

STEPS_COLUMNS: tuple[str, ...] = UPDATE_COLUMNS  # then any extra columns, sorted by name
EVALS_COLUMNS: tuple[str, ...] = EVAL_COLUMNS
WORKERS_COLUMNS: tuple[str, ...] = ("worker", "compute_s", "comm_s", "idle_s", "samples", "steps")
LINKS_COLUMNS: tuple[str, ...] = ("link", "kind", "bytes", "busy_s")
SPANS_COLUMNS: tuple[str, ...] = ("rank", "kind", "name", "start_s", "end_s", "blocking")


def round_sig(value: Any, digits: int = 12) -> Any:
    """``value`` made JSON-stable: floats to ``digits`` significant digits, NaN/inf to None.

    Integers (Python or numpy, not bools) come back as Python ints; other values unchanged.
    """
    if value is None or isinstance(value, (bool, np.bool_, str)):
        return bool(value) if isinstance(value, np.bool_) else value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        if not math.isfinite(x):
            return None
        return float(f"{x:.{digits}g}")
    return value


def jsonable(value: Any) -> Any:
    """``value`` as something ``json.dumps(..., allow_nan=False)`` writes.

    Dicts, lists and tuples are converted recursively (keys become strings), numpy and
    torch scalars become Python numbers, NaN and infinities become ``None``, and anything
    else unknown becomes its ``str``. Floats are not rounded.
    """
    kind = type(value)
    if kind is float:  # fast paths first: traces call this for every event argument
        return value if math.isfinite(value) else None
    if value is None or kind is int or kind is str or kind is bool:
        return value
    if isinstance(value, (bool, str, np.bool_)):
        return value if isinstance(value, str) else bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        return x if math.isfinite(x) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        try:
            return jsonable(value.item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


# --------------------------------------------------------------------------- tables


def steps_table(result: RunResult) -> pd.DataFrame:
    """One row per applied update, in recording order.

    Columns ``time_s, worker, step, version, staleness, batch_size, loss``, then any extra
    columns the runtime recorded (e.g. ``age_s``), sorted by name. Timing-only runs have
    ``loss`` all missing.
    """
    columns = result.recorder.update_columns()
    if columns is not None:
        return pd.DataFrame(columns, columns=list(UPDATE_COLUMNS))
    rows = result.recorder.updates
    extras = sorted({key for row in rows for key in row} - set(UPDATE_COLUMNS))
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=_empty_dtype(c)) for c in UPDATE_COLUMNS})
    data = {c: [row.get(c) for row in rows] for c in list(UPDATE_COLUMNS) + extras}
    frame = pd.DataFrame(data, columns=list(data))
    frame["loss"] = pd.to_numeric(frame["loss"], errors="coerce").astype(float)
    return frame


def evals_table(result: RunResult) -> pd.DataFrame:
    """One row per evaluation: ``time_s, step, worker, test_loss, test_accuracy``."""
    rows = result.recorder.evals
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=_empty_dtype(c)) for c in EVALS_COLUMNS})
    frame = pd.DataFrame({c: [row.get(c) for row in rows] for c in EVALS_COLUMNS})
    for c in ("test_loss", "test_accuracy"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype(float)
    return frame


def spans_table(result: RunResult) -> pd.DataFrame:
    """All recorded spans: ``rank, kind, name, start_s, end_s, blocking`` (args dropped)."""
    return pd.DataFrame(result.recorder.span_columns(), columns=list(SPANS_COLUMNS))


def workers_table(result: RunResult) -> pd.DataFrame:
    """One row per worker rank (by rank): ``worker, compute_s, comm_s, idle_s, samples, steps``.

    ``compute_s``/``comm_s`` sum the rank's blocking spans of that kind; ``wait`` spans
    and uncovered time are idle: ``idle_s = virtual_time_s - compute_s - comm_s``.
    ``samples``/``steps`` are the batch sizes summed over / the number of the update rows
    the worker produced.
    """
    workers = sorted(result.workers)
    spans = spans_table(result)
    busy = spans[spans["blocking"]].assign(duration_s=lambda f: f["end_s"] - f["start_s"])
    by_kind = busy.groupby(["rank", "kind"])["duration_s"].sum()
    updates = steps_table(result)
    samples = updates.groupby("worker")["batch_size"].sum()
    counts = updates.groupby("worker").size()

    def lookup(series: pd.Series, key: Any) -> float:
        return float(series.get(key, 0.0))

    compute = [lookup(by_kind, (w, "compute")) for w in workers]
    comm = [lookup(by_kind, (w, "comm")) for w in workers]
    total = float(result.virtual_time_s)
    return pd.DataFrame(
        {
            "worker": pd.Series(workers, dtype="int64"),
            "compute_s": pd.Series(compute, dtype=float),
            "comm_s": pd.Series(comm, dtype=float),
            "idle_s": pd.Series([total - a - b for a, b in zip(compute, comm)], dtype=float),
            "samples": pd.Series([int(samples.get(w, 0)) for w in workers], dtype="int64"),
            "steps": pd.Series([int(counts.get(w, 0)) for w in workers], dtype="int64"),
        },
        columns=list(WORKERS_COLUMNS),
    )


def events_table(result: RunResult) -> pd.DataFrame:
    """Free-form ``rt.record(kind, ...)`` events (phase changes, global syncs, λ ...): ``time_s, rank,
    kind`` then every field any event has, sorted by name (empty where an event lacks it)."""
    rows = result.recorder.events
    extra = sorted({key for row in rows for key in row} - {"time_s", "rank", "kind"})
    return pd.DataFrame([{k: metrics_value(row.get(k)) for k in ("time_s", "rank", "kind", *extra)} for row in rows],
                        columns=["time_s", "rank", "kind", *extra])


def metrics_value(value: Any) -> Any:
    """A value as a table cell: containers as JSON text, everything else as is."""
    return json.dumps(jsonable(value), sort_keys=True) if isinstance(value, (dict, list, tuple)) else value


def links_table(result: RunResult) -> pd.DataFrame:
    """One row per directional link, in the order the platform lists them."""
    links = result.links
    return pd.DataFrame(
        {
            "link": pd.Series([ln.link for ln in links], dtype=object),
            "kind": pd.Series([ln.kind for ln in links], dtype=object),
            "bytes": pd.Series([float(ln.bytes) for ln in links], dtype=float),
            "busy_s": pd.Series([float(ln.busy_s) for ln in links], dtype=float),
        },
        columns=list(LINKS_COLUMNS),
    )


def _empty_dtype(column: str) -> str:
    if column in ("worker", "step", "version", "staleness", "batch_size"):
        return "int64"
    return "float64"


# --------------------------------------------------------------------------- summary


def summarize(result: RunResult) -> dict[str, Any]:
    """The run's figures, keyed exactly by :data:`SUMMARY_KEYS` in that order (see module doc)."""
    updates = steps_table(result)
    evals = evals_table(result)
    n_workers = len(result.workers)
    total_s = float(result.virtual_time_s)
    samples = int(updates["batch_size"].sum()) if len(updates) else 0

    summary: dict[str, Any] = {
        "algorithm": result.algorithm,
        "workers": n_workers,
        "virtual_time_s": total_s,
        "steps": int(updates["step"].nunique()),
        "samples": samples,
        "epochs": result.epochs,
        "throughput_samples_per_s": samples / total_s if total_s > 0 else None,
        "mean_iteration_s": _mean_iteration_s(updates),
        **_accuracy_figures(evals, result.target_accuracy),
        **_staleness_figures(updates),
        "compute_fraction": _compute_fraction(result, n_workers, total_s),
        "comm_bytes": float(sum(float(ln.bytes) for ln in result.links)),
        "wall_time_s": float(result.wall_time_s),
        "status": result.status,
    }
    return {key: round_sig(summary[key]) for key in SUMMARY_KEYS}


def _mean_iteration_s(updates: pd.DataFrame) -> float | None:
    own = updates[pd.to_numeric(updates["batch_size"], errors="coerce") > 0]
    if own.empty:
        return None
    per_worker = own.groupby("worker")["time_s"].agg(["max", "size"])
    # mean of consecutive intervals starting at t = 0 telescopes to last time / count
    return float((per_worker["max"] / per_worker["size"]).mean())


def _accuracy_figures(evals: pd.DataFrame, target: float | None) -> dict[str, Any]:
    scored = evals.dropna(subset=["test_accuracy"])
    if scored.empty:
        return {"final_test_accuracy": None, "best_test_accuracy": None,
                "target_accuracy": target, "time_to_accuracy_s": None}
    last = scored[scored["time_s"] == scored["time_s"].max()]
    time_to = None
    if target is not None:
        met = scored[scored["test_accuracy"] >= target]
        time_to = float(met["time_s"].min()) if not met.empty else None
    return {
        "final_test_accuracy": float(last["test_accuracy"].mean()),
        "best_test_accuracy": float(scored["test_accuracy"].max()),
        "target_accuracy": target,
        "time_to_accuracy_s": time_to,
    }


def _staleness_figures(updates: pd.DataFrame) -> dict[str, Any]:
    staleness = pd.to_numeric(updates["staleness"], errors="coerce").dropna().to_numpy(dtype=float)
    if staleness.size == 0:
        return {"mean_staleness": None, "p95_staleness": None, "max_staleness": None}
    peak = staleness.max()
    return {
        "mean_staleness": float(staleness.mean()),
        "p95_staleness": float(np.percentile(staleness, 95, method="linear")),
        "max_staleness": int(peak) if float(peak).is_integer() else float(peak),
    }


def _compute_fraction(result: RunResult, n_workers: int, total_s: float) -> float | None:
    if n_workers == 0 or total_s <= 0:
        return None
    spans = result.recorder.span_columns()
    chosen = spans["blocking"] & (spans["kind"] == "compute") & np.isin(spans["rank"], list(result.workers))
    compute_s = float((spans["end_s"][chosen] - spans["start_s"][chosen]).sum())
    return compute_s / (n_workers * total_s)
