"""Synchronous SGD end to end: it is one big-batch SGD, deterministic, and costs what it should.

Runs go through the public path (scenario dict -> ``scenario_from_dict`` -> ``simulate``); where
the final replicas are needed, :class:`Sync` is wired to a :class:`SimWorld` by hand from the
same scenario (what ``simulate`` does), with its data iterators recording every batch.

The workload is small on purpose: an MLP 8-16-3 on 400 synthetic training samples, 4 workers
of 100 samples each, batches of 16 (6 full batches and one of 4 per epoch).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import PROFILE_T0_S, PROFILE_T1_S
from simdist.algorithms import ALGORITHMS
from simdist.algorithms.sync import PRESETS, Sync, SyncConfig
from simdist.errors import InputError
from helpers import run_by_hand
from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate
from simdist.training.data import EpochSharder, ShardIterator
from simdist.training.workload import build_workload

N_WORKERS, BATCH, EPOCHS, TRAIN_SAMPLES = 4, 16, 2, 400
SHARD = TRAIN_SAMPLES // N_WORKERS
STEPS_PER_EPOCH = -(-SHARD // BATCH)  # 7: six of 16 and one of 4
PARAMS = 8 * 16 + 16 + 16 * 3 + 3
SHM_LATENCY_S, SHM_BANDWIDTH_BPS = 0.11e-6, 13.8e9
CPU_MEMORY_BPS = 19e9  # the cpu device kind's stated memory bandwidth


def scenario(profile_path, *, epochs=EPOCHS, workload=None, **algorithm):
    data = {
        "name": "sync-test",
        "seed": 3,
        "platform": {"preset": "laptop-cpu", "node": {"devices": N_WORKERS}},
        "workload": {
            "model": {"name": "mlp", "hidden": [16]},
            "dataset": {"name": "synthetic", "samples": 500, "features": 8, "classes": 3},
            "batch_size": BATCH,
            "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
        } | (workload or {}),
        "algorithm": {"name": "sync", **algorithm},
        "stop": {"epochs": epochs},
        "evaluation": {"every_steps": 5},
        "compute": {"profiles": [profile_path]},
    }
    return scenario_from_dict(data)


def big_batch_reference(s):
    """One replica, one optimizer, the union of the workers' batches every step."""
    w = s.workload
    workload = build_workload(w.model.name, w.model.options, w.dataset.name, w.dataset.options, w.optimizer, s.seed)
    replica = workload.new_replica()
    sharder = EpochSharder(workload.dataset.train_size, s.worker_count, s.seed)
    shards = [ShardIterator(sharder, i, s.stop.epochs) for i in range(s.worker_count)]
    steps = 0
    while True:
        batches = [shard.next_batch(w.batch_size) for shard in shards]
        if batches[0] is None:
            assert all(b is None for b in batches)
            return workload, replica.params, steps
        assert len({b.size for b in batches}) == 1  # equal batches: mean of means = mean of the union
        tensors = [workload.batch_tensors(b) for b in batches]
        x = torch.cat([t[0] for t in tensors])
        y = torch.cat([t[1] for t in tensors])
        grad, _ = workload.evaluator.gradient(replica.params, x, y)
        replica.apply_gradient(grad)
        steps += 1


# -- the math -----------------------------------------------------------------------------------


def test_sync_equals_one_big_batch_sgd(profile_path):
    s = scenario(profile_path)
    algorithm, world, _ = run_by_hand(s)
    _, reference, steps = big_batch_reference(s)
    assert steps == EPOCHS * STEPS_PER_EPOCH
    for replica in algorithm.replicas:  # every replica applied the same averaged gradient
        torch.testing.assert_close(replica.params, algorithm.replicas[0].params, rtol=0, atol=0)
    torch.testing.assert_close(algorithm.replicas[0].params, reference, rtol=0, atol=1e-5)
    assert not torch.equal(reference, big_batch_reference(scenario(profile_path, epochs=1))[1])  # it did train


def test_simulated_test_loss_is_the_big_batch_models(profile_path):
    s = scenario(profile_path)
    result = simulate(s)
    workload, reference, steps = big_batch_reference(s)
    loss, accuracy = workload.test_metrics(reference)
    final = result.recorder.evals[-1]
    assert (result.status, final["step"]) == ("completed", steps)
    assert final["test_loss"] == pytest.approx(loss, rel=1e-5)
    assert final["test_accuracy"] == pytest.approx(accuracy, abs=1e-9)


def test_two_runs_of_a_scenario_are_identical(profile_path):
    first, second = simulate(scenario(profile_path)), simulate(scenario(profile_path))
    assert first.recorder.updates == second.recorder.updates
    assert first.recorder.evals == second.recorder.evals
    assert first.virtual_time_s == second.virtual_time_s
    assert first.recorder.spans == second.recorder.spans  # every field, args included


def test_update_rows_have_zero_staleness_and_one_row_per_worker_per_step(profile_path):
    result = simulate(scenario(profile_path))
    updates = result.recorder.updates
    assert len(updates) == N_WORKERS * EPOCHS * STEPS_PER_EPOCH
    assert all(row["staleness"] == 0 for row in updates)
    by_step: dict[int, list[int]] = {}
    for row in updates:
        assert row["version"] == row["step"]
        by_step.setdefault(row["step"], []).append(row["worker"])
    assert sorted(by_step) == list(range(1, EPOCHS * STEPS_PER_EPOCH + 1))
    assert all(sorted(workers) == list(range(N_WORKERS)) for workers in by_step.values())
    assert sum(row["batch_size"] for row in updates) == EPOCHS * N_WORKERS * SHARD
    assert all(row["loss"] is not None and np.isfinite(row["loss"]) for row in updates)


def test_every_sample_is_used_once_per_epoch(profile_path):
    s = scenario(profile_path)
    algorithm, _, batches = run_by_hand(s)
    assert algorithm.epochs_completed() == EPOCHS
    for epoch in range(EPOCHS):
        used = np.concatenate([b.indices for b in batches if b.epoch == epoch])
        assert len(used) == N_WORKERS * SHARD == TRAIN_SAMPLES  # 400 split evenly: nothing dropped
        assert sorted(used.tolist()) == list(range(TRAIN_SAMPLES))
        for worker in range(N_WORKERS):
            mine = [b for b in batches if b.epoch == epoch and b.worker == worker]
            assert [b.size for b in mine] == [BATCH] * (STEPS_PER_EPOCH - 1) + [SHARD % BATCH]


def test_virtual_time_is_compute_plus_ring_allreduce_per_step(profile_path):
    result = simulate(scenario(profile_path))
    sizes = [BATCH] * (STEPS_PER_EPOCH - 1) + [SHARD % BATCH]
    nbytes = 4 * PARAMS
    n = N_WORKERS
    allreduce_s = 2 * (n - 1) * (SHM_LATENCY_S + nbytes / n / SHM_BANDWIDTH_BPS)
    allreduce_s += (n - 1) * nbytes / n / (CPU_MEMORY_BPS / 3)  # the reduce-scatter's sums (3 bytes moved per byte)
    # the rank's own work at the cpu kind's memory bandwidth (simdist.platform.op_costs): the gradient into
    # the send buffer (8 B/param), scaling the sum by 1/N (8 B/param) and the optimizer step (12 B/param)
    own_s = (8 + 8 + 12) * PARAMS / CPU_MEMORY_BPS
    # forward/backward: the profile without its optimizer step (charged above as the update)
    t0_s = PROFILE_T0_S - 12 * PARAMS / CPU_MEMORY_BPS
    assert result.extra["compute_profiles"]["host-cpu"]["t0_s"] == pytest.approx(t0_s, rel=1e-12)
    # loading a batch out of memory: (features + label + index) elements of 8 B per sample (simdist.training.data_loading)
    data_s = [b * (8 + 2) * 8 / CPU_MEMORY_BPS for b in sizes]
    expected = EPOCHS * sum(t0_s + PROFILE_T1_S * b + allreduce_s + own_s + d for b, d in zip(sizes, data_s))
    assert result.extra["param_count"] == PARAMS
    assert result.virtual_time_s == pytest.approx(expected, rel=1e-9)


# -- options --------------------------------------------------------------------------------------


def test_overlapping_with_backward_changes_time_not_math(profile_path):
    plain_alg, plain_world, _ = run_by_hand(scenario(profile_path))
    overlap = scenario(profile_path, overlap="backward", bucket_bytes="256B")
    overlap_alg, overlap_world, _ = run_by_hand(overlap)
    assert len(overlap_alg.buckets) == 2  # small buckets: more than one allreduce per step
    torch.testing.assert_close(overlap_alg.replicas[0].params, plain_alg.replicas[0].params, rtol=0, atol=1e-6)
    assert overlap_world.env.now <= plain_world.env.now
    assert overlap_world.env.now < plain_world.env.now  # the first bucket hid under backward


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_half_precision_compression_halves_the_link_bytes(profile_path, dtype):
    full = simulate(scenario(profile_path))
    half = simulate(scenario(profile_path, compression=dtype))
    full_bytes = sum(link.bytes for link in full.links)
    assert full_bytes > 0
    assert sum(link.bytes for link in half.links) == pytest.approx(full_bytes / 2, rel=1e-12)
    assert half.extra["sent_bytes"] == half.extra["received_bytes"] == pytest.approx(full.extra["sent_bytes"] / 2)
    # rounding the sum to half precision changes the numbers, not the training
    assert half.recorder.evals[-1]["test_loss"] == pytest.approx(full.recorder.evals[-1]["test_loss"], rel=0.05)


@pytest.mark.parametrize("collective", ["ring", "tree", "halving_doubling", "hierarchical"])
def test_every_collective_trains_the_same_model(profile_path, collective):
    reference = simulate(scenario(profile_path, epochs=1))
    other = simulate(scenario(profile_path, epochs=1, collective=collective))
    assert other.recorder.evals[-1]["test_loss"] == pytest.approx(reference.recorder.evals[-1]["test_loss"], rel=1e-5)


def test_horovod_preset_fills_ring_backward_fp16_64MiB():
    config = SyncConfig.model_validate({"name": "sync", "preset": "horovod"})
    assert (config.collective, config.overlap, config.compression, config.bucket_bytes) == (
        "ring", "backward", "fp16", 64 * 2**20)
    classic = SyncConfig.model_validate({"name": "sync", "preset": "classic"})
    assert (classic.overlap, classic.compression, classic.bucket_bytes) == ("backward", "none", 0)
    assert PRESETS["horovod"]["bucket_bytes"] == 64 * 2**20


def test_explicit_fields_override_the_preset(profile_path):
    s = scenario(profile_path, preset="horovod", compression="none", bucket_bytes="1MiB", collective="tree")
    assert s.algorithm | {} == {"name": "sync", "preset": "horovod", "collective": "tree", "overlap": "backward",
                                "bucket_bytes": 2**20, "compression": "none"}
    assert s.algorithm_config() == SyncConfig.model_validate(s.algorithm)


@pytest.mark.parametrize("options, field, message", [
    ({"collective": "rign"}, "algorithm.collective", "unknown collective 'rign'; known: "),
    ({"bucket_bytes": "lots"}, "algorithm.bucket_bytes", "expected a size like '40GiB'"),
    ({"preset": "deepspeed"}, "algorithm.preset", "'horovod' or 'classic'"),
    ({"compression": "int8"}, "algorithm.compression", "'none', 'fp16' or 'bf16'"),
    ({"overlap": "forward"}, "algorithm.overlap", "'none' or 'backward'"),
    ({"bucket_bytes": -1}, "algorithm.bucket_bytes", "non-negative"),
    ({"momentum": 0.9}, "algorithm.momentum", "unknown field"),
])
def test_bad_sync_options_are_input_errors_naming_the_option(profile_path, options, field, message):
    with pytest.raises(InputError) as info:
        scenario(profile_path, **options)
    assert message in str(info.value)
    assert info.value.field == field


def test_timing_only_runs_without_tensors_or_evaluations(profile_path):
    result = simulate(scenario(profile_path, workload={"timing_only": True}))
    assert result.timing_only and result.status == "completed"
    assert result.recorder.evals == []
    assert sum(link.bytes for link in result.links) > 0
    assert len(result.recorder.updates) == N_WORKERS * EPOCHS * STEPS_PER_EPOCH
    assert all(row["loss"] is None for row in result.recorder.updates)
    # the same bytes and time as the real run: only the values are missing
    real = simulate(scenario(profile_path))
    assert sum(link.bytes for link in result.links) == pytest.approx(sum(link.bytes for link in real.links))
    assert result.virtual_time_s == pytest.approx(real.virtual_time_s, rel=1e-12)


def test_sync_is_registered_with_its_config():
    entry = ALGORITHMS.entry("sync")
    assert entry.factory is Sync and entry.config is SyncConfig
