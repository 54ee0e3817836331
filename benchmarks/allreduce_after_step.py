"""The runtime's allreduce as a run calls it, right after a training step, against back to back.

    python benchmarks/allreduce_after_step.py [--ranks 4] [--scenario scenarios/epoch_end_costs.yaml]
                                              [--repeats 40] [--warmup 5] [--timeout-s 300]

``simdist calibrate network --path runtime --after-compute S`` times the runtime's allreduce
twice, each call from a barrier the ranks leave together: with warm caches, and right after a
training step of S on every rank (``after_compute`` table); the simulator prices a collective
every member calls right after a forward/backward from the second. Both wait, after each call,
for every rank to be done. In a run the ranks do not: the first out start their next step.
This script launches ``--ranks`` processes under mpiexec; each times the runtime's blocking
allreduce (through its driver, as sync SGD reduces its gradient) of a float32 tensor of the
scenario's parameter count:

* ``back to back``: ``--repeats`` allreduces in a row;
* ``after a step``: each right after one training step of the scenario (forward, backward,
  optimizer step) and a blocking ``MPI_Allreduce`` of one number, so that the ranks enter the
  timed allreduce together and what is timed is its data phase, not the ranks' arrival skew
  (which the simulator models on its own); each rank goes straight on to its next step, as in
  a run, so a rank still finishing the allreduce shares its core with one already computing;
* ``after a step, waiting``: the same, every rank then waiting for the others (a blocking
  ``MPI_Allreduce`` of one number) before its next step, as ``calibrate network`` times it.

Printed last: the median over calls of the slowest rank's time after a step, both ways, and
their ratio.

The first ``--warmup`` of each are dropped. Printed per rank: the median and 90th percentile of
both in ms, and the ratio of the medians. On the development host (2 cores, MPICH 5), with the
predictive table's 256x256 point (85 k parameters, batch 2,048: ``--scenario
results/pv_afterwait/sync-4-256x256/scenario.yaml``): 4 ranks 1.7-2.4 ms back to back and
2.1-5.0 ms after a step (the first two ranks about twice the others: 4.3-4.8 against
2.5-2.9 ms, where the calibration's slowest rank, all waiting for each other after the call,
takes 2.8-3.2); 2 ranks 0.17 against 0.45 ms, an extra of about the cold first call.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

DEFAULT_SCENARIO = "scenarios/epoch_end_costs.yaml"


def _timed(path: Any, tensor: Any, repeats: int, before=None, after=None) -> list[float]:
    """Seconds of ``repeats`` runtime allreduces of ``tensor`` on this rank, each after ``before()``
    and followed by ``after()`` (untimed)."""
    rt, driver, out = path.rt, path.driver, []
    for _ in range(repeats):
        if before is not None:
            before()
        start = time.perf_counter()
        driver.wait(rt.allreduce(path.everyone, tensor))
        out.append(time.perf_counter() - start)
        path.forget()  # the sweep's spans are not wanted: keep memory flat
        if after is not None:
            after()
    return out


def worker(out: str, scenario: str, repeats: int) -> None:
    """One rank under mpiexec: the three series; rank 0 writes every rank's to ``out`` (JSON)."""
    import torch
    from mpi4py import MPI

    from simdist.calibrate.compute_scenario import plan_scenario
    from simdist.calibrate.runtime_sweep import RuntimePath
    from simdist.calibrate.timed_steps import cpu_training_step, steady_allocator

    torch.set_num_threads(1)
    steady_allocator()
    comm = MPI.COMM_WORLD
    target = plan_scenario(scenario, "cpu")
    step = cpu_training_step(target.workload, target.scenario.workload.batch_size)
    step()  # the first step allocates what the others reuse
    path = RuntimePath(comm)
    tensor = torch.ones(int(target.workload.param_count))

    def step_then_enter_together() -> None:
        step()
        comm.allreduce(0.0)  # blocking: every rank is in MPI when the timed allreduce starts

    series = {"back_to_back": _timed(path, tensor, repeats),
              "after_step": _timed(path, tensor, repeats, step_then_enter_together),
              # as calibrate network times it: every rank waits for the others after the call
              "after_step_waiting": _timed(path, tensor, repeats, step_then_enter_together,
                                           lambda: comm.allreduce(0.0))}
    gathered = comm.gather(series, root=0)
    if comm.Get_rank() == 0:
        Path(out).write_text(json.dumps({"params": int(target.workload.param_count), "ranks": gathered}))


def summary(ranks: list[dict[str, list[float]]], warmup: int) -> list[dict[str, float]]:
    """Per rank: median and 90th percentile (ms) of each series after ``warmup`` dropped, and the
    ratio of the medians after a step and back to back."""
    rows = []
    for rank, series in enumerate(ranks):
        row: dict[str, float] = {"rank": rank}
        for name, times in series.items():
            kept = np.array(times[warmup:]) * 1e3
            row[f"{name}_median_ms"] = float(np.median(kept))
            row[f"{name}_p90_ms"] = float(np.percentile(kept, 90))
        row["ratio"] = row["after_step_median_ms"] / row["back_to_back_median_ms"]
        rows.append(row)
    return rows


def slowest_median_ms(ranks: list[dict[str, list[float]]], name: str, warmup: int) -> float:
    """Median over rounds (after ``warmup``) of the slowest rank's time in series ``name``, ms:
    what a table of the slowest rank's time per call would hold."""
    rounds = np.array([series[name][warmup:] for series in ranks])
    return float(np.median(rounds.max(axis=0)) * 1e3)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4, help="MPI processes (default 4)")
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO,
                        help=f"its workload: the training step and the parameter count (default {DEFAULT_SCENARIO})")
    parser.add_argument("--repeats", type=int, default=40, help="allreduces timed per series and rank (default 40)")
    parser.add_argument("--warmup", type=int, default=5, help="first allreduces of each series dropped (default 5)")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="limit for the MPI run (default 300)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: the rank's own run, writing this JSON
    args = parser.parse_args(argv)
    if args.ranks < 2:
        parser.error(f"--ranks: an allreduce needs at least 2 ranks, got {args.ranks}")
    if args.warmup < 0 or args.repeats <= args.warmup:
        parser.error(f"--repeats ({args.repeats}) must exceed --warmup ({args.warmup}), which must be >= 0")
    if args.timeout_s <= 0:
        parser.error("--timeout-s must be > 0")
    if not Path(args.scenario).is_file():
        parser.error(f"--scenario {args.scenario}: no such file")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if args.worker is not None:
        worker(args.worker, args.scenario, args.repeats)
        return 0
    from simdist.calibrate.network import find_mpiexec
    from simdist.errors import InputError

    try:
        mpiexec = find_mpiexec()
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "allreduce.json"
        command = [mpiexec, "-n", str(args.ranks), sys.executable, __file__, "--worker", str(out),
                   "--scenario", args.scenario, "--repeats", str(args.repeats), "--warmup", str(args.warmup)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout_s)
        if done.returncode != 0 or not out.is_file():
            print(f"error: the MPI run failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}", file=sys.stderr)
            return 1
        document = json.loads(out.read_text())
    print(f"# {args.ranks} ranks, the runtime's allreduce of {document['params']} float32 parameters "
          f"({args.scenario}), ms per allreduce, {args.repeats - args.warmup} per series: back to back, and right "
          "after a training step with the ranks entering together")
    for row in summary(document["ranks"], args.warmup):
        print(f"rank {row['rank']}: back to back {row['back_to_back_median_ms']:.2f} / {row['back_to_back_p90_ms']:.2f}"
              f"   after a step {row['after_step_median_ms']:.2f} / {row['after_step_p90_ms']:.2f}"
              f"   (median / p90)   x{row['ratio']:.2f}")
    going_on, waiting = (slowest_median_ms(document["ranks"], name, args.warmup)
                         for name in ("after_step", "after_step_waiting"))
    print(f"slowest rank per call after a step, median: {going_on:.2f} ms with each rank going straight on to its "
          f"next step (as in a run), {waiting:.2f} ms with every rank waiting for the others after the call "
          f"(as calibrate network times it): x{going_on / waiting:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
