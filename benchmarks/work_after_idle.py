"""Work right after a rank idled: how much slower than the same work back to back?

    python benchmarks/work_after_idle.py [--idle-ms 0,1,3,10,30] [--repeats 30] [--sleep-us 50]
                                         [--runs 20] [--model mlp | --scenario FILE] [--batch-size 2048]

A rank of a real run that waits sleeps in short sleeps between tests (simdist's runtime: 50 µs
at first, doubling to 1 ms where ranks share cores). What it does when the wait ends (a
parameter server's optimizer step on a gradient that has just arrived, the send of the new
weights) may find its caches, TLB and clock in another state than back to back. The
simulator prices host work from microbenchmarks run back to back, or right after a training
step (``calibrate compute``'s ops, ``calibrate network``'s calls after compute); nothing in it
depends on how long the rank idled before.

This script measures that dependence on one process with one torch thread: the zoo model's
(or ``--scenario``'s model, dataset and optimizer) optimizer step on its flat parameter
vector (the ``update`` op every algorithm applies), a copy of the vector (``pack``), and one
forward/backward at the batch size, each timed right after
the process idled ``ms`` milliseconds in sleeps of ``--sleep-us``, and after the same work
done once untimed (so 0 ms is back to back). Printed per idle time: the median of
``--repeats`` of each, in µs, and its ratio to the 0 ms median. Then, for the two short works,
what ``--runs`` runs in a row right after the idle cost beyond back to back: the first run's
extra and all of theirs together. Where they are about equal, the extra is a one-off refill of
what the idle evicted, paid by the first work that touches it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

from simdist.calibrate.compute_profile import ZOO, cpu_training_step
from simdist.calibrate.cpu_share import stepped_workload
from simdist.calibrate.timed_steps import steady_allocator
from simdist.training.replica import Replica


def idle(seconds: float, sleep_s: float) -> None:
    """Sleep ``seconds`` in sleeps of ``sleep_s``, as a waiting loop does (nothing when 0)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        time.sleep(sleep_s)


def timed_after_idle(work: Callable[[], None], idle_s: float, sleep_s: float, repeats: int) -> float:
    """Median seconds of ``work`` run right after idling ``idle_s`` (the work done once untimed first)."""
    times = []
    for _ in range(repeats):
        work()
        idle(idle_s, sleep_s)
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def extra_after_idle(work: Callable[[], None], idle_s: float, sleep_s: float, repeats: int, runs: int,
                     warm_s: float) -> tuple[float, float]:
    """What ``runs`` runs of ``work`` in a row right after idling ``idle_s`` cost beyond ``warm_s``
    each (its back-to-back time): (the first run's extra, all ``runs``' extra), medians over
    ``repeats`` position by position. Where the extra is a refill of what the idle evicted,
    the first run pays nearly all of it."""
    timed = []
    for _ in range(repeats):
        work()
        idle(idle_s, sleep_s)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            work()
            times.append(time.perf_counter() - start)
        timed.append(times)
    extras = [statistics.median(column) - warm_s for column in zip(*timed)]
    return extras[0], sum(extras)


def ratios(medians: dict[float, float]) -> dict[float, float]:
    """Each idle time's median over the median at the shortest idle time measured."""
    base = medians[min(medians)]
    return {idle_ms: value / base for idle_ms, value in medians.items()}


def _works(model: str, batch_size: int, scenario: str | None) -> dict[str, Callable[[], None]]:
    workload = stepped_workload(model, 0, scenario)
    replica = Replica(workload.initial_params().detach().clone().float(), workload.optimizer)
    grad = torch.randn(workload.param_count) * 1e-3
    out = torch.empty_like(grad)
    return {"update": lambda: replica.apply_gradient(grad), "pack": lambda: out.copy_(grad),
            "forward/backward": cpu_training_step(workload, batch_size)}


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-ms", default="0,1,3,10,30", help="idle times before the work, ms (default 0,1,3,10,30)")
    parser.add_argument("--repeats", type=int, default=30, help="timed runs per work and idle time (default 30)")
    parser.add_argument("--sleep-us", type=float, default=50.0,
                        help="length of each sleep while idling, µs (default 50)")
    parser.add_argument("--model", default="mlp", choices=sorted(ZOO), help="zoo model (default mlp)")
    parser.add_argument("--runs", type=int, default=20,
                        help="short works timed in a row after each idle, for the extra they pay together (default 20)")
    parser.add_argument("--scenario", help="a scenario file: its model, dataset and optimizer instead of --model's")
    parser.add_argument("--batch-size", type=int, default=2048, help="samples per forward/backward (default 2048)")
    args = parser.parse_args(argv)
    if args.scenario is not None and not Path(args.scenario).is_file():
        parser.error(f"--scenario {args.scenario}: no such file")
    try:
        args.idle = sorted({float(v) for v in args.idle_ms.split(",") if v.strip()})
    except ValueError:
        parser.error(f"--idle-ms: comma-separated milliseconds, got {args.idle_ms!r}")
    if not args.idle or args.idle[0] < 0 or min(args.repeats, args.runs, args.batch_size) < 1 or args.sleep_us <= 0:
        parser.error("need --idle-ms >= 0 (at least one), --repeats, --runs and --batch-size >= 1 and --sleep-us > 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    torch.set_num_threads(1)
    steady_allocator()  # as calibrate compute and the real runs' workers
    works = _works(args.model, args.batch_size, args.scenario)
    print(f"# {args.scenario or args.model} (batch {args.batch_size}), one torch thread: "
          "median µs of each work right after idling, "
          f"in sleeps of {args.sleep_us:g} µs; x = over the shortest idle")
    medians = {name: {} for name in works}
    for idle_ms in args.idle:
        cells = []
        for name, work in works.items():
            medians[name][idle_ms] = timed_after_idle(work, idle_ms / 1e3, args.sleep_us / 1e6, args.repeats)
            cells.append(f"{name} {medians[name][idle_ms] * 1e6:9.1f}")
        print(f"idle {idle_ms:6.1f} ms: " + "   ".join(cells), flush=True)
    for name, by_idle in medians.items():
        print(f"# {name}: " + "  ".join(f"{idle_ms:g} ms x{r:.2f}" for idle_ms, r in ratios(by_idle).items()))
    print(f"# the short works' extra over back to back, µs: the first run after the idle / the first {args.runs} "
          "runs in a row together")
    for name in ("update", "pack"):
        warm = medians[name][min(args.idle)]
        cells = []
        for idle_ms in args.idle:
            first, total = extra_after_idle(works[name], idle_ms / 1e3, args.sleep_us / 1e6, args.repeats,
                                            args.runs, warm)
            cells.append(f"{idle_ms:g} ms {first * 1e6:+.0f} / {total * 1e6:+.0f}")
        print(f"# {name}: " + "  ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
