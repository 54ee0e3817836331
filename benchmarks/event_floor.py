"""The least host time one SimPy process per rank can take: the floor under the per-rank path.

nnt and the parameter-server family (asgd, nsoftsync, dbs) run one SimPy process per rank:
nnt's control flow depends on each rank's own timing (it applies whatever neighbour gradient
has arrived), and a server serves pushes in the order they arrive. Whatever a simulator does
per event, such a run schedules and processes each of its events through SimPy's queue. This
script measures how many events simdist's per-rank path schedules per unit (an nnt iteration
per GPU, an applied asgd update) and then runs a *bare skeleton* with that many events per
unit: one process per rank, each yielding plain timeouts (one with the noisy compute time, the
rest short), no network, no record, no span. Its host time per unit is a floor: no execution
with one process per rank and that many events can cost less on this host. Printed next to
the targets of ``benchmarks/timing_only_scale.py`` (2 ms per nnt iteration at 1,024 GPUs,
20 us per applied update at 1,024 workers, an exponent of cost vs GPUs <= 1.1).

    python benchmarks/event_floor.py [--gpus 64 256 1024 4096] [--units 20] [--repeats 2]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np
import simpy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing_only_scale import (TARGET_EXPONENT, TARGET_MS_AT_1024, TARGET_US_PER_UPDATE_AT_1024,  # noqa: E402
                               algorithm_scenario)

from simdist.scenario import scenario_from_dict  # noqa: E402
from simdist.simulate import Simulation  # noqa: E402

COMPUTE_S = 0.1  # the skeleton's compute time per unit, with the benchmark's 5 % jitter
SHORT_S = 1e-4  # every other event of a unit


def events_per_unit(algorithm: str, gpus: int, units: int) -> float:
    """SimPy events simdist's per-rank path schedules per unit: per GPU and iteration (nnt), per
    applied update (the parameter-server family); a run of ``units`` more iterations or updates
    less a run of as many fewer, so that setting up and finishing cancel out."""
    def scheduled(steps: int) -> int:
        simulation = Simulation(scenario_from_dict(algorithm_scenario(algorithm, gpus, steps)), None)
        simulation.execute()
        return simulation.world.env.scheduled

    short, long = (units, 2 * units) if algorithm == "nnt" else (gpus, 2 * gpus)
    per_step = (scheduled(long) - scheduled(short)) / (long - short)
    return per_step / gpus if algorithm == "nnt" else per_step


def build_skeleton(env: simpy.Environment, ranks: int, events: int, units: int, seed: int = 0) -> None:
    """``ranks`` processes on ``env``, each running ``units`` units of ``events`` timeouts (the
    first with a jittered compute time, the others short)."""
    draw = random.Random(seed).random

    def rank():
        for _ in range(units):
            yield env.timeout(COMPUTE_S * (1.0 + 0.05 * draw()))
            for _ in range(events - 1):
                yield env.timeout(SHORT_S * draw())

    for _ in range(ranks):
        env.process(rank())


def skeleton_s(ranks: int, events: int, units: int) -> float:
    """Host seconds of :func:`build_skeleton` run to its end on a bare SimPy environment."""
    env = simpy.Environment()
    build_skeleton(env, ranks, events, units)
    started = time.perf_counter()
    env.run()
    return time.perf_counter() - started


def skeleton_per_unit_s(ranks: int, events: int, units: int, repeats: int) -> float:
    """Host seconds per rank-unit in steady state: ``2 units`` less ``units`` (best of ``repeats``)."""
    return min(skeleton_s(ranks, events, 2 * units) - skeleton_s(ranks, events, units)
               for _ in range(repeats)) / (ranks * units)


def exponent(gpus: list[int], costs: list[float]) -> float:
    """k of cost ~ GPUs^k by least squares on log-log."""
    return float(np.polyfit(np.log(gpus), np.log(costs), 1)[0])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[64, 256, 1024, 4096])
    parser.add_argument("--units", type=int, default=20, help="iterations per rank timed by the skeleton")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--count-at", type=int, default=256,
                        help="GPUs of the simdist runs whose events are counted (a multiple of 4)")
    args = parser.parse_args(argv)
    if any(g < 4 for g in args.gpus) or args.units < 1 or args.repeats < 1:
        parser.error("--gpus must be at least 4 each, --units and --repeats at least 1")
    if args.count_at < 4 or args.count_at % 4:
        parser.error(f"--count-at must be a multiple of 4 GPUs (4 per node), not {args.count_at}")

    nnt_events = events_per_unit("nnt", args.count_at, 10)
    asgd_events = events_per_unit("asgd", args.count_at, 10)
    print(f"simdist's per-rank path at {args.count_at} GPUs: {nnt_events:.2f} events per nnt GPU-iteration, "
          f"{asgd_events:.2f} per applied asgd update")

    nnt_ms = [skeleton_per_unit_s(g, round(nnt_events), args.units, args.repeats) * g * 1e3 for g in args.gpus]
    print(f"\nbare skeleton, {round(nnt_events)} events per GPU-iteration (nnt): ms per iteration")
    for g, ms in zip(args.gpus, nnt_ms):
        print(f"  {g:5d} GPUs  {ms:9.3f} ms")
    if 1024 in args.gpus:
        at = nnt_ms[args.gpus.index(1024)]
        print(f"  at 1,024 GPUs: {at:.2f} ms, {at / TARGET_MS_AT_1024:.1f}x the target of {TARGET_MS_AT_1024} ms")
    if len(args.gpus) > 1:
        print(f"  exponent {exponent(args.gpus, nnt_ms):.3f} over {args.gpus[0]}-{args.gpus[-1]} GPUs "
              f"(target <= {TARGET_EXPONENT})")

    asgd_us = [skeleton_per_unit_s(g, round(asgd_events), args.units, args.repeats) * 1e6 for g in args.gpus]
    print(f"\nbare skeleton, {round(asgd_events)} events per update (asgd): us per applied update")
    for g, us in zip(args.gpus, asgd_us):
        print(f"  {g:5d} workers  {us:8.2f} us")
    if 1024 in args.gpus:
        at = asgd_us[args.gpus.index(1024)]
        print(f"  at 1,024 workers: {at:.1f} us, {at / TARGET_US_PER_UPDATE_AT_1024:.2f}x the target of "
              f"{TARGET_US_PER_UPDATE_AT_1024:g} us")


if __name__ == "__main__":
    main()
