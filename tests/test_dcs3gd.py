"""DC-S3GD (docs/algorithms.md §6): the math against its formulas, the protocol, and its timing.

* Math: ``D``, ``λ`` (with its zero-denominator guard), ``g̃`` and the combined update on
  random tensors, written out by hand; the learning-rate schedule's shape; phantoms.
* Protocol: one worker (any λ0) is momentum SGD on the same batches; workers fed identical
  batches stay at distance ``D = 0``; every replica ends at the same average model.
* Timing: on an uncontended platform an iteration lasts max(compute, allreduce) + update,
  checked within 1 % on both sides of the crossover (allreduce shorter / longer than compute).

Where final replicas are needed, :class:`Dcs3gd` is wired to a :class:`SimWorld` by hand from
the scenario (what ``simulate`` does). Compute times: ``tests/data/tiny_profile.yaml``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from helpers import wire_and_run
from simdist.algorithms import ALGORITHMS
from simdist.algorithms.dcs3gd_math import (
    Schedule,
    compensated_gradient,
    compensation_lambda,
    dcs3gd_update,
    distance_to_average,
    overlap_fraction,
    schedule_factor,
)
from simdist.errors import InputError
from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate
from simdist.training.data import EpochSharder, ShardIterator
from simdist.training.optim import OptimizerConfig, make_optimizer
from simdist.training.replica import PhantomTensor

PROFILE = str((Path(__file__).parent / "data" / "tiny_profile.yaml").resolve())
MLP_T0_S, MLP_T1_S = 1.0e-4, 1.0e-5  # tiny_profile.yaml, mlp
BATCH = 16


def scenario(*, workers=4, epochs=2, optimizer=None, timing_only=False, platform=None, model=None, batch=BATCH,
             dataset=None, **algorithm):
    data = {
        "name": "dcs3gd-test",
        "seed": 7,
        "platform": platform or {"preset": "laptop-cpu", "node": {"devices": workers}},
        "workload": {
            "model": model or {"name": "mlp", "hidden": [16]},
            "dataset": dataset or {"name": "synthetic", "samples": 500, "features": 8, "classes": 3},
            "batch_size": batch,
            "optimizer": optimizer or {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-3},
            "timing_only": timing_only,
        },
        "algorithm": {"name": "dcs3gd", **algorithm},
        "stop": {"epochs": epochs},
        "evaluation": {"every_steps": 10**6},
        "compute": {"profiles": [PROFILE]},
    }
    return scenario_from_dict(data)


def run_by_hand(s, make_data=None):
    """Dcs3gd wired to a SimWorld as simulate wires it: (algorithm, world, workload)."""
    algorithm, world, workload, _ = wire_and_run(s, make_data=make_data)
    return algorithm, world, workload


# -- the math --------------------------------------------------------------------------------


def random_tensors(seed, n=64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=g) for _ in range(4)]


def test_distance_lambda_and_compensated_gradient_follow_the_formulas():
    total, own, grad, _ = random_tensors(1)
    n = 4
    d = distance_to_average(total, own, n)
    torch.testing.assert_close(d, total / n - own)
    lam = compensation_lambda(grad, d, 0.2)
    expected = 0.2 * math.sqrt(float((grad**2).sum())) / math.sqrt(float(((grad * grad * d) ** 2).sum()))
    assert lam == pytest.approx(expected, rel=1e-5)
    torch.testing.assert_close(compensated_gradient(grad, d, lam), grad + lam * grad * grad * d)
    # the correction's norm is λ0 · ‖g‖ by construction
    correction = compensated_gradient(grad, d, lam) - grad
    assert float(correction.norm()) == pytest.approx(0.2 * float(grad.norm()), rel=1e-5)


def test_lambda_guard_zero_denominator_and_phantoms():
    _, _, grad, _ = random_tensors(2)
    assert compensation_lambda(grad, torch.zeros_like(grad), 0.2) == 0.0  # D = 0
    assert compensation_lambda(torch.zeros_like(grad), grad, 0.2) == 0.0  # g = 0
    assert compensation_lambda(grad, grad, 0.0) == 0.0  # λ0 = 0
    assert compensation_lambda(grad, torch.full_like(grad, float("inf")), 0.2) == 0.0  # not finite
    phantom = PhantomTensor(64)
    assert compensation_lambda(phantom, phantom, 0.2) == 0.0
    assert compensated_gradient(grad, grad, 0.0) is grad


def test_combined_update_is_momentum_sgd_on_the_compensated_gradient():
    total, own, grad, params = random_tensors(3)
    config = OptimizerConfig(name="sgd", lr=0.1, momentum=0.9, weight_decay=1e-2)
    optimizer = make_optimizer(config)
    state = optimizer.init_state(params)
    state["momentum_buffer"].copy_(torch.linspace(-1, 1, params.numel()))
    buf = state["momentum_buffer"].clone()
    w, n, lr, wd = params.clone(), 4, 0.03, 5e-3

    result = dcs3gd_update(optimizer, params, state, grad, total, own, n, 0.2, lr, wd)

    d = total / n - own
    lam = 0.2 * grad.norm() / (grad * grad * d).norm()
    g_tilde = grad + lam * grad * grad * d
    buf = 0.9 * buf + (g_tilde + wd * w)
    delta = -lr * buf
    torch.testing.assert_close(result.delta, delta)
    torch.testing.assert_close(params, w + d + delta)
    assert result.lambda_ == pytest.approx(float(lam), rel=1e-5)
    assert result.distance_norm == pytest.approx(float(d.norm()), rel=1e-5)


def test_update_runs_on_phantoms():
    phantom = PhantomTensor(10)
    optimizer = make_optimizer(OptimizerConfig(momentum=0.9))
    result = dcs3gd_update(optimizer, PhantomTensor(10), {}, phantom, phantom, phantom, 4, 0.2, 0.1, 0.0)
    assert isinstance(result.delta, PhantomTensor) and result.delta.numel() == 10
    assert (result.lambda_, result.distance_norm) == (0.0, 0.0)


def test_schedule_warms_up_linearly_then_decays_linearly():
    factors = [schedule_factor(t, 10, 30, 0.25, 0.1) for t in range(40)]
    assert factors[0] == pytest.approx(0.25)
    assert factors[5] == pytest.approx(0.25 + 0.75 * 0.5)
    assert factors[10] == pytest.approx(1.0)  # peak at the end of warm-up
    assert factors[20] == pytest.approx(1.0 - 0.9 * 0.5)
    assert factors[30] == pytest.approx(0.1) and factors[39] == pytest.approx(0.1)  # held at the end
    diffs = [b - a for a, b in zip(factors, factors[1:])]
    assert all(d == pytest.approx(0.075) for d in diffs[:10])  # linear up
    assert all(d == pytest.approx(-0.045) for d in diffs[10:30])  # linear down
    assert [schedule_factor(t, 0, None, 0.0, 0.0) for t in (0, 5, 10**6)] == [1.0, 1.0, 1.0]


def test_schedule_scales_the_rate_by_workers_and_decays_weight_decay_with_it():
    s = Schedule.build(0.1, 1e-4, 8, warmup_iterations=4, total_iterations=12)
    assert s.peak_lr == pytest.approx(0.8)
    assert s.lr(0) == pytest.approx(0.1)  # warm-up starts at the one-worker rate η_1
    assert s.lr(4) == pytest.approx(0.8)
    assert s.weight_decay_at(8) == pytest.approx(1e-4 * 0.5)
    flat = Schedule.build(0.1, 1e-4, 8, lr_scaling="none", decay_weight_decay=False, total_iterations=12)
    assert (flat.lr(0), flat.lr(6), flat.weight_decay_at(6)) == pytest.approx((0.1, 0.05, 1e-4))


def test_overlap_fraction():
    assert overlap_fraction(0.0, 2.0, 2.0) == 1.0  # allreduce over by the end of compute
    assert overlap_fraction(1.0, 2.0, 5.0) == pytest.approx(0.25)


# -- the protocol ----------------------------------------------------------------------------


@pytest.mark.parametrize("lambda0", [0.0, 0.2])
def test_one_worker_is_momentum_sgd(lambda0):
    s = scenario(workers=1, lambda0=lambda0, decay="none")
    algorithm, world, workload = run_by_hand(s)
    reference = workload.new_replica()
    sharder = EpochSharder(workload.dataset.train_size, 1, s.seed)
    data, steps = ShardIterator(sharder, 0, s.stop.epochs), 0
    while (batch := data.next_batch(BATCH)) is not None:
        x, y = workload.batch_tensors(batch)
        grad, _ = workload.evaluator.gradient(reference.params, x, y)
        reference.apply_gradient(grad)
        steps += 1
    rows = world.recorder.updates
    assert len(rows) == steps == 2 * math.ceil(400 / BATCH)
    assert [r["staleness"] for r in rows] == [0] + [1] * (steps - 1)
    assert all(r["d_norm"] == 0.0 and r["lambda_"] == 0.0 for r in rows)
    torch.testing.assert_close(algorithm.replicas[0].params, reference.params, rtol=0, atol=1e-6)


def test_workers_with_identical_batches_stay_at_distance_zero():
    s = scenario(workers=4)
    one_shard = EpochSharder(400, 1, s.seed)  # every worker walks the same shard (400 training samples)
    algorithm, world, _ = run_by_hand(s, make_data=lambda i: ShardIterator(one_shard, 0, s.stop.epochs))
    rows = world.recorder.updates
    assert len(rows) == 4 * 2 * math.ceil(400 / BATCH)
    later = [r for r in rows if r["step"] > 1]
    assert max(r["d_norm"] for r in later) < 1e-7
    assert all(r["lambda_"] == 0.0 for r in later)  # D = 0: the guard keeps λ at 0
    for replica in algorithm.replicas[1:]:
        torch.testing.assert_close(replica.params, algorithm.replicas[0].params, rtol=0, atol=1e-7)


def test_replicas_differ_while_training_and_end_at_the_average():
    s = scenario(workers=4)
    algorithm, world, _ = run_by_hand(s)
    rows = world.recorder.updates
    assert [r["staleness"] for r in rows if r["step"] == 1] == [0] * 4
    assert {r["staleness"] for r in rows if r["step"] > 1} == {1}
    assert min(r["d_norm"] for r in rows if r["step"] > 1) > 0  # different data, different local steps
    assert 0 < min(r["lambda_"] for r in rows if r["step"] > 1)
    merges = [e for e in world.recorder.events if e["kind"] == "dcs3gd_final_merge"]
    assert sorted(e["worker"] for e in merges) == [0, 1, 2, 3]
    for replica in algorithm.replicas[1:]:
        torch.testing.assert_close(replica.params, algorithm.replicas[0].params, rtol=0, atol=1e-5)


def test_lr_schedule_reaches_the_records():
    s = scenario(workers=2, warmup_iterations=5)
    rows = [r for r in simulate(s).recorder.updates if r["worker"] == 0]
    total = 2 * math.ceil(200 / BATCH)
    lrs = [r["lr"] for r in rows]
    assert len(lrs) == total
    assert lrs[0] == pytest.approx(0.05) and lrs[5] == pytest.approx(0.1)  # η_1 → N·η_1
    assert lrs[-1] == pytest.approx(0.1 / (total - 5))  # linear decay to 0 at the end of the run


def test_runs_are_deterministic_and_timing_only_works():
    first, second = simulate(scenario()), simulate(scenario())
    assert first.recorder.updates == second.recorder.updates
    assert first.recorder.evals == second.recorder.evals
    timing = simulate(scenario(timing_only=True))
    assert [r["time_s"] for r in timing.recorder.updates] == [r["time_s"] for r in first.recorder.updates]
    assert {r["lambda_"] for r in timing.recorder.updates} == {0.0}


def test_unknown_collective_is_refused():
    with pytest.raises(InputError, match="collective"):
        scenario(collective="carrier-pigeon")
    assert "dcs3gd" in ALGORITHMS


# -- timing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bandwidth_Bps", [1e8, 5e7])  # allreduce shorter, then longer than compute
def test_iteration_is_max_of_compute_and_allreduce_plus_update(bandwidth_Bps):
    n, hidden = 4, 64
    platform = {"preset": "laptop-cpu", "nodes": n, "node": {"devices": 1, "nic_link": {
        "kind": "ethernet-tcp", "bandwidth": bandwidth_Bps}}, "fabric": {"topology": "switch"}}
    s = scenario(workers=n, epochs=1, platform=platform, model={"name": "mlp", "hidden": [hidden]},
                 dataset="digits", batch=32, timing_only=True, update_time_per_param=1e-8)
    result = simulate(s)
    params = 64 * hidden + hidden + hidden * 10 + 10
    alpha = 19.17e-6  # ethernet-tcp port-to-port latency
    allreduce_s = 2 * (n - 1) * (alpha + 4 * params / (n * bandwidth_Bps))  # ring, analytic
    update_s = 1e-8 * params
    rows = sorted((r for r in result.recorder.updates if r["worker"] == 0), key=lambda r: r["step"])
    checked = 0
    # forward/backward without the profile's optimizer step (dcs3gd charges its own update)
    t0_s = MLP_T0_S - result.extra["compute_profiles"]["host-cpu"]["optimizer_step_s"]
    for before, row in zip(rows, rows[1:]):
        compute_s = t0_s + MLP_T1_S * row["batch_size"]
        expected = max(compute_s, allreduce_s) + update_s
        assert row["time_s"] - before["time_s"] == pytest.approx(expected, rel=0.01)
        hidden_share = 1.0 if allreduce_s <= compute_s else compute_s / allreduce_s
        assert row["overlap_fraction"] == pytest.approx(hidden_share, rel=0.01)
        checked += 1
    assert checked == len(rows) - 1 >= 10
    assert 0.5 < allreduce_s / (MLP_T0_S + MLP_T1_S * 32) < 2  # comparable sizes, as intended


# -- the scaling scenario --------------------------------------------------------------------


def test_scaling_scenario_runs_on_the_published_xc_node_profile():
    """The scenario as shipped, on 4 nodes for 3 steps; 32x32 images keep ResNet-50's FLOP count cheap here."""
    from simdist.platform.compute import load_profiles
    from simdist.scenario import load_scenario

    root = Path(__file__).resolve().parents[1]
    published = load_profiles([root / "calibration" / "profiles" / "xc-skylake-published.yaml"])
    assert published[("xc-skylake", "resnet50")].t1_s == pytest.approx(64 / 81.69 / 64, rel=0.07)  # ~85 img/s
    s = load_scenario(root / "scenarios" / "dcs3gd_scaling.yaml", overrides=[
        "platform.nodes=4", "stop.steps=3", "workload.dataset={name: imagenet-shape, input_shape: [3, 32, 32]}"])
    result = simulate(s)
    profile = result.extra["compute_profiles"]["xc-skylake"]
    assert profile["source"].endswith("xc-skylake-published.yaml")
    assert profile["t1_s"] < published[("xc-skylake", "resnet50")].t1_s  # scaled by FLOPs to 32x32 images
    # each step: the rank loads its batch (imagenet-shape's published decode time per image, serially), then computes
    per_image_s = result.extra["data_loading"]["figures"][0]["per_sample_core_s"]
    assert per_image_s == pytest.approx(10 / 1923)  # 10 cores for 1,923 images/s
    compute_s = 512 * per_image_s + profile["t0_s"] + profile["t1_s"] * 512
    params = result.extra["param_count"]
    allreduce_s = 2 * 3 * (3.7e-6 + 4 * params / (4 * 8e9))  # ring over aries NICs
    assert allreduce_s < compute_s
    rows = [r for r in result.recorder.updates if r["worker"] == 0]
    # each update's own passes at the node's memory bandwidth (simdist.platform.op_costs): the first
    # step is the optimizer step (12 B/param), later ones add the move to the average (48) and the
    # compensation (68)
    memory_Bps = 2 * 6 * 2666e6 * 8
    first_s, later_s = 12 * params / memory_Bps, (12 + 48 + 68) * params / memory_Bps
    assert [r["time_s"] for r in rows] == pytest.approx(
        [compute_s * k + first_s + later_s * (k - 1) for k in (1, 2, 3)], rel=1e-6)
    assert [r["overlap_fraction"] for r in rows[1:]] == [1.0, 1.0]
