"""The ``simdist`` command line.

    simdist run SCENARIO [--out DIR] [--set key=value]... [--timing-only] [--overwrite]
    simdist compare SCENARIO [--out DIR] [--set key=value]... [--only LABEL]... [--overwrite]
    simdist plot RESULT_DIR [--out DIR]
    simdist calibrate compute|network|trace|cpu-share ...
    simdist validate SCENARIO --ranks N [--out DIR] ...
    simdist sweep SCENARIO [--out DIR] [--backend local|dask] [--jobs N]
    simdist report SWEEP_DIR [--out reports]
    simdist list algorithms|platforms|models|datasets|collectives|links|devices|network-models
    simdist schema
    simdist examples [copy NAME [DEST]]
    simdist --version

Bad input (scenario, platform, profile, argument) prints one line naming the file, the field
and what is allowed, and exits with status 2; nothing already written is lost.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from . import __version__
from .errors import InputError
from .outdir import default_out_dir

__all__ = ["main", "build_parser"]

EXIT_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit status 2."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(EXIT_INPUT, f"{self.prog}: error: {message} (see --help)\n")


def _registries():
    from .algorithms import ALGORITHMS
    from .platform import DEVICE_KINDS, LINK_KINDS, PLATFORMS
    from .platform.fabrics import FABRICS
    from .platform.network import NETWORK_MODELS
    from .runtime.collectives import COLLECTIVES
    from .training.datasets import DATASETS
    from .training.models import MODELS

    return {"algorithms": ALGORITHMS, "platforms": PLATFORMS, "models": MODELS, "datasets": DATASETS,
            "collectives": COLLECTIVES, "links": LINK_KINDS, "devices": DEVICE_KINDS,
            "network-models": NETWORK_MODELS, "topologies": FABRICS}


LIST_KINDS = ("algorithms", "platforms", "models", "datasets", "collectives", "links", "devices", "network-models",
              "topologies")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="simdist", description="Discrete-event simulator of data-parallel neural-network training.")
    parser.add_argument("--version", action="version", version=f"simdist {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="simulate a scenario and write its result directory")
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument("--out", help="result directory (default: results/<scenario name>)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a scenario field by dotted path, e.g. --set workload.batch_size=64 (repeatable)")
    run.add_argument("--timing-only", action="store_true", help="no tensors: payload sizes from the parameter count")
    run.add_argument("--overwrite", action="store_true", help="replace an existing result directory")
    run.add_argument("--no-plots", action="store_true", help="skip the plots/ folder")
    run.add_argument("--parquet", action="store_true",
                     help="write every table as Parquet too (steps.parquet beside steps.csv ...; needs pyarrow)")
    run.add_argument("--quiet", action="store_true", help="no progress bar and no summary on stdout")
    run.add_argument("--per-rank", action="store_true", help=(
        "one simulated process per rank even where the workers could move as one lockstep process "
        "(same results, slower: for debugging; manifest.json's execution says which ran)"))
    run.add_argument("--force", action="store_true",
                     help="run even where the work estimate exceeds the host's memory or 6 h (docs/reliability.md)")

    compare = sub.add_parser("compare", help="run a scenario's 'compare' variants and overlay their results")
    compare.add_argument("scenario", help="scenario YAML file with a 'compare' list")
    compare.add_argument("--out", help="folder for the variants' results (default: results/<scenario name>)")
    compare.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="override a field of every variant (repeatable)")
    compare.add_argument("--only", action="append", default=[], metavar="LABEL", help="run only these variants")
    compare.add_argument("--overwrite", action="store_true", help="replace existing result directories")
    compare.add_argument("--no-plots", action="store_true", help="skip all figures")
    compare.add_argument("--quiet", action="store_true", help="no progress and no table on stdout")
    compare.add_argument("--force", action="store_true",
                         help="run even where a variant's work estimate exceeds the host's memory or 6 h")

    plot = sub.add_parser("plot", help="(re)draw the plots of a result directory from its tables")
    plot.add_argument("result", help="a result directory written by simdist run")
    plot.add_argument("--out", help="folder for the figures (default: RESULT/plots)")

    lister = sub.add_parser("list", help="list registered components")
    lister.add_argument("kind", choices=LIST_KINDS)

    sub.add_parser("schema", help="print the JSON Schema of scenario files")

    from .calibrate.cli import add_calibrate_parser
    from .examples import add_examples_parser
    from .validation.cli import add_validate_parser
    from .sweep_cli import add_sweep_parsers

    add_calibrate_parser(sub)
    add_validate_parser(sub)
    add_sweep_parsers(sub)
    add_examples_parser(sub)
    return parser


class _LazyProgress:
    """A rich progress bar on stderr that appears only once a run has taken over a second."""

    def __init__(self, label: str, enabled: bool):
        self.label, self.enabled = label, enabled
        self.start = time.perf_counter()
        self.bar = None
        self.task = None

    def __call__(self, fraction: float, status: str) -> None:
        if not self.enabled or time.perf_counter() - self.start < 1.0:
            return
        if self.bar is None:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                                TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[status]}"),
                                transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=1.0, status="")
        self.bar.update(self.task, completed=fraction, status=status)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _cmd_run(args) -> int:
    from .outdir import check_out_dir
    from .results import write_result_dir
    from .scenario import load_scenario
    from .simulate import simulate

    scenario = load_scenario(args.scenario, args.overrides, timing_only=args.timing_only)
    out = Path(args.out) if args.out else default_out_dir(scenario.name, args.scenario)
    check_estimate(scenario, force=args.force, quiet=args.quiet)  # the input first: a refusal names the scenario
    check_out_dir(out, kind="run", overwrite=args.overwrite)  # before simulating; checked again when written
    if args.parquet:
        from .results import require_parquet

        require_parquet()  # before simulating: a missing pyarrow is known now
    progress = _LazyProgress(f"{scenario.name} ({scenario.algorithm_name})", not args.quiet and sys.stderr.isatty())
    try:
        result = simulate(scenario, progress=progress, per_rank=args.per_rank)
    finally:
        progress.close()
    path = write_result_dir(result, out, overwrite=args.overwrite, plots=scenario.outputs.plots and not args.no_plots,
                            parquet=args.parquet)
    if not args.quiet:
        from .metrics import summarize

        summary = summarize(result)
        shown = {k: summary[k] for k in ("algorithm", "workers", "status", "virtual_time_s", "steps",
                                         "final_test_accuracy", "time_to_accuracy_s", "mean_staleness",
                                         "wall_time_s") if k in summary}
        print(f"wrote {path}")
        print("  " + "  ".join(f"{k}={_fmt(v)}" for k, v in shown.items()))
    return 0


def check_estimate(scenario, *, force: bool, quiet: bool = True) -> None:
    """Refuse a scenario whose estimated memory or wall time is beyond the host (unless ``force``);
    say what a run will cost when it is long enough to wait for."""
    from .estimate import refuse_excess_work

    estimate = refuse_excess_work(scenario, force=force)
    if not quiet and estimate.wall_s > 60:
        print(f"simdist: estimate: {estimate.describe()}", file=sys.stderr)


def _cmd_compare(args) -> int:
    from .comparison import run_comparison
    from .scenario import read_scenario_file

    name = read_scenario_file(args.scenario).get("name", Path(args.scenario).stem)
    out = Path(args.out) if args.out else default_out_dir(str(name), args.scenario)
    bars: list[_LazyProgress] = []

    def progress(label: str):
        bar = _LazyProgress(label, not args.quiet and sys.stderr.isatty())
        bars.append(bar)
        return bar

    def announce(label: str) -> None:
        bars[-1].close() if bars else None
        if not args.quiet:
            print(f"  {label}: done", flush=True)

    run_comparison(args.scenario, out, overrides=args.overrides, only=args.only or None, overwrite=args.overwrite,
                   plots=not args.no_plots, progress=progress, announce=announce, force=args.force)
    if not args.quiet:
        import pandas as pd

        table = pd.read_csv(out / "compare.csv")
        cols = [c for c in ("label", "algorithm", "workers", "status", "virtual_time_s", "steps",
                            "final_test_accuracy", "time_to_accuracy_s", "mean_staleness", "p95_staleness")
                if c in table]
        print(f"wrote {out}/compare.csv")
        print(table[cols].to_string(index=False))
    return 0


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _cmd_plot(args) -> int:
    from .plots import plot_result_dir

    for path in plot_result_dir(Path(args.result), Path(args.out) if args.out else None):
        print(path)
    return 0


def _cmd_list(args) -> int:
    registry = _registries()[args.kind]
    width = max((len(e.name) for e in registry), default=0)
    for entry in registry:
        line = f"{entry.name:<{width}}  {entry.description}"
        if entry.citation:
            line += f"  [{entry.citation}]"
        print(line)
    return 0


def _cmd_schema(args) -> int:
    from .scenario import scenario_json_schema

    print(json.dumps(scenario_json_schema(), indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from .osatomic import Terminated, sigterm_as_interrupt

    args = build_parser().parse_args(argv)
    handlers = {"run": _cmd_run, "compare": _cmd_compare, "plot": _cmd_plot, "list": _cmd_list, "schema": _cmd_schema}
    try:
        with sigterm_as_interrupt():  # SIGTERM unwinds like Ctrl-C: temporary output is removed
            if args.command in handlers:
                return handlers[args.command](args)
            return args.func(args)  # calibrate, validate, sweep, report
    except InputError as exc:
        print(f"simdist: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:  # stdout closed early (| head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(f"simdist: {'terminated' if terminated else 'interrupted'}; output being written was left as it "
              "was or completed, never half-written", file=sys.stderr)
        return 143 if terminated else 130  # 128 + the signal's number, as a shell reports it


if __name__ == "__main__":
    sys.exit(main())
