"""DBS-SGD against asgd, n-softsync (n = 2) and sync on the published heterogeneous setup.

Ye et al. (DBS, arXiv:2007.11831, 2020; docs/algorithms.md §4) report, for LeNet on MNIST with
half the workers at 1 CPU and half at 1.5 CPUs: per-worker iteration times equalise, the
staleness distribution returns to the narrow homogeneous shape, the loss at equal steps is
better than asgd's and n-softsync's (n = 2) and slightly worse than sync's, with near-linear
speedup to 8 workers. This script runs ``scenarios/dbs_heterogeneous.yaml`` (the LeNet-like
cnn on scikit-learn's digits, 4 and 8 workers) for each configuration and seed and prints,
per configuration, the mean over seeds (and the range) of:

* ``epoch_s``: simulated time per epoch; ``final_acc``: last test accuracy; ``p95_stale``;
* ``compute_spread``: the slowest worker's mean forward/backward time over the fastest's, in
  the second half of the run (1.0 = equal iteration compute times; 1.5 = the CPU ratio);
* test loss at equal *steps* (applied gradients), at equal *samples* (epochs of data) and at
  equal *simulated time*, each at 25 % and 50 % of the shortest run's span, interpolated
  linearly between evaluations.

``dbs-4-shards`` is the earlier reading (fixed equal shards, batch sizes from whole-loop
times) for comparison. Writes ``--out`` (default ``reports/dbs_vs_asgd.csv``) and prints the
table. ``--quick``: 3 epochs, one seed, four configurations (for tests).

    python benchmarks/dbs_vs_asgd.py [--seeds 0 1 2] [--out reports/dbs_vs_asgd.csv] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from simdist.scenario import load_scenario
from simdist.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "dbs_heterogeneous.yaml"
EIGHT = ["workers=8", "platform.node.devices=9",
         "platform.device_overrides=[{ranks: [0, 1, 2, 3], cpus: 1.5}, {ranks: [4, 5, 6, 7], cpus: 1.0}]"]
CONFIGS = {
    "sync-4": ["algorithm={name: sync}"],
    "asgd-4": ["algorithm={name: asgd}"],
    "nsoftsync2-4": ["algorithm={name: nsoftsync, n: 2}"],
    "dbs-4": ["algorithm={name: dbs}"],
    "dbs-4-shards": ["algorithm={name: dbs, data: shards, measure: iteration}"],
    "asgd-8": ["algorithm={name: asgd}", *EIGHT],
    "dbs-8": ["algorithm={name: dbs}", *EIGHT],
}
QUICK = ["asgd-4", "dbs-4", "dbs-4-shards", "sync-4"]
FRACTIONS = (0.25, 0.5)


def run(label: str, seed: int, epochs: int | None) -> dict:
    """One simulation: its figures and its evaluation curve on three axes."""
    overrides = [*CONFIGS[label], f"seed={seed}"] + ([f"stop.epochs={epochs}"] if epochs else [])
    result = simulate(load_scenario(SCENARIO, overrides=overrides))
    updates = pd.DataFrame(result.recorder.updates)
    evals = pd.DataFrame(result.recorder.evals).groupby("step", as_index=False).first()
    per_step = updates.groupby("step")["batch_size"].sum().sort_index().cumsum()
    evals["samples"] = [int(per_step[per_step.index <= step].iloc[-1]) if step > 0 else 0 for step in evals["step"]]
    return {"label": label, "seed": seed, "epochs": result.epochs, "epoch_s": result.virtual_time_s / result.epochs,
            "final_acc": float(evals["test_accuracy"].iloc[-1]),
            "p95_stale": float(np.percentile(updates["staleness"], 95)),
            "compute_spread": compute_spread(result), "curve": evals}


def compute_spread(result) -> float:
    """Slowest over fastest worker's mean forward/backward time in the second half of the run."""
    half = result.virtual_time_s / 2
    means = {}
    for span in result.recorder.spans:
        if span.name == "forward/backward" and span.start_s >= half:
            means.setdefault(span.rank, []).append(span.duration_s)
    values = [statistics.mean(v) for v in means.values()]
    return max(values) / min(values)


def loss_at(curve: pd.DataFrame, axis: str, where: float) -> float:
    return float(np.interp(where, curve[axis], curve["test_loss"]))


def add_equal_points(runs: list[dict]) -> None:
    """Test loss of every run at the same steps, samples and time (fractions of the shortest run)."""
    for seed in {r["seed"] for r in runs}:
        mine = [r for r in runs if r["seed"] == seed]
        for axis, column in (("step", "steps"), ("samples", "samples"), ("time_s", "time")):
            span = min(r["curve"][axis].iloc[-1] for r in mine)
            for fraction in FRACTIONS:
                for r in mine:
                    r[f"loss@{column}{int(fraction * 100)}"] = loss_at(r["curve"], axis, fraction * span)


def summarise(runs: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame([{k: v for k, v in r.items() if k != "curve"} for r in runs])
    figures = [c for c in table.columns if c not in ("label", "seed", "epochs")]
    grouped = table.groupby("label", sort=False)[figures]
    summary = grouped.mean().add_suffix("")
    low, high = grouped.min(), grouped.max()
    for column in figures:
        summary[f"{column}_min"], summary[f"{column}_max"] = low[column], high[column]
    summary.insert(0, "seeds", table.groupby("label", sort=False)["seed"].count())
    return summary.reset_index()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "dbs_vs_asgd.csv")
    parser.add_argument("--quick", action="store_true", help="3 epochs, one seed, four configurations")
    args = parser.parse_args(argv)
    labels, seeds, epochs = (QUICK, args.seeds[:1], 3) if args.quick else (list(CONFIGS), args.seeds, None)
    runs = []
    for seed in seeds:
        for label in labels:
            started = time.perf_counter()
            runs.append(run(label, seed, epochs))
            print(f"  {label} seed {seed}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    add_equal_points(runs)
    summary = summarise(runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary.to_csv(args.out, index=False)
    shown = ["label", "seeds", "epoch_s", "final_acc", "p95_stale", "compute_spread"] + \
        [c for c in summary.columns if c.startswith("loss@") and not c.endswith(("_min", "_max"))]
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.float_format", "{:.4g}".format):
        print(summary[shown].to_string(index=False))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
