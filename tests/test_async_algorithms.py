"""Parameter-server algorithms end to end: asgd, nsoftsync and dbs (docs/algorithms.md §2–§4).

Runs go through the public path (scenario dict -> ``scenario_from_dict`` -> ``simulate``);
where the servers' final parameters or per-server counters are needed, the registered
algorithm is wired to a :class:`SimWorld` by hand from the same scenario (what ``simulate``
does), with data iterators that record every batch.

Platform: ``laptop-cpu`` with N + 1 devices and ``workers: N`` (the last rank is the
server); compute times from ``tests/data/tiny_profile.yaml`` (mlp: 1e-4 s + 1e-5 s/sample).
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from simdist.errors import InputError
from helpers import run_by_hand, wire_and_run
from simdist.runtime import sim_messages
from simdist.runtime.base import GradResult
from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate
from simdist.training.data import EpochSharder, ShardIterator
from simdist.training.workload import build_workload

PROFILE = str((Path(__file__).parent / "data" / "tiny_profile.yaml").resolve())
BATCH, EPOCHS, TRAIN_SAMPLES = 16, 2, 400  # synthetic 500 samples, 20 % held out
PARAMS = 8 * 16 + 16 + 16 * 3 + 3


def scenario(name="asgd", *, workers=4, devices=None, batch=BATCH, epochs=EPOCHS, samples=500, overrides=(),
             optimizer=None, timing_only=False, workload_extra=None, **algorithm):
    data = {
        "name": f"{name}-test",
        "seed": 5,
        "platform": {"preset": "laptop-cpu", "node": {"devices": devices or workers + 1},
                     "device_overrides": list(overrides)},
        "workers": workers,
        "workload": {
            "model": {"name": "mlp", "hidden": [16]},
            "dataset": {"name": "synthetic", "samples": samples, "features": 8, "classes": 3},
            "batch_size": batch,
            "optimizer": optimizer or {"name": "sgd", "lr": 0.1, "momentum": 0.9},
            "timing_only": timing_only,
            **(workload_extra or {}),
        },
        "algorithm": {"name": name, **algorithm},
        "stop": {"epochs": epochs},
        "evaluation": {"every_steps": 10**6},
        "compute": {"profiles": [PROFILE]},
    }
    return scenario_from_dict(data)


def sequential_sgd(s):
    """One replica, one optimizer, worker 0's batches in order (the one-worker reference)."""
    w = s.workload
    workload = build_workload(w.model.name, w.model.options, w.dataset.name, w.dataset.options, w.optimizer, s.seed)
    replica = workload.new_replica()
    data = ShardIterator(EpochSharder(workload.dataset.train_size, 1, s.seed), 0, s.stop.epochs)
    steps = 0
    while (batch := data.next_batch(w.batch_size)) is not None:
        grad, _ = workload.evaluator.gradient(replica.params, *workload.batch_tensors(batch))
        replica.apply_gradient(grad)
        steps += 1
    return replica.params, steps


def gradients_pushed(result):
    """Forward/backward spans of worker ranks: every one of them is pushed once."""
    workers = {r.rank for r in result.ranks if r.role == "worker"}
    return sum(1 for span in result.recorder.spans
               if span.rank in workers and span.kind == "compute" and span.name == "forward/backward")


def mean_staleness(result):
    return statistics.mean(row["staleness"] for row in result.recorder.updates)


HETEROGENEOUS = [{"ranks": [1], "cpus": 0.5}, {"ranks": [2], "cpus": 2.0}]
CASES = {
    "asgd": dict(name="asgd"),
    "asgd-2-servers": dict(name="asgd", servers=2, devices=6),
    "nsoftsync-n1": dict(name="nsoftsync", n=1),
    "nsoftsync-n2-heterogeneous": dict(name="nsoftsync", n=2, overrides=HETEROGENEOUS),
    "nsoftsync-n1-after-update-heterogeneous": dict(name="nsoftsync", n=1, pull="after_update",
                                                    overrides=HETEROGENEOUS),
    "nsoftsync-3-of-4-workers": dict(name="nsoftsync", n=3, staleness_aware=True, overrides=HETEROGENEOUS),
    # 5 workers x 5 batches per epoch: an odd number of gradients, so the last group of c = 2 is partial
    "nsoftsync-partial-last-group": dict(name="nsoftsync", workers=5, n=2, epochs=1, overrides=HETEROGENEOUS),
    "nsoftsync-partial-last-group-after-update": dict(name="nsoftsync", workers=5, n=2, epochs=1,
                                                      pull="after_update", overrides=HETEROGENEOUS),
    "dbs-heterogeneous": dict(name="dbs", m=2, overrides=HETEROGENEOUS),
    "dbs-heterogeneous-shards": dict(name="dbs", m=2, data="shards", measure="iteration", overrides=HETEROGENEOUS),
}


# -- the math ------------------------------------------------------------------------------------


@pytest.mark.parametrize("servers", [1, 2])
def test_asgd_with_one_worker_is_sequential_sgd(servers):
    s = scenario("asgd", workers=1, devices=1 + servers, servers=servers)
    algorithm, world, _ = run_by_hand(s)
    reference, steps = sequential_sgd(s)
    server_params = algorithm.evaluation_replicas()[1].params
    torch.testing.assert_close(server_params, reference, rtol=0, atol=1e-6)
    rows = world.recorder.updates
    assert len(rows) == steps == EPOCHS * -(-TRAIN_SAMPLES // BATCH)
    assert all(row["staleness"] == 0 for row in rows)
    assert [row["version"] for row in rows] == list(range(1, steps + 1))


def test_nsoftsync_n_equal_to_workers_is_asgd():
    asgd, softsync = simulate(scenario("asgd")), simulate(scenario("nsoftsync", n=4))
    assert asgd.recorder.updates == softsync.recorder.updates
    assert asgd.recorder.evals == softsync.recorder.evals


def test_nsoftsync_n1_with_homogeneous_workers_averages_every_workers_gradient():
    result = simulate(scenario("nsoftsync", n=1))
    by_version: dict[int, list[int]] = {}
    for row in result.recorder.updates:
        assert row["step"] == row["version"]
        by_version.setdefault(row["version"], []).append(row["worker"])
    assert len(by_version) == EPOCHS * 7  # 7 steps per worker per epoch, 4 gradients per update
    assert all(sorted(workers) == [0, 1, 2, 3] for workers in by_version.values())


def test_staleness_aware_asgd_changes_only_stale_steps():
    def server_params(**options):
        algorithm = run_by_hand(scenario("asgd", **options))[0]
        return algorithm.servers_[0].replica.params

    # one worker: staleness 0 and eta / max(1, 0) = eta, so nothing changes
    torch.testing.assert_close(server_params(workers=1, staleness_aware=True), server_params(workers=1), rtol=0, atol=0)
    assert not torch.equal(server_params(staleness_aware=True), server_params())


# -- conservation and determinism ------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_gradient_is_applied_exactly_once(case):
    options = CASES[case]
    workers, epochs = options.get("workers", 4), options.get("epochs", EPOCHS)
    result = simulate(scenario(**options))
    rows = result.recorder.updates
    assert result.status == "completed"
    assert len(rows) == gradients_pushed(result)
    assert sum(row["batch_size"] for row in rows) == epochs * TRAIN_SAMPLES
    assert result.epochs == epochs
    if options.get("data", "pool") == "pool" and options["name"] == "dbs":
        return  # a shared epoch pool: each worker takes as much of the epoch as its speed allows
    for worker in range(workers):
        assert sum(row["batch_size"] for row in rows if row["worker"] == worker) == epochs * TRAIN_SAMPLES // workers
    assert all(row["age_s"] > 0 and np.isfinite(row["loss"]) for row in rows)


@pytest.mark.parametrize("case", ["nsoftsync-partial-last-group", "nsoftsync-partial-last-group-after-update"])
def test_a_partial_last_group_is_applied_once_no_more_gradients_can_arrive(case):
    result = simulate(scenario(**CASES[case]))
    sizes = Counter(row["version"] for row in result.recorder.updates)
    assert len(result.recorder.updates) == 25  # 5 workers x 5 batches: odd, with c = 2
    assert [sizes[v] for v in sorted(sizes)] == [2] * 12 + [1]


@pytest.mark.parametrize("case", ["asgd", "nsoftsync-n2-heterogeneous", "dbs-heterogeneous-shards"])
def test_every_sample_is_used_once_per_epoch(case):
    algorithm, _, batches = run_by_hand(scenario(**CASES[case]))
    assert algorithm.epochs_completed() == EPOCHS
    for epoch in range(EPOCHS):
        used = np.concatenate([b.indices for b in batches if b.epoch == epoch])
        assert sorted(used.tolist()) == list(range(TRAIN_SAMPLES))


@pytest.mark.parametrize("case", ["nsoftsync-n2-heterogeneous", "dbs-heterogeneous", "asgd-2-servers"])
def test_two_runs_are_identical(case):
    first, second = simulate(scenario(**CASES[case])), simulate(scenario(**CASES[case]))
    assert first.recorder.updates == second.recorder.updates
    assert first.recorder.events == second.recorder.events
    assert first.recorder.evals == second.recorder.evals
    assert first.virtual_time_s == second.virtual_time_s


@pytest.mark.parametrize("case", ["asgd", "asgd-2-servers", "nsoftsync-n1-after-update-heterogeneous",
                                  "dbs-heterogeneous"])
def test_messages_without_copies_give_the_run_with_copies(case, monkeypatch):
    """Gradients and weights are sent with handover=True (uncopied); copying them at every send changes nothing."""
    def final_params(algorithm):
        return next(iter(algorithm.evaluation_replicas().values())).params

    shared_algorithm, shared_world, _ = run_by_hand(scenario(**CASES[case]))
    copying = sim_messages.sent_copy
    monkeypatch.setattr(sim_messages, "sent_copy", lambda payload, handover=False: copying(payload))  # every tensor
    copied_algorithm, copied_world, _ = run_by_hand(scenario(**CASES[case]))
    assert shared_world.recorder.updates == copied_world.recorder.updates
    assert torch.equal(final_params(shared_algorithm), final_params(copied_algorithm))


SLOW_SERVER = {"apply_time_per_param": 2e-6}  # 0.4 ms per update: pushes queue at the server


@pytest.mark.parametrize("case, options", [("asgd", {}), ("asgd-2-servers", {}), ("asgd", SLOW_SERVER),
                                           ("nsoftsync-n2-heterogeneous", SLOW_SERVER),
                                           ("dbs-heterogeneous", SLOW_SERVER)])
def test_gradients_evaluated_when_applied_give_the_run_evaluated_at_the_push(case, options, monkeypatch):
    """Pushed gradients travel unevaluated and are evaluated, batched, when a server applies
    them: the same weights as evaluating each at its push, and while pushes queue at a busy
    server, fewer and larger evaluations; every loss is reduced over its own request's rows.
    What is guaranteed is agreement within float32 rounding (simdist/training/gradients.py):
    one forward over the concatenated batch may sum in another order than over each batch.
    On an AMD EPYC host every case here was bit-identical; on an Intel Xeon VM the
    heterogeneous nsoftsync case differed by 9e-8 in a weight and 1e-7 (relative) in a loss."""
    late_algorithm, late_world, late_workload, _ = wire_and_run(scenario(**CASES[case], **options))
    monkeypatch.setattr(GradResult, "grad_for_message", lambda self, start, stop: self.grad[start:stop])
    monkeypatch.setattr(GradResult, "loss_for_message", lambda self: self.loss)
    eager_algorithm, eager_world, eager_workload, _ = wire_and_run(scenario(**CASES[case], **options))
    late_rows, eager_rows = late_world.recorder.updates, eager_world.recorder.updates
    assert [{**row, "loss": None} for row in late_rows] == [{**row, "loss": None} for row in eager_rows]
    assert [row["loss"] for row in late_rows] == pytest.approx([row["loss"] for row in eager_rows], rel=1e-6)
    for late, eager in zip(late_algorithm.servers_, eager_algorithm.servers_):
        torch.testing.assert_close(late.replica.params, eager.replica.params)
    if options:
        assert late_workload.pending.evaluations < eager_workload.pending.evaluations


def test_two_servers_each_apply_every_gradient_to_their_shard():
    algorithm, world, batches = run_by_hand(scenario(**CASES["asgd-2-servers"]))
    first, second = algorithm.servers_
    assert (first.start, first.stop, second.start, second.stop) == (0, PARAMS // 2, PARAMS // 2, PARAMS)
    assert first.gradients_applied == second.gradients_applied == len(batches) == len(world.recorder.updates)
    assert first.version == second.version == len(batches)  # asgd: one version per gradient on each server
    evaluated = algorithm.evaluation_replicas()[first.rank].params
    torch.testing.assert_close(evaluated, torch.cat([first.replica.params, second.replica.params]))
    applies = [span for span in world.recorder.spans if span.rank in (4, 5) and span.name == "apply"]
    assert len(applies) == 2 * len(batches)  # each server spends apply time on each gradient


def test_server_spends_apply_time_per_parameter_on_every_gradient():
    result = simulate(scenario("asgd", apply_time_per_param=1e-6))
    applies = [span for span in result.recorder.spans if span.rank == 4 and span.name == "apply"]
    assert len(applies) == len(result.recorder.updates)
    assert all(span.duration_s == pytest.approx(PARAMS * 1e-6) for span in applies)
    assert result.virtual_time_s > simulate(scenario("asgd")).virtual_time_s


def test_timing_only_runs_and_conserves_gradients():
    result = simulate(scenario("nsoftsync", n=2, timing_only=True, servers=2, devices=6))
    assert result.status == "completed"
    assert len(result.recorder.updates) == gradients_pushed(result)
    assert all(row["loss"] is None for row in result.recorder.updates)


# -- staleness -----------------------------------------------------------------------------------


def test_asgd_mean_staleness_with_homogeneous_workers_is_about_n_minus_one():
    result = simulate(scenario("asgd", workers=8, batch=8, samples=1000))
    assert mean_staleness(result) == pytest.approx(7, rel=0.25)


def test_nsoftsync_mean_staleness_grows_with_n():
    means = [mean_staleness(simulate(scenario("nsoftsync", workers=8, batch=8, samples=1000, n=n))) for n in (1, 2, 4)]
    assert means[0] < means[1] < means[2]
    assert means == pytest.approx([1, 2, 4], rel=0.25)


# -- dbs -----------------------------------------------------------------------------------------


def dbs_scenario(**options):
    return scenario("dbs", workers=2, batch=400, samples=25_000, epochs=1, optimizer={"name": "sgd", "lr": 0.05},
                    **options)


def test_dbs_with_equal_workers_never_changes_a_batch_size():
    result = simulate(dbs_scenario())
    assert not [e for e in result.recorder.events if e["kind"] == "batch_size"]
    assert {row["batch_size"] for row in result.recorder.updates} == {400}


def test_dbs_gives_a_slower_worker_a_smaller_batch_and_equal_iteration_times():
    result = simulate(dbs_scenario(overrides=[{"ranks": [0], "cpus": 1.5}]))  # worker 1 is 1.5x slower
    changes = [e for e in result.recorder.events if e["kind"] == "batch_size"]
    assert changes and all(e["worker"] == 1 for e in changes)
    final = changes[-1]["batch_size"]
    assert final / 400 == pytest.approx(2 / 3, rel=0.05)
    rows = result.recorder.updates
    end = max(row["time_s"] for row in rows if row["worker"] == 0)  # while both workers run
    intervals = {}
    for worker, size in ((0, 400), (1, final)):
        mine = [row for row in rows if row["worker"] == worker and changes[-1]["time_s"] <= row["time_s"] <= end]
        intervals[worker] = statistics.mean(b["time_s"] - a["time_s"] for a, b in zip(mine, mine[1:])
                                            if b["batch_size"] == size)
    assert intervals[1] == pytest.approx(intervals[0], rel=0.10)


def test_dbs_rescale_base_and_weight_by_batch_run():
    result = simulate(dbs_scenario(overrides=[{"ranks": [0], "cpus": 1.5}], rescale="base", weight_by_batch=True))
    assert result.status == "completed"
    assert [e for e in result.recorder.events if e["kind"] == "batch_size"]


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, field", [
    (dict(name="nsoftsync", n=5), "algorithm.n"),
    (dict(name="nsoftsync", n=0), "algorithm.n"),
    (dict(name="dbs", A=0), "algorithm.A"),
    (dict(name="dbs", A=-0.1), "algorithm.A"),
    (dict(name="dbs", m=0), "algorithm.m"),
    (dict(name="dbs", b_min=10, b_max=5), "algorithm.b_max"),
    (dict(name="dbs", b_min=100), "algorithm.b_min"),  # default b_max = 4 x 16
    (dict(name="asgd", servers=0), "algorithm.servers"),
    (dict(name="asgd", server_ranks=[2]), "algorithm.server_ranks"),  # a worker
    (dict(name="asgd", server_ranks=[7]), "algorithm.server_ranks"),  # no such rank
    (dict(name="asgd", servers=2, server_ranks=[4]), "algorithm"),
    (dict(name="asgd", servers=2), "workers"),  # 4 workers + 2 servers on 5 devices
    (dict(name="dbs", devices=4), "workers"),
])
def test_bad_options_are_rejected_naming_the_field(kwargs, field):
    with pytest.raises(InputError) as error:
        scenario(**kwargs)
    assert error.value.field == field


def test_messages_say_what_is_wrong():
    with pytest.raises(InputError, match="unknown server rank 7"):
        scenario("asgd", server_ranks=[7])
    with pytest.raises(InputError, match="also a worker"):
        scenario("asgd", server_ranks=[0])
    with pytest.raises(InputError, match="set workers"):
        scenario_from_dict({"platform": "laptop-cpu", "workload": {"model": "mlp"}, "algorithm": "asgd",
                            "stop": {"epochs": 1}})


def test_explicit_server_ranks_and_an_idle_rank_work():
    result = simulate(scenario("asgd", devices=6, server_ranks=[5]))
    assert result.status == "completed"
    assert {r.rank: r.role for r in result.ranks} == {0: "worker", 1: "worker", 2: "worker", 3: "worker", 5: "server"}
    assert scenario("asgd", devices=7, server_ranks=[6, 4]).algorithm["servers"] == 2
