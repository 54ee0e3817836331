"""The result of one run, and its directory on disk (the results contract).

``simdist run SCENARIO --out DIR`` writes exactly one directory, atomically (a temporary
sibling directory renamed into place), holding:

=====================  ==========================================================================
``manifest.json``      resolved scenario and platform, seed, package versions, content hash, summary
``summary.json``       the run's figures (see :data:`simdist.metrics.SUMMARY_KEYS`)
``steps.csv``          one row per applied update: time_s, worker, step, version, staleness, batch_size, loss
``evals.csv``          time_s, step, worker, test_loss, test_accuracy
``workers.csv``        per worker: compute_s, comm_s, idle_s, samples, steps
``links.csv``          per link: link, kind, bytes, busy_s
``trace.json``         Chrome/Perfetto trace: a process per node, a thread per rank
``plots/``             PNG and SVG figures read from the tables above
``.simdist-output``    the marker of a folder simdist wrote (:mod:`simdist.outdir`)
=====================  ==========================================================================

:func:`write_result_dir` writes that directory and :func:`load_result_dir` reads it back
as a :class:`LoadedResult` (the tables as DataFrames). Plots and reports start from a
loaded directory and never from a re-run.

Atomicity and what may be replaced follow :mod:`simdist.outdir`: everything is written into
a temporary sibling ``.<name>.tmp-<random>`` and moved into place; on any error the temporary
directory is removed and whatever was at the destination is left untouched. Only a folder
simdist wrote is replaced (``overwrite=True``), never the current directory or one above it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform as _platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from . import metrics, tracefile
from .errors import InputError
from .ledger import ledger_table
from .metrics import jsonable
from .outdir import MARKER, staged_dir
from .recorder import Recorder

__all__ = [
    "RankInfo",
    "LinkStats",
    "RunResult",
    "LoadedResult",
    "RESULT_FILES",
    "write_result_dir",
    "load_result_dir",
    "build_manifest",
    "content_hash",
    "package_versions",
]


@dataclass(frozen=True)
class RankInfo:
    """Where a rank lives and what it is."""

    rank: int
    node: int
    device: str  # device kind, e.g. "cpu", "a100"
    role: str = "worker"  # "worker" or "server"


@dataclass(frozen=True)
class LinkStats:
    """Traffic counters of one directional link over the whole run."""

    link: str
    kind: str
    bytes: float
    busy_s: float


@dataclass
class RunResult:
    """Everything one run produced; result files and plots are derived from this alone."""

    scenario: dict[str, Any]  # the resolved, validated scenario (JSON-able)
    platform: dict[str, Any]  # the resolved platform (JSON-able)
    seed: int
    algorithm: str
    ranks: list[RankInfo]
    recorder: Recorder
    links: list[LinkStats]
    virtual_time_s: float
    wall_time_s: float
    status: str  # "completed" | "target_reached" | "step_limit" | "time_limit" | "stalled"
    target_accuracy: float | None = None
    epochs: float | None = None  # epochs completed (fractional for asynchronous algorithms)
    timing_only: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def workers(self) -> list[int]:
        return [r.rank for r in self.ranks if r.role == "worker"]


# --------------------------------------------------------------------------- the directory

MANIFEST = "manifest.json"
SUMMARY = "summary.json"
TRACE = "trace.json"
PLOTS_DIR = "plots"
_TABLES = ("steps.csv", "evals.csv", "workers.csv", "links.csv")
EVENTS = "events.csv"  # free-form events; optional when reading (older directories lack it)
LEDGER = "ledger.csv"  # per rank and step, the parts of the step (simdist.ledger); optional when reading
RESULT_FILES: tuple[str, ...] = (MANIFEST, SUMMARY, *_TABLES, EVENTS, LEDGER, TRACE, MARKER)  # plus plots/
_PACKAGES = ("torch", "numpy", "pandas", "simpy", "pydantic")
_FLOAT_FORMAT = "%.12g"


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


def write_result_dir(result: RunResult, out_dir: str | os.PathLike[str], *, overwrite: bool = False,
                     plots: bool = True) -> Path:
    """Write ``result`` as a result directory at ``out_dir``, atomically; returns ``Path(out_dir)``.

    An existing non-empty ``out_dir`` is an :class:`~simdist.errors.InputError` unless
    ``overwrite`` and simdist wrote it (:mod:`simdist.outdir`); then it is replaced only once
    the new directory is complete. The parent directory is created if missing.
    ``plots=False`` leaves out ``plots/``.
    """
    out = Path(out_dir)
    with staged_dir(out, kind="run", overwrite=overwrite) as tmp:
        _write_contents(result, tmp, plots=plots)
    return out


def load_result_dir(path: str | os.PathLike[str]) -> LoadedResult:
    """Read the result directory at ``path``; :class:`InputError` if it is not one."""
    directory = Path(path)
    if not directory.is_dir():
        raise InputError("not a simdist result directory (no such directory)", source=str(directory))
    for name in (MANIFEST, SUMMARY):
        if not (directory / name).is_file():
            raise InputError(f"not a simdist result directory: {name} is missing", source=str(directory))
    return _load_tables(directory, _read_json(directory / MANIFEST))


def content_hash(scenario: dict[str, Any], platform: dict[str, Any], seed: int) -> str:
    """SHA-256 (hex) of the canonical JSON of a run's inputs: scenario, platform and seed."""
    canonical = json.dumps(
        jsonable({"scenario": scenario, "platform": platform, "seed": seed}),
        sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False,
    )
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def package_versions() -> dict[str, str]:
    """Versions of Python and of the packages a run's numbers depend on (``"missing"`` if absent)."""
    versions = {"python": _platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "missing"
    return versions


def build_manifest(result: RunResult, summary: dict[str, Any], files: list[str]) -> dict[str, Any]:
    """The ``manifest.json`` object of ``result`` (``files``: paths relative to the directory)."""
    return {
        "simdist_version": _simdist_version(),
        "scenario": jsonable(result.scenario),
        "platform": jsonable(result.platform),
        "seed": result.seed,
        "algorithm": result.algorithm,
        "timing_only": result.timing_only,
        "status": result.status,
        "faults": jsonable(result.extra.get("faults")),  # crashed ranks and what was dropped (docs/faults.md)
        # which collectives a measured table priced, and how: inside it, size or ranks extrapolated
        "collective_pricing": jsonable(result.extra.get("collective_pricing") or []),
        "collective_reduction": jsonable(result.extra.get("collective_reduction") or []),
        # per device and op (update, average, ...): measured by calibrate compute, or estimated
        "op_costs": jsonable(result.extra.get("op_costs") or []),
        # what a batch costs to load (per sample, measured, estimated or cited) and the loader model
        "data_loading": jsonable(result.extra.get("data_loading")),
        # the job's validation pass and checkpoint at epoch ends (simdist.training.epoch_end); null: none
        "epoch_end": jsonable(result.extra.get("epoch_end")),
        "packages": package_versions(),
        "content_hash": content_hash(result.scenario, result.platform, result.seed),
        "summary": summary,
        "files": list(files),
    }


# --------------------------------------------------------------------------- helpers


def _write_contents(result: RunResult, directory: Path, *, plots: bool) -> None:
    summary = metrics.summarize(result)
    (directory / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tables = {
        "steps.csv": metrics.steps_table(result),
        "evals.csv": metrics.evals_table(result),
        "workers.csv": metrics.workers_table(result),
        "links.csv": metrics.links_table(result),
        EVENTS: metrics.events_table(result),
        LEDGER: ledger_table(metrics.spans_table(result),
                             uncovered="update" if result.extra.get("runtime") == "mpi" else "wait"),
    }
    for name, table in tables.items():
        table.to_csv(directory / name, index=False, float_format=_FLOAT_FORMAT)
    tracefile.write_chrome_trace(result, directory / TRACE)
    manifest = build_manifest(result, summary, files=[])
    if plots:
        from . import plots as plotting

        plotting.plot_tables(_load_tables(directory, manifest), directory / PLOTS_DIR)
    manifest["files"] = sorted(
        [MANIFEST] + [p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()]
    )
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def _load_tables(directory: Path, manifest: dict[str, Any]) -> LoadedResult:
    steps_name = "steps.csv" if (directory / "steps.csv").is_file() else "steps.parquet"
    for name in (steps_name, *_TABLES[1:]):
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


def _simdist_version() -> str:
    try:
        import simdist

        version = getattr(simdist, "__version__", None)
        if version:
            return str(version)
        return importlib.metadata.version("simdist")
    except (ImportError, importlib.metadata.PackageNotFoundError):
        return "unknown"
