"""n-softsync staleness vs n: mean staleness of the applied gradients for n in {1, 2, 15, 30}, N = 30.

Gupta et al. ("Rudra", ICDM 2016) report staleness distributions for 1-, 15- and 30-softsync
with 30 learners centred near 1, 15 and 30: the mean staleness is close to n. With
homogeneous workers in lockstep the simulator gives n − 1/c exactly in steady state
(c = ⌊N/n⌋ gradients per update: the gradient that completes a group reads the new
version), so the ratio mean / n sits just below 1.

Runs ``scenarios/nsoftsync_staleness.yaml`` (30 workers + 1 server, MLP on digits, 5 epochs)
once per n, overriding ``algorithm.n``; a few seconds in all.

    python benchmarks/nsoftsync_staleness.py [--scenario PATH] [--n 1 2 15 30]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from simdist.scenario import load_scenario
from simdist.simulate import simulate

DEFAULT_SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "nsoftsync_staleness.yaml"


def staleness_row(scenario_path: Path, n: int) -> dict:
    scenario = load_scenario(scenario_path, overrides=[f"algorithm.n={n}"])
    result = simulate(scenario)
    values = [row["staleness"] for row in result.recorder.updates]
    workers = scenario.worker_count
    mean = statistics.mean(values)
    return {"n": n, "N": workers, "c": workers // n, "gradients": len(values), "mean": mean,
            "median": statistics.median(values), "max": max(values), "ratio": mean / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO)
    parser.add_argument("--n", type=int, nargs="+", default=[1, 2, 15, 30])
    args = parser.parse_args()
    rows = [staleness_row(args.scenario, n) for n in args.n]
    print(f"{'n':>4} {'N':>4} {'c':>4} {'gradients':>10} {'mean staleness':>15} {'median':>7} {'max':>5} "
          f"{'mean / n':>9}")
    for r in rows:
        print(f"{r['n']:>4} {r['N']:>4} {r['c']:>4} {r['gradients']:>10} {r['mean']:>15.3f} {r['median']:>7g} "
              f"{r['max']:>5} {r['ratio']:>9.3f}")


if __name__ == "__main__":
    main()
