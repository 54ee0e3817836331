"""One conformance battery over every registered algorithm.

Each algorithm runs on a tiny platform for two epochs and must: finish (status completed),
be deterministic, consume every sample of every worker's shard once per epoch, record a
staleness that is never negative, keep time and versions monotone, and deliver every byte it
sends. A newly registered algorithm fails ``test_every_algorithm_has_a_tiny_scenario`` until
it is given one here.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from simdist.algorithms import ALGORITHMS
from simdist.metrics import steps_table
from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate
from simdist.training.data import EpochSharder
from simdist.training.datasets import validation_split_size

PROFILE = str(Path(__file__).parent / "data" / "tiny_profile.yaml")
EPOCHS = 2

# per algorithm: (devices per node, nodes, workers, algorithm options)
TINY = {
    "sync": (3, 1, 3, {}),
    "asgd": (4, 1, 3, {}),
    "nsoftsync": (4, 1, 3, {"n": 2}),
    "dbs": (4, 1, 3, {"m": 2}),
    "daso": (2, 2, 4, {"schedule": "fixed", "B": 2, "S": 1}),
    "dcs3gd": (3, 1, 3, {}),
    "nnt": (3, 1, 3, {"topology": "ring"}),
}


def tiny_scenario(name: str, *, one_rank_per_node: bool = False, **extra):
    """The algorithm's tiny conformance scenario; ``extra`` adds top-level fields (faults ...)."""
    devices, nodes, workers, options = TINY[name]
    if one_rank_per_node and nodes == 1:
        nodes, devices = devices, 1
    return scenario_from_dict({
        "name": f"conformance-{name}",
        "platform": {"preset": "laptop-cpu", "nodes": nodes, "node": {"devices": devices}},
        "workers": workers,
        "workload": {"model": {"name": "mlp", "hidden": [16]},
                     "dataset": {"name": "synthetic", "samples": 300, "features": 8, "classes": 3},
                     "batch_size": 16, "optimizer": {"name": "sgd", "lr": 0.05}},
        "algorithm": {"name": name, **options},
        "stop": {"epochs": EPOCHS},
        "evaluation": {"every_steps": 10},
        "compute": {"profiles": [PROFILE], "noise_sigma": 0.2},
        **extra,
    })


def test_every_algorithm_has_a_tiny_scenario():
    assert set(ALGORITHMS.names()) == set(TINY)


@pytest.fixture(scope="module", params=sorted(TINY))
def runs(request):
    scenario = tiny_scenario(request.param)
    return scenario, simulate(scenario), simulate(scenario)


def test_runs_to_completion(runs):
    _, result, _ = runs
    assert result.status == "completed"
    assert result.recorder.updates and result.virtual_time_s > 0


def test_is_deterministic(runs):
    _, a, b = runs
    assert a.recorder.updates == b.recorder.updates
    assert a.recorder.evals == b.recorder.evals
    assert a.virtual_time_s == b.virtual_time_s


def test_every_sample_is_used_once_per_epoch(runs):
    scenario, result, _ = runs
    train = 240 - validation_split_size(240, scenario.validation_split)  # 300 samples, 20 % test, the split held out
    shard = EpochSharder(train, scenario.worker_count, scenario.seed).shard_size
    assert int(steps_table(result)["batch_size"].sum()) == EPOCHS * shard * scenario.worker_count


def test_staleness_is_recorded_and_never_negative(runs):
    _, result, _ = runs
    staleness = pd.to_numeric(steps_table(result)["staleness"], errors="coerce").dropna()
    assert len(staleness) > 0 and (staleness >= 0).all()


def test_time_and_versions_are_monotone(runs):
    _, result, _ = runs
    times = [row["time_s"] for row in result.recorder.updates]
    assert times == sorted(times)
    for worker, rows in steps_table(result).groupby("worker"):
        assert rows["step"].is_monotonic_increasing, worker


def test_every_byte_sent_is_received(runs):
    _, result, _ = runs
    assert result.extra["sent_bytes"] == result.extra["received_bytes"] > 0
