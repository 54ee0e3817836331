"""Timing-only scale: host wall time of one synchronous iteration at 64 ... 1,024 GPUs.

Horovod-style sync SGD (ring allreduce, analytic collectives) on the cluster-a100-hdr preset
(4 A100 per node, fat tree), timing-only (no tensors), ResNet-50-sized MLP payloads. Targets:
<= 2 ms of host time per iteration at 1,024 GPUs, and a fitted exponent of cost vs GPUs <= 1.1
(cost ~ GPUs^k by least squares on log-log).

The cost of one iteration is measured in steady state: the wall time of a run of
``10 + steps`` steps minus that of a 10-step run, divided by ``steps`` (best of ``repeats``
each), so the one-time work — building the platform, planning the collective, running each
collective phase once alone — is reported apart, as "first 10 steps". The reference column
runs the same scenario with one SimPy process per rank (``Simulation(..., lockstep=False)``)
instead of the workers as one lockstep cohort; both give the same results (tests/test_cohort.py).

    python benchmarks/timing_only_scale.py [--steps 50] [--repeats 3] [--reference-up-to 1024]
"""

from __future__ import annotations

import argparse

import numpy as np

from simdist.scenario import scenario_from_dict
from simdist.simulate import Simulation

TARGET_MS_AT_1024 = 2.0
TARGET_EXPONENT = 1.1
GPUS = (64, 128, 256, 512, 1024)


def scenario(gpus: int, steps: int) -> dict:
    return {
        "name": f"timing-only-{gpus}",
        "platform": {"preset": "cluster-a100-hdr", "nodes": gpus // 4},
        "workload": {"model": {"name": "mlp", "hidden": [4096, 4096]},
                     "dataset": {"name": "synthetic", "samples": 4096, "features": 1024, "classes": 10},
                     "batch_size": 64, "timing_only": True},
        "algorithm": {"name": "sync", "collective": "ring"},
        "stop": {"steps": steps},
        "outputs": {"plots": False, "trace": False},
    }


def wall_s(gpus: int, steps: int, repeats: int, lockstep: bool) -> float:
    built = scenario_from_dict(scenario(gpus, steps))
    return min(Simulation(built, None, lockstep=lockstep).execute().wall_time_s for _ in range(repeats))


def steady_ms(gpus: int, steps: int, repeats: int, lockstep: bool = True) -> tuple[float, float]:
    """(ms per iteration in steady state, seconds of the first 10 steps)."""
    first = wall_s(gpus, 10, repeats, lockstep)
    return (wall_s(gpus, 10 + steps, repeats, lockstep) - first) / steps * 1e3, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reference-up-to", type=int, default=1024,
                        help="largest GPU count also run with one process per rank (slow: ~0.15 s per step at 1,024)")
    args = parser.parse_args()
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
    exponent = float(np.polyfit(np.log(GPUS), np.log(costs), 1)[0])
    at_1024 = costs[-1]
    print(f"  at 1,024 GPUs: {at_1024:.3f} ms per iteration  (target <= {TARGET_MS_AT_1024} ms)  "
          f"{'MET' if at_1024 <= TARGET_MS_AT_1024 else 'NOT MET'}")
    print(f"  fitted exponent of cost vs GPUs: {exponent:.3f}  (target <= {TARGET_EXPONENT})  "
          f"{'MET' if exponent <= TARGET_EXPONENT else 'NOT MET'}")


if __name__ == "__main__":
    main()
