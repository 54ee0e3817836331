"""A result directory's files, and reading one back (:func:`load_result_dir`).

The layout is the results contract (:mod:`simdist.results` writes it): ``manifest.json``,
``summary.json``, the tables ``steps.csv``, ``evals.csv``, ``workers.csv``, ``links.csv``,
``events.csv``, ``ledger.csv`` and ``link_usage.csv`` (each may stand as ``.parquet`` instead or beside it:
the CSV is read where both are), ``trace.json`` and ``plots/``. Reading gives a
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

__all__ = ["MANIFEST", "SUMMARY", "TRACE", "PLOTS_DIR", "EVENTS", "LEDGER", "LINK_USAGE", "TABLES", "RESULT_FILES",
           "LoadedResult", "load_result_dir", "load_tables", "parquet_name"]

MANIFEST = "manifest.json"
SUMMARY = "summary.json"
TRACE = "trace.json"
PLOTS_DIR = "plots"
TABLES = ("steps.csv", "evals.csv", "workers.csv", "links.csv")
EVENTS = "events.csv"  # free-form events; optional when reading (older directories lack it)
LEDGER = "ledger.csv"  # per rank and step, the parts of the step (simdist.ledger); optional when reading
LINK_USAGE = "link_usage.csv"  # per link and time bin, bytes, utilisation, flows; optional when reading
RESULT_FILES: tuple[str, ...] = (MANIFEST, SUMMARY, *TABLES, EVENTS, LEDGER, LINK_USAGE, TRACE, MARKER)  # plus plots/


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
    link_usage: pd.DataFrame | None = None  # each link over time (link_usage.csv); None where not written

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


def parquet_name(table_name: str) -> str:
    """``steps.csv`` -> ``steps.parquet``: where a table's Parquet copy stands."""
    return str(Path(table_name).with_suffix(".parquet"))


def _table_path(directory: Path, name: str) -> Path | None:
    """The file holding table ``name`` (``steps.csv``): the CSV, else its Parquet copy, else None."""
    for candidate in (name, parquet_name(name)):
        if (directory / candidate).is_file():
            return directory / candidate
    return None


def load_tables(directory: Path, manifest: dict[str, Any]) -> LoadedResult:
    paths = {name: _table_path(directory, name) for name in (*TABLES, EVENTS, LEDGER, LINK_USAGE)}
    for name in TABLES:
        if paths[name] is None:
            raise InputError(f"not a simdist result directory: {name} is missing", source=str(directory))
    return LoadedResult(
        path=directory,
        manifest=manifest,
        summary=_read_json(directory / SUMMARY),
        steps=_read_table(paths["steps.csv"]),
        evals=_read_table(paths["evals.csv"]),
        workers=_read_table(paths["workers.csv"]),
        links=_read_table(paths["links.csv"]),
        ledger=None if paths[LEDGER] is None else _read_table(paths[LEDGER]),
        events=None if paths[EVENTS] is None else _read_table(paths[EVENTS]),
        link_usage=None if paths[LINK_USAGE] is None else _read_table(paths[LINK_USAGE]),
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
