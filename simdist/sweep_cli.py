"""The ``simdist sweep`` and ``simdist report`` commands.

    simdist sweep SCENARIO [--out DIR] [--backend local|dask] [--jobs N] [--scheduler ADDR]
                           [--set key=value]... [--no-plots] [--quiet]
    simdist report SWEEP_DIR [--out REPORTS_DIR] [--name NAME] [--baseline ALGORITHM[@WORKERS]]

``sweep`` runs the points of the scenario's ``sweep:`` axes not yet complete in DIR (a rerun
after an interruption finishes the rest), writes ``DIR/sweep.csv``, and lists failed points
(exit status 1 when any failed; the others are kept). ``report`` reads a sweep folder and
writes ``REPORTS_DIR/<name>/index.md`` and ``index.html`` with its figures; it never simulates.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .argtypes import int_between

__all__ = ["add_sweep_parsers", "MAX_JOBS"]

MAX_JOBS = 1024  # points run at once; more processes than this is a typo, not a machine


def add_sweep_parsers(subparsers) -> None:
    """Add ``sweep`` and ``report`` to the ``simdist`` sub-command parsers (each sets ``func``)."""
    sweep = subparsers.add_parser("sweep", help="run a scenario's 'sweep' points (resumable), write DIR/sweep.csv")
    sweep.add_argument("scenario", help="scenario YAML file with a 'sweep' section")
    sweep.add_argument("--out", help="sweep folder (default: results/<scenario name>)")
    sweep.add_argument("--backend", choices=("local", "dask"), default="local",
                       help="local process pool (default) or a Dask distributed cluster")
    sweep.add_argument("--jobs", type=int_between(1, MAX_JOBS), default=None, metavar="N",
                       help=f"points run at once, 1 to {MAX_JOBS} (default: CPU count; dask: LocalCluster workers)")
    sweep.add_argument("--scheduler", metavar="ADDR", help="dask: address of a running scheduler (tcp://host:8786)")
    sweep.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a field of every point (repeatable)")
    sweep.add_argument("--no-plots", action="store_true", help="skip each point's figures")
    sweep.add_argument("--quiet", action="store_true", help="no progress and no table on stdout")
    sweep.add_argument("--force", action="store_true",
                       help="run even where a point's work estimate exceeds the host's memory or 6 h")
    sweep.set_defaults(func=_cmd_sweep)

    report = subparsers.add_parser("report", help="write a report (Markdown + HTML + figures) from a sweep folder")
    report.add_argument("sweep_dir", help="a folder written by simdist sweep")
    report.add_argument("--out", default="reports", help="reports folder (default: reports)")
    report.add_argument("--name", help="report name (default: the sweep's scenario name)")
    report.add_argument("--baseline", metavar="ALGORITHM[@WORKERS]", default=None,
                        help="the point speedup and efficiency are measured against (default sync@1; where the sweep "
                             "has none, a fallback the report names)")
    report.set_defaults(func=_cmd_report)


class _SweepProgress:
    """A rich progress bar (points done, ETA) on stderr, only when stderr is a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None
        self.task = None

    def start(self, total: int, done: int) -> None:
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self.bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[status]}"),
                            console=Console(stderr=True), transient=True)
        self.bar.start()
        self.task = self.bar.add_task("sweep", total=total, completed=done, status="")

    def advance(self, status: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1, status=status)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _cmd_sweep(args) -> int:
    from .osatomic import Terminated
    from .scenario import read_scenario_file
    from .sweeps import run_sweep

    from .outdir import default_out_dir

    name = read_scenario_file(args.scenario).get("name", Path(args.scenario).stem)
    out = Path(args.out) if args.out else default_out_dir(str(name), args.scenario)
    bar = _SweepProgress(not args.quiet and sys.stderr.isatty())

    def on_start(total: int, done: int) -> None:
        if not args.quiet:
            print(f"sweep {name}: {total} points, {done} already done, {total - done} to run", flush=True)
        bar.start(total, done)

    def on_stale(point, reason) -> None:
        if not args.quiet:
            print(f"  recomputing {point.label} [{point.key}]: {reason}", flush=True)

    def on_point(point, result) -> None:
        bar.advance(point.label)
        if result.error is not None:
            print(f"  FAILED {point.label} [{point.key}]: {result.error}", file=sys.stderr, flush=True)

    try:
        outcome = run_sweep(args.scenario, out, overrides=args.overrides, backend=args.backend, jobs=args.jobs,
                            scheduler=args.scheduler, plots=False if args.no_plots else None,
                            on_start=on_start, on_point=on_point, force=args.force, on_stale=on_stale)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated)
        bar.close()
        print(f"simdist: interrupted; completed points are kept in {out}; rerun the same command to finish",
              file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    finally:
        bar.close()
    if not args.quiet:
        import pandas as pd

        table = pd.read_csv(out / "sweep.csv")
        cols = [c for c in ("point", "status", "virtual_time_s", "steps", "final_test_accuracy",
                            "time_to_accuracy_s", "mean_staleness") if c in table]
        print(f"wrote {out}/sweep.csv ({len(table)} of {len(outcome.points)} points)")
        if len(table):
            print(table[cols].to_string(index=False))
    if outcome.failures:
        print(f"simdist: {len(outcome.failures)} point(s) failed; see {out}/failures.csv", file=sys.stderr)
        return 1
    return 0


def _cmd_report(args) -> int:
    from .report import write_report

    path = write_report(args.sweep_dir, args.out, name=args.name, baseline=args.baseline)
    print(f"wrote {path}")
    print(f"wrote {path.with_suffix('.html')}")
    return 0
