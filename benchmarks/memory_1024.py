"""Peak memory of a 1,024-GPU timing-only run (sync, ring allreduce, analytic collectives).

Reports the Python heap peak during the run (tracemalloc) and the process's peak resident set
size (ru_maxrss, which includes torch and the interpreter), for 100 steps on 256 nodes x 4 A100.

    python benchmarks/memory_1024.py [--steps 100] [--gpus 1024]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tracemalloc

from simdist.metrics import steps_table
from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from timing_only_scale import scenario  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--gpus", type=int, default=1024)
    args = parser.parse_args()
    built = scenario_from_dict(scenario(args.gpus, args.steps))
    rss_before_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tracemalloc.start()
    result = simulate(built)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.gpus}-GPU timing-only sync run, {args.steps} steps ({result.wall_time_s:.2f} s wall, "
          f"{len(result.recorder.span_columns()['rank'])} spans, {len(steps_table(result))} update rows)")
    print(f"  Python heap peak during the run (tracemalloc): {peak / 2**20:8.1f} MiB")
    print(f"  process peak RSS: {rss_mib:8.1f} MiB  (before the run: {rss_before_mib:.1f} MiB)")


if __name__ == "__main__":
    main()
