"""DC-S3GD vs blocking synchronous SGD: throughput and speedup, 32-128 CPU nodes, ResNet-50.

Rigazzi (DC-S3GD, 2019) reports, for ResNet-50/ImageNet on a Cray XC with Aries and CPU
nodes at local batch 512-1024, throughput that scales close to linearly from 32 to 128
nodes. This benchmark runs ``scenarios/dcs3gd_scaling.yaml`` (timing-only; published
Skylake-node compute times; Aries NICs on a fat tree standing in for the dragonfly) at every
(nodes, local batch) point, once with ``dcs3gd`` and once with blocking ``sync`` (gradient
allreduce after backward, no overlap), and prints images/s, the speedup of dcs3gd over sync,
weak-scaling efficiency against 32 nodes, and dcs3gd's mean overlap fraction.

Throughput = images consumed / virtual time (weak scaling: fixed local batch). If the
``resnet50`` model is not registered, the runs fall back to an MLP of about ResNet-50's
size (3x224x224 -> 160 -> 1000, 24.2 M parameters; its compute time then comes from the
xc-skylake device's FLOP-count estimate) and say so.

    python benchmarks/dcs3gd_scaling.py [--nodes 32 64 128] [--batch 512 1024] [--steps 30]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from simdist.metrics import summarize
from simdist.scenario import load_scenario
from simdist.simulate import simulate
from simdist.training.models import MODELS

DEFAULT_SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "dcs3gd_scaling.yaml"
# an MLP of about ResNet-50's size (25.6 M parameters) when resnet50 is missing: 3x224x224 -> 160 -> 1000
FALLBACK = ["workload.model={name: mlp, hidden: [160]}"]


def run_point(path: Path, algorithm: str, nodes: int, batch: int, steps: int, extra: list[str]) -> dict:
    overrides = [f"platform.nodes={nodes}", f"workload.batch_size={batch}", f"stop.steps={steps}", *extra]
    if algorithm != "dcs3gd":
        overrides.append(f"algorithm={algorithm}")
    result = simulate(load_scenario(path, overrides=overrides))
    summary = summarize(result)
    overlaps = [r["overlap_fraction"] for r in result.recorder.updates if r.get("overlap_fraction") is not None]
    return {"throughput": summary["throughput_samples_per_s"], "iteration_s": summary["mean_iteration_s"],
            "overlap": statistics.mean(overlaps) if overlaps else None, "params": result.extra["param_count"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO)
    parser.add_argument("--nodes", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--batch", type=int, nargs="+", default=[512, 1024])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    extra: list[str] = []
    if "resnet50" not in MODELS:
        extra = FALLBACK
        print("note: model 'resnet50' is not registered; using an MLP 150528-160-1000 (~24 M parameters) instead")
    print(f"{'nodes':>5} {'batch':>5} {'sync img/s':>11} {'dcs3gd img/s':>13} {'speedup':>8} "
          f"{'sync eff.':>9} {'dcs3gd eff.':>11} {'overlap':>8} {'iter s (sync/dcs3gd)':>21}")
    for batch in args.batch:
        base: dict[str, float] = {}
        for nodes in args.nodes:
            sync = run_point(args.scenario, "sync", nodes, batch, args.steps, extra)
            dc = run_point(args.scenario, "dcs3gd", nodes, batch, args.steps, extra)
            base.setdefault("sync", sync["throughput"] / nodes)
            base.setdefault("dcs3gd", dc["throughput"] / nodes)
            eff_sync = sync["throughput"] / nodes / base["sync"]
            eff_dc = dc["throughput"] / nodes / base["dcs3gd"]
            print(f"{nodes:>5} {batch:>5} {sync['throughput']:>11.1f} {dc['throughput']:>13.1f} "
                  f"{dc['throughput'] / sync['throughput']:>8.4f} {eff_sync:>9.4f} {eff_dc:>11.4f} "
                  f"{dc['overlap']:>8.3f} {sync['iteration_s']:>10.4f}/{dc['iteration_s']:<10.4f}")
    print(f"(weak scaling: efficiency = images/s per node relative to {args.nodes[0]} nodes; "
          f"{args.steps} iterations per point; model parameters: {dc['params']:,})")


if __name__ == "__main__":
    main()
