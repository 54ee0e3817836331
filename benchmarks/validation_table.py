"""Real-vs-simulated iteration time of every algorithm at 2 and 4 ranks on this machine.

    python benchmarks/validation_table.py [--ranks 2,4] [--algorithms sync,asgd,...] [--no-hetero]
                                          [--calibrate pilot|isolated] [--pilot-runs 1|2] [--wait-idle S] [--retries N]
                                          [--repeats N] [--repeat-real] [--out results/validation_table]

Each point is ``simdist validate`` (simdist.validation.validate) of scenarios/quickstart.yaml
with the algorithm swapped in and a workload whose steps the compute model has to get right
(``--workload``, see WORKLOADS): by default an MLP [512, 512] on a synthetic 64-feature dataset,
batch 2048 per worker, a forward/backward of about 45 ms at one torch thread, many of the
scheduler's time slices long (the quickstart MLP [128] at batch 32 takes 0.1 ms, so the driver's
per-step Python work would dominate whatever the simulator predicts; steps of one slice leave
the ranks sharing a core to the scheduler's turns, which processor sharing does not follow). Parameter-server
algorithms use the last rank as server; daso runs on 2 simulated nodes of ranks/2 ranks, each
node pinned to half of the cores; nnt needs a ring of >= 3 workers, so its "2" row is a 3-ring.
The heterogeneous rows (asgd and dbs, 3 workers + server on 2 cores pinned '0;1;1;0': worker 0
has core 0 to itself but for the server, workers 1 and 2 share core 1) are described to the
simulator by the pinning alone (validate derives the CPU shares).

Prints, per point: median and p90 absolute % error of iteration time (first iteration of each
worker left out), total-time error, the final-loss difference at the common step budget, both
mean stalenesses, how much CPU other processes used during the real run or its pilot (cores,
the larger), the CPU other virtual machines stole from this one during the real run (cores),
how far the host's speed moved between the pilot and the compared run (isolated
forward/backward timing, largest |%| of before and after the run), the real
forward/backwards' wall / CPU time against the simulated one, the replay diagnostic (the
simulation given the compute cost the run itself measured; see simdist.validation), and how
many compared iterations had another batch size in the simulation (dbs rescales batches from
the iteration times it sees, so a near tie can go either way in the two runs). The
host's load averages are printed before and after: on a host shared with other work the real
times are not the machine's; ``--wait-idle`` and ``--retries`` wait for the host to be idle
before each point and run a point again when other processes took more than 0.1 core or the
host's speed moved more than 10 % between the pilot and the compared run. ``--repeats N``
validates every point N times and prints each run's figures; the row is then the run with the
median median-error (single runs move by 10 points on a shared host). ``--repeat-real`` runs
every point for real a second time and prints how far the two real runs differ per iteration
once the second is scaled to the first's level (``again med/p90``; see
simdist.validation.repeatability): the floor under any prediction's per-iteration error on
this machine. A point that fails prints its error and the table goes on.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from simdist.validation import validate

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"
BASE = ["stop.steps=60", "stop.epochs=60", "evaluation.max_samples=200", "workload.model={name: mlp, hidden: [512, 512]}"]
WORKLOADS = {  # name: (overrides, what it is for)
    "standard": (["workload.dataset={name: synthetic, samples: 40000, features: 64}", "workload.batch_size=2048"],
                 "MLP [512, 512], synthetic 64 features, batch 2048: a forward/backward of about 45 ms of CPU, "
                 "many of the scheduler's time slices"),
    "short-steps": (["workload.batch_size=256"],
                    "MLP [512, 512] on digits, batch 256: about 3-6 ms of CPU, the length of a time slice; "
                    "shows what CFS's slicing does to shared cores"),
}
COMMON = BASE + WORKLOADS["standard"][0]
HETERO = {"asgd": "0;1;1;0", "dbs": "0;1;1;0"}  # 3 workers + server (rank 3) on 2 cores


def overrides(algorithm: str, ranks: int) -> list[str] | None:
    """Scenario overrides of one point; None where the algorithm cannot run on ``ranks`` ranks."""
    if algorithm == "sync":
        return ["algorithm={name: sync}"]
    if algorithm in ("asgd", "nsoftsync", "dbs"):
        return [f"workers={ranks - 1}", f"algorithm={{name: {algorithm}}}"]
    if algorithm == "daso":  # 2 "nodes" x ranks/2
        return None if ranks % 2 else ["platform.nodes=2", f"platform.node.devices={ranks // 2}",
                                       "algorithm={name: daso}"]
    if algorithm == "dcs3gd":
        return ["algorithm={name: dcs3gd}"]
    if algorithm == "nnt":
        return ["algorithm={name: nnt, topology: ring}"]
    raise ValueError(algorithm)


HEADER = (f"{'algorithm':10} {'ranks':>5} {'median %':>9} {'p90 %':>7} {'total %':>8} {'dloss':>9} "
          f"{'stale real/sim':>15} {'other load':>10} {'steal':>6} {'drift %':>7} {'wall/cpu real/sim':>18} "
          f"{'replay med/p90':>15} {'other batch':>11} {'again med/p90':>14}")


def row(label: str, ranks: int, s: dict) -> str:
    """One table line from a validate summary."""
    stale = f"{s['measured_mean_staleness'] or 0:.2f}/{s['predicted_mean_staleness'] or 0:.2f}"
    dloss = s["final_loss_difference"]
    load, drift = other_load(s), drift_pct(s)  # the pilot's load too: it calibrates the simulation
    steal = s.get("host_steal_cores")
    slow = f"{s.get('measured_compute_wall_over_cpu') or 0:.2f}/{s.get('predicted_compute_wall_over_work') or 0:.2f}"
    replay = s.get("replay")
    adj = f"{replay['median_abs_iteration_error_pct']:.1f}/{replay['p90_abs_iteration_error_pct']:.1f}" \
        if replay else "-"
    again = s.get("real_again")
    floor = f"{again['level_matched_median_abs_iteration_difference_pct']:.1f}/" \
            f"{again['level_matched_p90_abs_iteration_difference_pct']:.1f}" if again else "-"
    return (f"{label:10} {ranks:5d} {s['median_abs_iteration_error_pct']:9.1f} {s['p90_abs_iteration_error_pct']:7.1f} "
            f"{s['total_time_error_pct']:8.1f} {'n/a' if dloss is None else f'{dloss:9.2g}':>9} {stale:>15} "
            f"{'?' if load is None else f'{load:.2f}':>10} {'?' if steal is None else f'{steal:.2f}':>6} "
            f"{'-' if drift is None else f'{drift:.0f}':>7} {slow:>18} "
            f"{adj:>15} {s.get('iterations_with_other_batch', 0):>11} {floor:>14}")


def other_load(s: dict) -> float | None:
    """The CPU other processes used during the real run or its pilots (cores, the largest)."""
    calibration = s.get("calibration") or {}
    pilots = [(calibration.get(name) or {}).get("host_foreign_load_cores") for name in ("pilot", "pilot_after")]
    loads = [v for v in (s.get("host_foreign_load_cores"), *pilots) if v is not None]
    return max(loads) if loads else None


def drift_pct(s: dict) -> float | None:
    """How far the host's speed moved between the pilot and the compared run (largest |%|; None: not known)."""
    change = (s.get("calibration") or {}).get("host_speed_change_pct")
    return max(abs(v) for v in change.values()) if change else None


def wait_idle(limit_s: float, threshold: float = 0.1, window_s: float = 3.0) -> float | None:
    """Wait (at most ``limit_s``) until the host's CPU use over ``window_s`` is below ``threshold`` cores."""
    from simdist.real.describe import HostLoad

    waited = 0.0
    while True:
        with HostLoad() as load:
            time.sleep(window_s)
        waited += window_s
        if load.cores is None or load.cores < threshold or waited >= limit_s:
            return load.cores


def measure(label: str, ranks: int, sets: list[str], out: Path, affinity: str, calibrate: str, idle_s: float,
            retries: int, pilot_runs: int, common: list[str] = COMMON, repeat_real: bool = False) -> dict | None:
    """One validation of a point; with ``idle_s``, after waiting for an idle host, and again
    while other load or drift spoilt it. None (error printed) if it failed."""
    attempt = 0
    while True:
        if idle_s:
            wait_idle(idle_s)
        try:
            s = validate(SCENARIO, ranks, out, overrides=common + sets, affinity=affinity, calibrate=calibrate,
                         pilot_runs=pilot_runs, repeat_real=repeat_real, timeout_s=300, plots=False)
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"{label:10} {ranks:5d}  FAILED: {' '.join(str(exc).split())[:160]}", flush=True)
            return None
        load, drift = other_load(s), drift_pct(s)
        if (load is None or load <= 0.1) and (drift is None or drift <= 10.0) or attempt >= retries:
            return s
        print(f"# {label} {ranks}: other processes used {load or 0:.2f} cores, host speed moved {drift or 0:.0f} %; "
              "again", flush=True)
        attempt += 1


def point(label: str, ranks: int, sets: list[str], out: Path, affinity: str = "auto", calibrate: str = "pilot",
          idle_s: float = 0.0, retries: int = 0, pilot_runs: int = 2, repeats: int = 1,
          common: list[str] = COMMON, repeat_real: bool = False) -> None:
    """One table row. With ``repeats`` > 1 the point is validated that many times (each in its
    own directory); every run's errors are printed, and the row is the run with the median
    median error, so that one drifted run does not make the row."""
    runs = []
    for k in range(repeats):
        s = measure(label, ranks, sets, out if repeats == 1 else out / f"run{k + 1}", affinity, calibrate, idle_s,
                    retries, pilot_runs, common, repeat_real)
        if s is None:
            return
        runs.append(s)
    if repeats > 1:
        figures = ", ".join(f"{r['median_abs_iteration_error_pct']:.1f}/{r['p90_abs_iteration_error_pct']:.1f}"
                            f" ({r['total_time_error_pct']:+.1f})" for r in runs)
        print(f"# {label} {ranks}: {repeats} runs, median/p90 % (total %): {figures}", flush=True)
    runs.sort(key=lambda r: r["median_abs_iteration_error_pct"])
    print(row(label, ranks, runs[(len(runs) - 1) // 2]), flush=True)


def load_line(when: str) -> str:
    one, five, fifteen = os.getloadavg()
    return f"# host load averages {when}: {one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min) on {os.cpu_count()} CPUs"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--algorithms", default="sync,asgd,nsoftsync,dbs,daso,dcs3gd,nnt")
    parser.add_argument("--no-hetero", action="store_true", help="leave out the heterogeneous asgd/dbs rows")
    parser.add_argument("--calibrate", default="pilot", choices=("pilot", "isolated"),
                        help="where the simulation's figures come from (simdist validate --calibrate)")
    parser.add_argument("--pilot-runs", type=int, default=2, choices=(1, 2),
                        help="pilots before (1) or before and after (2) the compared run (simdist validate --pilot-runs)")
    parser.add_argument("--wait-idle", type=float, default=0.0, metavar="S",
                        help="before each point wait (at most S seconds) until other processes use < 0.1 core")
    parser.add_argument("--retries", type=int, default=0,
                        help="run a point again (at most this many times) when other processes used > 0.1 core "
                             "or the host's speed moved > 10 %% between pilot and run")
    parser.add_argument("--repeats", type=int, default=1, metavar="N",
                        help="validate each point N times; print every run, and as the row the run with the "
                             "median median-error")
    parser.add_argument("--repeat-real", action="store_true",
                        help="run every point for real twice and print how far the two real runs differ per "
                             "iteration, level-matched (simdist validate --repeat-real)")
    parser.add_argument("--workload", default="standard", choices=tuple(WORKLOADS),
                        help="what every point trains: " + "; ".join(f"{k}: {v[1]}" for k, v in WORKLOADS.items()))
    parser.add_argument("--out", default="results/validation_table")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats: at least 1 run per point, got {args.repeats}")
    if args.retries < 0 or args.wait_idle < 0:
        parser.error(f"--retries and --wait-idle: 0 or more, got {args.retries} and {args.wait_idle:g}")
    started = time.perf_counter()
    print(load_line("before"))
    common = BASE + WORKLOADS[args.workload][0]
    print(f"# workload {args.workload}: {WORKLOADS[args.workload][1]}")
    print(f"# calibration: {args.calibrate}" + (f", {args.pilot_runs} pilot run(s)" if args.calibrate == "pilot" else ""))
    print(HEADER, flush=True)
    for algorithm in args.algorithms.split(","):
        for ranks in (int(r) for r in args.ranks.split(",")):
            if algorithm == "nnt":
                ranks = max(ranks, 3)  # a ring needs 3 workers: nnt runs on a 3-ring at "2" ranks
            sets = overrides(algorithm, ranks)
            if sets is None:
                print(f"{algorithm:10} {ranks:5d}  (not applicable)")
                continue
            point(algorithm, ranks, sets, Path(args.out) / f"{algorithm}-{ranks}", calibrate=args.calibrate,
                  idle_s=args.wait_idle, retries=args.retries, pilot_runs=args.pilot_runs, repeats=args.repeats,
                  common=common, repeat_real=args.repeat_real)
    if not args.no_hetero:
        for algorithm, affinity in HETERO.items():
            if algorithm in args.algorithms.split(","):
                point(f"{algorithm}-het", 4, overrides(algorithm, 4), Path(args.out) / f"{algorithm}-het",
                      affinity=affinity, calibrate=args.calibrate, idle_s=args.wait_idle, retries=args.retries,
                      pilot_runs=args.pilot_runs, repeats=args.repeats, common=common,
                      repeat_real=args.repeat_real)
    print(load_line("after"))
    print(f"# {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
