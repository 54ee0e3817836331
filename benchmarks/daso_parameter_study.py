"""DASO parameter study: time per ResNet-50 ImageNet epoch for fixed B and S at 32 and 128 GPUs.

The published study (Coquelin et al., J. Big Data 2022) fixes the global-sync interval
B ∈ {1, 2, 4, 8, 16, 32} and the wait S ∈ {0 .. B} (S = 0: a blocking bf16 sync every B
batches). This benchmark runs ``scenarios/daso_parameter_study.yaml`` (timing-only, 4 A100
per node) for one full epoch at every (GPUs, B, S) — 2 × 69 points — and writes
``reports/daso_parameter_study.csv`` (one row per point: virtual seconds per epoch, global
syncs, steps) and prints the table, one line per (GPUs, B) with the times for S = 0 .. B.

Check: with blocking syncs (S = 0) the epoch time must not grow with B — fewer syncs of the
same cost. The benchmark asserts it (up to 1e-9 relative, for float noise).

One epoch is 157 batches per GPU at 32 GPUs and 40 at 128: B = 32 syncs 4 times resp. once
(the last sync of the data is merged right after the last batch). Three to four minutes.

    python benchmarks/daso_parameter_study.py [--gpus 32 128] [--B 1 2 4 8 16 32] [--epochs 1]
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from simdist.scenario import load_scenario
from simdist.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "daso_parameter_study.yaml"
REPORTS = ROOT / "reports"
GPUS_PER_NODE = 4


def run_point(gpus: int, B: int, S: int, epochs: int) -> dict:
    overrides = [f"platform.nodes={gpus // GPUS_PER_NODE}", f"algorithm.B={B}", f"algorithm.S={S}",
                 f"stop.epochs={epochs}"]
    scenario = load_scenario(SCENARIO, overrides)
    wall = time.perf_counter()
    result = simulate(scenario)
    wall = time.perf_counter() - wall
    assert result.status == "completed", result.status
    syncs = [e for e in result.recorder.events if e["kind"] == "global_sync"]
    staleness = [row["staleness"] for row in result.recorder.updates]
    return {"gpus": gpus, "B": B, "S": S, "epoch_s": result.virtual_time_s / epochs,
            "steps_per_epoch": max(row["step"] for row in result.recorder.updates) // epochs,
            "global_syncs": len(syncs), "mean_staleness": sum(staleness) / len(staleness), "wall_s": wall}


def check_monotone_at_blocking(rows: list[dict]) -> None:
    """At S = 0 the time per epoch is non-increasing in B (for each GPU count)."""
    for gpus in sorted({r["gpus"] for r in rows}):
        blocking = sorted((r["B"], r["epoch_s"]) for r in rows if r["gpus"] == gpus and r["S"] == 0)
        for (b1, t1), (b2, t2) in zip(blocking, blocking[1:]):
            assert t2 <= t1 * (1 + 1e-9), (
                f"{gpus} GPUs, S = 0: B = {b2} takes {t2:.4f} s per epoch, more than B = {b1} ({t1:.4f} s)")


def print_table(rows: list[dict], per_line: int = 11) -> None:
    print("virtual seconds per epoch; each line: B, then S = 0, 1, ..., B")
    for gpus in sorted({r["gpus"] for r in rows}):
        print(f"-- {gpus} GPUs ({gpus // GPUS_PER_NODE} nodes x {GPUS_PER_NODE})")
        for B in sorted({r["B"] for r in rows if r["gpus"] == gpus}):
            times = [r["epoch_s"] for r in sorted((r for r in rows if r["gpus"] == gpus and r["B"] == B),
                                                  key=lambda r: r["S"])]
            for start in range(0, len(times), per_line):
                label = f"B={B:<3}" if start == 0 else " " * 5
                cells = " ".join(f"{t:7.3f}" for t in times[start:start + per_line])
                print(f"  {label} S={start:<2}.. {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--B", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    start = time.perf_counter()
    rows = []
    for gpus in args.gpus:
        for B in args.B:
            for S in range(B + 1):
                rows.append(run_point(gpus, B, S, args.epochs))
    REPORTS.mkdir(exist_ok=True)
    path = REPORTS / "daso_parameter_study.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print_table(rows)
    check_monotone_at_blocking(rows)
    print(f"S = 0 rows are non-increasing in B at every GPU count. Wrote {path} "
          f"({len(rows)} points, {time.perf_counter() - start:.0f} s wall)")


if __name__ == "__main__":
    main()
