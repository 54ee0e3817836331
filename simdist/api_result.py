"""The result of one run in Python: :class:`Result`, what a result directory holds, in memory.

A :class:`Result` comes from :func:`simdist.run` (built from the simulation's
:class:`~simdist.run_result.RunResult` by the builders that write ``simdist run --out``'s
directory, :func:`simdist.results.result_tables` and :func:`simdist.metrics.summarize`) or
from :func:`simdist.load` (read back by :func:`simdist.result_files.load_result_dir`), so a
table in memory and the same table on disk are one table. Figures are drawn by
:func:`simdist.plots.figure` from the tables, never by re-running; :meth:`Result.save`
writes the directory with the same writer as the command line. See docs/python-api.md.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from . import plots as plotting
from .errors import InputError
from .ledger import LEDGER_COLUMNS
from .link_outputs import LINK_USAGE_COLUMNS
from .metrics import summarize
from .outdir import MARKER, staged_dir
from .result_files import MANIFEST, PLOTS_DIR, TRACE, LoadedResult, load_result_dir, load_tables
from .results import build_manifest, result_tables, write_result_dir
from .run_result import RunResult
from .tracefile import write_chrome_trace

__all__ = ["Result", "TABLE_NAMES"]

TABLE_NAMES = ("steps", "evals", "workers", "links", "events", "ledger", "link_usage")  # each <name>.csv on disk
_EVENTS_COLUMNS = ("time_s", "rank", "kind")  # what events.csv always has (metrics.events_table)


class Result:
    """One run: ``summary`` and ``manifest`` (dicts), its tables as DataFrames, its figures.

    Attributes (each table is the file of the same name in the result directory):

    * ``summary``: the run's figures, the keys of ``summary.json`` (:data:`simdist.metrics.SUMMARY_KEYS`);
    * ``manifest``: ``manifest.json`` (resolved scenario and platform, seed, versions, content
      hash); its ``files`` list is empty until the result is written;
    * ``steps``, ``evals``, ``workers``, ``links``, ``events``, ``ledger``, ``link_usage``: DataFrames
      (``link_usage``: each link's bytes, utilisation and flows per time bin, :mod:`simdist.link_outputs`);
    * ``path``: the result directory it was written to or read from, or None.

    Build one with :func:`simdist.run` or :func:`simdist.load`, not directly.
    """

    def __init__(self, *, summary: dict[str, Any], manifest: dict[str, Any], tables: dict[str, pd.DataFrame],
                 path: Path | None = None, run: RunResult | None = None):
        self.summary = summary
        self.manifest = manifest
        self.steps: pd.DataFrame = tables["steps"]
        self.evals: pd.DataFrame = tables["evals"]
        self.workers: pd.DataFrame = tables["workers"]
        self.links: pd.DataFrame = tables["links"]
        self.events: pd.DataFrame = tables["events"]
        self.ledger: pd.DataFrame = tables["ledger"]
        self.link_usage: pd.DataFrame = tables["link_usage"]
        self.path = path
        self._run = run

    @classmethod
    def from_run(cls, run: RunResult, path: Path | None = None) -> "Result":
        """The result of a simulation; ``path``: the directory it was written to (its manifest is read)."""
        summary = summarize(run)
        tables = {name.removesuffix(".csv"): table for name, table in result_tables(run).items()}
        manifest = (json.loads((path / MANIFEST).read_text(encoding="utf-8")) if path is not None
                    else build_manifest(run, summary, files=[]))
        return cls(summary=summary, manifest=manifest, tables=tables, path=path, run=run)

    @classmethod
    def from_dir(cls, path: str | os.PathLike[str]) -> "Result":
        """The result directory at ``path``; :class:`InputError` if it is not one."""
        loaded = load_result_dir(path)
        empty_events = pd.DataFrame(columns=list(_EVENTS_COLUMNS))
        empty_ledger = pd.DataFrame(columns=list(LEDGER_COLUMNS))
        tables = {"steps": loaded.steps, "evals": loaded.evals, "workers": loaded.workers, "links": loaded.links,
                  "events": loaded.events if loaded.events is not None else empty_events,
                  "ledger": loaded.ledger if loaded.ledger is not None else empty_ledger,
                  "link_usage": loaded.link_usage if loaded.link_usage is not None
                  else pd.DataFrame(columns=list(LINK_USAGE_COLUMNS))}
        return cls(summary=loaded.summary, manifest=loaded.manifest, tables=tables, path=loaded.path)

    # ------------------------------------------------------------------ what it is

    @property
    def scenario(self) -> dict[str, Any]:
        """The resolved scenario the run simulated (``manifest["scenario"]``)."""
        return self.manifest.get("scenario") or {}

    def __repr__(self) -> str:
        s = self.summary
        accuracy = s.get("final_test_accuracy")
        shown = [f"{s.get('algorithm') or '?'}", f"{s.get('workers')} workers",
                 f"virtual time {_fmt(s.get('virtual_time_s'))} s", f"{s.get('steps')} steps",
                 "final accuracy " + ("n/a" if accuracy is None else _fmt(accuracy)), f"status {s.get('status')}"]
        where = f", path={str(self.path)!r}" if self.path is not None else ""
        return f"<simdist.Result {', '.join(shown)}{where}>"

    # ------------------------------------------------------------------ figures

    def plot(self, name: str) -> Figure:
        """Figure ``name`` (one of :data:`simdist.plots.FIGURES`) drawn from the tables, as a
        :class:`matplotlib.figure.Figure`; where the run has no data for it (a timing-only run has
        no loss or accuracy), a figure that says so."""
        if name not in plotting.FIGURES:
            raise InputError(f"unknown figure {name!r}; known: {', '.join(plotting.FIGURES)}", source="plot")
        with tempfile.TemporaryDirectory(prefix="simdist-plot-") as tmp:
            fig = plotting.figure(self._loaded(Path(tmp), trace=name == "timeline"), name)
        return fig if fig is not None else _no_data_figure(name)

    def plot_loss(self) -> Figure:
        """Training loss per update and test loss against virtual time."""
        return self.plot("loss_vs_time")

    def plot_accuracy(self) -> Figure:
        """Each evaluated worker's test accuracy against virtual time, with the target."""
        return self.plot("accuracy_vs_time")

    def plot_staleness(self) -> Figure:
        """Histogram of the staleness (model versions) of the applied updates."""
        return self.plot("staleness_hist")

    def plot_timeline(self) -> Figure:
        """One row per rank, its compute / comm / wait spans (the first spans of a long run)."""
        return self.plot("timeline")

    def _loaded(self, scratch: Path, *, trace: bool) -> LoadedResult:
        """The tables as plots read them; ``scratch`` holds the trace of a result never written."""
        directory = self.path
        if directory is None or not (directory / TRACE).is_file():
            directory = scratch
            if trace and self._run is not None:
                write_chrome_trace(self._run, scratch / TRACE)
        return LoadedResult(path=directory, manifest=self.manifest, summary=self.summary, steps=self.steps,
                            evals=self.evals, workers=self.workers, links=self.links, ledger=self.ledger,
                            events=self.events, link_usage=self.link_usage)

    # ------------------------------------------------------------------ writing

    def save(self, directory: str | os.PathLike[str], *, overwrite: bool = False, plots: bool | None = None,
             parquet: bool = False) -> Path:
        """Write the result directory at ``directory`` as ``simdist run --out`` does (atomically);
        returns its path.

        An existing non-empty directory is refused (:class:`InputError`) unless ``overwrite``
        and simdist wrote it. ``plots``: draw ``plots/`` (default: the scenario's
        ``outputs.plots`` for a run's result; a loaded result keeps what its directory had).
        ``parquet``: a run's tables as Parquet too, as ``simdist run --parquet`` (a loaded result
        is copied as it is).
        """
        if self._run is not None:
            draw = bool((self.scenario.get("outputs") or {}).get("plots", True)) if plots is None else plots
            return write_result_dir(self._run, directory, overwrite=overwrite, plots=draw, parquet=parquet)
        if parquet:
            raise InputError("Parquet tables are written when a run is saved; a loaded result is copied as it is",
                             source="save(parquet=True)")
        if self.path is None:
            raise InputError("this result has neither a run nor a directory to save from", source="save")
        return self._copy_dir(self.path, Path(directory), overwrite=overwrite, plots=plots)

    def _copy_dir(self, source: Path, out: Path, *, overwrite: bool, plots: bool | None) -> Path:
        """The loaded result's directory ``source`` copied to ``out``; the manifest's file list brought up to date."""
        with staged_dir(out, kind="run", overwrite=overwrite) as tmp:
            for item in sorted(source.iterdir()):
                if item.name in (MARKER, MANIFEST) or (item.name == PLOTS_DIR and plots is False):
                    continue
                copy = shutil.copytree if item.is_dir() else shutil.copy2
                copy(item, tmp / item.name)
            manifest = dict(self.manifest)
            if plots and not (tmp / PLOTS_DIR).is_dir():
                plotting.plot_tables(load_tables(tmp, manifest), tmp / PLOTS_DIR)
            files = {MANIFEST, *(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file())}
            manifest["files"] = sorted(files)
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        return out


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _no_data_figure(name: str) -> Figure:
    """A figure saying that the run holds no data for ``name`` (timing-only runs have no loss)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(figsize=(7, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, f"{name}: this run recorded no data for it", ha="center", va="center")
    return fig

