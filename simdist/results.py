"""The result of one run, and its directory on disk (the results contract).

``simdist run SCENARIO --out DIR`` writes exactly one directory, atomically (a temporary
sibling directory renamed into place), holding:

=====================  ==========================================================================
``manifest.json``      resolved scenario and platform, seed, package versions, hashed input files, content hash, summary
``summary.json``       the run's figures (see :data:`simdist.metrics.SUMMARY_KEYS`)
``steps.csv``          one row per applied update: time_s, worker, step, version, staleness, batch_size, loss
``evals.csv``          time_s, step, worker, test_loss, test_accuracy
``workers.csv``        per worker: compute_s, comm_s, idle_s, samples, steps
``links.csv``          per link: link, kind, bytes, busy_s
``ledger.csv``         per rank and step, the parts of the step (:mod:`simdist.ledger`)
``events.csv``         free-form events (DASO phases, NNT syncs, DBS batch changes ...)
``link_usage.csv``     per link and time bin: bytes, utilisation, flows (:mod:`simdist.link_outputs`;
                       simulated runs with ``outputs.link_usage``, the default; else the header only)
``*.parquet``          with ``parquet=True``: every table again as Parquet (typed, compressed)
``trace.json``         Chrome/Perfetto trace: a process per node, a thread per rank
``plots/``             PNG and SVG figures read from the tables above
``.simdist-output``    the marker of a folder simdist wrote (:mod:`simdist.outdir`)
=====================  ==========================================================================

:func:`write_result_dir` writes that directory from a :class:`~simdist.run_result.RunResult`;
:func:`~simdist.result_files.load_result_dir` reads it back as a
:class:`~simdist.result_files.LoadedResult` (the tables as DataFrames). Both, and the run's
data classes, are importable from here too. Plots and reports start from a loaded directory
and never from a re-run.

Atomicity and what may be replaced follow :mod:`simdist.outdir`: everything is written into
a temporary sibling ``.<name>.tmp-<random>`` and moved into place; on any error the temporary
directory is removed and whatever was at the destination is left untouched. Only a folder
simdist wrote is replaced (``overwrite=True``), never the current directory or one above it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform as _platform
from pathlib import Path
from typing import Any

import pandas as pd

from . import metrics, tracefile
from .content_hash import content_hash, simdist_version
from .errors import InputError
from .ledger import ledger_table
from .metrics import jsonable
from .outdir import staged_dir
from .link_outputs import link_usage_table
from .result_files import (EVENTS, LEDGER, LINK_USAGE, MANIFEST, PLOTS_DIR, RESULT_FILES, SUMMARY, TRACE, LoadedResult,
                           load_result_dir, load_tables, parquet_name)
from .run_result import LinkStats, RankInfo, RunResult

__all__ = [
    "RankInfo",
    "LinkStats",
    "RunResult",
    "LoadedResult",
    "RESULT_FILES",
    "write_result_dir",
    "require_parquet",
    "parquet_table",
    "result_tables",
    "load_result_dir",
    "build_manifest",
    "content_hash",
    "package_versions",
]


# --------------------------------------------------------------------------- the directory

_PACKAGES = ("torch", "numpy", "pandas", "simpy", "pydantic")
_FLOAT_FORMAT = "%.12g"


def write_result_dir(result: RunResult, out_dir: str | os.PathLike[str], *, overwrite: bool = False,
                     plots: bool = True, parquet: bool = False) -> Path:
    """Write ``result`` as a result directory at ``out_dir``, atomically; returns ``Path(out_dir)``.

    An existing non-empty ``out_dir`` is an :class:`~simdist.errors.InputError` unless
    ``overwrite`` and simdist wrote it (:mod:`simdist.outdir`); then it is replaced only once
    the new directory is complete. The parent directory is created if missing.
    ``plots=False`` leaves out ``plots/``; ``parquet=True`` writes every table as Parquet too
    (``steps.parquet`` beside ``steps.csv`` ...; needs pyarrow: the ``parquet`` extra). The
    scenario's ``outputs`` section adds to these: ``parquet: true`` asks for Parquet as the
    argument does, ``trace: false`` leaves out ``trace.json`` (and so the timeline figure).
    """
    parquet = parquet or bool(_outputs(result).get("parquet", False))
    if parquet:
        require_parquet()  # before anything is written
    out = Path(out_dir)
    with staged_dir(out, kind="run", overwrite=overwrite) as tmp:
        _write_contents(result, tmp, plots=plots, parquet=parquet)
    return out


def require_parquet() -> None:
    """An :class:`~simdist.errors.InputError` (exit 2) unless pyarrow can write Parquet files."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise InputError("writing Parquet tables needs pyarrow: pip install 'simdist[parquet]' (or pyarrow)",
                         source="--parquet") from None


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
    """The ``manifest.json`` object of ``result`` (``files``: paths relative to the directory).

    ``inputs`` lists the files the run read on its scenario's word with their SHA-256 and
    simdist's version (:mod:`simdist.content_hash`), all of which ``content_hash`` covers; a
    runtime that does not list them (``result.extra["inputs"]`` absent) records ``files: null``.
    """
    inputs = result.extra.get("inputs") or {"simdist_version": simdist_version(), "files": None}
    return {
        "simdist_version": inputs["simdist_version"],
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
        # the allreduce schedule of calls that name none, and whose choice it is (scenario, platform, default)
        "collective_schedule": jsonable(result.extra.get("collective_schedule")),
        # per-byte CPU of messages (LogGOPS O): measured (platform.messages) or the link kinds' own
        "message_copies": jsonable(result.extra.get("message_copies") or []),
        # the runtime's turn between two requests (platform.calls): charged with its source, or not
        "runtime_calls": jsonable(result.extra.get("runtime_calls")),
        # the workers as one lockstep process or one process each, and why (simdist run --per-rank forces the latter)
        "execution": jsonable(result.extra.get("execution") or {}),
        # per device and op (update, average, ...): measured by calibrate compute, or estimated
        "op_costs": jsonable(result.extra.get("op_costs") or []),
        # what a batch costs to load (per sample, measured, estimated or cited) and the loader model
        "data_loading": jsonable(result.extra.get("data_loading")),
        # the training samples held out for validation (workload.validation_split), and those left to train on
        "validation_split": jsonable(result.extra.get("validation_split")),
        # the job's validation pass and checkpoint at epoch ends (simdist.training.epoch_end); null: none
        "epoch_end": jsonable(result.extra.get("epoch_end")),
        "packages": package_versions(),
        "inputs": jsonable(inputs),
        "content_hash": content_hash(result.scenario, result.platform, result.seed, inputs),
        "summary": summary,
        "files": list(files),
    }


def result_tables(result: RunResult) -> dict[str, Any]:
    """The tables of ``result`` as DataFrames, keyed by their file name in the result directory."""
    return {
        "steps.csv": metrics.steps_table(result),
        "evals.csv": metrics.evals_table(result),
        "workers.csv": metrics.workers_table(result),
        "links.csv": metrics.links_table(result),
        EVENTS: metrics.events_table(result),
        LEDGER: ledger_table(metrics.spans_table(result),
                             uncovered="update" if result.extra.get("runtime") == "mpi" else "wait"),
        LINK_USAGE: link_usage_table(result),  # header only where not kept (real runs, outputs.link_usage false)
    }


# --------------------------------------------------------------------------- helpers


def _outputs(result: RunResult) -> dict[str, Any]:
    """The run's ``outputs`` section as resolved (empty for a result built without one)."""
    outputs = result.scenario.get("outputs") if isinstance(result.scenario, dict) else None
    return outputs if isinstance(outputs, dict) else {}


def parquet_table(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` as Parquet stores it: a column of mixed Python types (an event field that is a
    number in one event and text in another) becomes text, as it reads back from the CSV."""
    out = table.copy()
    for column in out.columns[out.dtypes == object]:
        kinds = {type(v) for v in out[column] if v is not None and not (isinstance(v, float) and v != v)}
        if len(kinds) > 1:
            out[column] = out[column].map(lambda v: v if v is None or (isinstance(v, float) and v != v) else str(v))
    return out


def _write_contents(result: RunResult, directory: Path, *, plots: bool, parquet: bool = False) -> None:
    summary = metrics.summarize(result)
    (directory / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    for name, table in result_tables(result).items():
        table.to_csv(directory / name, index=False, float_format=_FLOAT_FORMAT)
        if parquet:
            parquet_table(table).to_parquet(directory / parquet_name(name), index=False)
    if _outputs(result).get("trace", True):
        tracefile.write_chrome_trace(result, directory / TRACE)
    manifest = build_manifest(result, summary, files=[])
    if plots:
        from . import plots as plotting

        plotting.plot_tables(load_tables(directory, manifest), directory / PLOTS_DIR)
    manifest["files"] = sorted(
        [MANIFEST] + [p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()]
    )
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2, allow_nan=False) + "\n", encoding="utf-8")
