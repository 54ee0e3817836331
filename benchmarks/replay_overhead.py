"""Replay overhead: a 16-worker sync replay in the simulator vs a naive per-worker torch loop.

Both compute the same gradients on the same batches (the simulator's own shards) and apply
the same averaged SGD step, so their final weights agree; the simulator additionally runs
the whole discrete-event machinery (compute model, ring allreduce on the flow network,
records). The ratio simulator / naive is the overhead figure (target ≤ 0.33: batching the
workers' identical-weight gradients into one call must more than pay for the simulation).

asgd: the simulator's parameter-server replay (every gradient on the weights its worker
pulled, applied on arrival, staleness real) against a naive per-worker loop: each worker's
nn.Module replica in turn computes a gradient on the weights it last pulled, the server
model applies it (torch.optim.SGD) and the worker pulls the new weights, so staleness is
real there too (target ≤ 0.7: workers' weights differ, so their gradients batch only as a
stack of weight sets, where that is bit-exact; the rest of the figure is the event
machinery's cost). A stricter reference is printed next to it: one model computing the same
number of gradients one after another, with no replicas and no staleness (no verdict). It
also prints the simulator's final test loss, which must not change with a speed-up.

Each simulator run sits between two naive runs and is compared with their mean (the host's
speed drifts); the verdict is on the median of those ratios.

    python benchmarks/replay_overhead.py [--workers 16] [--steps 200] [--batch 32] [--repeats 9] [--algorithms sync,asgd]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch.nn.functional as F

from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate
from simdist.training.data import EpochSharder, ShardIterator
from simdist.training.workload import build_workload

TARGET_RATIO = 0.33
TARGET_RATIO_ASGD = 0.7
# sync trains with momentum; asgd's ~15 steps of staleness make that diverge, so it takes plain SGD
OPTIMIZERS = {"sync": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
              "asgd": {"name": "sgd", "lr": 0.02, "momentum": 0.0}}


def scenario(workers: int, steps: int, batch: int, algorithm: str = "sync") -> dict:
    return {
        "name": "replay-overhead",
        "workload": {"model": {"name": "mlp", "hidden": [128]}, "dataset": "digits", "batch_size": batch,
                     "optimizer": OPTIMIZERS[algorithm]},
        "algorithm": {"name": "sync", "collective": "ring"} if algorithm == "sync" else {"name": algorithm},
        "platform": {"preset": "laptop-cpu", "node": {"devices": workers + (algorithm != "sync")}},
        "workers": workers,
        "stop": {"steps": steps},
        "evaluation": {"every_steps": 10**9},
    }


def naive_loop(workers: int, steps: int, batch: int, seed: int = 0) -> tuple[float, torch.Tensor]:
    """Per-worker nn.Module replicas, autograd per worker, averaged gradients, torch.optim.SGD."""
    workload = build_workload("mlp", {"hidden": [128]}, "digits", {}, _optimizer(), seed)
    template = workload.module
    torch.nn.utils.vector_to_parameters(workload.initial_params(), template.parameters())
    replicas = [copy.deepcopy(template) for _ in range(workers)]
    config = OPTIMIZERS["sync"]
    optimizers = [torch.optim.SGD(m.parameters(), lr=config["lr"], momentum=config["momentum"]) for m in replicas]
    sharder = EpochSharder(len(workload.dataset.train_y), workers, seed)
    data = [ShardIterator(sharder, i) for i in range(workers)]
    start = time.perf_counter()
    for _ in range(steps):
        for model, it in zip(replicas, data):
            x, y = workload.batch_tensors(it.next_batch(batch))
            model.zero_grad()
            F.cross_entropy(model(x), y).backward()
        for params in zip(*(m.parameters() for m in replicas)):
            mean = torch.stack([p.grad for p in params]).mean(0)
            for p in params:
                p.grad.copy_(mean)
        for opt in optimizers:
            opt.step()
    elapsed = time.perf_counter() - start
    return elapsed, torch.nn.utils.parameters_to_vector(replicas[0].parameters()).detach()


def _optimizer(algorithm: str = "sync"):
    from simdist.training.optim import OptimizerConfig

    return OptimizerConfig(**OPTIMIZERS[algorithm])


def simulated(workers: int, steps: int, batch: int, algorithm: str = "sync") -> tuple[float, float]:
    result = simulate(scenario_from_dict(scenario(workers, steps, batch, algorithm)))
    return result.wall_time_s, result.recorder.evals[-1]["test_loss"]


def _asgd_setup(workers: int, seed: int):
    """The asgd workload, a model at its initial weights, and each worker's shard iterator."""
    workload = build_workload("mlp", {"hidden": [128]}, "digits", {}, _optimizer("asgd"), seed)
    model = copy.deepcopy(workload.module)
    torch.nn.utils.vector_to_parameters(workload.initial_params(), model.parameters())
    sharder = EpochSharder(len(workload.dataset.train_y), workers, seed)
    return workload, model, [ShardIterator(sharder, i) for i in range(workers)]


def _asgd_sgd(model: torch.nn.Module) -> torch.optim.SGD:
    config = OPTIMIZERS["asgd"]
    return torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"])


def naive_asgd_loop(workers: int, gradients: int, batch: int, seed: int = 0) -> float:
    """One model and optimizer; each worker's batch in turn: gradient, then an SGD step."""
    workload, model, data = _asgd_setup(workers, seed)
    optimizer = _asgd_sgd(model)
    start = time.perf_counter()
    for i in range(gradients):
        x, y = workload.batch_tensors(data[i % workers].next_batch(batch))
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return time.perf_counter() - start


def naive_asgd_replicas(workers: int, gradients: int, batch: int, seed: int = 0) -> float:
    """Per-worker replicas around one server model: in turn, each worker computes a gradient on
    the weights it pulled after its last push (``workers - 1`` updates old by now), the server
    applies it and the worker pulls."""
    workload, server, data = _asgd_setup(workers, seed)
    replicas = [copy.deepcopy(server) for _ in range(workers)]
    optimizer = _asgd_sgd(server)
    shared = [list(zip(replica.parameters(), server.parameters())) for replica in replicas]
    start = time.perf_counter()
    for i in range(gradients):
        worker = i % workers
        x, y = workload.batch_tensors(data[worker].next_batch(batch))
        replicas[worker].zero_grad()
        F.cross_entropy(replicas[worker](x), y).backward()
        for mine, central in shared[worker]:  # push
            central.grad = mine.grad
        optimizer.step()
        with torch.no_grad():
            for mine, central in shared[worker]:  # pull
                mine.copy_(central)
    return time.perf_counter() - start


def paired_runs(repeats: int, simulator, *naive) -> tuple[list, ...]:
    """``repeats`` simulator runs, each between two runs of every naive loop; a pair is
    (simulator run, mean of a naive loop's runs either side of it). On a host whose speed
    drifts (shared virtual machines: +-30 % within minutes here), the mean of the runs before
    and after cancels a steady drift, so a pair's ratio is steadier than that of two runs taken
    one after the other, and far steadier than the ratio of two minima taken minutes apart.
    Returns the simulator's results and each naive loop's (``repeats + 1`` of them, in order)."""
    sim_runs, naive_runs = [], [[loop()] for loop in naive]
    for _ in range(repeats):
        sim_runs.append(simulator())
        for loop, runs in zip(naive, naive_runs):
            runs.append(loop())
    return sim_runs, *naive_runs


def sandwiched(naive_times: list[float]) -> list[float]:
    """The naive time paired with each simulator run: the mean of the runs either side of it."""
    return [(before + after) / 2 for before, after in zip(naive_times, naive_times[1:])]


def print_ratio(label: str, sim_times: list[float], naive_times: list[float], target: float | None) -> None:
    """Best-of ratio and the median of the sandwiched pairs' ratios; the verdict (when there is a
    ``target``) is on the median. ``naive_times`` are all of a naive loop's runs in order (one
    more than ``sim_times``: see ``paired_runs``)."""
    pairs = sorted(s / n for s, n in zip(sim_times, sandwiched(naive_times)))
    median = statistics.median(pairs)
    verdict = "" if target is None else f"  (target <= {target})  {'MET' if median <= target else 'NOT MET'}"
    print(f"  ratio simulator / naive{label}: best/best {min(sim_times) / min(naive_times):.3f}, "
          f"median of {len(pairs)} sandwiched pairs {median:.3f} (range {pairs[0]:.3f}-{pairs[-1]:.3f}){verdict}")


def asgd_figures(args) -> None:
    gradients = args.steps * args.workers  # each asgd step applies one worker's gradient
    simulated(args.workers, 5, args.batch, "asgd")
    sim_runs, replica_times, one_model_times = paired_runs(
        args.repeats, lambda: simulated(args.workers, gradients, args.batch, "asgd"),
        lambda: naive_asgd_replicas(args.workers, gradients, args.batch),
        lambda: naive_asgd_loop(args.workers, gradients, args.batch))
    sim_s, sim_loss = min(sim_runs, key=lambda r: r[0])
    print(f"asgd replay, {args.workers} workers x batch {args.batch}, {gradients} gradients (best of {args.repeats})")
    us = 1e6 / gradients  # seconds -> microseconds per gradient
    print(f"  simulator (parameter server, real staleness): {sim_s:8.3f} s  ({sim_s * us:.0f} us/gradient)")
    print(f"  naive per-worker replicas and a server model: {min(replica_times):8.3f} s  "
          f"({min(replica_times) * us:.0f} us/gradient)")
    print(f"  naive one model, no staleness (reference):    {min(one_model_times):8.3f} s  "
          f"({min(one_model_times) * us:.0f} us/gradient)")
    sim_times = [r[0] for r in sim_runs]
    print_ratio(" (per-worker)", sim_times, replica_times, TARGET_RATIO_ASGD)
    print_ratio(" (one model, reference)", sim_times, one_model_times, None)
    print(f"  simulator final test loss: {sim_loss:.6f}  (a run is deterministic: compare before/after a change)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=9,
                        help="simulator runs, each between two naive runs (the host may be shared); best and median pair printed")
    parser.add_argument("--algorithms", default="sync,asgd", help="comma-separated: sync, asgd")
    args = parser.parse_args()
    torch.set_num_threads(1)
    algorithms = args.algorithms.split(",")
    if "sync" in algorithms:
        sync_figures(args)
    if "asgd" in algorithms:
        asgd_figures(args)


def sync_figures(args) -> None:
    simulated(args.workers, 5, args.batch)  # warm-up: imports, dataset, first kernels
    naive_loop(args.workers, 5, args.batch)
    sim_runs, naive_runs = paired_runs(args.repeats, lambda: simulated(args.workers, args.steps, args.batch),
                                       lambda: naive_loop(args.workers, args.steps, args.batch))
    sim_s, sim_loss = min(sim_runs, key=lambda r: r[0])
    naive_s, naive_params = min(naive_runs, key=lambda r: r[0])
    workload = build_workload("mlp", {"hidden": [128]}, "digits", {}, _optimizer(), 0)
    naive_loss, _ = workload.test_metrics(naive_params)
    print(f"sync replay, {args.workers} workers x batch {args.batch}, {args.steps} steps (mlp on digits, 1 thread, "
          f"best of {args.repeats})")
    print(f"  simulator (full discrete-event run): {sim_s:8.3f} s  ({sim_s / args.steps * 1e3:.2f} ms/step)")
    print(f"  naive per-worker torch loop:         {naive_s:8.3f} s  ({naive_s / args.steps * 1e3:.2f} ms/step)")
    print_ratio("", [r[0] for r in sim_runs], [r[0] for r in naive_runs], TARGET_RATIO)
    print(f"  same math: test loss simulator {sim_loss:.6f} vs naive {naive_loss:.6f}")


if __name__ == "__main__":
    main()
