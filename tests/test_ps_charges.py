"""What the parameter-server algorithms (asgd, nsoftsync, dbs) charge, and bucketed pushes.

Workers pay for packing their gradient and unpacking the pulled weights (op ``copy``), servers
for each update (op ``update``), an aggregating server per push and per round; ``push:
buckets`` sends the gradient in buckets as backward produces them (simdist.algorithms.ps_buckets).
Scenarios: ``laptop-cpu`` with N workers and their server(s), an MLP on a small synthetic set,
compute from ``tests/data/tiny_profile.yaml``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from simdist.algorithms.async_math import shard_bounds
from simdist.algorithms.ps_buckets import pack_schedule, pieces_per_server, plan_buckets
from simdist.errors import InputError
from simdist.ledger import PARTS, ledger_table
from simdist.metrics import spans_table
from simdist.runtime.sim import SimWorld
from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate
from simdist.training.models import MLPConfig, mlp, model_info

PROFILE = str((Path(__file__).parent / "data" / "tiny_profile.yaml").resolve())
SAMPLES, TRAIN = 200, 160  # synthetic samples, 20 % held out
HIDDEN = [64, 64]  # three Linear layers: several buckets of 1 KiB
ALGORITHMS = ("asgd", "nsoftsync", "dbs")


def scenario(name="asgd", *, workers=2, servers=1, push="whole", timing_only=False, bandwidth=None, **algorithm):
    link = {"kind": "shm", **({"bandwidth": bandwidth} if bandwidth else {})}
    return scenario_from_dict({
        "name": f"{name}-charges", "seed": 3,
        "platform": {"preset": "laptop-cpu", "node": {"devices": workers + servers, "intra_link": link}},
        "workers": workers,
        "workload": {"model": {"name": "mlp", "hidden": HIDDEN},
                     "dataset": {"name": "synthetic", "samples": SAMPLES, "features": 8, "classes": 3},
                     "batch_size": 16, "optimizer": {"name": "sgd", "lr": 0.05}, "timing_only": timing_only},
        "algorithm": {"name": name, "servers": servers, "push": push, "bucket_bytes": "1KiB", **algorithm},
        "stop": {"epochs": 1}, "evaluation": {"every_steps": 10**6},
        "compute": {"profiles": [PROFILE]},
    })


def mlp_info():
    """The scenario model's parameter layout (8 features, 3 classes)."""
    return model_info(mlp((8,), 3, MLPConfig(hidden=HIDDEN)), (8,))


def worker_ledger(result):
    ledger = ledger_table(spans_table(result))
    return ledger[ledger["rank"].isin(result.workers)], ledger[~ledger["rank"].isin(result.workers)]


def busy_calls(monkeypatch):
    """Every ``rt.busy`` of the run as (rank, name, seconds), zero-second ones included."""
    calls, busy = [], SimWorld.busy

    def recording(self, rank, duration_s, name="busy", *args, **kwargs):
        calls.append((rank, name, duration_s))
        return busy(self, rank, duration_s, name, *args, **kwargs)

    monkeypatch.setattr(SimWorld, "busy", recording)
    return calls


@pytest.mark.parametrize("push", ["whole", "buckets"])
@pytest.mark.parametrize("name", ALGORITHMS)
def test_workers_pack_and_unpack_and_servers_update(name, push):
    workers, servers = worker_ledger(simulate(scenario(name, push=push)))
    assert workers["pack"].sum() > 0 and workers["unpack"].sum() > 0
    assert servers["update"].sum() > 0 and servers["pack"].sum() == 0


def test_a_whole_push_packs_and_unpacks_every_parameter_once_per_step():
    result = simulate(scenario("asgd"))
    pack = [s.duration_s for s in result.recorder.spans if s.name == "pack gradient"]
    unpack = [s.duration_s for s in result.recorder.spans if s.name == "unpack weights"]
    steps = sum(1 for s in result.recorder.spans if s.name == "forward/backward")
    assert len(pack) == len(unpack) == steps
    assert max(pack) == pytest.approx(min(unpack))  # both the copy op over all parameters


def test_buckets_pack_as_much_as_a_whole_push():
    whole, buckets = (worker_ledger(simulate(scenario("asgd", workers=1, push=p)))[0] for p in ("whole", "buckets"))
    assert buckets["pack"].sum() == pytest.approx(whole["pack"].sum(), rel=1e-9)


def test_an_aggregating_server_accumulates_every_push_and_applies_once_per_round(monkeypatch):
    calls = busy_calls(monkeypatch)
    result = simulate(scenario("nsoftsync", workers=4, n=2))  # c = 4 // 2 = 2 gradients per round
    server = result.workers[-1] + 1
    accumulate = [s for rank, name, s in calls if rank == server and name == "accumulate"]
    apply = [s for rank, name, s in calls if rank == server and name == "apply"]
    pushes = sum(1 for rank, name, _ in calls if rank != server and name == "pack gradient")
    rounds = len({row["version"] for row in result.recorder.updates})
    assert len(accumulate) == pushes == len(result.recorder.updates) and len(apply) == rounds
    update_s = max(accumulate)
    # a round's first gradient starts the sum as is; the second is summed in (read 2, write 1: 12 B)
    assert accumulate[0::2] == [0.0] * len(accumulate[0::2]) and set(accumulate[1::2]) == {update_s}
    # each round of two: the update (12 B per parameter) plus the 1/c scaling pass (8 B)
    assert apply[0] == pytest.approx(update_s * (12 + 8) / 12)


def test_an_asynchronous_server_applies_each_push_with_the_update_op(monkeypatch):
    calls = busy_calls(monkeypatch)
    result = simulate(scenario("asgd", workers=3))
    server_calls = Counter(name for rank, name, _ in calls if rank == 3)
    assert server_calls == {"apply": len(result.recorder.updates)}


def test_bucketed_pushes_finish_no_later_on_a_slow_link():
    runs = {push: simulate(scenario("asgd", workers=1, push=push, bandwidth="20MBps")) for push in ("whole", "buckets")}
    whole, buckets = runs["whole"], runs["buckets"]
    ledger = worker_ledger(whole)[0]
    assert ledger["comm_wire"].sum() > ledger["forward_backward"].sum()  # network bound
    assert buckets.virtual_time_s < whole.virtual_time_s
    for result in runs.values():  # every sample trained on once, one update per gradient
        assert sum(row["batch_size"] for row in result.recorder.updates) == TRAIN
    assert len(buckets.recorder.updates) == len(whole.recorder.updates)


@pytest.mark.parametrize("name, options", [("nsoftsync", {"n": 1}), ("dbs", {"m": 2})])
def test_bucketed_pushes_conserve_samples_with_several_workers(name, options):
    runs = [simulate(scenario(name, workers=4, push=push, bandwidth="20MBps", **options))
            for push in ("whole", "buckets")]
    for result in runs:
        assert sum(row["batch_size"] for row in result.recorder.updates) == TRAIN
    if name == "nsoftsync":  # fixed batches: the same gradients; dbs's batch sizes follow the timing
        assert len(runs[0].recorder.updates) == len(runs[1].recorder.updates)


def test_each_bucket_is_a_message_of_its_own(monkeypatch):
    sent, send = Counter(), SimWorld.send

    def counting(self, src, dst, payload, tag=0, **kwargs):
        sent[(dst, tag)] += 1
        return send(self, src, dst, payload, tag, **kwargs)

    monkeypatch.setattr(SimWorld, "send", counting)
    result = simulate(scenario("asgd", workers=1, servers=2, push="buckets"))
    params = mlp_info()
    plans = plan_buckets(params.layers, 1024, 4, shard_bounds(params.param_count, 2))
    steps = len(result.recorder.updates)
    assert [sent[(1, 102)], sent[(2, 102)]] == [steps * n for n in pieces_per_server(plans, 2)]
    assert len(plans) > 2


@pytest.mark.parametrize("name, options", [("asgd", {"servers": 2}), ("nsoftsync", {"n": 1, "staleness_aware": True}),
                                           ("dbs", {"m": 2, "weight_by_batch": True})])
def test_bucket_push_replay_and_timing_only_charge_the_same(name, options):
    servers = options.pop("servers", 1)
    sums = [ledger_table(spans_table(simulate(scenario(name, workers=3, servers=servers, push="buckets",
                                                       timing_only=t, **options))))[list(PARTS)].sum()
            for t in (False, True)]
    assert sums[1].to_dict() == pytest.approx(sums[0].to_dict(), rel=1e-9, abs=1e-15)


def test_the_pack_schedule_delays_later_buckets_by_the_copies_before_them():
    # bucket 0 ready at half of a 1 s backward, its 0.1 s copy ends at 0.6 s (inside backward);
    # bucket 1 ready at the end: ready at 1.0 + 0.1 s, copied by 1.2 s: 0.2 s of packing after compute
    assert pack_schedule([0.5, 1.0], [0.1, 0.1], 1.0) == [pytest.approx((0.6, 0.0)), pytest.approx((1.0, 0.2))]
    # copies longer than what is left of backward: all of it after compute, 0.7 s in total
    assert pack_schedule([0.5, 1.0], [0.6, 0.1], 1.0) == [pytest.approx((1.0, 0.1)), pytest.approx((1.0, 0.6))]


def test_buckets_are_cut_at_shard_bounds_and_cover_the_gradient_once():
    info = mlp_info()
    bounds = shard_bounds(info.param_count, 3)
    pieces = [piece for plan in plan_buckets(info.layers, 1024, 4, bounds) for piece in plan.pieces]
    assert sorted((p.start, p.stop) for p in pieces)[0][0] == 0
    assert sum(p.stop - p.start for p in pieces) == info.param_count
    assert all(bounds[p.server][0] <= p.start < p.stop <= bounds[p.server][1] for p in pieces)


@pytest.mark.parametrize("field, value", [("push", "chunks"), ("bucket_bytes", "-4MiB"), ("bucket_bytes", -1)])
def test_a_bad_push_option_is_refused_naming_the_field(field, value):
    with pytest.raises(InputError, match=f"algorithm.{field}"):
        scenario("asgd", **{field: value})
