"""Timing-only scale: host wall time of one synchronous iteration at 64 ... 1,024 GPUs.

Horovod-style sync SGD (ring allreduce, analytic collectives) on the cluster-a100-hdr preset
(4 A100 per node, fat tree), timing-only (no tensors), ResNet-50-sized MLP payloads. Targets:
<= 2 ms of host time per iteration at 1,024 GPUs, and a fitted exponent of cost vs GPUs <= 1.1
(cost ~ GPUs^k by least squares on log-log).

    python benchmarks/timing_only_scale.py [--steps 50] [--repeats 3]
"""

from __future__ import annotations

import argparse

import numpy as np

from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate

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


def ms_per_iteration(gpus: int, steps: int, repeats: int) -> float:
    built = scenario_from_dict(scenario(gpus, steps))
    return min(simulate(built).wall_time_s for _ in range(repeats)) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    ms_per_iteration(64, 5, 1)  # warm-up
    costs = []
    print(f"sync, ring allreduce (analytic), timing-only, {args.steps} steps, best of {args.repeats}")
    for gpus in GPUS:
        costs.append(ms_per_iteration(gpus, args.steps, args.repeats))
        print(f"  {gpus:5d} GPUs: {costs[-1]:8.3f} ms per iteration  ({costs[-1] / gpus * 1e3:.2f} us per GPU)")
    exponent = float(np.polyfit(np.log(GPUS), np.log(costs), 1)[0])
    at_1024 = costs[-1]
    print(f"  at 1,024 GPUs: {at_1024:.3f} ms  (target <= {TARGET_MS_AT_1024} ms)  "
          f"{'MET' if at_1024 <= TARGET_MS_AT_1024 else 'NOT MET'}")
    print(f"  fitted exponent of cost vs GPUs: {exponent:.3f}  (target <= {TARGET_EXPONENT})  "
          f"{'MET' if exponent <= TARGET_EXPONENT else 'NOT MET'}")


if __name__ == "__main__":
    main()
