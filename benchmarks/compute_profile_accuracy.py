"""Does a measured compute profile predict batch sizes it never saw? (target: within 10 %)

    python benchmarks/compute_profile_accuracy.py [--threads 1] [--attempts 5] [--max-drift 0.05]

1. Calibrate: the measurement ``simdist calibrate compute`` makes (the zoo's mlp and cnn on
   digits, batch sizes 8 … 512, round-robin medians, relative least squares).
2. Measure afresh, the same way, at batch sizes the profile was not fitted on (24 … 448),
   interleaved with two *anchor* sizes the profile did measure (64, 256).
3. Print predicted vs measured per (model, batch), the error, and the worst error against the
   10 % target.

The anchors tell a profile error from a machine whose load changed between the two
measurements (other processes on a shared host): if an anchor moved by more than
``--max-drift``, the comparison is not like for like and the attempt is repeated (up to
``--attempts``); the attempt with the least drift is reported, with its drift. Before each
attempt the benchmark waits (up to ``--wait-s``) for the other CPUs to go idle, and reports
the CPU time other processes used during the attempt.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from simdist.calibrate.compute_profile import DEFAULT_BATCH_SIZES, ZOO, measure_profile, measure_zoo, steady_allocator
from simdist.training import OptimizerConfig, build_workload

UNSEEN = (24, 48, 96, 192, 320, 448)
ANCHORS = (64, 256)
TARGET = 0.10


def _cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine (Linux), or (0, 0)."""
    try:
        values = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    except OSError:
        return 0, 0
    return sum(values) - values[3] - values[4], sum(values)


def foreign_load(since: tuple[int, int], own_cpu_s: float, wall_s: float) -> float:
    """CPUs' worth of work other processes did since ``since`` (busy jiffies minus our own CPU time)."""
    busy, total = _cpu_jiffies()
    if total == since[1] or wall_s <= 0:
        return float("nan")
    cpus = os.cpu_count() or 1
    machine = (busy - since[0]) / (total - since[1]) * cpus  # CPUs busy on average
    return max(0.0, machine - own_cpu_s / wall_s)


def wait_for_quiet(limit_s: float, threshold: float = 0.15) -> None:
    """Wait until other processes use less than ``threshold`` CPUs over one second (at most ``limit_s``)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        since, cpu0, t0 = _cpu_jiffies(), time.process_time(), time.monotonic()
        time.sleep(1.0)
        if not foreign_load(since, time.process_time() - cpu0, time.monotonic() - t0) > threshold:
            return


def attempt(models, threads, repeats, statistic):
    """(rows, drift, profiles): one calibration and one fresh measurement."""
    profiles = measure_zoo(DEFAULT_BATCH_SIZES, repeats, 5, threads, models, statistic=statistic)
    rows, drift = [], 0.0
    for name in models:
        dataset, options = ZOO[name]
        workload = build_workload(name, options, dataset, {}, OptimizerConfig(), 0)
        sizes = sorted(UNSEEN + ANCHORS)
        fresh = dict(zip(sizes, measure_profile(workload, sizes, repeats, 5, threads,
                                                statistic=statistic)["statistic_s"]))
        profile = profiles[name]
        seen = dict(zip(profile["batch_sizes"], profile["statistic_s"]))
        drift = max([drift] + [abs(fresh[a] / seen[a] - 1) for a in ANCHORS])
        for batch in UNSEEN:
            predicted = profile["t0_s"] + profile["t1_s"] * batch
            rows.append((name, batch, predicted, fresh[batch], predicted / fresh[batch] - 1))
    return rows, drift, profiles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--attempts", type=int, default=5)
    parser.add_argument("--max-drift", type=float, default=0.05)
    parser.add_argument("--wait-s", type=float, default=60.0, help="wait this long at most for a quiet machine")
    parser.add_argument("--statistic", default="median", choices=("median", "p25", "min"),
                        help="what calibrate compute fits, and what the fresh measurement reports (default median)")
    args = parser.parse_args()
    models = args.models.split(",")
    steady_allocator()  # as simdist calibrate compute does by default (--allocator steady)
    start, best = time.perf_counter(), None
    for k in range(1, args.attempts + 1):
        wait_for_quiet(args.wait_s)
        since, cpu0, t0 = _cpu_jiffies(), time.process_time(), time.monotonic()
        rows, drift, profiles = attempt(models, args.threads, args.repeats, args.statistic)
        other = foreign_load(since, time.process_time() - cpu0, time.monotonic() - t0)
        worst = max(abs(r[4]) for r in rows)
        print(f"attempt {k}: anchor drift {drift:.1%}, worst error {worst:.1%}, other processes used "
              f"{other:.2f} CPUs meanwhile")
        if best is None or drift < best[1]:
            best = (rows, drift, profiles)
        if drift <= args.max_drift:
            break
    rows, drift, profiles = best
    print(f"\nprofile calibrated at batch sizes {list(DEFAULT_BATCH_SIZES)} ({args.statistic} per size); fresh "
          f"measurement at unseen sizes {list(UNSEEN)}; {args.threads} torch thread(s); anchor drift {drift:.1%}\n")
    print(f"{'model':<6} {'batch':>5} {'predicted':>11} {'measured':>11} {'error':>8}  target ±{TARGET:.0%}")
    for name, batch, predicted, measured, error in rows:
        print(f"{name:<6} {batch:>5} {predicted * 1e3:>9.4f}ms {measured * 1e3:>9.4f}ms {error:>+8.1%}  "
              f"{'ok' if abs(error) <= TARGET else 'OVER'}")
    for name in models:
        p = profiles[name]
        print(f"{name:<6} profile t0 = {p['t0_s'] * 1e6:.1f} us, t1 = {p['t1_s'] * 1e6:.3f} us/sample, "
              f"r2 = {p['r2']:.4f}, max fit residual {p['max_relative_error']:.1%}")
    worst = max(abs(r[4]) for r in rows)
    mean = float(np.mean([abs(r[4]) for r in rows]))
    verdict = "PASS" if worst <= TARGET else "FAIL"
    note = "" if drift <= args.max_drift else f" (machine load changed between measurements: drift {drift:.1%})"
    print(f"\nworst |error| {worst:.1%} (mean {mean:.1%}) vs target {TARGET:.0%}: ratio {worst / TARGET:.2f} "
          f"-> {verdict}{note}; {time.perf_counter() - start:.0f} s")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
