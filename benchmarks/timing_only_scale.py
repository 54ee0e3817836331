"""Timing-only scale: host wall time per iteration of every algorithm at 64 ... 1,024 GPUs.

Two tables. The first is Horovod-style sync SGD (ring allreduce, analytic collectives) on the
cluster-a100-hdr preset (4 A100 per node, fat tree), timing-only (no tensors), ResNet-50-sized
MLP payloads, its workers run as one lockstep group, against the same scenario with one SimPy
process per rank (``Simulation(..., lockstep=False)``); both give the same results
(tests/test_lockstep_group.py).

The second runs every algorithm (``--algorithms``, default all seven) at ``--gpus`` GPU counts
with compute noise on (``compute.noise.rank_sigma`` 0.05), each point in a child process of
its own so that its peak resident set size (VmHWM, else ru_maxrss) is its own. Parameter-server
algorithms (asgd, nsoftsync, dbs) get one more node, whose first GPU is the server; their cost
is per applied update (a step of the server's model, the unit of ``stop.steps``), the others'
per iteration. Targets: <= 2 ms per iteration at 1,024 GPUs (sync, daso, nnt, dcs3gd), <= 20 us
per applied update at 1,024 workers (asgd, nsoftsync, dbs), a fitted exponent of cost vs GPUs
<= 1.1 (cost ~ GPUs^k by least squares on log-log), peak RSS <= 2 GiB at 4,096 GPUs.

The cost is measured in steady state. In the first table: the wall time of a run of
``warm-up + steps`` steps minus that of the warm-up alone, divided by ``steps`` (best of
``repeats`` each). In the second: inside one run, the host time from the first update of the
step after the warm-up to the first update of the step after the measured ones, divided by
their number (best of ``repeats`` runs): the run-to-run spread of the one-time work — building
the platform, planning the collective, running each collective phase once alone, writing the
results — does not enter it, and is reported apart as the warm-up. The warm-up is 10
iterations (DASO: a whole rotation of its global syncs, 18, so that each local rank's global
group and node broadcast has run once), or two rounds of updates (each worker's gradient twice)
for the parameter-server algorithms, whose measured part is two more rounds. The dataset holds 64 batches per worker, so no epoch ends inside a
measured run.

After the first table, one whole sync run at 16,384 GPUs (``--largest-steps``, default 100 steps;
0 skips it), from the scenario to the results in a child process: its wall time against the
target of under a minute, and its peak RSS.

    python benchmarks/timing_only_scale.py [--steps 50] [--repeats 3] [--reference-up-to 1024]
        [--algorithms sync daso ...] [--gpus 64 128 256 512 1024] [--algorithm-steps 20]
        [--algorithm-repeats 2] [--per-rank] [--no-link-usage] [--skip-sync-table] [--skip-algorithms]
        [--largest-steps 100]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from simdist.scenario import scenario_from_dict
from simdist.simulate import Simulation

TARGET_MS_AT_1024 = 2.0
TARGET_US_PER_UPDATE_AT_1024 = 20.0
TARGET_EXPONENT = 1.1
TARGET_RSS_GIB_AT_4096 = 2.0
TARGET_LARGEST_S = 60.0  # a 16,384-GPU sync scenario runs in under a minute
LARGEST_GPUS = 16384
GPUS = (64, 128, 256, 512, 1024)
GPUS_PER_NODE = 4
BATCH = 64
BATCHES_PER_EPOCH = 64
NOISE = {"rank_sigma": 0.05, "source": "benchmarks/timing_only_scale.py: a round 5 % per-GPU jitter"}
PARAMETER_SERVER = ("asgd", "nsoftsync", "dbs")
ALGORITHMS: dict[str, dict] = {  # valid settings of each (scenarios/*.yaml, docs/algorithms.md)
    "sync": {"name": "sync", "collective": "ring"},
    "daso": {"name": "daso", "schedule": "fixed", "B": 4, "S": 1},  # cycling: a global sync every 4th batch
    "nnt": {"name": "nnt", "topology": "ring"},
    "dcs3gd": {"name": "dcs3gd"},
    "asgd": {"name": "asgd"},
    "nsoftsync": {"name": "nsoftsync"},  # n set per point: c = 4 gradients per update
    "dbs": {"name": "dbs"},
}
GRADIENTS_PER_UPDATE = {"nsoftsync": 4}


def scenario(gpus: int, steps: int) -> dict:
    """The sync scenario of the first table (benchmarks/memory_1024.py runs it too)."""
    return {
        "name": f"timing-only-{gpus}",
        "platform": {"preset": "cluster-a100-hdr", "nodes": gpus // GPUS_PER_NODE},
        "workload": {"model": {"name": "mlp", "hidden": [4096, 4096]},
                     "dataset": {"name": "synthetic", "samples": 4096, "features": 1024, "classes": 10},
                     "batch_size": BATCH, "timing_only": True},
        "algorithm": {"name": "sync", "collective": "ring"},
        "stop": {"steps": steps},
        "outputs": {"plots": False, "trace": False},
    }


def shape_dataset(gpus: int) -> dict:
    """A shape-only dataset of ``BATCHES_PER_EPOCH`` batches per GPU: no epoch ends in a measured run."""
    return {"name": "imagenet-shape", "samples": gpus * BATCH * BATCHES_PER_EPOCH, "input_shape": [1024],
            "classes": 10, "test_samples": 0}


def algorithm_scenario(algorithm: str, gpus: int, steps: int, link_usage: bool = True) -> dict:
    """``algorithm`` on ``gpus`` training GPUs, timing-only, compute noise on, no epoch end in sight."""
    section = dict(ALGORITHMS[algorithm])
    server = algorithm in PARAMETER_SERVER
    if algorithm == "nsoftsync":
        section["n"] = gpus // GRADIENTS_PER_UPDATE["nsoftsync"]
    built = {
        "name": f"timing-only-{algorithm}-{gpus}",
        "platform": {"preset": "cluster-a100-hdr", "nodes": gpus // GPUS_PER_NODE + (1 if server else 0)},
        "workload": {"model": {"name": "mlp", "hidden": [4096, 4096]},
                     "dataset": shape_dataset(gpus), "batch_size": BATCH, "timing_only": True},
        "compute": {"noise": dict(NOISE)},
        "algorithm": section,
        "stop": {"steps": steps},
        "outputs": {"plots": False, "trace": False, **({} if link_usage else {"link_usage": False})},
    }
    if server:
        built["workers"] = gpus
    return built


def wall_s(gpus: int, steps: int, repeats: int, lockstep: bool, algorithm: str | None = None,
           link_usage: bool = True) -> float:
    """Best wall time of ``repeats`` runs (``algorithm`` None: the first table's sync scenario)."""
    spec = scenario(gpus, steps) if algorithm is None else algorithm_scenario(algorithm, gpus, steps, link_usage)
    built = scenario_from_dict(spec)
    return min(_run_once(built, lockstep) for _ in range(repeats))


def _run_once(built, lockstep: bool) -> float:
    """One run's wall time, from a collected heap: the garbage of the run before is not its cost."""
    simulation = Simulation(built, None, lockstep=lockstep)
    gc.collect()
    return simulation.execute().wall_time_s


def steady_ms(gpus: int, steps: int, repeats: int, lockstep: bool = True) -> tuple[float, float]:
    """(ms per iteration in steady state, seconds of the first 10 steps)."""
    first = wall_s(gpus, 10, repeats, lockstep)
    return (wall_s(gpus, 10 + steps, repeats, lockstep) - first) / steps * 1e3, first


@dataclass
class Point:
    """One algorithm at one GPU count: steady cost per unit, warm-up seconds, peak RSS."""

    ms: float  # per iteration, or per applied update
    warmup_s: float
    rss_mib: float


def measured_steps(algorithm: str, gpus: int, steps: int) -> tuple[int, int]:
    """(warm-up steps, measured steps): iterations, or server updates over two rounds each. DASO's
    warm-up is a whole rotation of its global syncs (B x GPUs per node iterations, plus the S
    the last one waits): each local rank's global group and node broadcast runs first there."""
    if algorithm == "daso":
        return ALGORITHMS["daso"]["B"] * GPUS_PER_NODE + ALGORITHMS["daso"]["S"] + 1, steps
    if algorithm not in PARAMETER_SERVER:
        return 10, steps
    per_round = gpus // GRADIENTS_PER_UPDATE.get(algorithm, 1)
    return 2 * per_round, 2 * per_round


def measure_point(algorithm: str, gpus: int, steps: int, repeats: int, lockstep: bool,
                  link_usage: bool = True) -> Point:
    """Steady cost of ``algorithm`` at ``gpus`` (run in a child process, so the peak RSS is its own):
    the host time between the first update of step ``warm + 1`` and the first of step
    ``warm + measured + 1`` inside one run, per step (best of ``repeats`` runs); the warm-up
    is the time to the first of those, from the run's start."""
    wall_s(8, 3, 1, lockstep, algorithm, link_usage)  # warm-up: imports, first-call caches
    warm, measured = measured_steps(algorithm, gpus, steps)
    built = scenario_from_dict(algorithm_scenario(algorithm, gpus, warm + measured + 1, link_usage))
    runs = [_steady_run(built, lockstep, warm, measured) for _ in range(repeats)]
    return Point(min(ms for ms, _ in runs), min(first for _, first in runs), peak_rss_mib())


def _steady_run(built, lockstep: bool, warm: int, measured: int) -> tuple[float, float]:
    """(host ms per step from step ``warm`` to step ``warm + measured``, seconds to step ``warm``)
    of one run, timed as its update rows appear."""
    simulation = Simulation(built, None, lockstep=lockstep)
    marks: dict[int, float] = {}

    def mark(row: dict) -> None:
        for step in (warm + 1, warm + measured + 1):
            if row["step"] >= step and step not in marks:
                marks[step] = time.perf_counter()

    simulation.world.update_listeners.append(mark)
    gc.collect()
    started = time.perf_counter()
    simulation.execute()
    if len(marks) < 2:
        raise SystemExit(f"the run stopped before step {warm + measured + 1}: nothing to time")
    return (marks[warm + measured + 1] - marks[warm + 1]) / measured * 1e3, marks[warm + 1] - started


def point_in_child(algorithm: str, gpus: int, steps: int, repeats: int, lockstep: bool, link_usage: bool) -> Point:
    """:func:`measure_point` in a fresh interpreter running this script (``--measure-point``).

    A new process rather than a multiprocessing pool: the script may itself run as a module
    loaded by path (runpy), whose functions a spawned pool worker could not import."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--measure-point", algorithm, str(gpus), str(steps),
            str(repeats), str(int(lockstep)), str(int(link_usage))]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"measuring {algorithm} at {gpus} GPUs failed (exit {done.returncode}): "
                         f"{done.stderr.strip().splitlines()[-1:] or ''}")
    return Point(**json.loads(done.stdout.strip().splitlines()[-1]))


def peak_rss_mib() -> float:
    """This process's peak resident set size in MiB.

    Linux's VmHWM where there is one: ``ru_maxrss`` survives exec, so a spawned child's
    would start at its parent's peak, while VmHWM belongs to the child's own address space.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sync_table(args: argparse.Namespace) -> None:
    """The first table: sync as a lockstep group against one process per rank."""
    wall_s(64, 5, 1, True)  # warm-up
    costs = []
    print(f"sync, ring allreduce (analytic), timing-only, {args.steps} steps after 10, best of {args.repeats}")
    print(f"  {'GPUs':>5}  {'ms/iteration':>12}  {'us/GPU':>7}  {'first 10 steps':>14}  "
          f"{'per-rank processes':>18}  {'ratio':>6}")
    for gpus in GPUS:
        ms, first = steady_ms(gpus, args.steps, args.repeats)
        costs.append(ms)
        line = f"  {gpus:5d}  {ms:12.3f}  {ms / gpus * 1e3:7.2f}  {first:12.3f} s"
        if gpus <= args.reference_up_to:
            reference, _ = steady_ms(gpus, 20, 2, lockstep=False)
            line += f"  {reference:15.3f} ms  {ms / reference:6.3f}"
        print(line)
    at_1024 = costs[-1]
    print(f"  at 1,024 GPUs: {at_1024:.3f} ms per iteration  (target <= {TARGET_MS_AT_1024} ms)  "
          f"{'MET' if at_1024 <= TARGET_MS_AT_1024 else 'NOT MET'}")
    if min(costs) <= 0:
        print(f"  fitted exponent: none ({NO_EXPONENT})")
        return
    exponent = float(np.polyfit(np.log(GPUS), np.log(costs), 1)[0])
    print(f"  fitted exponent of cost vs GPUs: {exponent:.3f}  (target <= {TARGET_EXPONENT})  "
          f"{'MET' if exponent <= TARGET_EXPONENT else 'NOT MET'}")


NO_EXPONENT = "a point's steady cost came out <= 0: too few measured steps to rise above the run-to-run spread"


def largest_sync_run(gpus: int, steps: int) -> dict:
    """A whole sync run at ``gpus`` GPUs, timing-only, compute noise on: wall seconds from the
    scenario to the results (building the platform included) and the peak RSS."""
    spec = scenario(gpus, steps)
    spec["workload"]["dataset"] = shape_dataset(gpus)
    spec["compute"] = {"noise": dict(NOISE)}
    started = time.perf_counter()
    Simulation(scenario_from_dict(spec), None, lockstep=True).execute()
    return {"wall_s": time.perf_counter() - started, "rss_mib": peak_rss_mib()}


def largest_table(args: argparse.Namespace) -> None:
    """The largest run the issue names: sync at 16,384 GPUs, whole, in a child process of its own."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--measure-largest", str(LARGEST_GPUS),
            str(args.largest_steps)]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the {LARGEST_GPUS}-GPU sync run failed (exit {done.returncode}): "
                         f"{done.stderr.strip().splitlines()[-1:] or ''}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\nsync at {LARGEST_GPUS:,} GPUs, timing-only, compute noise on, {args.largest_steps} steps, whole run "
          f"(platform built, run, results): {figures['wall_s']:.1f} s  (target < {TARGET_LARGEST_S:.0f} s)  "
          f"{_verdict(figures['wall_s'], TARGET_LARGEST_S)}; peak RSS {figures['rss_mib'] / 1024:.2f} GiB")


def _verdict(value: float, target: float) -> str:
    return "MET" if value <= target else "NOT MET"


def algorithm_rows(algorithm: str, gpus_list: list[int], args: argparse.Namespace) -> list[Point]:
    """Measure and print one algorithm's points, each in a fresh child process."""
    server = algorithm in PARAMETER_SERVER
    unit = "us/update" if server else "ms/iteration"
    print(f"{algorithm} ({ALGORITHMS[algorithm]}{', workers = GPUs, +1 server node' if server else ''}), "
          f"{'lockstep where supported' if not args.per_rank else 'one process per rank'}")
    print(f"  {'GPUs':>5}  {unit:>12}  {'us/GPU' if not server else 'grads/update':>12}  {'warm-up':>9}  "
          f"{'peak RSS':>10}")
    points = []
    for gpus in gpus_list:
        point = point_in_child(algorithm, gpus, args.algorithm_steps, args.algorithm_repeats,
                               not args.per_rank, not args.no_link_usage)
        points.append(point)
        shown = point.ms * 1e3 if server else point.ms
        second = f"{GRADIENTS_PER_UPDATE.get(algorithm, 1):12d}" if server else f"{point.ms / gpus * 1e3:12.2f}"
        print(f"  {gpus:5d}  {shown:12.3f}  {second}  {point.warmup_s:7.3f} s  {point.rss_mib:6.0f} MiB", flush=True)
    return points


def algorithm_summary(algorithm: str, gpus_list: list[int], points: list[Point]) -> None:
    """The targets next to what was measured."""
    server = algorithm in PARAMETER_SERVER
    if 1024 in gpus_list:
        cost = points[gpus_list.index(1024)].ms
        value, target, unit = (cost * 1e3, TARGET_US_PER_UPDATE_AT_1024, "us per update") if server else \
            (cost, TARGET_MS_AT_1024, "ms per iteration")
        print(f"  at 1,024 GPUs: {value:.3f} {unit}  (target <= {target})  {_verdict(value, target)}")
    if len(gpus_list) >= 2 and min(p.ms for p in points) <= 0:
        print(f"  fitted exponent: none ({NO_EXPONENT}; use more --algorithm-steps)")
    elif len(gpus_list) >= 2:
        costs = [p.ms for p in points]
        exponent = float(np.polyfit(np.log(gpus_list), np.log(costs), 1)[0])
        print(f"  fitted exponent of cost vs GPUs ({gpus_list[0]}-{gpus_list[-1]}): {exponent:.3f}  "
              f"(target <= {TARGET_EXPONENT})  {_verdict(exponent, TARGET_EXPONENT)}")
    rss_gib = points[-1].rss_mib / 1024
    where = f"at {gpus_list[-1]} GPUs"
    verdict = _verdict(rss_gib, TARGET_RSS_GIB_AT_4096) if gpus_list[-1] >= 4096 else "(target is at 4,096 GPUs)"
    print(f"  peak RSS {where}: {rss_gib:.2f} GiB  (target <= {TARGET_RSS_GIB_AT_4096} GiB at 4,096)  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reference-up-to", type=int, default=1024,
                        help="largest GPU count also run with one process per rank (slow: ~0.15 s per step at 1,024)")
    parser.add_argument("--algorithms", nargs="+", choices=list(ALGORITHMS), default=list(ALGORITHMS))
    parser.add_argument("--gpus", nargs="+", type=int, default=list(GPUS),
                        help="GPU counts of the per-algorithm table (multiples of 4)")
    parser.add_argument("--algorithm-steps", type=int, default=20,
                        help="measured iterations per point of the per-algorithm table (after 10)")
    parser.add_argument("--algorithm-repeats", type=int, default=2)
    parser.add_argument("--per-rank", action="store_true", help="run sync with one process per rank too")
    parser.add_argument("--no-link-usage", action="store_true",
                        help="per-algorithm runs without outputs.link_usage (the links' bytes over time)")
    parser.add_argument("--skip-sync-table", action="store_true", help="only the per-algorithm table")
    parser.add_argument("--skip-algorithms", action="store_true", help="only the sync lockstep table")
    parser.add_argument("--largest-steps", type=int, default=100,
                        help=f"steps of the whole sync run at {LARGEST_GPUS:,} GPUs (0: not run)")
    parser.add_argument("--measure-largest", nargs=2, type=int, metavar=("GPUS", "STEPS"),
                        help=argparse.SUPPRESS)  # the largest run, in the child process largest_table starts
    parser.add_argument("--measure-point", nargs=6, metavar=("ALG", "GPUS", "STEPS", "REPEATS", "LOCKSTEP", "LINKS"),
                        help=argparse.SUPPRESS)  # one point, in the child process point_in_child starts
    args = parser.parse_args()
    if args.measure_point:
        algorithm, *numbers = args.measure_point
        gpus, steps, repeats, lockstep, link_usage = map(int, numbers)
        print(json.dumps(asdict(measure_point(algorithm, gpus, steps, repeats, bool(lockstep), bool(link_usage)))))
        return
    if args.measure_largest:
        print(json.dumps(largest_sync_run(*args.measure_largest)))
        return
    if not args.skip_sync_table:
        sync_table(args)
        if args.largest_steps > 0:
            largest_table(args)
    if args.skip_algorithms:
        return
    print(f"\nevery algorithm, timing-only, compute noise rank_sigma {NOISE['rank_sigma']}, "
          f"link usage {'off' if args.no_link_usage else 'on'}, best of {args.algorithm_repeats}, "
          f"each point in its own process")
    for algorithm in args.algorithms:
        points = algorithm_rows(algorithm, sorted(args.gpus), args)
        algorithm_summary(algorithm, sorted(args.gpus), points)


if __name__ == "__main__":
    main()
