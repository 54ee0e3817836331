"""Test helpers shared by several test modules: an algorithm wired to a SimWorld as simulate wires
it (with every batch handed out recorded), and the tiny scenario command-line tests run."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from simdist.algorithms import ALGORITHMS, AlgorithmContext
from simdist.platform.op_costs import OpCostModel
from simdist.platform.compute import ComputeModel, load_profiles
from simdist.platform.topology import Platform
from simdist.recorder import Recorder
from simdist.runtime.collectives import default_schedule
from simdist.runtime.sim import SimWorld
from simdist.training.data import EpochSharder, ShardIterator
from simdist.training.workload import build_workload


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as module ``name`` (registered in ``sys.modules``: dataclasses
    and the scripts' own sibling imports look it up), for testing a benchmark's pure functions."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


TINY_PROFILE = str((Path(__file__).parent / "data" / "tiny_profile.yaml").resolve())


def tiny_scenario(**changes) -> dict:
    """A scenario that runs in a fraction of a second: sync on 2 CPU ranks, a small MLP on a small
    synthetic set, 2 steps, the tiny test profile, no figures or trace; ``changes`` replace top-level keys."""
    data = {
        "name": "tiny",
        "platform": {"preset": "laptop-cpu", "node": {"devices": 2}},
        "workload": {"model": "mlp", "dataset": {"name": "synthetic", "samples": 100, "features": 4, "classes": 2},
                     "batch_size": 8},
        "algorithm": "sync",
        "stop": {"steps": 2},
        "compute": {"profiles": [TINY_PROFILE]},
        "outputs": {"plots": False, "trace": False},
    }
    data.update(changes)
    return data


class RecordingIterator(ShardIterator):
    """A worker's data iterator that keeps every batch it hands out."""

    def __init__(self, sharder, worker, max_epochs, log):
        super().__init__(sharder, worker, max_epochs)
        self.log = log

    def next_batch(self, batch_size):
        batch = super().next_batch(batch_size)
        if batch is not None:
            self.log.append(batch)
        return batch


def run_by_hand(s):
    """The scenario's algorithm wired to a SimWorld as simulate wires it: (algorithm, world, batches)."""
    algorithm, world, _, batches = wire_and_run(s)
    return algorithm, world, batches


def wire_and_run(s, *, make_data=None):
    """Run the scenario's algorithm on a SimWorld wired as simulate wires it, until its workers end.

    Returns (algorithm, world, workload, batches); ``batches`` holds every batch the default
    data iterators handed out (empty when ``make_data`` replaces them).
    """
    platform = Platform(s.platform)
    w = s.workload
    workload = build_workload(w.model.name, w.model.options, w.dataset.name, w.dataset.options, w.optimizer, s.seed,
                              validation_split=s.validation_split)
    compute = ComputeModel(platform, load_profiles(s.compute.profiles), model=workload.model_name,
                           forward_flops_per_sample=workload.forward_flops_per_sample, parameter_layers=2, seed=s.seed)

    def gradients(rank, replica, batch):
        x, y = workload.batch_tensors(batch)
        return workload.pending.submit(replica.params, x, y).result

    world = SimWorld(platform, compute, Recorder(), gradient_source=gradients,
                     fidelity=s.network.collective_fidelity,
                     default_collective=default_schedule(s.network.collective, platform.spec.collectives)[0])
    sharder = EpochSharder(workload.dataset.train_size, s.worker_count, s.seed)
    batches = []
    ctx = AlgorithmContext(
        workers=list(range(s.worker_count)), node_of=platform.node_of, workload=workload,
        batch_size=w.batch_size, seed=s.seed, max_epochs=s.stop.epochs, timing_only=False,
        make_data=make_data or (lambda i: RecordingIterator(sharder, i, s.stop.epochs, batches)),
        make_replica=lambda: workload.new_replica(), op_cost=OpCostModel(platform).seconds,
        platform=platform)
    algorithm = ALGORITHMS.entry(s.algorithm_name).factory(s.algorithm_config(), ctx)
    procs = {rank: world.spawn(rank, make(world.runtime(rank))) for rank, make in algorithm.processes().items()}
    world.env.run(until=world.env.all_of([procs[r] for r in ctx.workers]))
    return algorithm, world, workload, batches


def link_load(routes, rates, n_links):
    """The sum of the rates of the flows crossing each link (one per mention in a route)."""
    load = [0.0] * n_links
    for route, rate in zip(routes, rates):
        for link in route:
            load[link] += rate
    return load


def assert_run_refuses(tmp_path: Path, data: dict, field: str) -> None:
    """``simdist run`` of scenario ``data`` exits 2 with one message naming the file and ``field``,
    no traceback, and writes no output directory."""
    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "simdist", "run", str(path), "--out", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert field in done.stderr and "bad.yaml" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()
