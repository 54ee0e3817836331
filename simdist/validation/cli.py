"""``simdist validate SCENARIO --ranks N``: a real MPI run against its simulation.

    simdist validate SCENARIO --ranks N [--out DIR] [--set KEY=VALUE]... [--threads T]
                     [--affinity auto|none|'0;1;1;0'] [--network-overlay FILE] [--profile FILE]
                     [--cores C] [--calibrate pilot|isolated] [--pilot-runs 1|2] [--pilot-iterations K]
                     [--repeat-real] [--timeout-s S] [--no-plots]

Writes ``DIR/pilot`` and ``DIR/pilot-after`` (the calibrating runs, with ``--calibrate pilot``), ``DIR/real`` and
``DIR/sim`` (result directories; ``DIR/real-again`` with ``--repeat-real``), ``DIR/validation.csv``,
``DIR/validation.json`` (the summary) and ``DIR/timeline_overlay.png``; prints the verdict: the deciding
figures, simulated against real, each with its error and target (:mod:`.verdict`), and where the summary is.
:func:`add_validate_parser` adds the command and sets ``func`` to the handler.
"""

from __future__ import annotations

import argparse

from ..argtypes import int_between, positive_float

__all__ = ["add_validate_parser"]


def add_validate_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("validate", help="run a scenario for real under mpiexec and compare with its simulation")
    parser.add_argument("scenario", help="scenario YAML file")
    parser.add_argument("--ranks", type=int_between(1), required=True, help="MPI processes (= platform ranks, servers included)")
    parser.add_argument("--out", help="output folder (default: results/validate-<scenario name>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario field in both runs (repeatable)")
    parser.add_argument("--threads", "--cpus-per-rank", dest="threads", type=int_between(1), default=None,
                        help="torch threads per rank (default: the scenario's compute.threads)")
    parser.add_argument("--affinity", default="auto",
                        help="cores per rank: 'auto' (default: not pinned on one node; a slice of the cores per "
                             "simulated node), 'none', or ';'-separated core lists such as '0;1;1;0' (ranks 1 and 2 "
                             "share core 1); the simulation is given the same sharing")
    parser.add_argument("--network-overlay", default=None,
                        help="platform overlay for the simulation (default: calibration/platforms/host-shm.yaml)")
    parser.add_argument("--profile", default=None,
                        help="compute profile for the simulation (default: calibrated from the real run's workers)")
    parser.add_argument("--cores", type=positive_float, default=None,
                        help="cores per node the simulation shares among the ranks (default: from the placement)")
    parser.add_argument("--calibrate", default="pilot", choices=("pilot", "isolated"),
                        help="pilot (default): a short real run of the same scenario and placement calibrates the "
                             "simulation; isolated: forward/backward and network timed around the compared run, host "
                             "work read from its trace (quicker)")
    parser.add_argument("--pilot-runs", type=int, default=2, choices=(1, 2),
                        help="pilot runs: 1 before the compared run, or 2 (default) before and after it, averaged, "
                             "so that a drift of the host's speed is bracketed")
    parser.add_argument("--pilot-iterations", type=int_between(1), default=None,
                        help="iterations per worker of the pilot run (default 12; the first 2 are warm-up)")
    parser.add_argument("--repeat-real", action="store_true",
                        help="run the scenario for real a second time and compare the two real runs (summary "
                             "real_again): how far this machine repeats itself per iteration, the floor under "
                             "the simulation's per-iteration error")
    parser.add_argument("--timeout-s", type=positive_float, default=600.0, help="limit of the real run (seconds)")
    parser.add_argument("--no-plots", action="store_true", help="no figures")
    parser.set_defaults(func=_cmd_validate)
    return parser


class _StageBar:
    """A rich progress bar on stderr, one step per stage of the validation (pilot, real run, simulation ...)."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar, self.task = enabled, None, None

    def __call__(self, done: int, total: int, stage: str) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("validate"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                TextColumn("{task.fields[stage]}"), console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("validate", total=total, stage="")
        self.bar.update(self.task, completed=done, total=total, stage=stage)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _cmd_validate(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from .run import validate
    from .verdict import print_verdict

    out = args.out or f"results/validate-{Path(args.scenario).stem}"
    bar = _StageBar(sys.stderr.isatty())
    try:
        summary = validate(args.scenario, args.ranks, out, overrides=args.overrides, threads=args.threads,
                           affinity=args.affinity, overlay=args.network_overlay, profile=args.profile,
                           cores=args.cores, calibrate=args.calibrate, pilot_iterations=args.pilot_iterations,
                           pilot_runs=args.pilot_runs, repeat_real=args.repeat_real, timeout_s=args.timeout_s,
                           plots=not args.no_plots, progress=bar)
    finally:
        bar.close()
    print_verdict(summary, str(Path(out) / "validation.json"))
    return 0
