"""The job's epoch-end work: its validation pass (ledger part ``eval``) and its checkpoint
(ledger part ``checkpoint``), as simdist.training.epoch_end models them.

Who owes what and when (the schedule), which batch closes an epoch, what each piece costs in
the simulator (hand-computed from the compute profile, the cpu kind's memory bandwidth, the
host link and the node's storage bandwidth), that cohorts and per-rank processes charge the
same, how bad input is refused, and what a real run does (a validation share, a checkpoint
written to a temporary file and deleted).
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from simdist.cli import main
from simdist.ledger import ledger_table
from simdist.metrics import spans_table
from simdist.platform.devices import DEVICE_KINDS
from simdist.platform.host_staging import HOST_CPU_KIND
from simdist.platform.links import LINK_KINDS
from simdist.scenario import scenario_from_dict
from simdist.simulate import Simulation, simulate
from simdist.training.data import Batch, EpochSharder, LockstepShards, ShardIterator
from simdist.training.epoch_end import (CHECKPOINT_SPAN, VALIDATION_SPAN, CheckpointConfig, EpochEndRunner,
                                        EpochEndSchedule, EpochEndTask, ValidationConfig, checkpoint_bytes,
                                        optimizer_state_buffers, run_validation, write_checkpoint)
from simdist.training.optim import OptimizerConfig
from simdist.training.workload import build_workload

from helpers import TINY_PROFILE
from test_lockstep_group import assert_same_results, replay_scenario, run_both

CPU_MEMORY_BPS = DEVICE_KINDS.get("cpu").memory_bandwidth_Bps  # laptop-cpu's ranks and a GPU node's host
DIGITS_TRAIN, DIGITS_TEST, DIGITS_FEATURES = 1438, 359, 64  # sklearn digits, 80/20 split (8x8 images)
MLP_PARAMS = DIGITS_FEATURES * 16 + 16 + 16 * 10 + 10  # mlp hidden [16] on digits


def digits_scenario(algorithm: str = "sync", *, devices: int = 3, epochs: int = 3, optimizer=None,
                    **workload) -> dict:
    """``algorithm`` on ``devices`` laptop-cpu ranks: mlp [16] on digits, batches of 64, the tiny profile."""
    return {
        "platform": {"preset": "laptop-cpu", "node": {"devices": devices}},
        "workload": {"model": {"name": "mlp", "hidden": [16]}, "dataset": "digits", "batch_size": 64,
                     "optimizer": optimizer or {"name": "sgd", "lr": 0.05, "momentum": 0.9}, **workload},
        "algorithm": {"name": algorithm},
        "stop": {"epochs": epochs},
        "compute": {"profiles": [TINY_PROFILE]},
        "outputs": {"plots": False, "trace": False},
    }


def ledger_of(result) -> pd.DataFrame:
    return ledger_table(spans_table(result))


def run(data: dict, *, lockstep: bool = True) -> tuple[Simulation, object]:
    sim = Simulation(scenario_from_dict(data), None, lockstep=lockstep)
    return sim, sim.execute()


def in_memory_per_sample_s(features: int) -> float:
    """Indexing one sample out of memory: its float32 features and int64 label (two elements' worth),
    read and written (8 B per element), at the cpu kind's memory bandwidth (simdist.training.data_loading)."""
    return (features + 2) * 8 / CPU_MEMORY_BPS


# -- the schedule ------------------------------------------------------------------------------------


def batch(epoch: int, closes: bool) -> Batch:
    return Batch(np.arange(4), epoch, 0, closes_epoch=closes)


def test_work_is_owed_only_after_a_batch_that_closes_an_epoch():
    schedule = EpochEndSchedule(ValidationConfig(), CheckpointConfig(), [0, 1])
    assert schedule.before_batch(0, batch(0, False)) == []
    assert schedule.before_batch(0, batch(0, True)) == []  # the closing batch is computed first
    assert schedule.before_batch(0, batch(1, False)) == [EpochEndTask("validation", 0), EpochEndTask("checkpoint", 0)]
    assert schedule.before_batch(0, batch(1, False)) == []  # owed once
    assert schedule.before_batch(1, batch(0, True)) == []
    assert schedule.before_batch(1, batch(1, False)) == [EpochEndTask("validation", 0)]  # only worker 0 checkpoints


def test_every_epochs_is_counted_in_epochs_completed_for_each_kind():
    schedule = EpochEndSchedule(ValidationConfig(every_epochs=2), CheckpointConfig(every_epochs=3), [0])
    owed = {}
    for epoch in range(6):
        schedule.before_batch(0, batch(epoch, True))
        owed[epoch + 1] = [task.kind for task in schedule.before_batch(0, batch(epoch + 1, False))]
    assert owed == {1: [], 2: ["validation"], 3: ["checkpoint"], 4: ["validation"], 5: [],
                    6: ["validation", "checkpoint"]}


def test_the_first_worker_writes_the_checkpoint_and_a_server_owes_nothing():
    schedule = EpochEndSchedule(ValidationConfig(), CheckpointConfig(), [2, 0, 1])  # workers[0] is rank 2
    assert schedule.writer == 2
    for rank in (0, 1, 2, 3):  # rank 3 is a server: not a worker
        schedule.before_batch(rank, batch(0, True))
    kinds = {rank: [task.kind for task in schedule.at_finish(rank)] for rank in (0, 1, 2, 3)}
    assert kinds == {0: ["validation"], 1: ["validation"], 2: ["validation", "checkpoint"], 3: []}


def test_at_finish_hands_out_the_pending_work_once():
    schedule = EpochEndSchedule(ValidationConfig(), None, [0])
    assert schedule.at_finish(0) == []  # nothing closed yet
    schedule.before_batch(0, batch(4, True))
    assert schedule.at_finish(0) == [EpochEndTask("validation", 4)]
    assert schedule.at_finish(0) == []
    assert schedule.before_batch(0, batch(5, False)) == []


def test_a_batch_without_closes_epoch_owes_nothing():
    schedule = EpochEndSchedule(ValidationConfig(), CheckpointConfig(), [0])
    schedule.before_batch(0, SimpleNamespace(size=4, epoch=0))  # what a runtime test hands a compute
    assert schedule.at_finish(0) == []


def test_a_pool_worker_owes_an_epoch_s_work_when_its_next_batch_is_from_a_later_epoch():
    """With a shared epoch pool (dbs) another worker may take an epoch's closing batch: a worker has
    left the epoch when its next batch comes from a later one, and at its end the last epoch is done."""
    schedule = EpochEndSchedule(ValidationConfig(), CheckpointConfig(), [0, 1])
    pooled = [Batch(np.arange(4), epoch, 1, closes_epoch=False, from_pool=True) for epoch in (0, 0, 1, 1)]
    owed = [schedule.before_batch(1, b) for b in pooled]
    assert owed == [[], [], [EpochEndTask("validation", 0)], []]  # only worker 0 checkpoints
    assert schedule.at_finish(1) == [EpochEndTask("validation", 1)]
    assert schedule.at_finish(1) == []
    closing = EpochEndSchedule(ValidationConfig(), None, [0])  # it took the closing batch itself: owed once
    closing.before_batch(0, Batch(np.arange(4), 0, 0, closes_epoch=True, from_pool=True))
    assert closing.before_batch(0, Batch(np.arange(4), 1, 0, from_pool=True)) == [EpochEndTask("validation", 0)]
    assert closing.at_finish(0) == [EpochEndTask("validation", 1)]


def test_checkpoint_size_counts_the_optimizer_s_buffers():
    assert [optimizer_state_buffers("sgd", 0.0), optimizer_state_buffers("sgd", 0.9),
            optimizer_state_buffers("adam", 0.0)] == [0, 1, 2]
    assert checkpoint_bytes(1000, 2) == 12_000


# -- which batch closes an epoch ---------------------------------------------------------------------


def test_shard_iterator_marks_exactly_the_last_batch_of_each_epoch():
    sharder = EpochSharder(100, 3, seed=0)  # 33 samples per worker: batches 8, 8, 8, 8, 1
    iterator = ShardIterator(sharder, 1, max_epochs=2)
    batches = []
    while (b := iterator.next_batch(8)) is not None:
        batches.append(b)
    assert [b.size for b in batches] == [8, 8, 8, 8, 1] * 2
    assert [b.closes_epoch for b in batches] == [False, False, False, False, True] * 2
    assert [b.epoch for b in batches if b.closes_epoch] == [0, 1]


def test_a_batch_that_ends_the_shard_exactly_closes_the_epoch():
    iterator = ShardIterator(EpochSharder(48, 2, seed=0), 0, max_epochs=1)  # 24 samples: 3 full batches
    assert [iterator.next_batch(8).closes_epoch for _ in range(3)] == [False, False, True]
    assert iterator.next_batch(8) is None


@pytest.mark.parametrize("with_indices", [True, False])
def test_lockstep_batches_close_epochs_where_each_worker_s_iterator_does(with_indices):
    sharder = EpochSharder(100, 3, seed=7)
    lockstep = LockstepShards(sharder, 3, max_epochs=2)
    iterators = [ShardIterator(sharder, w, max_epochs=2) for w in range(3)]
    steps = 0
    while (together := lockstep.next_batches(8, with_indices=with_indices)) is not None:
        alone = [it.next_batch(8) for it in iterators]
        assert [b.closes_epoch for b in together] == [b.closes_epoch for b in alone]
        assert [(b.epoch, b.size) for b in together] == [(b.epoch, b.size) for b in alone]
        steps += 1
    assert steps == 10 and all(it.next_batch(8) is None for it in iterators)


# -- in the simulator: sync ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sync_runs():
    """sync on 3 ranks for 3 epochs: validation every epoch, a checkpoint every 2, and the same without."""
    with_work = digits_scenario(validation={"every_epochs": 1}, checkpoint={"every_epochs": 2})
    return run(with_work), run(digits_scenario())


def test_sync_validates_on_the_last_step_of_every_epoch_at_the_hand_computed_cost(sync_runs):
    (sim, result), _ = sync_runs
    assert sim.in_lockstep
    ledger = ledger_of(result)
    share = math.ceil(DIGITS_TEST / 3)  # 120: DistributedSampler's split of the test set
    steps_per_epoch = math.ceil((DIGITS_TRAIN // 3) / 64)  # 479 samples per worker: 8 batches, the last of 31
    last_steps = [steps_per_epoch * (epoch + 1) - 1 for epoch in range(3)]
    for rank in (0, 1, 2):
        rows = ledger[ledger["rank"] == rank]
        assert rows.loc[rows["eval"] > 0, "step"].tolist() == last_steps
        # a forward pass over the share (the compute model's inference time) after loading it on the rank's core
        expected = sim.compute.forward_s(rank, share) + share * in_memory_per_sample_s(DIGITS_FEATURES)
        assert rows.loc[rows["eval"] > 0, "eval"].tolist() == pytest.approx([expected] * 3, rel=1e-12)
    assert result.extra["epoch_end"]["validation"] == {"every_epochs": 1, "samples": DIGITS_TEST,
                                                       "samples_per_worker": share}


def test_only_worker_0_checkpoints_and_only_every_second_epoch(sync_runs):
    (sim, result), _ = sync_runs
    ledger = ledger_of(result)
    writes = ledger[ledger["checkpoint"] > 0]
    assert writes["rank"].tolist() == [0] and writes["step"].tolist() == [15]  # the end of epoch 1 (of 0, 1, 2)
    values = MLP_PARAMS * 2  # parameters and SGD's momentum buffer
    assert writes["checkpoint"].iloc[0] == pytest.approx(values * 8 / CPU_MEMORY_BPS, rel=1e-12)  # save: 8 B/value
    assert result.extra["epoch_end"]["checkpoint"]["bytes"] == values * 4
    assert [s.name for s in result.recorder.spans if s.name in (VALIDATION_SPAN, CHECKPOINT_SPAN)].count(
        CHECKPOINT_SPAN) == 1


def test_the_work_lies_on_a_synchronous_run_s_critical_path(sync_runs):
    (sim, result), (_, without) = sync_runs
    validation_s = sim.world.epoch_end.seconds(0, EpochEndTask("validation", 0))
    checkpoint_s = sim.world.epoch_end.seconds(0, EpochEndTask("checkpoint", 1))
    # every rank validates at once; the others wait for worker 0's checkpoint at the next allreduce
    assert result.virtual_time_s - without.virtual_time_s == pytest.approx(3 * validation_s + checkpoint_s,
                                                                           abs=1e-12)
    # the last epoch's validation comes after everything else, before the processes end
    others = [s.end_s for s in result.recorder.spans if s.name not in (VALIDATION_SPAN, CHECKPOINT_SPAN)]
    assert result.virtual_time_s - max(others) == pytest.approx(validation_s, abs=1e-12)


def test_cohort_and_per_rank_processes_charge_the_same():
    data = digits_scenario(validation={}, checkpoint={}, epochs=2)
    (cohort_sim, cohort), (rank_sim, per_rank) = run(data), run(data, lockstep=False)
    assert cohort_sim.in_lockstep and not rank_sim.in_lockstep
    sums = [ledger_of(r).groupby("rank")[["eval", "checkpoint"]].sum() for r in (cohort, per_rank)]
    assert sums[0].loc[0, "checkpoint"] > 0 and (sums[0]["eval"] > 0).all()
    pd.testing.assert_frame_equal(sums[0], sums[1], rtol=1e-9, atol=0.0)
    assert cohort.virtual_time_s == pytest.approx(per_rank.virtual_time_s, rel=1e-12)


def test_a_noisy_cohort_records_what_per_rank_processes_record():
    data = replay_scenario(**{"workload.validation": {"samples": 50}, "workload.checkpoint": {"every_epochs": 2}})
    (_, per_rank), (cohort_sim, cohort) = run_both(data)
    assert cohort_sim.in_lockstep
    assert {s.name for s in cohort.recorder.spans} >= {VALIDATION_SPAN, CHECKPOINT_SPAN}
    assert_same_results(per_rank, cohort)


def test_loader_workers_hide_a_validation_pass_s_loading_up_to_its_forward_pass():
    loading = {"per_sample": "40us", "loader_workers": 2}
    sim, result = run(digits_scenario(validation={"samples": 90}, data_loading=loading, epochs=1))
    forward_s = sim.compute.forward_s(0, 30)
    load_s = 30 * 40e-6 / 2  # the share, loaded by two workers
    assert load_s > forward_s
    (eval_s,) = ledger_of(result).query("rank == 1 and eval > 0")["eval"]
    assert eval_s == pytest.approx(max(forward_s, load_s), rel=1e-12)


def test_a_checkpoint_beside_loader_workers_keeps_ranks_in_their_own_processes():
    # only worker 0 checkpoints: its loader workers' clocks part from the others', which a cohort cannot follow
    loading = {"per_sample": "3us", "loader_workers": 2}
    sim, _ = run(digits_scenario(checkpoint={}, data_loading=loading, epochs=1))
    assert not sim.in_lockstep
    sim, _ = run(digits_scenario(validation={}, data_loading=loading, epochs=1))
    assert sim.in_lockstep


def test_ranks_sharing_one_core_validate_at_a_third_of_its_rate():
    data = digits_scenario(validation={}, epochs=1)
    data["platform"]["node"]["cores"] = 1
    sim, result = run(data)
    alone_s = sim.world.epoch_end.seconds(0, EpochEndTask("validation", 0))
    passes = [s for s in result.recorder.spans if s.name == VALIDATION_SPAN]
    assert len(passes) == 3 and len({s.start_s for s in passes}) == 1
    assert [s.duration_s for s in passes] == pytest.approx([3 * alone_s] * 3, rel=1e-9)


def test_timing_only_charges_what_replay_charges():
    parts = []
    for timing_only in (False, True):
        _, result = run(digits_scenario(validation={}, checkpoint={}, timing_only=timing_only, epochs=2))
        parts.append(ledger_of(result).groupby("rank")[["eval", "checkpoint"]].sum())
    pd.testing.assert_frame_equal(parts[0], parts[1], rtol=1e-9, atol=0.0)


# -- a parameter server -------------------------------------------------------------------------------


def test_asgd_workers_validate_and_its_server_does_not():
    data = digits_scenario("asgd", devices=4, epochs=2, validation={}, checkpoint={}) | {"workers": 3}
    sim, result = run(data)
    sums = ledger_of(result).groupby("rank")[["eval", "checkpoint", "update"]].sum()
    assert result.workers == [0, 1, 2]
    expected = sim.compute.forward_s(0, 120) + 120 * in_memory_per_sample_s(DIGITS_FEATURES)
    assert sums.loc[[0, 1, 2], "eval"].tolist() == pytest.approx([2 * expected] * 3, rel=1e-12)
    assert sums.loc[3, "eval"] == 0 and sums.loc[3, "checkpoint"] == 0 and sums.loc[3, "update"] > 0
    assert sums.loc[[1, 2], "checkpoint"].tolist() == [0, 0] and sums.loc[0, "checkpoint"] > 0


# -- a timing-only ImageNet-sized run ------------------------------------------------------------------


def imagenet_scenario(**workload) -> dict:
    """resnet18 on 4 A100 (one node of cluster-a100-hdr), timing-only, 8 steps of 256 per epoch."""
    return {"platform": {"preset": "cluster-a100-hdr", "nodes": 1},
            "workload": {"model": "resnet18", "dataset": {"name": "imagenet-shape", "samples": 8192},
                         "batch_size": 256, "timing_only": True, **workload},
            "algorithm": "sync", "stop": {"epochs": 1}, "outputs": {"plots": False, "trace": False}}


def test_imagenet_validation_splits_50000_samples_and_a_gpu_checkpoint_crosses_pcie(tmp_path):
    from simdist.results import write_result_dir

    sim, result = run(imagenet_scenario(validation={}, checkpoint={}))
    ledger = ledger_of(result)
    params = sim.workload.param_count
    decode_s = sim.workload.dataset.load_per_sample_s  # the published JPEG decode per image per core
    for rank in range(4):
        (eval_s,) = ledger.query(f"rank == {rank} and eval > 0")["eval"]
        # 12,500 images decoded by the rank itself, then the forward pass on the A100
        assert eval_s == pytest.approx(sim.compute.forward_s(rank, 12_500) + 12_500 * decode_s, rel=1e-12)
    pcie = LINK_KINDS.get("pcie4")  # an A100's host interface
    copy_s = pcie.latency_s + 4 * params / pcie.bandwidth_Bps
    save_s = params * 8 / DEVICE_KINDS.get(HOST_CPU_KIND).memory_bandwidth_Bps
    assert ledger.loc[ledger["checkpoint"] > 0, "checkpoint"].tolist() == pytest.approx([copy_s + save_s], rel=1e-12)
    manifest = json.loads((write_result_dir(result, tmp_path / "out", plots=False)
                                         / "manifest.json").read_text())
    assert manifest["epoch_end"]["validation"] == {"every_epochs": 1, "samples": 50_000, "samples_per_worker": 12_500}
    assert manifest["epoch_end"]["checkpoint"]["bytes"] == params * 4  # SGD without momentum keeps no buffer


# -- storage -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer, buffers", [({"name": "sgd", "lr": 0.05, "momentum": 0.9}, 1),
                                                ({"name": "adam", "lr": 0.01}, 2)], ids=["sgd-momentum", "adam"])
def test_slow_storage_sets_the_checkpoint_s_time(optimizer, buffers):
    data = digits_scenario(checkpoint={}, epochs=1, devices=2, optimizer=optimizer)
    data["platform"]["node"]["storage_write_bandwidth"] = "1MBps"
    _, result = run(data)
    written = MLP_PARAMS * 4 * (1 + buffers)
    assert written / 1e6 > written * 2 / CPU_MEMORY_BPS  # slower than serializing into memory
    assert ledger_of(result).query("checkpoint > 0")["checkpoint"].tolist() == pytest.approx([written / 1e6],
                                                                                             rel=1e-12)
    assert result.extra["epoch_end"]["checkpoint"]["storage_write_bandwidth_Bps"] == 1e6


def test_fast_storage_leaves_the_serialization_s_time():
    data = digits_scenario(checkpoint={}, epochs=1, devices=2)
    data["platform"]["node"]["storage_write_bandwidth"] = "100TBps"
    _, result = run(data)
    values = MLP_PARAMS * 2
    assert ledger_of(result).query("checkpoint > 0")["checkpoint"].tolist() == pytest.approx(
        [values * 8 / CPU_MEMORY_BPS], rel=1e-12)


# -- bad input ---------------------------------------------------------------------------------------------


def tiny_file(tmp_path: Path, change) -> Path:
    data = digits_scenario(devices=2, epochs=1)
    change(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _set(path: str, value):
    def change(data):
        *parents, leaf = path.split(".")
        target = data
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = value
    return change


def _no_test_samples(data):
    data["workload"].update(timing_only=True, validation={},
                            dataset={"name": "imagenet-shape", "samples": 96, "input_shape": [8], "test_samples": 0})


BAD = {
    "every-epochs-0": (_set("workload.validation.every_epochs", 0), "workload.validation.every_epochs"),
    "samples-negative": (_set("workload.validation.samples", -5), "workload.validation.samples"),
    "unknown-key": (_set("workload.checkpoint.every", 1), "workload.checkpoint.every"),
    "negative-storage": (_set("platform.node.storage_write_bandwidth", "-1GBps"),
                         "platform.node.storage_write_bandwidth"),
    "no-test-samples": (_no_test_samples, "workload.validation.samples"),
    # digits holds 359 test samples: a real run could not validate on more
    "more-than-the-test-set": (_set("workload.validation.samples", 1000), "workload.validation.samples"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_epoch_end_input_is_one_line_naming_the_field(case, tmp_path, capsys):
    change, field = BAD[case]
    out = tmp_path / "out"
    assert main(["run", str(tiny_file(tmp_path, change)), "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert field in line and "bad.yaml" in line
    assert not out.exists()


@pytest.mark.parametrize("case", ["negative-storage", "no-test-samples"])
def test_bad_epoch_end_input_exits_2_without_a_traceback(case, tmp_path):
    change, field = BAD[case]
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "simdist", "run", str(tiny_file(tmp_path, change)), "--out",
                           str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert field in line
    assert not out.exists()


# -- determinism ---------------------------------------------------------------------------------------------


def test_the_same_scenario_writes_the_same_eval_and_checkpoint_columns(tmp_path):
    from simdist.results import write_result_dir

    data = digits_scenario(validation={"samples": 100}, checkpoint={}, epochs=2)
    data["compute"]["noise_sigma"] = 0.2
    columns = []
    for k in range(2):
        out = write_result_dir(simulate(scenario_from_dict(copy.deepcopy(data))), tmp_path / f"run{k}", plots=False)
        columns.append(pd.read_csv(out / "ledger.csv")[["rank", "step", "eval", "checkpoint"]])
    assert columns[0]["eval"].sum() > 0 and columns[0]["checkpoint"].sum() > 0
    pd.testing.assert_frame_equal(columns[0], columns[1], check_exact=True)


# -- a real run's work, without MPI ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def workload():
    return build_workload("mlp", {"hidden": [8]}, "synthetic", {"samples": 200, "features": 4, "classes": 3},
                          OptimizerConfig(name="adam", lr=0.01), 0)


def test_validation_shares_cover_the_first_samples_and_wrap_around_as_distributed_sampler(workload, monkeypatch):
    seen = []
    evaluate = workload.evaluator.evaluate
    monkeypatch.setattr(workload.evaluator, "evaluate", lambda p, x, y: (seen.append(x), evaluate(p, x, y))[1])
    params = workload.initial_params()
    test_x = workload.dataset.test_x
    assert len(test_x) >= 31
    for w in range(3):
        run_validation(workload, params, w, 3, 31)  # shares of ceil(31 / 3) = 11: the last one pads with 2
    assert [len(x) for x in seen] == [11, 11, 11]
    assert torch.equal(torch.cat(seen[:2] + [seen[2][:9]]), test_x[:31])
    assert torch.equal(seen[2][9:], test_x[:2])  # padded from the start of the set, as DistributedSampler does
    seen.clear()
    loss, accuracy = run_validation(workload, params, 0, 1, None)  # one worker: the whole test set
    assert torch.equal(seen[0], test_x) and (loss, accuracy) == workload.test_metrics(params)


def test_every_worker_validates_as_many_samples_as_the_simulator_charges(workload, monkeypatch):
    seen = []
    evaluate = workload.evaluator.evaluate
    monkeypatch.setattr(workload.evaluator, "evaluate", lambda p, x, y: (seen.append(len(x)), evaluate(p, x, y))[1])
    for w in range(4):
        run_validation(workload, workload.initial_params(), w, 4, 3)  # 3 samples over 4 workers: 1 each
    assert seen == [1, 1, 1, 1]


def test_a_real_checkpoint_is_written_and_deleted(workload, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # gettempdir(): where mkstemp writes
    written = []
    unlink = os.unlink

    def keep_a_copy(path):
        written.append(torch.load(path, weights_only=False))
        unlink(path)

    monkeypatch.setattr("os.unlink", keep_a_copy)
    replica = workload.new_replica()
    size = write_checkpoint(replica.params, replica.opt_state)
    assert size >= checkpoint_bytes(workload.param_count, 2)  # parameters and Adam's two moments, float32
    (saved,) = written
    assert torch.equal(saved["params"], replica.params)
    assert torch.equal(saved["optimizer"]["exp_avg_sq"], replica.opt_state["exp_avg_sq"])
    assert list(Path(tempfile.gettempdir()).glob("simdist-checkpoint-*")) == []


def test_a_failed_checkpoint_leaves_no_file(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def full_disk(*_args, **_kwargs):
        raise OSError("no space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError, match="no space"):
        write_checkpoint(torch.zeros(10), {})
    assert list(tmp_path.glob("simdist-checkpoint-*")) == []


def test_the_runner_validates_a_share_and_only_worker_0_checkpoints(workload, monkeypatch):
    calls = []
    monkeypatch.setattr("simdist.training.epoch_end.run_validation",
                        lambda _wl, _params, index, workers, samples: calls.append(
                            ("validation", index, workers, samples)))
    monkeypatch.setattr("simdist.training.epoch_end.write_checkpoint",
                        lambda params, state: calls.append(("checkpoint", sorted(state))))
    schedule = EpochEndSchedule(ValidationConfig(samples=30), CheckpointConfig(), [4, 5, 6])
    runner = EpochEndRunner(schedule, workload, 30)
    replica = workload.new_replica()
    for rank in (4, 6):
        schedule.before_batch(rank, batch(0, True))
        for task in schedule.at_finish(rank):
            runner.perform(rank, task, replica)
    assert calls == [("validation", 0, 3, 30), ("checkpoint", ["exp_avg", "exp_avg_sq", "step"]),
                     ("validation", 2, 3, 30)]
    assert runner.span_name(EpochEndTask("validation", 0)) == VALIDATION_SPAN
    assert runner.span_name(EpochEndTask("checkpoint", 0)) == CHECKPOINT_SPAN


def test_perform_for_real_leaves_no_checkpoint_file(workload, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    schedule = EpochEndSchedule(ValidationConfig(), CheckpointConfig(), [0, 1])
    runner = EpochEndRunner(schedule, workload, None)
    schedule.before_batch(0, batch(0, True))
    tasks = schedule.at_finish(0)
    assert [t.kind for t in tasks] == ["validation", "checkpoint"]
    for task in tasks:
        runner.perform(0, task, workload.new_replica())
    assert list(tmp_path.iterdir()) == []


def test_the_real_runtime_does_the_last_epoch_s_work_before_the_next_batch(workload, monkeypatch):
    from simdist.real.runtime import CpuClock, MPIRuntime, MPIWorld

    spans, done = [], []
    schedule = EpochEndSchedule(ValidationConfig(), None, [0])
    runner = EpochEndRunner(schedule, workload, None)
    monkeypatch.setattr(runner, "perform", lambda rank, task, replica: done.append((rank, task, replica)))
    clock = iter(range(1000))
    world = SimpleNamespace(
        rank=0, size=1, now=lambda: float(next(clock)), progress=None, cpu=CpuClock(), epoch_end=runner,
        last_replica=None, fetch=None, gradient=lambda replica, tensors: (torch.zeros(1), 0.0),
        span=lambda kind, name, start, end, **args: spans.append((kind, name)))
    world.epoch_end_work = lambda tasks: MPIWorld.epoch_end_work(world, tasks)
    runtime = MPIRuntime(world, 0)
    first, second = object(), object()
    runtime.compute(first, Batch(np.arange(4), 0, 0, closes_epoch=True))
    assert done == [] and world.last_replica is first
    runtime.compute(second, Batch(np.arange(4), 1, 0))
    assert done == [(0, EpochEndTask("validation", 0), first)]  # the replica that finished epoch 0
    assert spans.index(("compute", VALIDATION_SPAN)) < len(spans) - 1  # before the second forward/backward
    assert spans[-1] == ("compute", "forward/backward")
