"""Published convergence claims of DASO and NNT, checked on replayed stand-ins (real training math).

The papers' own runs (ResNet-50 on ImageNet, ResNet-18 on CIFAR-10) cannot be replayed here;
these stand-ins train real models on scikit-learn's digits, so they test the *direction* of
each claim, not its size:

* **DASO** (docs/algorithms.md §5; Coquelin et al. 2022): "a larger B cuts time and, past
  B ≈ 4, accuracy; within a fixed B, accuracy dips as S grows and recovers when S = B".
  ``scenarios/daso_small.yaml`` (MLP on digits, 2 nodes × 2 CPU ranks, 12 epochs) with
  ``schedule: fixed``: final test accuracy and simulated time for B ∈ {1, 2, 4, 8, 16} at S = 0,
  and for S ∈ {0, 1, 2, 4, 8} at B = 8, over ``--seeds``.
* **NNT** (§7): "converges faster in wall time than sequential training".
  ``scenarios/nnt_topologies.yaml`` (cnn on digits, 16 nodes, per-node batch 16) on a ring
  against the same scenario on one node with sync (sequential SGD at batch 16): simulated time
  to reach 0.9 test accuracy, over ``--seeds``.

Prints one table per claim (mean and range over seeds) and writes ``--out`` (default
``reports/convergence_claims.csv``). ``--quick``: one seed, fewer points, fewer epochs.

    python benchmarks/convergence_claims.py [--seeds 0 1 2 3 4] [--out reports/convergence_claims.csv] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

from simdist.scenario import load_scenario
from simdist.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
DASO = ROOT / "scenarios" / "daso_small.yaml"
NNT = ROOT / "scenarios" / "nnt_topologies.yaml"
TARGET = 0.9


def daso_points(quick: bool) -> list[tuple[str, list[str]]]:
    """(label, overrides) of the B and S study."""
    b_values, s_values = ((1, 4, 16), (0, 8)) if quick else ((1, 2, 4, 8, 16), (0, 1, 2, 4, 8))
    fixed = "algorithm={{name: daso, schedule: fixed, B: {b}, S: {s}}}"
    points = [(f"daso B{b} S0", [fixed.format(b=b, s=0)]) for b in b_values]
    points += [(f"daso B8 S{s}", [fixed.format(b=8, s=s)]) for s in s_values if s > 0]
    return points


def nnt_points() -> list[tuple[str, list[str]]]:
    return [("nnt ring, 16 nodes", []),
            ("sequential (sync, 1 node)", ["platform.nodes=1", "algorithm=sync"])]


def run_point(claim: str, scenario: Path, label: str, overrides: list[str], seed: int, epochs: int | None) -> dict:
    extra = [f"seed={seed}", f"stop.target_accuracy={TARGET}", "stop.stop_at_target=false"]
    extra += [f"stop.epochs={epochs}"] if epochs else []
    result = simulate(load_scenario(scenario, overrides=[*overrides, *extra]))
    evals = pd.DataFrame(result.recorder.evals)
    reached = evals[evals["test_accuracy"] >= TARGET]
    return {"claim": claim, "label": label, "seed": seed, "virtual_time_s": result.virtual_time_s,
            "final_acc": float(evals.sort_values("time_s")["test_accuracy"].iloc[-1]),
            "time_to_target_s": float(reached["time_s"].min()) if len(reached) else None}


def summary_table(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    figures = ["virtual_time_s", "final_acc", "time_to_target_s"]
    grouped = table.groupby(["claim", "label"], sort=False)
    summary = grouped[figures].mean()
    for column in figures:
        summary[f"{column}_min"], summary[f"{column}_max"] = grouped[column].min(), grouped[column].max()
    summary["seeds"] = grouped.size()
    summary["reached"] = grouped["time_to_target_s"].count()
    return summary.reset_index()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "convergence_claims.csv")
    parser.add_argument("--quick", action="store_true", help="one seed, fewer points, 2 epochs")
    args = parser.parse_args(argv)
    seeds, epochs = (args.seeds[:1], 2) if args.quick else (args.seeds, None)
    plan = [("daso", DASO, label, o) for label, o in daso_points(args.quick)]
    plan += [("nnt", NNT, label, o) for label, o in nnt_points()]
    rows = []
    for seed in seeds:
        for claim, scenario, label, overrides in plan:
            started = time.perf_counter()
            rows.append(run_point(claim, scenario, label, overrides, seed, epochs))
            print(f"  {label} seed {seed}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    table = summary_table(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    shown = ["claim", "label", "seeds", "virtual_time_s", "final_acc", "final_acc_min", "final_acc_max",
             "time_to_target_s", "reached"]
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.4g}".format):
        print(table[shown].to_string(index=False))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
