"""Results over seeds: hand-computed means and t intervals, never-reached counting, column roles,
telling two samples apart, and speedup against one common baseline."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from simdist.aggregate import (Estimate, aggregate, column_roles, compare_samples, estimate, ratio_estimate,
                               t_quantile)
from simdist.errors import InputError
from simdist.speedup import resolve_baselines, speedup_table


def test_t_quantiles_are_the_tables_and_tend_to_the_normal_limit():
    assert t_quantile(1) == 12.7062 and t_quantile(2) == 4.3027 and t_quantile(10) == 2.2281
    assert t_quantile(30) == 2.0423
    assert t_quantile(40) == pytest.approx(2.0211, abs=1e-4)   # the table's 40 and 120 rows
    assert t_quantile(120) == pytest.approx(1.9799, abs=1e-4)
    assert t_quantile(10**6) == pytest.approx(1.95996, abs=1e-5)
    assert all(t_quantile(d) > t_quantile(d + 1) for d in range(1, 200))
    assert math.isnan(t_quantile(0))


def test_t_quantiles_agree_with_scipy_where_it_is_installed():
    stats = pytest.importorskip("scipy.stats")
    for df in range(1, 300):
        assert t_quantile(df) == pytest.approx(stats.t.ppf(0.975, df), abs=6e-5)


def test_estimate_by_hand():
    est = estimate([1.0, 2.0, 3.0, 4.0, float("nan")])
    std = math.sqrt(5 / 3)  # sum of squared deviations 5, over n - 1 = 3
    assert (est.n, est.mean, est.std) == (4, 2.5, pytest.approx(std))
    assert est.half_width == pytest.approx(3.1824 * std / 2)
    assert est.contains(0.5) and not est.contains(4.6)
    one = estimate([7.0])
    assert (one.n, one.mean) == (1, 7.0) and math.isnan(one.half_width) and not one.contains(7.0)
    assert estimate([]).n == 0 and math.isnan(estimate([]).mean)


def test_ratio_of_means_has_a_delta_method_interval():
    num, den = estimate([10.0, 14.0]), estimate([4.0, 6.0])  # means 12 and 5, std √8 and √2
    ratio = ratio_estimate(num, den)
    se = math.sqrt(8 / 2 + 2.4**2 * 2 / 2) / 5
    assert ratio.mean == pytest.approx(2.4) and ratio.std == pytest.approx(se)
    assert ratio.half_width == pytest.approx(12.7062 * se)  # min(n) - 1 = 1 degree of freedom
    assert math.isnan(ratio_estimate(estimate([3.0]), den).half_width)


SWEEP = pd.DataFrame({
    "point": [f"p{i}" for i in range(8)], "key": [f"k{i}" for i in range(8)],
    "algorithm.name": ["sync"] * 4 + ["asgd"] * 4,
    "workers": [1, 1, 2, 2] * 2, "workload.batch_size": [64, 64, 32, 32] * 2, "seed": [0, 1] * 4,
    "algorithm": ["sync"] * 4 + ["asgd"] * 4,
    "throughput_samples_per_s": [10.0, 12.0, 18.0, 20.0, 9.0, 11.0, 19.0, 23.0],
    "time_to_accuracy_s": [5.0, 6.0, 3.0, None, None, None, 2.0, 2.5],
    "final_test_accuracy": [0.8, 0.9, 0.85, 0.7, 0.5, 0.6, 0.9, 0.92],
    "target_accuracy": [0.9] * 8,
})


def test_aggregate_means_intervals_and_never_reached_by_hand():
    summary = aggregate(SWEEP).set_index(["algorithm", "workers"])
    assert list(summary["n"]) == [2, 2, 2, 2]
    sync1 = summary.loc[("sync", 1)]
    assert sync1["throughput_samples_per_s"] == 11.0
    assert sync1["throughput_samples_per_s_std"] == pytest.approx(math.sqrt(2))
    assert sync1["throughput_samples_per_s_ci95"] == pytest.approx(12.7062 * math.sqrt(2) / math.sqrt(2))
    assert sync1["time_to_accuracy_s"] == 5.5 and sync1["reached"] == 2
    sync2 = summary.loc[("sync", 2)]  # one seed reached: its time alone, the other seed counted, not averaged
    assert sync2["reached"] == 1 and sync2["time_to_accuracy_s"] == 3.0
    assert math.isnan(sync2["time_to_accuracy_s_ci95"])
    asgd1 = summary.loc[("asgd", 1)]
    assert asgd1["reached"] == 0 and math.isnan(asgd1["time_to_accuracy_s"])
    assert summary.loc[("asgd", 2), "final_test_accuracy"] == pytest.approx(0.91)
    assert summary.loc[("asgd", 2), "target_accuracy"] == 0.9


def test_column_roles_seed_series_tied_and_condition():
    table = pd.DataFrame({"algorithm": ["nsoftsync"] * 4, "algorithm.n": [2, 4, 2, 4], "workers": [2, 2, 4, 4],
                          "workload.batch_size": [64, 64, 32, 32], "workload.optimizer.lr": [0.1, 0.1, 0.1, 0.2],
                          "seed": [0, 0, 0, 0], "throughput_samples_per_s": [1.0, 2.0, 3.0, 4.0]})
    roles = column_roles(table)
    assert roles.seeds == ("seed",) and roles.series == ("algorithm.n",)
    assert roles.tied == ("workload.batch_size",) and roles.conditions == ("workload.optimizer.lr",)
    labels = set(aggregate(table)["series"])
    assert labels == {"nsoftsync (algorithm.n=2)", "nsoftsync (algorithm.n=4)"}


def _seeds(*values: float) -> pd.Series:
    return pd.Series(values, index=[str(i) for i in range(len(values))])


def test_compare_samples_paired_unpaired_identical_and_one_seed():
    assert compare_samples(_seeds(1.0, 2.0, 3.0), _seeds(1.1, 2.2, 2.9)).verdict == "overlap"
    told = compare_samples(_seeds(1.0, 2.0, 3.0), _seeds(1.5, 2.6, 3.4))  # a always ~0.5 lower
    assert told.verdict == "lower" and told.paired and told.difference.mean == pytest.approx(-0.5)
    assert compare_samples(_seeds(1.5, 2.6, 3.4), _seeds(1.0, 2.0, 3.0)).verdict == "higher"
    assert compare_samples(_seeds(1.0, 2.0), _seeds(1.0, 2.0)).verdict == "identical"
    assert compare_samples(_seeds(1.0), _seeds(2.0)).verdict == "unknown"
    other = pd.Series([5.0, 5.1], index=["7", "8"])  # other seeds: each side's interval, overlapping or not
    assert compare_samples(_seeds(1.0, 1.1), other).verdict == "lower"
    assert not compare_samples(_seeds(1.0, 9.0), other).paired
    assert compare_samples(_seeds(1.0, 9.0), other).verdict == "overlap"


def test_speedup_against_the_common_single_worker_sync_baseline_paired_by_seed():
    speed = speedup_table(SWEEP).set_index(["algorithm", "workers"])
    assert set(speed["baseline"]) == {"sync@1"} and speed["paired"].all()
    ratios = np.array([18 / 10, 20 / 12])  # per seed, against the same seed's baseline
    assert speed.loc[("sync", 2), "speedup"] == pytest.approx(ratios.mean())
    assert speed.loc[("sync", 2), "speedup_ci95"] == pytest.approx(12.7062 * ratios.std(ddof=1) / math.sqrt(2))
    assert speed.loc[("sync", 2), "efficiency"] == pytest.approx(ratios.mean() / 2)
    assert speed.loc[("sync", 1), "speedup"] == 1.0 and speed.loc[("sync", 1), "speedup_ci95"] == 0.0
    assert speed.loc[("asgd", 1), "speedup"] == pytest.approx((9 / 10 + 11 / 12) / 2)  # not 1: not its own


def test_speedup_without_shared_seeds_is_a_ratio_of_means():
    table = SWEEP.assign(seed=[0, 1, 0, 1, 5, 6, 5, 6])
    speed = speedup_table(table).set_index(["algorithm", "workers"])
    expected = ratio_estimate(estimate([19.0, 23.0]), estimate([10.0, 12.0]))
    assert not speed.loc[("asgd", 2), "paired"]
    assert speed.loc[("asgd", 2), "speedup"] == pytest.approx(expected.mean)
    assert speed.loc[("asgd", 2), "speedup_ci95"] == pytest.approx(expected.half_width)


def test_baseline_is_selectable_and_efficiency_counts_from_its_workers():
    speed = speedup_table(SWEEP, "asgd@2").set_index(["algorithm", "workers"])
    assert set(speed["baseline"]) == {"asgd@2"}
    assert speed.loc[("sync", 1), "speedup"] == pytest.approx((10 / 19 + 12 / 23) / 2)
    assert speed.loc[("sync", 1), "efficiency"] == pytest.approx(2 * (10 / 19 + 12 / 23) / 2)
    assert resolve_baselines(SWEEP, "asgd")[""].label == "asgd@1"  # no @: its fewest workers


@pytest.mark.parametrize(("spec", "message"), [("daso@4", "is not a point of this sweep; name one of: sync@1, "
                                                          "sync@2, asgd@1, asgd@2"),
                                               ("sync@8", "is not a point"), ("sync@0", "ALGORITHM@WORKERS"),
                                               ("@1", "ALGORITHM@WORKERS")])
def test_an_absent_or_malformed_baseline_is_an_input_error_naming_the_option(spec, message):
    with pytest.raises(InputError, match=message) as caught:
        speedup_table(SWEEP, spec)
    assert caught.value.source == "--baseline" and "\n" not in str(caught.value)


def test_without_a_single_worker_sync_point_the_default_falls_back_and_says_why():
    no_sync = SWEEP[SWEEP["algorithm"] == "asgd"]
    chosen = resolve_baselines(no_sync)[""]
    assert chosen.label == "asgd@1" and chosen.fallback == "the sweep has no single-worker sync point"
    two_workers = SWEEP[SWEEP["workers"] == 2]
    assert resolve_baselines(two_workers)[""].label == "sync@2"
    assert resolve_baselines(SWEEP)[""].fallback == ""


def test_estimate_interval_endpoints():
    est = Estimate(3, 10.0, 1.0, 2.0)
    assert (est.low, est.high) == (8.0, 12.0) and est.overlaps(Estimate(3, 13.0, 1.0, 1.5))
    assert not est.overlaps(Estimate(3, 15.0, 1.0, 2.0))


def test_points_without_a_seed_value_form_their_own_group_and_are_not_paired():
    # a sweep's listed points do not get the grid's seed axis: their seed cell is empty
    listed = pd.DataFrame({"algorithm": ["daso"], "workers": [4], "seed": [None],
                           "throughput_samples_per_s": [40.0], "time_to_accuracy_s": [1.0]})
    table = pd.concat([SWEEP, listed], ignore_index=True)
    summary = aggregate(table).set_index(["algorithm", "workers"])
    assert summary.loc[("daso", 4), "n"] == 1 and summary.loc[("daso", 4), "reached"] == 1
    speed = speedup_table(table).set_index(["algorithm", "workers"])
    assert not speed.loc[("daso", 4), "paired"]
    assert speed.loc[("daso", 4), "speedup"] == pytest.approx(40.0 / 11.0)
    assert math.isnan(speed.loc[("daso", 4), "speedup_ci95"])
