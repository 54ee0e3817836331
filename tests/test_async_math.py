"""The parameter-server update rules against the formulas of docs/algorithms.md §2–§4.

asgd: s = v_now − v_read, w ← w − η·g or w ← w − η/max(1, s)·g. n-softsync: c = ⌊N/n⌋,
w ← w − η·(1/c)·Σ g_j, each g_j first divided by max(1, s_j) when staleness-aware. dbs:
S = Σ reference times / Σ own times, b ← clamp(round(b·S), b_min, b_max) when |1 − S| > A
(b = current batch or base X), gradient scaled by b_i / X with weight_by_batch.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from simdist.algorithms.async_math import (
    asgd_learning_rate,
    batch_weighted,
    dbs_per_sample_s,
    dbs_rescale,
    dbs_resize,
    dbs_speed_ratio,
    shard_bounds,
    softsync_average,
    softsync_group_size,
    staleness,
    staleness_scale,
)
from simdist.training.replica import PhantomTensor

# -- asgd --------------------------------------------------------------------------------------


def test_staleness_is_versions_applied_since_the_read():
    assert staleness(7, 7) == 0
    assert staleness(10, 3) == 7
    with pytest.raises(ValueError):
        staleness(2, 3)


@pytest.mark.parametrize("s, scale", [(0, 1.0), (1, 1.0), (2, 0.5), (4, 0.25), (10, 0.1)])
def test_staleness_scale_is_one_over_max_one_s(s, scale):
    assert staleness_scale(s) == scale


def test_asgd_learning_rate_is_eta_or_eta_over_max_one_s():
    assert asgd_learning_rate(0.1, 5, staleness_aware=False) == 0.1
    assert asgd_learning_rate(0.1, 0, staleness_aware=True) == 0.1
    assert asgd_learning_rate(0.1, 4, staleness_aware=True) == pytest.approx(0.025)


# -- n-softsync --------------------------------------------------------------------------------


@pytest.mark.parametrize("n_workers, n, c", [(30, 1, 30), (30, 2, 15), (30, 15, 2), (30, 30, 1), (8, 3, 2), (5, 5, 1)])
def test_group_size_is_floor_n_workers_over_n(n_workers, n, c):
    assert softsync_group_size(n_workers, n) == c


@pytest.mark.parametrize("n", [0, 9, -1])
def test_group_size_rejects_n_outside_one_to_n_workers(n):
    with pytest.raises(ValueError):
        softsync_group_size(8, n)


def test_softsync_average_is_the_mean_of_the_gradients():
    grads = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, -2.0]), torch.tensor([5.0, 6.0])]
    torch.testing.assert_close(softsync_average(grads, [0, 3, 1], staleness_aware=False), torch.tensor([3.0, 2.0]))


def test_staleness_aware_softsync_divides_each_gradient_before_averaging():
    grads = [torch.tensor([4.0]), torch.tensor([4.0]), torch.tensor([4.0])]
    # (4/1 + 4/2 + 4/4) / 3, staleness 0 counts as 1
    torch.testing.assert_close(softsync_average(grads, [0, 2, 4], staleness_aware=True), torch.tensor([7.0 / 3.0]))


def test_one_unscaled_gradient_is_returned_unchanged_and_inputs_are_not_modified():
    g = torch.tensor([1.0, 2.0])
    assert softsync_average([g], [5], staleness_aware=False) is g
    h = torch.tensor([3.0, 4.0])
    softsync_average([g, h], [0, 0], staleness_aware=False)
    torch.testing.assert_close(g, torch.tensor([1.0, 2.0]))


def test_softsync_average_of_phantoms_is_a_phantom():
    out = softsync_average([PhantomTensor(10), PhantomTensor(10)], [1, 2], staleness_aware=True)
    assert isinstance(out, PhantomTensor) and out.numel() == 10


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-10, 10), min_size=1, max_size=6), st.lists(st.integers(0, 6), min_size=6, max_size=6))
def test_softsync_average_matches_the_formula(values, stalenesses):
    grads = [torch.tensor([v], dtype=torch.float64) for v in values]
    s = stalenesses[: len(values)]
    expected = sum(v / max(1, si) for v, si in zip(values, s)) / len(values)
    assert float(softsync_average(grads, s, staleness_aware=True)) == pytest.approx(expected, abs=1e-9)


# -- dbs ---------------------------------------------------------------------------------------


def test_speed_ratio_is_sum_of_reference_over_sum_of_own():
    assert dbs_speed_ratio([1.0, 1.0, 1.0], [1.5, 1.5, 1.5]) == pytest.approx(2.0 / 3.0)
    assert dbs_speed_ratio([2.0, 4.0], [1.0, 2.0]) == pytest.approx(2.0)


def test_rescale_keeps_the_batch_within_the_threshold():
    kwargs = dict(threshold=0.1, b_min=1, b_max=1000)
    assert dbs_rescale(300, 400, 1.0625, **kwargs) == 300
    assert dbs_rescale(300, 400, 0.875, threshold=0.125, b_min=1, b_max=1000) == 300  # |1 - S| = A is not > A
    assert dbs_rescale(300, 400, 0.95, **kwargs) == 300


def test_rescale_scales_the_current_or_the_base_batch():
    kwargs = dict(threshold=0.1, b_min=1, b_max=1000)
    assert dbs_rescale(300, 400, 2 / 3, rescale="current", **kwargs) == 200
    assert dbs_rescale(300, 400, 2 / 3, rescale="base", **kwargs) == 267  # round(266.67)
    assert dbs_rescale(300, 400, 1.5, **kwargs) == 450


def test_rescale_clamps_to_b_min_and_b_max():
    assert dbs_rescale(10, 400, 0.01, threshold=0.1, b_min=4, b_max=1000) == 4
    assert dbs_rescale(900, 400, 3.0, threshold=0.1, b_min=1, b_max=1600) == 1600


def test_per_sample_time_is_the_window_s_time_over_its_samples():
    assert dbs_per_sample_s([(1.0, 100), (3.0, 100)]) == pytest.approx(0.02)
    assert dbs_per_sample_s([(0.5, 50), (1.5, 100)]) == pytest.approx(2.0 / 150)  # not the mean of the ratios
    with pytest.raises(ValueError):
        dbs_per_sample_s([])


def test_resize_moves_to_the_target_only_beyond_the_threshold():
    kwargs = dict(threshold=0.1, b_min=1, b_max=1000)
    assert dbs_resize(100, 109.9, **kwargs) == 100  # 9.9 % away: kept
    assert dbs_resize(100, 90.0, **kwargs) == 100  # exactly A away is not beyond it
    assert dbs_resize(100, 66.7, **kwargs) == 67
    assert dbs_resize(50, 400.0, threshold=0.1, b_min=1, b_max=200) == 200
    assert dbs_resize(50, 0.2, threshold=0.1, b_min=2, b_max=200) == 2


def test_rescale_rejects_an_unknown_mode():
    with pytest.raises(ValueError):
        dbs_rescale(10, 10, 3.0, threshold=0.1, b_min=1, b_max=100, rescale="paper")


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2000), st.floats(0.05, 5.0), st.floats(0.01, 0.5), st.integers(1, 50), st.integers(0, 2000))
def test_rescale_matches_the_formula(batch, ratio, threshold, b_min, extra):
    b_max = b_min + extra
    out = dbs_rescale(batch, 400, ratio, threshold=threshold, b_min=b_min, b_max=b_max)
    if abs(1 - ratio) <= threshold:
        assert out == batch
    else:
        assert out == min(max(round(batch * ratio), b_min), b_max)
        assert b_min <= out <= b_max


def test_batch_weighting_scales_by_b_over_base():
    g = torch.tensor([2.0, -4.0])
    torch.testing.assert_close(batch_weighted(g, 200, 400), torch.tensor([1.0, -2.0]))
    assert batch_weighted(g, 400, 400) is g


# -- sharding ----------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 10_000), st.integers(1, 16))
def test_shards_are_contiguous_cover_everything_and_differ_by_at_most_one(numel, k):
    if k > numel:
        with pytest.raises(ValueError):
            shard_bounds(numel, k)
        return
    bounds = shard_bounds(numel, k)
    assert bounds[0][0] == 0 and bounds[-1][1] == numel
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [stop - start for start, stop in bounds]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
