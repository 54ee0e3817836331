"""Sweeps: the points of a scenario's ``sweep:`` axes, run on a backend, resumable.

A scenario declares its axes as dotted fields, as a grid (every combination) and/or a list
of further points; a grid key joining several fields with commas links them (one axis)::

    sweep:
      grid:
        algorithm.name: [sync, asgd]
        workers,workload.batch_size: [[1, 128], [2, 64], [4, 32]]   # strong scaling: global batch 128
      points:                                                         # run after the grid's points
        - {algorithm.name: daso, workers: 4, workload.batch_size: 32}

``simdist sweep SCENARIO --out DIR`` validates every point's scenario before running any,
refuses a ``DIR`` that is not new, empty or a sweep folder (:mod:`simdist.outdir`), then writes:

==========================  ==================================================================
``DIR/sweep.json``          the sweep: name, axes, and each point's label, key and axis values
``DIR/points/<key>/``       one result directory per point (written atomically)
``DIR/sweep.csv``           a row per completed point: ``point, key``, the axis columns (named
                            by their dotted key; ``axis.<key>`` where a summary column has that
                            name, e.g. ``axis.workers``), then the summary columns
                            (:data:`SWEEP_SUMMARY_KEYS`)
``DIR/failures.csv``        ``point, key, error`` of the points that failed (absent when none)
==========================  ==================================================================

A point's key is the first 16 hex digits of the SHA-256 of its resolved scenario's
canonical JSON. A rerun reuses a point whose directory exists (it was written atomically, so
it is complete) and whose manifest's ``content_hash`` is the one the point has now
(:mod:`simdist.content_hash`: the resolved scenario and platform, the bytes of every file they
name, such as compute profiles and imported code, and simdist's version), and runs the rest.
A point whose hash differs is computed again and ``on_stale`` is told why, from the files its
manifest lists (``profile calibration/profiles/cpu.yaml changed``); a directory written before
manifests listed their files is never reused. Until it is computed again, a stale point is
left out of ``sweep.csv``. ``sweep.csv`` is rebuilt from the point directories, in point
order, and is the same whether or not the sweep was interrupted and whichever backend ran it.
It leaves out ``wall_time_s`` (host time is not a result; each point's ``summary.json`` keeps it).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection

import pandas as pd

from .backends import PointOutcome, PointTask, resolve_out, run_tasks
from .content_hash import input_changes, scenario_content_hash
from .errors import InputError
from .estimate import refuse_excess_work
from .metrics import SUMMARY_KEYS, jsonable
from .outdir import open_container, tidy, write_text_atomically
from .result_files import load_result_dir
from .scenario import Scenario, apply_overrides, read_scenario_file, scenario_from_dict, set_dotted

__all__ = ["SweepPoint", "SweepOutcome", "SWEEP_SUMMARY_KEYS", "sweep_points", "point_key", "run_sweep",
           "build_sweep_table", "write_sweep_table", "axis_column", "stale_reason", "POINTS_DIR"]

POINTS_DIR = "points"
SWEEP_JSON = "sweep.json"
SWEEP_CSV = "sweep.csv"
FAILURES_CSV = "failures.csv"
SWEEP_SUMMARY_KEYS: tuple[str, ...] = tuple(k for k in SUMMARY_KEYS if k != "wall_time_s")
KEY_HEX_DIGITS = 16


@dataclass(frozen=True)
class SweepPoint:
    """One point: its label (``key=value,...``), content key, axis values and validated scenario."""

    label: str
    key: str
    values: dict[str, Any]
    scenario: Scenario


@dataclass
class SweepOutcome:
    """What a call of :func:`run_sweep` did."""

    out_dir: Path
    points: list[SweepPoint]
    ran: list[str] = field(default_factory=list)  # keys simulated by this call
    skipped: list[str] = field(default_factory=list)  # keys already complete on disk, with the current hash
    stale: dict[str, str] = field(default_factory=dict)  # key -> why its directory on disk was not reused
    failures: dict[str, str] = field(default_factory=dict)  # key -> one-line error

    @property
    def ok(self) -> bool:
        return not self.failures


def point_key(scenario: Scenario) -> str:
    """First :data:`KEY_HEX_DIGITS` hex digits of SHA-256 of the resolved scenario's canonical JSON."""
    canonical = json.dumps(jsonable(scenario.resolved()), sort_keys=True, separators=(",", ":"),
                           ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()[:KEY_HEX_DIGITS]


def _axis_values(grid: dict[str, list[Any]], points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every grid combination (linked ``a,b`` keys expanded), then the listed points."""
    combos = []
    if grid:
        for values in itertools.product(*grid.values()):
            combo: dict[str, Any] = {}
            for key, value in zip(grid, values):
                fields = key.split(",")
                combo.update(zip(fields, value) if len(fields) > 1 else [(key, value)])
            combos.append(combo)
    return combos + [dict(point) for point in points]


def _label(values: dict[str, Any]) -> str:
    def show(v: Any) -> str:
        return json.dumps(v, sort_keys=True, separators=(",", ":")) if isinstance(v, (dict, list)) else str(v)

    return ",".join(f"{k}={show(v)}" for k, v in values.items()) or "base"


def _blame(values: dict[str, Any], grid: dict[str, list[Any]], index: int, exc: InputError) -> str:
    """The sweep field a point's validation error comes from: ``sweep.grid.<key>`` or ``sweep.points[i].<key>``."""
    n_grid = math.prod(len(v) for v in grid.values()) if grid else 0
    suspects = [k for k in values if exc.field and (exc.field == k or exc.field.startswith(k + ".")
                                                    or k.startswith(exc.field + "."))]
    if index >= n_grid:
        return f"sweep.points[{index - n_grid}]" + (f".{suspects[0]}" if suspects else "")
    if not suspects:
        return "sweep.grid"
    axis = next((key for key in grid if suspects[0] in key.split(",")), suspects[0])
    return f"sweep.grid.{axis}"


def sweep_points(path: str | Path, overrides: list[str] | None = None, *,
                 data: dict[str, Any] | None = None) -> tuple[Scenario, list[SweepPoint]]:
    """The base scenario and every validated point of the scenario file at ``path``.

    ``data``: the scenario's mapping where it was not read from a file (the Python API); ``path``
    then only names it in messages and locates the files it refers to (its folder).

    Raises :class:`InputError` before anything runs if any point's scenario is invalid,
    naming the axis (``sweep.grid.<key>`` or ``sweep.points[i].<key>``) and the problem.
    """
    path = Path(path)
    data = read_scenario_file(path) if data is None else copy.deepcopy(data)
    data = apply_overrides(data, list(overrides or []))
    base = scenario_from_dict(copy.deepcopy(data), source=str(path), base_dir=path.parent)
    grid, listed = base.sweep.grid, base.sweep.points
    if not grid and not listed:
        raise InputError("has no sweep axes; add sweep: {grid: {dotted.key: [values]}} or sweep: {points: [...]}",
                         source=str(path), field="sweep")
    points: list[SweepPoint] = []
    seen: dict[str, str] = {}
    for i, values in enumerate(_axis_values(grid, listed)):
        variant = copy.deepcopy(data)
        variant.pop("sweep", None)
        variant.pop("compare", None)
        for key, value in values.items():
            set_dotted(variant, key, copy.deepcopy(value))
        label = _label(values)
        try:
            scenario = scenario_from_dict(variant, source=str(path), base_dir=path.parent)
        except InputError as exc:
            where = _blame(values, grid, i, exc)
            detail = f"{exc.field}: {exc.message}" if exc.field else exc.message
            raise InputError(f"point {label}: {detail}", source=exc.source, field=where) from None
        key = point_key(scenario)
        if key in seen:
            raise InputError(f"points {seen[key]} and {label} are the same scenario", source=str(path), field="sweep")
        seen[key] = label
        points.append(SweepPoint(label, key, values, scenario))
    return base, points


def run_sweep(path: str | Path, out_dir: str | Path, *, overrides: list[str] | None = None, backend: str = "local",
              jobs: int | None = None, scheduler: str | None = None, plots: bool | None = None,
              on_start: Callable[[int, int], None] | None = None,
              on_point: Callable[[SweepPoint, PointOutcome], None] | None = None,
              force: bool = False, data: dict[str, Any] | None = None,
              on_stale: Callable[[SweepPoint, str], None] | None = None) -> SweepOutcome:
    """Run the points of the sweep in ``path`` not yet complete in ``out_dir``; write ``sweep.csv``.

    ``plots`` (default: the scenario's ``outputs.plots``) draws each point's figures.
    ``on_start(total, already_done)`` is called once before running, then ``on_stale(point,
    reason)`` for each point whose directory is there but whose content hash differs (it runs
    again), and ``on_point`` after each point finishes (success or failure). The table is
    rewritten after every point, so an interrupted sweep leaves a valid ``sweep.csv`` of what is
    done. Every point's work estimate (:mod:`simdist.estimate`) is checked before any runs;
    ``force`` skips that check. ``data``: the scenario's mapping where there is no file to read
    (:func:`sweep_points`).
    """
    base, points = sweep_points(path, overrides, data=data)
    for point in points:
        try:
            refuse_excess_work(point.scenario, force=force)
        except InputError as exc:
            raise InputError(f"point {point.label}: {exc.message}", source=exc.source, field=exc.field) from None
    out = Path(out_dir)
    open_container(out, kind="sweep")  # new, empty or a sweep folder; never the current directory
    (out / POINTS_DIR).mkdir(exist_ok=True)
    tidy(out / POINTS_DIR)  # point folders a killed sweep left half-written
    write_text_atomically(out / SWEEP_JSON, json.dumps(_sweep_meta(base, points, path), indent=2) + "\n")
    outcome = SweepOutcome(out, points)
    todo = []
    for point in points:
        manifest = out / POINTS_DIR / point.key / "manifest.json"
        reason = stale_reason(manifest, point) if manifest.is_file() else None
        if manifest.is_file() and reason is None:
            outcome.skipped.append(point.key)
            continue
        if reason is not None:
            outcome.stale[point.key] = reason
        draw = point.scenario.outputs.plots if plots is None else plots and point.scenario.outputs.plots
        todo.append(PointTask(point.key, point.scenario, resolve_out(out / POINTS_DIR / point.key), draw))
    if on_start:
        on_start(len(points), len(outcome.skipped))
    by_key = {p.key: p for p in points}
    for key, reason in outcome.stale.items():
        if on_stale:
            on_stale(by_key[key], reason)
    outdated = set(outcome.stale)  # left out of the table until computed again
    try:
        for result in run_tasks(todo, backend=backend, jobs=jobs, scheduler=scheduler):
            outcome.ran.append(result.key)
            if result.error is not None:
                outcome.failures[result.key] = result.error
            else:
                outdated.discard(result.key)
            if on_point:
                on_point(by_key[result.key], result)
            write_sweep_table(out, points, outcome.failures, exclude=outdated)
    finally:
        write_sweep_table(out, points, outcome.failures, exclude=outdated)
    return outcome


def stale_reason(manifest_path: str | Path, point: SweepPoint) -> str | None:
    """Why the result at ``manifest_path`` cannot stand for ``point`` now; None when it can
    (its ``content_hash`` is the point's :func:`~simdist.content_hash.scenario_content_hash`)."""
    try:
        manifest = json.loads(Path(manifest_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "its manifest.json cannot be read"
    if not isinstance(manifest, dict):
        return "its manifest.json is not a JSON object"
    expected, inputs = scenario_content_hash(point.scenario)
    if manifest.get("content_hash") == expected:
        return None
    stored = manifest.get("inputs")
    if not isinstance(stored, dict) or not isinstance(stored.get("files"), list):
        return ("written before results recorded the files they read (compute profiles, imported code) "
                "and simdist's version, so it cannot be checked")
    changes = input_changes(stored, inputs)
    return ", ".join(changes) if changes else "its resolved scenario or platform differs"


def build_sweep_table(out_dir: str | Path, points: list[SweepPoint], exclude: Collection[str] = ()) -> pd.DataFrame:
    """``sweep.csv``'s table from the completed point directories, in point order, leaving out
    the keys in ``exclude`` (stale directories not yet computed again)."""
    out = Path(out_dir)
    axes = list(dict.fromkeys(k for p in points for k in p.values))
    rows = []
    for point in points:
        directory = out / POINTS_DIR / point.key
        if point.key in exclude or not (directory / "manifest.json").is_file():
            continue
        summary = load_result_dir(directory).summary
        rows.append({"point": point.label, "key": point.key,
                     **{axis_column(a): _cell(point.values.get(a)) for a in axes},
                     **{k: summary.get(k) for k in SWEEP_SUMMARY_KEYS}})
    columns = ["point", "key", *map(axis_column, axes), *SWEEP_SUMMARY_KEYS]
    return pd.DataFrame(rows, columns=columns)


def write_sweep_table(out_dir: str | Path, points: list[SweepPoint], failures: dict[str, str],
                      exclude: Collection[str] = ()) -> Path:
    """Rewrite ``sweep.csv`` (and ``failures.csv``) atomically from what is on disk (but ``exclude``)."""
    out = Path(out_dir)
    table = build_sweep_table(out, points, exclude)
    write_text_atomically(out / SWEEP_CSV, table.to_csv(index=False, float_format="%.12g"))
    done = set(table["key"])
    failed = [(p.label, p.key, failures[p.key]) for p in points if p.key in failures and p.key not in done]
    failures_path = out / FAILURES_CSV
    if failed:
        frame = pd.DataFrame(failed, columns=["point", "key", "error"])
        write_text_atomically(failures_path, frame.to_csv(index=False))
    elif failures_path.exists():
        failures_path.unlink()
    return out / SWEEP_CSV


def axis_column(key: str) -> str:
    """The ``sweep.csv`` column of an axis: its dotted key, or ``axis.<key>`` where a summary column has that name."""
    return f"axis.{key}" if key in SWEEP_SUMMARY_KEYS or key in ("point", "key") else key


def _cell(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def _sweep_meta(base: Scenario, points: list[SweepPoint], path: str | Path) -> dict[str, Any]:
    return {
        "name": base.name,
        "description": base.description,
        "scenario": str(path),
        "axes": list(dict.fromkeys(k for p in points for k in p.values)),
        "target_accuracy": base.stop.target_accuracy,
        "points": [{"label": p.label, "key": p.key, "values": jsonable(p.values),
                    "dir": f"{POINTS_DIR}/{p.key}"} for p in points],
    }
