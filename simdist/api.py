"""The Python API: :func:`run`, :func:`load`, :func:`sweep` and :func:`compare` for notebooks.

Each function is the matching command, called from Python, through the command's own code
path: a scenario is read and overridden by :func:`simdist.scenario.load_scenario` /
:func:`~simdist.scenario.scenario_from_dict` (``set`` is ``--set``), simulated by
:func:`simdist.simulate.simulate`, written by :func:`simdist.results.write_result_dir`;
sweeps and comparisons are :func:`simdist.sweeps.run_sweep` and
:func:`simdist.comparison.run_comparison`. So a notebook and ``simdist run`` give the same
numbers and the same directories. Bad input raises :class:`~simdist.errors.InputError` with
the line the command line prints. See docs/python-api.md.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar, Union

import pandas as pd

from .algorithms import ALGORITHMS
from .api_result import Result
from .comparison import run_comparison
from .errors import InputError
from .estimate import refuse_excess_work
from .outdir import check_out_dir
from .results import write_result_dir
from .scenario import Scenario, load_scenario, read_scenario_file, scenario_from_dict
from .simulate import simulate
from .sweeps import SWEEP_CSV, run_sweep
from .sweep_cli import MAX_JOBS

__all__ = ["run", "load", "sweep", "compare", "Result", "InputError", "ScenarioLike", "DICT_SOURCE"]

ScenarioLike = Union[str, "os.PathLike[str]", Mapping[str, Any], Scenario]
DICT_SOURCE = "<dict>"  # how messages name a scenario given as a mapping (its relative paths: from the cwd)
_F = TypeVar("_F", bound=Callable[..., Any])


def _input_errors_here(func: _F) -> _F:
    """Raise an :class:`InputError` from the API call itself: its one line, not the library's depths."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except InputError as exc:
            raise exc.with_traceback(None) from None

    return wrapper  # type: ignore[return-value]


@_input_errors_here
def run(scenario: ScenarioLike, *, set: Mapping[str, Any] | None = None,  # noqa: A002 - the CLI's --set
        out: str | os.PathLike[str] | None = None, timing_only: bool | None = None, seed: int | None = None,
        overwrite: bool = False, force: bool = False, per_rank: bool = False) -> Result:
    """Simulate ``scenario`` and return its :class:`Result` (as ``simdist run``).

    ``scenario``: a scenario YAML path, a mapping (the YAML's content; relative paths from the
    current directory) or a validated :class:`~simdist.scenario.Scenario`. ``set``:
    ``{dotted.key: value}`` applied as ``--set dotted.key=value`` (a string value is read as on
    the command line, ``"64"`` is the number 64; other values are used as they are).
    ``timing_only``: True as ``--timing-only`` (None: the scenario's own). ``seed``: replaces
    the scenario's seed. ``out``: also write the result directory there, atomically, as
    ``simdist run --out`` (an existing non-empty directory is refused unless ``overwrite`` and
    simdist wrote it; checked before simulating). ``force``: run past the work estimate
    (docs/reliability.md). ``per_rank``: one simulated process per rank, as ``--per-rank``.
    """
    overrides = _overrides(set)
    if timing_only is not None:
        overrides += _overrides({"workload.timing_only": timing_only})
    if seed is not None:
        overrides += _overrides({"seed": seed})
    validated = _scenario(scenario, overrides)
    refuse_excess_work(validated, force=force)  # the input first, as simdist run
    if out is not None:
        check_out_dir(Path(out), kind="run", overwrite=overwrite)  # before simulating; checked again when written
    result = simulate(validated, per_rank=per_rank)
    if out is None:
        return Result.from_run(result)
    path = write_result_dir(result, out, overwrite=overwrite, plots=validated.outputs.plots)
    return Result.from_run(result, path)


@_input_errors_here
def load(directory: str | os.PathLike[str]) -> Result:
    """The :class:`Result` of a result directory written by ``simdist run`` (or :meth:`Result.save`)."""
    return Result.from_dir(directory)


@_input_errors_here
def sweep(scenario: ScenarioLike, axes: Mapping[str, Sequence[Any]] | None = None, *,
          out: str | os.PathLike[str] | None = None, workers: int | None = None,
          set: Mapping[str, Any] | None = None, plots: bool | None = None,  # noqa: A002
          force: bool = False) -> pd.DataFrame:
    """Run every point of a grid (as ``simdist sweep``); returns ``sweep.csv``'s table.

    ``axes``: ``{dotted.key: [values...]}``, every combination a point (a key joining fields
    with commas links them, as in a scenario's ``sweep.grid``); None: the scenario's own
    ``sweep`` section. ``out``: the sweep folder to keep (resumable: complete points are
    skipped); None: a temporary one, removed afterwards. ``workers``: points run at once in
    separate processes (default: the CPU count; 1 runs them here, one after another).
    ``plots``: each point's figures (default: the scenario's with ``out``, none without).
    Points that fail are left out of the table, named in a warning and in
    ``table.attrs["failures"]`` (``{point: error}``).
    """
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or not 1 <= workers <= MAX_JOBS):
        raise InputError(f"must be an integer from 1 to {MAX_JOBS}, got {workers!r}", source="sweep", field="workers")
    path, data = _scenario_data(scenario)
    if axes is not None:
        if not isinstance(axes, Mapping):
            raise InputError(f"must map dotted keys to lists of values, got {type(axes).__name__}",
                             source="sweep", field="axes")
        data["sweep"] = {"grid": {key: list(values) if isinstance(values, (list, tuple)) else values
                                  for key, values in axes.items()}}
    with _folder(out, "sweep") as folder:
        outcome = run_sweep(path, folder, overrides=_overrides(set), jobs=workers, data=data, force=force,
                            plots=(None if out is not None else False) if plots is None else plots)
        table = pd.read_csv(folder / SWEEP_CSV)
    labels = {p.key: p.label for p in outcome.points}
    table.attrs["failures"] = {labels[key]: error for key, error in outcome.failures.items()}
    if outcome.failures:
        shown = "; ".join(f"{label}: {error}" for label, error in table.attrs["failures"].items())
        warnings.warn(f"{len(outcome.failures)} of {len(outcome.points)} sweep points failed: {shown}", stacklevel=3)
    return table


@_input_errors_here
def compare(scenario: ScenarioLike, variants: Mapping[str, Mapping[str, Any]] | None = None, *,
            out: str | os.PathLike[str] | None = None, set: Mapping[str, Any] | None = None,  # noqa: A002
            plots: bool | None = None, overwrite: bool = False, force: bool = False) -> pd.DataFrame:
    """Run variants of a scenario side by side (as ``simdist compare``); returns ``compare.csv``'s table.

    ``variants``: ``{label: {dotted.key: value}}`` (a mapping value replaces the subtree), as a
    scenario's ``compare`` list; None: the scenario's own ``compare`` section. ``out``: the
    folder of the variants' result directories (``out/<label>/``, each readable by :func:`load`),
    ``compare.csv`` and overlay ``plots/``; None: a temporary one, removed afterwards.
    ``plots``: draw the figures (default: with ``out`` only). ``overwrite``: replace variant
    directories simdist wrote before.
    """
    path, data = _scenario_data(scenario)
    if variants is not None:
        if not isinstance(variants, Mapping):
            raise InputError(f"must map each label to {{dotted.key: value}}, got {type(variants).__name__}",
                             source="compare", field="variants")
        data["compare"] = [{"label": label, "set": dict(changes) if isinstance(changes, Mapping) else changes}
                           for label, changes in variants.items()]
    with _folder(out, "compare") as folder:
        run_comparison(path, folder, overrides=_overrides(set), overwrite=overwrite, force=force, data=data,
                       plots=(out is not None) if plots is None else plots)
        return pd.read_csv(folder / "compare.csv")


# --------------------------------------------------------------------------- scenarios


def _scenario(scenario: ScenarioLike, overrides: list[str]) -> Scenario:
    """The validated scenario, ``overrides`` applied as the command line applies ``--set``."""
    if isinstance(scenario, Scenario):
        if not overrides:
            return scenario
        source = scenario.source
        return scenario_from_dict(_scenario_mapping(scenario), source=source,
                                  base_dir=Path(source).parent if source else None, overrides=overrides)
    if isinstance(scenario, Mapping):
        return scenario_from_dict(copy.deepcopy(dict(scenario)), source=DICT_SOURCE, overrides=overrides)
    return load_scenario(_path(scenario), overrides)


def _scenario_data(scenario: ScenarioLike) -> tuple[Path, dict[str, Any]]:
    """(the path that names it and locates its files, the raw mapping) for a sweep or a comparison."""
    if isinstance(scenario, Scenario):
        return Path(scenario.source or DICT_SOURCE), _scenario_mapping(scenario)
    if isinstance(scenario, Mapping):
        return Path(DICT_SOURCE), copy.deepcopy(dict(scenario))
    path = _path(scenario)
    return path, read_scenario_file(path)


def _scenario_mapping(scenario: Scenario) -> dict[str, Any]:
    """A validated scenario as a mapping to override: resolved, with the algorithm's options left
    at their defaults left out (so ``algorithm.name`` can change, as in a scenario file)."""
    data = scenario.resolved()
    config = ALGORITHMS.entry(scenario.algorithm_name).config.model_validate(scenario.algorithm)
    data["algorithm"] = {"name": scenario.algorithm_name, **config.model_dump(mode="json", exclude_defaults=True)}
    return data


def _path(scenario: Any) -> Path:
    if isinstance(scenario, (str, os.PathLike)):
        return Path(scenario)
    raise InputError(f"must be a scenario YAML path, a mapping or a simdist Scenario, got {type(scenario).__name__}",
                     source="scenario")


def _overrides(values: Mapping[str, Any] | None) -> list[str]:
    """``{dotted.key: value}`` as ``--set`` arguments: strings as typed, other values as JSON (YAML flow)."""
    if values is None:
        return []
    if not isinstance(values, Mapping):
        raise InputError(f"must map dotted keys to values, got {type(values).__name__}", source="--set")
    overrides = []
    for key, value in values.items():
        if not isinstance(key, str):
            raise InputError(f"a key must be a dotted field name (str), got {key!r}", source="--set")
        overrides.append(f"{key}={value if isinstance(value, str) else _json(key, value)}")
    return overrides


def _json(key: str, value: Any) -> str:
    def plain(item: Any) -> Any:
        if isinstance(item, os.PathLike):
            return os.fspath(item)
        if hasattr(item, "tolist"):  # numpy scalars and arrays
            return item.tolist()
        raise TypeError(f"{type(item).__name__} is not a number, string, bool, None, list or mapping")

    try:
        return json.dumps(value, allow_nan=False, default=plain)
    except (TypeError, ValueError) as exc:
        raise InputError(f"cannot use {value!r} as a value: {exc}", source="--set", field=key) from None


# --------------------------------------------------------------------------- folders


@contextlib.contextmanager
def _folder(out: str | os.PathLike[str] | None, name: str) -> Iterator[Path]:
    """``out`` as a Path, or where it is None a temporary folder, removed on exit."""
    if out is not None:
        yield Path(out)
        return
    with tempfile.TemporaryDirectory(prefix=f"simdist-{name}-") as tmp:
        yield Path(tmp) / name
