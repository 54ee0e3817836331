"""The correlated compute-noise model (simdist.platform.noise) and its wiring.

Statistical checks draw many factors with a fixed seed; each tolerance is several standard
errors of the estimate at that sample size (given beside it), so any seed would pass too.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from simdist.errors import InputError, SimulationError
from simdist.platform.compute import ComputeModel, ModelTiming
from simdist.platform.noise import BLOCK_STEPS, NoiseModel, NoiseSpec
from simdist.scenario import scenario_from_dict
from simdist.seeding import numpy_stream
from simdist.simulate import Simulation

from test_lockstep_group import PROFILE, assert_same_results, run_both, timing_scenario

FULL = dict(node_sigma=0.05, rank_sigma=0.08, correlation=0.6, straggler_probability=0.02,
            straggler_median=2.5, straggler_sigma=0.2, source="test figures")
NODES_8x4 = np.repeat(np.arange(8), 4)


def spec(**fields) -> NoiseSpec:
    return NoiseSpec(**{"source": "test figures", **fields})


def lag_correlation(log: np.ndarray, lag: int) -> float:
    """Pooled autocorrelation at ``lag`` of rows of a (ranks, steps) array, each row centred."""
    x = log - log.mean(axis=1, keepdims=True)
    return float((x[:, lag:] * x[:, :-lag]).sum() / (x * x).sum() * x.shape[1] / (x.shape[1] - lag))


# -- the spec -------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, message", [
    ({"correlation": 1.0}, "less than 1"),
    ({"correlation": -0.1}, "greater than or equal to 0"),
    ({"rank_sigma": -0.01}, "greater than or equal to 0"),
    ({"node_sigma": float("nan")}, "finite"),
    ({"straggler_probability": 1.5}, "less than or equal to 1"),
    ({"straggler_median": 0.5}, "greater than or equal to 1"),
    ({"rank_sigma": 0.1, "source": None}, "source is required"),
    ({"jitter": 0.1}, "Extra inputs"),
])
def test_spec_refuses_values_outside_its_ranges(fields, message):
    with pytest.raises(ValidationError, match=message):
        NoiseSpec(**{"source": "x", **fields})


def test_all_zero_spec_is_off_and_needs_no_source():
    assert not NoiseSpec().enabled
    assert not NoiseSpec(straggler_probability=0.5).enabled  # a straggler of factor 1 slows nothing
    assert spec(straggler_probability=0.1, straggler_median=2.0).enabled


def scenario_data(**compute) -> dict:
    data = timing_scenario()
    data["compute"] = compute
    return data


def test_scenario_errors_name_the_file_and_the_field():
    with pytest.raises(InputError) as info:
        scenario_from_dict(scenario_data(noise={"correlation": 1.0, "source": "x"}), source="s.yaml")
    assert str(info.value).startswith("s.yaml: compute.noise.correlation:")
    with pytest.raises(InputError, match=r"s.yaml: compute.noise: give noise_sigma or noise, not both"):
        scenario_from_dict(scenario_data(noise_sigma=0.1, noise=FULL), source="s.yaml")


def test_a_scenario_without_noise_resolves_as_before():
    resolved = scenario_from_dict(scenario_data(noise_sigma=0.1)).resolved()
    assert "noise" not in resolved["compute"]  # content hashes of existing scenarios do not move
    with_noise = scenario_from_dict(scenario_data(noise=FULL)).resolved()
    assert with_noise["compute"]["noise"] == FULL
    assert scenario_from_dict(scenario_data(**with_noise["compute"])).compute.noise == NoiseSpec(**FULL)


# -- determinism and vectorized == per rank -------------------------------------------------

def test_factors_are_deterministic_per_seed():
    a = NoiseModel(spec(**FULL), 3, NODES_8x4).matrix(300)
    assert np.array_equal(a, NoiseModel(spec(**FULL), 3, NODES_8x4).matrix(300))
    assert not np.array_equal(a, NoiseModel(spec(**FULL), 4, NODES_8x4).matrix(300))


def test_one_rank_at_a_time_in_any_order_equals_the_vectorized_draw():
    steps = 2 * BLOCK_STEPS + 40
    vectorized = NoiseModel(spec(**FULL), 1, NODES_8x4).matrix(steps)
    shuffled = NoiseModel(spec(**FULL), 1, NODES_8x4)
    order = np.random.default_rng(0)
    one_by_one = np.empty_like(vectorized)
    for k in range(steps):
        for r in order.permutation(32):
            one_by_one[r, k] = shuffled.next_factor(int(r))
    assert np.array_equal(one_by_one, vectorized)
    ahead = NoiseModel(spec(**FULL), 1, NODES_8x4)  # rank 5 runs all its steps first (async), then a cohort
    first = np.array([ahead.next_factor(5) for _ in range(steps)])
    others = np.delete(np.arange(32), 5)
    rest = np.stack([ahead.next_factors(others) for _ in range(steps)], axis=1)
    assert np.array_equal(first, vectorized[5]) and np.array_equal(rest, vectorized[others])


def test_steps_are_drawn_forward_only():
    model = NoiseModel(spec(rank_sigma=0.1), 0, [0, 0])
    model.factor(0, BLOCK_STEPS + 3)
    assert model.factor(0, BLOCK_STEPS) == model.factors([0], [BLOCK_STEPS])[0]  # same block: fine
    with pytest.raises(SimulationError, match="drawn forward"):
        model.factor(0, 3)


def test_each_component_draws_from_its_own_stream():
    plain = NoiseModel(spec(rank_sigma=0.1, correlation=0.5), 2, NODES_8x4).matrix(200)
    with_tail = NoiseModel(spec(rank_sigma=0.1, correlation=0.5, straggler_probability=0.1,
                                straggler_median=3.0), 2, NODES_8x4).matrix(200)
    ordinary = np.isclose(with_tail, plain)  # turning stragglers on leaves every other step as it was
    assert ordinary.mean() == pytest.approx(0.9, abs=0.02)
    assert np.allclose(with_tail[~ordinary] / plain[~ordinary], 3.0)


# -- statistics -----------------------------------------------------------------------------

def test_factors_have_mean_one_and_the_set_log_std():
    factors = NoiseModel(spec(node_sigma=0.1, rank_sigma=0.2), 0, np.repeat(np.arange(50), 4)).matrix(500)
    # 100,000 draws; node shares make ~25,000 independent node values: SE of the mean ~0.0015
    assert factors.mean() == pytest.approx(1.0, abs=0.01)
    assert np.log(factors).std() == pytest.approx(math.hypot(0.1, 0.2), rel=0.03)  # SE ~0.5 %


def test_ranks_of_one_node_move_together():
    alone = NoiseModel(spec(node_sigma=0.1), 0, NODES_8x4).matrix(100)
    assert np.array_equal(alone[0], alone[3]) and not np.array_equal(alone[0], alone[4])
    log = np.log(NoiseModel(spec(node_sigma=0.1, rank_sigma=0.1), 0, np.repeat(np.arange(100), 2)).matrix(400))
    same = np.corrcoef(log[0::2].ravel(), log[1::2].ravel())[0, 1]
    other = np.corrcoef(log[0::2].ravel(), np.roll(log[1::2], 1, axis=0).ravel())[0, 1]
    # 40,000 pairs of 100 independent node series: SE of a correlation ~0.01
    assert same == pytest.approx(0.5, abs=0.05)  # node variance / total variance
    assert other == pytest.approx(0.0, abs=0.05)


@pytest.mark.parametrize("rho, stays_slow", [(0.0, 0.100), (0.5, 0.324), (0.9, 0.689)])
def test_correlation_makes_slow_spells_persist(rho, stays_slow):
    log = np.log(NoiseModel(spec(rank_sigma=0.1, correlation=rho), 5, np.arange(40)).matrix(1000))
    # 40 series of 1000 steps: SE of a pooled lag-k autocorrelation ~ sqrt((1 + rho^2) / 40,000 / (1 - rho^2))
    assert lag_correlation(log, 1) == pytest.approx(rho, abs=0.03)
    assert lag_correlation(log, 5) == pytest.approx(rho ** 5, abs=0.05)
    # a step in a rank's slowest 10 % is followed by another with the bivariate-normal probability
    # P(X > z90 | Y > z90) at correlation rho (4,000 slow steps: SE ~0.01 .. 0.025 with persistence)
    slow = log > np.quantile(log, 0.9)
    stays = (slow[:, 1:] & slow[:, :-1]).sum() / slow[:, :-1].sum()
    assert stays == pytest.approx(stays_slow, abs=0.05)


def test_straggler_steps_are_rare_and_heavy():
    factors = NoiseModel(spec(straggler_probability=0.05, straggler_median=3.0), 0, NODES_8x4).matrix(500)
    slow = factors > 1.0
    assert np.all(factors[slow] == 3.0) and np.all(factors[~slow] == 1.0)
    assert slow.mean() == pytest.approx(0.05, abs=0.006)  # 16,000 steps: SE 0.0017
    spread = NoiseModel(spec(straggler_probability=0.05, straggler_median=3.0, straggler_sigma=0.5), 0,
                        NODES_8x4).matrix(500)
    tail = np.log(spread[spread != 1.0])
    assert np.median(tail) == pytest.approx(math.log(3.0), abs=0.08)  # ~800 draws: SE of the median 0.022
    assert tail.std() == pytest.approx(0.5, rel=0.1)  # SE 2.5 %


# -- the compute model and the simulator ------------------------------------------------------

def compute_model(platform, **kwargs) -> ComputeModel:
    timings = {("host-cpu", "m"): ModelTiming(1e-3, 1e-4, None, "test")}
    return ComputeModel(platform, timings, model="m", forward_flops_per_sample=1.0, parameter_layers=1, seed=9,
                        **kwargs)


def test_compute_model_vectorized_durations_equal_per_rank_durations(make_platform):
    platform = make_platform("laptop-cpu", nodes=3, node={"devices": 2})
    per_rank = compute_model(platform, noise=spec(**FULL))
    cohort = compute_model(platform, noise=spec(**FULL))
    ranks = list(range(6))
    for _ in range(BLOCK_STEPS + 10):
        assert np.array_equal(cohort.durations_s(ranks, 16), [per_rank.duration_s(r, 16) for r in ranks])


def test_noise_sigma_draws_are_unchanged(make_platform):
    platform = make_platform("laptop-cpu", nodes=1, node={"devices": 2})
    model = compute_model(platform, noise_sigma=0.3)
    stream = numpy_stream(9, "compute-noise/rank1")
    for _ in range(5):
        expected = (1e-3 + 1e-4 * 8) * math.exp(0.3 * stream.standard_normal() - 0.045)
        assert model.duration_s(1, 8) == expected
    assert model.noise is None and compute_model(platform, noise=NoiseSpec()).noise is None


@pytest.mark.parametrize("case", ["all", "stragglers-only"])
def test_timing_only_cohort_equals_per_rank_processes_with_noise(case):
    noise = FULL if case == "all" else {"straggler_probability": 0.2, "straggler_median": 4.0, "source": "x"}
    (_, per_rank), (cohort_sim, cohort) = run_both(scenario_data(noise=noise) | {"stop": {"steps": 30}})
    assert cohort_sim.in_lockstep
    assert_same_results(per_rank, cohort)


def test_noise_changes_replay_and_timing_only_runs_deterministically():
    for timing_only in (True, False):
        base = scenario_data()
        base["workload"]["timing_only"] = timing_only
        if not timing_only:
            base["platform"] = {"preset": "laptop-cpu", "nodes": 2, "node": {"devices": 2}}
            base["workload"]["model"] = {"name": "mlp", "hidden": [16]}
            base["compute"] = {"profiles": [PROFILE]}
        noisy = {**base, "compute": {**base["compute"], "noise": FULL}}
        quiet_time = Simulation(scenario_from_dict(base), None).execute().virtual_time_s
        runs = [Simulation(scenario_from_dict(noisy), None).execute().virtual_time_s for _ in range(2)]
        assert runs[0] == runs[1] != quiet_time
