"""A result directory's files, and reading one back (:func:`load_result_dir`).

The layout is the results contract (:mod:`simdist.results` writes it): ``manifest.json``,
``summary.json``, the tables ``steps.csv``, ``evals.csv``, ``workers.csv``, ``links.csv``,
``events.csv`` and ``ledger.csv``, ``trace.json`` and ``plots/``. Reading gives a
:class:`LoadedResult`: the manifest and summary, and the tables as DataFrames; plots and
reports start from it and never from a re-run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from .errors import InputError
from .outdir import MARKER

__all__ = ["MANIFEST", "SUMMARY", "TRACE", "PLOTS_DIR", "EVENTS", "LEDGER", "TABLES", "RESULT_FILES",
           "LoadedResult", "load_result_dir", "load_tables"]

MANIFEST = "manifest.json"
SUMMARY = "summary.json"
TRACE = "trace.json"
PLOTS_DIR = "plots"
TABLES = ("steps.csv", "evals.csv", "workers.csv", "links.csv")
EVENTS = "events.csv"  # free-form events; optional when reading (older directories lack it)
LEDGER = "ledger.csv"  # per rank and step, the parts of the step (simdist.ledger); optional when reading
RESULT_FILES: tuple[str, ...] = (MANIFEST, SUMMARY, *TABLES, EVENTS, LEDGER, TRACE, MARKER)  # plus plots/


@dataclass
class LoadedResult:
    """A result directory read back: its manifest and summary, and its tables as DataFrames."""

    path: Path
    manifest: dict[str, Any]
    summary: dict[str, Any]
    steps: pd.DataFrame
    evals: pd.DataFrame
    workers: pd.DataFrame
    links: pd.DataFrame
    ledger: pd.DataFrame | None = None  # the time ledger (ledger.csv); None for directories written before it
    events: pd.DataFrame | None = None  # free-form events (events.csv); None for directories written before it

    @property
    def algorithm(self) -> str:
        return str(self.summary.get("algorithm") or self.manifest.get("algorithm") or "?")

    @property
    def n_workers(self) -> int | None:
        value = self.summary.get("workers")
        return None if value is None else int(value)

    @property
    def trace_path(self) -> Path:
        return self.path / TRACE


def load_result_dir(path: str | os.PathLike[str]) -> LoadedResult:
    """Read the result directory at ``path``; :class:`InputError` if it is not one."""
    directory = Path(path)
    if not directory.is_dir():
        raise InputError("not a simdist result directory (no such directory)", source=str(directory))
    for name in (MANIFEST, SUMMARY):
        if not (directory / name).is_file():
            raise InputError(f"not a simdist result directory: {name} is missing", source=str(directory))
    return load_tables(directory, _read_json(directory / MANIFEST))


def load_tables(directory: Path, manifest: dict[str, Any]) -> LoadedResult:
    steps_name = "steps.csv" if (directory / "steps.csv").is_file() else "steps.parquet"
    for name in (steps_name, *TABLES[1:]):
        if not (directory / name).is_file():
            missing = "steps.csv" if name == "steps.parquet" else name
            raise InputError(f"not a simdist result directory: {missing} is missing", source=str(directory))
    return LoadedResult(
        path=directory,
        manifest=manifest,
        summary=_read_json(directory / SUMMARY),
        steps=_read_table(directory / steps_name),
        evals=_read_table(directory / "evals.csv"),
        workers=_read_table(directory / "workers.csv"),
        links=_read_table(directory / "links.csv"),
        ledger=_read_table(directory / LEDGER) if (directory / LEDGER).is_file() else None,
        events=_read_table(directory / EVENTS) if (directory / EVENTS).is_file() else None,
    )


def _read_table(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except (OSError, ValueError, ImportError) as exc:  # pandas parser errors are ValueErrors
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise InputError(f"cannot read {path.name}: {reason}", source=str(path.parent)) from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read {path.name}: {exc}", source=str(path.parent)) from None
    if not isinstance(data, dict):
        raise InputError(f"{path.name} does not hold a JSON object", source=str(path.parent))
    return data
