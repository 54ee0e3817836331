"""Two ranks on one core, the same training steps started together: how far apart do they end, real vs modelled?

    python benchmarks/time_slices_check.py [--core 0] [--repeats 30] [--steps 1,2,3] [--model mlp] [--batch-size 2048]

Processor sharing ends them together; Linux runs one at a time and switches at its tick, so the
first ends up to a slice before the second, and waits that long at the next collective. The
simulator's time slices (``node.co_run.slice_s``, :mod:`simdist.runtime.time_slices`) take the
slice from ``simdist calibrate cpu-share`` (the ranks' CPU time over the times they were
switched in while two stepped the workload on one core). This script checks the model on what
that calibration never saw: two processes pinned to ``--core`` wait at a barrier, then each
runs ``n`` training steps of the zoo model; the gap between their ends is timed ``--repeats``
times per ``n``. The simulation runs the same pair, each rank given the CPU time its steps took
in the real pair, with the slice just calibrated, started at ``--repeats`` instants spread
evenly over one slice (real starts fall anywhere between two ticks). Printed per ``n``: the
mean and median gap, real and simulated, and the simulated over the real mean. Processor
sharing's gap is 0 throughout.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Any, Sequence

import torch

from simdist.calibrate.compute_profile import ZOO, cpu_training_step
from simdist.calibrate.cpu_share import measure_contention, stepped_workload
from simdist.calibrate.time_slice import time_slice_fields
from simdist.calibrate.wake_run import measure_wake_run, wake_run_s
from simdist.platform.compute import ComputeModel, ModelTiming
from simdist.platform.presets import preset
from simdist.platform.spec import PlatformSpec
from simdist.platform.topology import Platform
from simdist.recorder import Recorder
from simdist.runtime.sim import SimWorld


def _worker(core: int, steps: Sequence[int], repeats: int, model: str, batch_size: int, barrier: Any,
            out: Any) -> None:
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    step = cpu_training_step(stepped_workload(model, 0, None), batch_size)
    for _ in range(3):
        step()
    ends, cpus = [], []
    for n in steps:
        for _ in range(repeats):
            time.sleep(0.02)  # both sleep, as ranks waiting between steps do
            barrier.wait()
            cpu = time.thread_time()
            for _ in range(n):
                step()
            ends.append(time.perf_counter())
            cpus.append(time.thread_time() - cpu)
    out.put((ends, cpus))


def real_pairs(core: int, steps: Sequence[int], repeats: int, model: str, batch_size: int
               ) -> dict[int, list[tuple[float, float, float]]]:
    """Per step count, (gap between the two ends, each one's CPU seconds) of every repeat."""
    context = mp.get_context("fork")
    barrier, out = context.Barrier(2), context.Queue()
    workers = [context.Process(target=_worker, args=(core, list(steps), repeats, model, batch_size, barrier, out))
               for _ in range(2)]
    for worker in workers:
        worker.start()
    (ends_a, cpu_a), (ends_b, cpu_b) = out.get(timeout=900), out.get(timeout=900)
    for worker in workers:
        worker.join()
    rows = [(abs(a - b), ca, cb) for a, b, ca, cb in zip(ends_a, ends_b, cpu_a, cpu_b)]
    return {n: rows[i * repeats:(i + 1) * repeats] for i, n in enumerate(steps)}


def simulated_gaps(slice_s: float, wake_run_s: float, works_s: Sequence[tuple[float, float]]) -> list[float]:
    """The gaps of the same pairs (each rank's CPU seconds) simulated with ``slice_s``, started at
    instants spread evenly over one slice."""
    spec = PlatformSpec.model_validate({**preset("laptop-cpu"), "node": {
        **preset("laptop-cpu")["node"], "devices": 2, "cores": 1,
        "co_run": {"slice_s": slice_s, "wake_run_s": wake_run_s, "source": "measured by this script"}}})
    platform = Platform(spec)
    timing = ModelTiming(1e-3, 1e-4, None, "unused")
    compute = ComputeModel(platform, {("host-cpu", "m"): timing}, model="m", forward_flops_per_sample=1.0,
                           parameter_layers=1, seed=0)
    world = SimWorld(platform, compute, Recorder(), gradient_source=None)
    gaps = []

    def run():
        t = 0.0
        for i, work in enumerate(works_s):
            start = t + slice_s * i / len(works_s)
            yield world.env.timeout(start - world.env.now)
            done = {}

            def member(rank):
                yield world.busy(rank, work[rank], "work").event
                done[rank] = world.env.now

            processes = [world.env.process(member(rank)) for rank in (0, 1)]
            yield world.env.all_of(processes)
            gaps.append(abs(done[0] - done[1]))
            t = world.env.now + 0.02 + 10 * slice_s  # the next pair starts well clear of this one
            t -= t % slice_s  # on a tick, so the offsets above place it within the slice

    world.env.process(run())
    world.env.run()
    return gaps


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--steps", default="1,2,3", help="comma-separated training steps per process")
    parser.add_argument("--model", default="mlp", choices=sorted(ZOO))
    parser.add_argument("--batch-size", type=int, default=2048)
    args = parser.parse_args(argv)
    if args.core not in os.sched_getaffinity(0) or args.repeats < 2 or args.batch_size < 1:
        parser.error("--core must be one of this process's cores, --repeats at least 2, --batch-size positive")
    try:
        steps = [int(n) for n in args.steps.split(",") if n.strip()]
    except ValueError:
        steps = []
    if not steps or min(steps) < 1:
        parser.error("--steps: positive whole numbers, e.g. 1,2,3")
    rows = measure_contention([2], [1], duration_s=1.0, rounds=1, model=args.model, batch_size=args.batch_size)
    slice_s = time_slice_fields(rows)["slice_s"]
    wake = wake_run_s(measure_wake_run(args.core))
    print(f"# calibrated: slice {slice_s * 1e3:.3f} ms (calibrate cpu-share's measurement, 2 ranks on 1 core), "
          f"woken run {wake * 1e3:.2f} ms; {args.model} at batch {args.batch_size}, core {args.core}, "
          f"{args.repeats} pairs per step count")
    if slice_s <= 0:
        print("the kernel gave no switch counts here (/proc/self/schedstat): nothing to check", file=sys.stderr)
        return 1
    real = real_pairs(args.core, steps, args.repeats, args.model, args.batch_size)
    print(f"{'steps':>5} {'cpu ms':>8} {'real mean':>10} {'sim mean':>9} {'sim/real':>9} {'real median':>12} "
          f"{'sim median':>11}")
    for n in steps:
        gaps = [gap for gap, _, _ in real[n]]
        sim = simulated_gaps(slice_s, wake, [(a, b) for _, a, b in real[n]])
        r_mean, s_mean = statistics.fmean(gaps), statistics.fmean(sim)
        cpu_ms = statistics.fmean(a + b for _, a, b in real[n]) / 2 * 1e3
        print(f"{n:5d} {cpu_ms:8.2f} {r_mean * 1e3:10.3f} {s_mean * 1e3:9.3f} {s_mean / r_mean:9.2f} "
              f"{statistics.median(gaps) * 1e3:12.3f} {statistics.median(sim) * 1e3:11.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
