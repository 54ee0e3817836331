"""The validation split (``workload.validation_split``, docs/algorithms.md §7).

* The split is seeded (stream ``"validation-split"``), disjoint from the training samples left
  and from the test set, and of size round(fraction x training samples); shard sizes shrink by it.
* Its default: 0.1 for nnt, 0 for every other algorithm; an explicit value wins.
* NNT chooses its best worker on the validation split, never consulting the test set.
* The epoch-end validation pass (``workload.validation``) evaluates the split where there is one.
* Bad values end ``simdist run`` with exit 2 and one line naming the field.
* Timing-only shape-only datasets: the split only shrinks the training-sample count.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from helpers import TINY_PROFILE, wire_and_run
from simdist.cli import main
from simdist.errors import InputError
from simdist.scenario import scenario_from_dict
from simdist.simulate import Simulation, simulate
from simdist.training.datasets import hold_out_validation, validation_split_size
from simdist.training.epoch_end import run_validation
from simdist.training.optim import OptimizerConfig
from simdist.training.workload import Workload, build_workload

FIELD = "workload.validation_split"
SYNTHETIC = {"samples": 500, "features": 6, "classes": 3}  # 100 test, 400 training samples


def scenario_dict(algorithm: str = "nnt", *, workers: int = 3, split=None, samples: int = 500, **workload) -> dict:
    data = {
        "name": "validation-split",
        "seed": 5,
        "platform": {"preset": "laptop-cpu", "node": {"devices": workers}},
        "workload": {"model": {"name": "mlp", "hidden": [8]},
                     "dataset": {"name": "synthetic", **SYNTHETIC, "samples": samples},
                     "batch_size": 16, "optimizer": {"name": "sgd", "lr": 0.1}, **workload},
        "algorithm": {"name": algorithm},
        "stop": {"epochs": 2},
        "evaluation": {"every_steps": 10**6},
        "compute": {"profiles": [TINY_PROFILE]},
        "outputs": {"plots": False, "trace": False},
    }
    if split is not None:
        data["workload"]["validation_split"] = split
    return data


def rows(x: torch.Tensor) -> set[tuple[float, ...]]:
    return {tuple(r) for r in x.reshape(len(x), -1).tolist()}


def synthetic_workload(split: float, seed: int = 3) -> Workload:
    return build_workload("mlp", {"hidden": [8]}, "synthetic", SYNTHETIC, OptimizerConfig(), seed, validation_split=split)


# -- the split -------------------------------------------------------------------------------


def test_the_split_is_seeded_sized_and_disjoint_from_training_and_test():
    whole, split = synthetic_workload(0.0), synthetic_workload(0.15)
    assert whole.validation_size == 0 and whole.dataset.train_size == 400
    assert split.validation_size == 60 and split.dataset.train_size == 340  # 0.15 x 400
    validation, train, test = rows(split.validation.x), rows(split.dataset.train_x), rows(split.dataset.test_x)
    assert len(validation) == 60 and not validation & train and not validation & test
    assert validation | train == rows(whole.dataset.train_x)  # carved from the training set, nothing lost
    # labels travel with their samples
    full = {tuple(x.tolist()): int(y) for x, y in zip(whole.dataset.train_x, whole.dataset.train_y)}
    assert all(full[tuple(x.tolist())] == int(y) for x, y in zip(split.validation.x, split.validation.y))
    again = synthetic_workload(0.15)
    assert torch.equal(again.validation.x, split.validation.x) and torch.equal(again.dataset.train_x, split.dataset.train_x)
    other_seed = hold_out_validation(whole.dataset, 0.15, seed=4)[1]
    assert rows(other_seed.x) != validation  # another seed holds out other samples (same data: held by seed 3)


def test_split_size_rounds_half_up_and_names_the_field_when_it_holds_out_nothing():
    assert [validation_split_size(400, f) for f in (0.0, 0.1, 0.15, 0.49)] == [0, 40, 60, 196]
    assert validation_split_size(10, 0.25) == 3  # 2.5 rounds up
    with pytest.raises(InputError, match="holds out no sample") as err:
        validation_split_size(8, 0.05)
    assert err.value.field == FIELD
    with pytest.raises(InputError, match="leaving 5 for 6 workers") as err:
        validation_split_size(8, 0.4, workers=6)
    assert err.value.field == FIELD


def test_shards_shrink_by_the_split():
    plain = Simulation(scenario_from_dict(scenario_dict("sync", split=0.0)))
    split = Simulation(scenario_from_dict(scenario_dict("sync", split=0.25)))
    assert plain.sharder.n_samples == 400 and split.sharder.n_samples == 300
    assert (plain.sharder.shard_size, split.sharder.shard_size) == (400 // 3, 300 // 3)
    result = simulate(scenario_from_dict(scenario_dict("sync", split=0.25)))
    assert sum(r["batch_size"] for r in result.recorder.updates) == 2 * 3 * (300 // 3)  # two epochs of the smaller shards


def test_a_shape_only_dataset_only_loses_training_samples():
    data = scenario_dict("nnt")
    data["workload"].update(timing_only=True, model={"name": "mlp", "hidden": [8]},
                            dataset={"name": "imagenet-shape", "samples": 1000, "input_shape": [6], "test_samples": 50})
    sim = Simulation(scenario_from_dict(data))
    assert sim.workload.dataset.train_size == 900 and sim.workload.validation_size == 100  # nnt's default 0.1
    assert sim.workload.validation.x.numel() == 0 and sim.sharder.n_samples == 900
    result = sim.execute()
    evaluations = [s for s in result.recorder.spans if s.name == "nnt evaluation"]
    t0_s = 1e-4 - result.extra["compute_profiles"]["host-cpu"]["optimizer_step_s"]
    assert evaluations and all(s.end_s - s.start_s == pytest.approx((t0_s + 1e-5 * 100) / 3) for s in evaluations)


# -- defaults --------------------------------------------------------------------------------


def test_nnt_holds_out_a_tenth_by_default_and_every_other_algorithm_nothing(tmp_path):
    nnt, sync = scenario_from_dict(scenario_dict("nnt")), scenario_from_dict(scenario_dict("sync"))
    assert (nnt.validation_split, sync.validation_split) == (0.1, 0.0)
    assert scenario_from_dict(scenario_dict("sync", split=0.2)).validation_split == 0.2
    assert scenario_from_dict(scenario_dict("nnt", split=0.3)).validation_split == 0.3
    assert "validation_split" not in nnt.resolved()["workload"]  # left out: the content hash is as before
    assert Simulation(nnt).workload.validation_size == 40 and Simulation(sync).workload.validation_size == 0
    path = tmp_path / "nnt.yaml"
    path.write_text(yaml.safe_dump(scenario_dict("nnt")))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["validation_split"] == {"fraction": 0.1, "samples": 40, "training_samples": 360}


# -- NNT chooses on the validation split ---------------------------------------------------------


def test_nnt_chooses_the_best_worker_on_validation_accuracy_without_consulting_the_test_set(monkeypatch):
    seen = []
    real = Workload.validation_metrics

    def validation_metrics(self, params, max_samples=None):
        seen.append(params.clone())
        return real(self, params, max_samples)

    def no_test_set(self, *args, **kwargs):
        raise AssertionError("the test set was consulted")

    monkeypatch.setattr(Workload, "validation_metrics", validation_metrics)
    monkeypatch.setattr(Workload, "test_metrics", no_test_set)
    monkeypatch.setattr(Workload, "test_samples", no_test_set)
    s = scenario_from_dict(scenario_dict("nnt", workers=4, split=0.2))
    algorithm, world, workload, _ = wire_and_run(s)
    syncs = [e for e in world.recorder.events if e["kind"] == "nnt_sync"]
    assert len(syncs) == 8 and len(seen) == 8  # 4 workers, 2 epoch ends: one validation pass each
    assert all("test_accuracy" not in e for e in syncs)
    for epoch in (1, 2):
        at = [e for e in syncs if e["epoch"] == epoch]
        accuracies = {e["worker"]: e["validation_accuracy"] for e in at}
        best = max(sorted(accuracies), key=lambda w: accuracies[w])  # lowest index on ties
        assert {e["best_worker"] for e in at} == {best}
        assert {e["best_accuracy"] for e in at} == {accuracies[best]}
    # the recorded accuracies are those of the evaluated replicas on the validation split
    assert sorted(real(workload, p)[1] for p in seen) == sorted(e["validation_accuracy"] for e in syncs)
    assert all(torch.equal(r.params, algorithm.replicas[0].params) for r in algorithm.replicas)


def test_nnt_restarts_from_the_worker_best_on_validation_even_where_the_test_set_disagrees(monkeypatch):
    """Validation accuracy := the replica's first weight, test accuracy := minus it: opposite orders."""
    monkeypatch.setattr(Workload, "validation_metrics", lambda self, p, max_samples=None: (0.0, float(p[0])))
    monkeypatch.setattr(Workload, "test_metrics", lambda self, p, max_samples=None: (0.0, -float(p[0])))
    algorithm, world, _, _ = wire_and_run(scenario_from_dict(scenario_dict("nnt", workers=4, split=0.2)))
    syncs = [e for e in world.recorder.events if e["kind"] == "nnt_sync"]
    last = [e for e in syncs if e["epoch"] == 2]
    first_weights = {e["worker"]: e["validation_accuracy"] for e in last}
    assert len(set(first_weights.values())) > 1  # the replicas differ before the restart
    best = max(first_weights, key=first_weights.get)
    assert {e["best_worker"] for e in last} == {best}
    assert float(algorithm.replicas[0].params[0]) == first_weights[best]  # every replica now holds the best's weights


# -- the epoch-end validation pass -------------------------------------------------------------


def test_the_epoch_end_validation_pass_evaluates_the_split(monkeypatch):
    workload = synthetic_workload(0.15)
    seen = []
    evaluate = workload.evaluator.evaluate
    monkeypatch.setattr(workload.evaluator, "evaluate", lambda p, x, y: (seen.append((x, y)), evaluate(p, x, y))[1])
    params = workload.initial_params()
    loss, accuracy = run_validation(workload, params, 0, 1, None)
    (x, y), = seen
    assert torch.equal(x, workload.validation.x) and torch.equal(y, workload.validation.y)
    assert (loss, accuracy) == workload.validation_metrics(params)
    seen.clear()
    for w in range(4):
        run_validation(workload, params, w, 4, None)  # 60 samples over 4 workers: 15 each
    assert torch.equal(torch.cat([x for x, _ in seen]), workload.validation.x)
    seen.clear()
    plain = synthetic_workload(0.0)
    monkeypatch.setattr(plain.evaluator, "evaluate", lambda p, x, y: (seen.append((x, y)), evaluate(p, x, y))[1])
    run_validation(plain, params, 0, 1, None)  # no split: the test set, as before
    assert torch.equal(seen[0][0], plain.dataset.test_x)


@pytest.mark.parametrize("split,samples", [(0.1, 40), (None, 100)])  # 0.1 x 400; no split: the 100 test samples
def test_the_simulated_validation_pass_defaults_to_the_splits_size(split, samples):
    result = simulate(scenario_from_dict(scenario_dict("sync", split=split, validation={})))
    assert result.extra["epoch_end"]["validation"]["samples"] == samples
    assert result.extra["epoch_end"]["validation"]["samples_per_worker"] == -(-samples // 3)


# -- bad values --------------------------------------------------------------------------------

BAD = {
    "half": ({"split": 0.5}, "workload.validation_split"),
    "negative": ({"split": -0.1}, "workload.validation_split"),
    "text": ({"split": "a tenth"}, "workload.validation_split"),
    "holds-out-nothing": ({"split": 0.05, "samples": 10, "algorithm": "sync"}, "workload.validation_split"),
    "too-few-left": ({"split": 0.4, "samples": 10, "workers": 6, "algorithm": "sync"}, "workload.validation_split"),
    "nnt-without-a-split": ({"split": 0.0}, "workload.validation_split"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_values_exit_2_with_one_line_naming_the_field(case, tmp_path, capsys):
    options, field = BAD[case]
    options = dict(options)
    data = scenario_dict(options.pop("algorithm", "nnt"), **options)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert field in line and "bad.yaml" in line
    assert not out.exists()


def test_a_bad_value_through_python_m_simdist(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(scenario_dict("sync", split=0.7)))
    run = subprocess.run([sys.executable, "-m", "simdist", "run", str(path), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=120)
    assert run.returncode == 2
    (line,) = run.stderr.strip().splitlines()
    assert FIELD in line and "Traceback" not in run.stderr
