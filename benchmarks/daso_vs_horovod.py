"""DASO vs Horovod-style sync: ResNet-50 time per ImageNet epoch on 16-256 A100 (timing-only).

The DASO paper (Coquelin et al., J. Big Data 2022) reports 25 % less training time than
Horovod for ResNet-50 on ImageNet, on nodes of 4 A100 with NVLink and HDR InfiniBand, 16-256
GPUs. This benchmark runs ``scenarios/daso_vs_horovod.yaml`` at 4, 8, 16, 32 and 64 nodes for
ONE full epoch per point (1,281,167 images; 313 batches of 256 per GPU at 16 GPUs, 20 at 256),
so every "time per epoch" below is a measured virtual epoch, not an extrapolation:

* ``horovod``: sync with ``preset: horovod`` (ring, fp16, 64 MiB fusion buckets overlapped
  with backward);
* ``daso blocking``: DASO as in its warm-up and cool-down epochs (a blocking bf16 global sync
  every batch) — ``schedule: fixed, B: 1, S: 0``;
* ``daso cycling``: DASO as cycling starts (the published B = 4, S = 1) — ``schedule: fixed,
  B: 4, S: 1``.

A 90-epoch DASO run with the default phases spends 4 + 4 epochs blocking and 82 cycling; the
``daso 90-ep mix`` column weights the two measured epochs that way (**estimate**: in a real
adaptive run the plateau test moves B between 1 and 8 during cycling —
``benchmarks/daso_256gpu_90epochs.py`` runs that in full at 256 GPUs). The ratio is DASO /
horovod time per epoch (below 1: DASO is faster).

Writes ``reports/daso_vs_horovod.csv`` and ``reports/daso_vs_horovod.png``. About a minute.

    python benchmarks/daso_vs_horovod.py [--nodes 4 8 16 32 64] [--epochs 1]
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from simdist.scenario import load_scenario
from simdist.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "daso_vs_horovod.yaml"
REPORTS = ROOT / "reports"
GPUS_PER_NODE = 4
WARMUP_EPOCHS = COOLDOWN_EPOCHS = 4
TOTAL_EPOCHS = 90

VARIANTS = {
    "horovod": ["algorithm={name: sync, preset: horovod}"],
    "daso_blocking": ["algorithm.schedule=fixed", "algorithm.B=1", "algorithm.S=0"],
    "daso_cycling": ["algorithm.schedule=fixed", "algorithm.B=4", "algorithm.S=1"],
}


def epoch_time_s(nodes: int, variant: str, epochs: int) -> tuple[float, float, int, float]:
    """(virtual s per epoch, wall s, steps per worker, rank 0's compute s per epoch) of ``epochs`` full epochs."""
    overrides = [f"platform.nodes={nodes}", f"stop.epochs={epochs}", *VARIANTS[variant]]
    scenario = load_scenario(SCENARIO, overrides)
    wall = time.perf_counter()
    result = simulate(scenario)
    wall = time.perf_counter() - wall
    assert result.status == "completed", result.status
    steps = max(row["step"] for row in result.recorder.updates) // epochs
    compute_s = sum(s.duration_s for s in result.recorder.spans if s.rank == 0 and s.kind == "compute")
    return result.virtual_time_s / epochs, wall, steps, compute_s / epochs


def run(nodes_list: list[int], epochs: int) -> list[dict]:
    rows = []
    for nodes in nodes_list:
        row: dict = {"nodes": nodes, "gpus": nodes * GPUS_PER_NODE}
        wall = 0.0
        for variant in VARIANTS:
            row[f"{variant}_epoch_s"], seconds, row["steps_per_epoch"], compute_s = epoch_time_s(nodes, variant, epochs)
            row.setdefault("compute_epoch_s", compute_s)  # forward/backward alone: the same for every variant
            wall += seconds
        cycling_epochs = TOTAL_EPOCHS - WARMUP_EPOCHS - COOLDOWN_EPOCHS
        row["daso_90ep_mix_epoch_s"] = ((WARMUP_EPOCHS + COOLDOWN_EPOCHS) * row["daso_blocking_epoch_s"]
                                        + cycling_epochs * row["daso_cycling_epoch_s"]) / TOTAL_EPOCHS
        for variant in ("daso_blocking", "daso_cycling", "daso_90ep_mix"):
            row[f"{variant}_ratio"] = row[f"{variant}_epoch_s"] / row["horovod_epoch_s"]
        row["wall_s"] = wall
        rows.append(row)
        print_row(row, header=len(rows) == 1)
    return rows


def print_row(row: dict, header: bool) -> None:
    if header:
        print(f"{'GPUs':>5} {'steps/ep':>8} {'compute s/ep':>12} {'horovod s/ep':>13} {'daso block':>11} "
              f"{'daso cycl':>10} {'daso 90-mix':>12} {'block/hvd':>10} {'cycl/hvd':>9} {'mix/hvd':>8} {'wall s':>7}")
    print(f"{row['gpus']:>5} {row['steps_per_epoch']:>8} {row['compute_epoch_s']:>12.2f} "
          f"{row['horovod_epoch_s']:>13.2f} {row['daso_blocking_epoch_s']:>11.2f} {row['daso_cycling_epoch_s']:>10.2f} "
          f"{row['daso_90ep_mix_epoch_s']:>12.2f} {row['daso_blocking_ratio']:>10.3f} "
          f"{row['daso_cycling_ratio']:>9.3f} {row['daso_90ep_mix_ratio']:>8.3f} {row['wall_s']:>7.1f}", flush=True)


def write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def plot(rows: list[dict], path: Path) -> None:
    """Time per epoch vs GPUs (left) and DASO / horovod (right), read from the rows."""
    fig = Figure(figsize=(11, 4.2))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    gpus = [r["gpus"] for r in rows]
    series = (("horovod", "sync, preset horovod", "o-", "C0"),
              ("daso_blocking", "DASO blocking (warm-up/cool-down)", "s--", "C1"),
              ("daso_cycling", "DASO cycling B=4, S=1", "^-", "C2"),
              ("daso_90ep_mix", "DASO 90-epoch mix (estimate)", "d:", "C3"))
    left.plot(gpus, [r["compute_epoch_s"] for r in rows], "-", color="grey", linewidth=0.8,
              label="forward/backward alone")
    for key, label, style, color in series:
        left.plot(gpus, [r[f"{key}_epoch_s"] for r in rows], style, color=color, label=label)
        if key != "horovod":
            right.plot(gpus, [r[f"{key}_ratio"] for r in rows], style, color=color, label=label)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(gpus, [str(g) for g in gpus])
        ax.set_xlabel("GPUs (4 A100 per node)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    left.set_yscale("log")
    left.set_ylabel("virtual time per ImageNet epoch (s)")
    left.set_title("ResNet-50, batch 256 per GPU, timing-only")
    right.axhline(1.0, color="grey", linewidth=0.8)
    right.axhline(0.75, color="grey", linewidth=0.8, linestyle=":")
    right.annotate("published: 0.75", (gpus[0], 0.75), textcoords="offset points", xytext=(2, 3), fontsize=8)
    right.set_ylabel("DASO / horovod time per epoch")
    right.set_title("Ratio (below 1: DASO faster)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    parser.add_argument("--epochs", type=int, default=1, help="full epochs simulated per point (default 1)")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = run(args.nodes, args.epochs)
    REPORTS.mkdir(exist_ok=True)
    write_csv(rows, REPORTS / "daso_vs_horovod.csv")
    plot(rows, REPORTS / "daso_vs_horovod.png")
    print(f"wrote {REPORTS / 'daso_vs_horovod.csv'} and {REPORTS / 'daso_vs_horovod.png'} "
          f"({time.perf_counter() - start:.0f} s wall in all)")


if __name__ == "__main__":
    main()
