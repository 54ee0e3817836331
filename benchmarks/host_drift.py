"""How steady is this host? One training step timed without pause: the floor under any prediction.

    python benchmarks/host_drift.py [--seconds 60] [--window-s 1] [--model mlp] [--batch-size 2048]

A simulation calibrated at one moment predicts a run made at another. Where the host's speed
wanders (a VM's neighbours, the clock frequency, memory shared with other guests), the two
differ by that wander however good the model is. One process with one torch thread runs the
zoo model's training step at the batch size for ``--seconds``; each window of ``--window-s``
gives its median step time. Printed: every window's median wall and CPU time, then the
windows' mean, standard deviation (also relative to the mean), range, lag-1 autocorrelation
(near 1: the speed drifts slowly, so measurements a few seconds apart share their error and
ones minutes apart do not), and the means of blocks of ten windows. CPU time equal to wall
time says the process was not switched out: a slower window is a slower CPU, not a busier
scheduler.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable, Sequence

import numpy as np
import torch

from simdist.calibrate.compute_profile import ZOO, cpu_training_step
from simdist.calibrate.cpu_share import stepped_workload
from simdist.calibrate.timed_steps import steady_allocator

BLOCK = 10  # windows per block mean


def window_medians(step: Callable[[], None], seconds: float, window_s: float,
                   report: Callable[[float, float, int], None] | None = None) -> list[tuple[float, float]]:
    """(median wall s, median CPU s) of ``step`` per window of ``window_s``, for ``seconds`` in all."""
    windows = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        closes = time.perf_counter() + window_s
        walls, cpus = [], []
        while time.perf_counter() < closes:
            wall, cpu = time.perf_counter(), time.thread_time()
            step()
            walls.append(time.perf_counter() - wall)
            cpus.append(time.thread_time() - cpu)
        windows.append((statistics.median(walls), statistics.median(cpus)))
        if report is not None:
            report(*windows[-1], len(walls))
    return windows


def summary(medians: Sequence[float]) -> dict[str, float | list[float]]:
    """The windows' mean, standard deviation (s and % of the mean), range, lag-1 autocorrelation
    (NaN under three windows or with no spread) and block-of-ten means."""
    x = np.asarray(medians, dtype=float)
    mean, sd = float(x.mean()), float(x.std())
    lag1 = float(np.corrcoef(x[:-1], x[1:])[0, 1]) if len(x) >= 3 and sd > 0 else float("nan")
    blocks = [float(x[i:i + BLOCK].mean()) for i in range(0, len(x), BLOCK)]
    return {"mean_s": mean, "sd_s": sd, "sd_pct": 100.0 * sd / mean, "min_s": float(x.min()),
            "max_s": float(x.max()), "lag1": lag1, "block_means_s": blocks}


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to step (default 60)")
    parser.add_argument("--window-s", type=float, default=1.0, help="seconds per window (default 1)")
    parser.add_argument("--model", default="mlp", choices=sorted(ZOO), help="zoo model (default mlp)")
    parser.add_argument("--batch-size", type=int, default=2048, help="samples per step (default 2048)")
    args = parser.parse_args(argv)
    if not 0 < args.window_s <= args.seconds or args.batch_size < 1:
        parser.error("need 0 < --window-s <= --seconds and --batch-size >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    torch.set_num_threads(1)
    steady_allocator()  # as calibrate compute and the real runs' workers
    step = cpu_training_step(stepped_workload(args.model, 0, None), args.batch_size)
    for _ in range(3):
        step()
    print(f"# {args.model} at batch {args.batch_size}, one torch thread, {args.seconds:g} s in windows of "
          f"{args.window_s:g} s: median step time per window")
    windows = window_medians(step, args.seconds, args.window_s, report=lambda wall, cpu, n: print(
        f"{wall * 1e3:8.3f} ms wall {cpu * 1e3:8.3f} ms CPU  ({n} steps)", flush=True))
    s = summary([wall for wall, _cpu in windows])
    print(f"# windows: mean {s['mean_s'] * 1e3:.3f} ms, sd {s['sd_s'] * 1e3:.3f} ms ({s['sd_pct']:.1f} %), "
          f"range {s['min_s'] * 1e3:.3f}-{s['max_s'] * 1e3:.3f} ms, lag-1 autocorrelation {s['lag1']:.2f}")
    print("# means of blocks of %d windows (ms): %s" % (BLOCK, " ".join(f"{b * 1e3:.2f}" for b in s["block_means_s"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
