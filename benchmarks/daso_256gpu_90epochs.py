"""DASO at scale: ResNet-50, 90 ImageNet-sized epochs on 256 A100 (64 nodes x 4), timing-only.

Runs ``scenarios/daso_vs_horovod.yaml`` at ``platform.nodes=64`` with the adaptive schedule
as specified (4 warm-up epochs, cycling steered by the plateau test on the scripted loss
curve, 4 cool-down epochs) for all 90 epochs, and prints what it took: wall time (total and
per epoch), virtual time, the phase and (B, S) changes, global syncs and staleness. For
scale it also simulates one epoch of Horovod-style sync (``preset: horovod``) on the same
platform and prints 90 × that epoch next to DASO's total (sync's epochs are all alike).

Nothing is extrapolated for DASO: the whole run is simulated. With ``--epochs N`` only N
epochs run (the cool-down then moves to the last 4 of those N), and the output says so.
``--profile`` runs under cProfile and prints the top functions.

    python benchmarks/daso_256gpu_90epochs.py [--nodes 64] [--epochs 90] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time
from collections import Counter
from pathlib import Path

from simdist.scenario import load_scenario
from simdist.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "daso_vs_horovod.yaml"
GPUS_PER_NODE = 4


def run_daso(nodes: int, epochs: int, profile: bool):
    scenario = load_scenario(SCENARIO, [f"platform.nodes={nodes}", f"stop.epochs={epochs}"])
    profiler = cProfile.Profile() if profile else None
    wall = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    result = simulate(scenario)
    if profiler is not None:
        profiler.disable()
    return result, time.perf_counter() - wall, profiler


def horovod_epoch_s(nodes: int) -> float:
    scenario = load_scenario(SCENARIO, [f"platform.nodes={nodes}", "stop.epochs=1",
                                        "algorithm={name: sync, preset: horovod}"])
    return simulate(scenario).virtual_time_s


def report(result, wall_s: float, nodes: int, epochs: int) -> None:
    events = result.recorder.events
    print(f"DASO, ResNet-50 timing-only, {nodes} nodes x {GPUS_PER_NODE} A100 = {nodes * GPUS_PER_NODE} GPUs, "
          f"{epochs} epochs requested: status {result.status}, {result.epochs:.2f} epochs done")
    print(f"  wall time {wall_s:.1f} s ({wall_s / max(result.epochs, 1e-9):.2f} s per epoch); "
          f"virtual time {result.virtual_time_s:.1f} s ({result.virtual_time_s / 3600:.3f} h)")
    steps = max(row["step"] for row in result.recorder.updates)
    print(f"  {steps} batches per GPU, {len(result.recorder.updates)} update rows, "
          f"{len(result.recorder.spans)} spans, {len(events)} events")
    print("  schedule: " + ", ".join(f"epoch {e['epoch']}: {e['phase']} B={e['B']} S={e['S']}"
                                     for e in events if e["kind"] == "schedule"))
    syncs = [e for e in events if e["kind"] == "global_sync"]
    print(f"  global syncs: {len(syncs)} ({sum(e['blocking'] for e in syncs)} blocking); S of the non-blocking "
          f"ones: {dict(sorted(Counter(e['S'] for e in syncs if not e['blocking']).items()))}")
    staleness = [row["staleness"] for row in result.recorder.updates]
    print(f"  staleness (local steps since the last merge): mean {statistics.mean(staleness):.2f}, "
          f"max {max(staleness)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=90)
    parser.add_argument("--profile", action="store_true", help="run under cProfile and print the top functions")
    parser.add_argument("--no-horovod", action="store_true", help="skip the one-epoch Horovod reference")
    args = parser.parse_args()
    result, wall_s, profiler = run_daso(args.nodes, args.epochs, args.profile)
    report(result, wall_s, args.nodes, args.epochs)
    if not args.no_horovod:
        epoch_s = horovod_epoch_s(args.nodes)
        total = epoch_s * args.epochs
        print(f"  horovod (sync, preset horovod): {epoch_s:.3f} s per epoch (one epoch simulated), "
              f"x {args.epochs} = {total:.1f} s; DASO / horovod = {result.virtual_time_s / total:.3f}")
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
        print(out.getvalue())


if __name__ == "__main__":
    main()
