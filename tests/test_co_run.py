"""Ranks that share a host slow each other: node.co_run, measured by calibrate cpu-share."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from simdist.calibrate.cpu_share import co_run_overlay
from simdist.platform.compute import ComputeModel, ModelTiming, co_run_factors
from simdist.platform.spec import CoRunSpec

from conftest import build_platform, busy_spans

T0, T1 = 1e-3, 1e-4
CO_RUN = {"undersubscribed_factor": 1.1, "oversubscribed_factor": 1.3, "source": "hand-made"}


def _model(**node) -> ComputeModel:
    platform = build_platform("laptop-cpu", node=node)
    timings = {("host-cpu", "m"): ModelTiming(T0, T1, None, "test")}
    return ComputeModel(platform, timings, model="m", forward_flops_per_sample=1.0, parameter_layers=1, seed=0)


def test_two_ranks_on_their_own_cores_pay_the_undersubscribed_factor():
    model = _model(devices=2, co_run=CO_RUN)
    assert model.duration_s(0, 10) == pytest.approx((T0 + 10 * T1) * 1.1)
    assert list(model.durations_s([0, 1], 10)) == pytest.approx([(T0 + 10 * T1) * 1.1] * 2)
    assert model.forward_s(1, 30) == pytest.approx((T0 + 30 * T1) * 1.1 / 3)


def test_ranks_sharing_core_pools_get_no_constant_factor_the_simulator_applies_it_while_they_co_run():
    model = _model(devices=3, cores=2, co_run=CO_RUN)
    assert model.work_core_s(2, 10) == pytest.approx(T0 + 10 * T1)
    pinned = build_platform("laptop-cpu", node={"devices": 3, "co_run": CO_RUN,
                                                 "core_sets": [{"cores": 1, "devices": [0]},
                                                               {"cores": 1, "devices": [1, 2]}]})
    assert co_run_factors(pinned) is None


def test_a_rank_alone_pays_nothing():
    assert co_run_factors(build_platform("laptop-cpu", node={"devices": 1, "co_run": CO_RUN})) is None


def _pool_run(starts: dict[int, float], work_s: dict[int, float]) -> dict[int, tuple[float, float]]:
    """Ranks 1 and 2 share one core (a core set), rank 0 has its own; each rank starts its busy work
    at ``starts`` and works ``work_s``: each rank's (start, end)."""
    platform = build_platform("laptop-cpu", node={"devices": 3, "co_run": CO_RUN, "core_sets": [
        {"cores": 1, "devices": [0]}, {"cores": 1, "devices": [1, 2]}]})
    return busy_spans(platform, starts, work_s)


def test_two_ranks_on_one_core_are_slowed_only_while_both_compute():
    together = _pool_run({1: 0.0, 2: 0.0}, {1: 1.0, 2: 1.0})
    assert together[1][1] == pytest.approx(2.0 * 1.3)  # both all along: shared and slowed
    apart = _pool_run({1: 0.0, 2: 5.0}, {1: 1.0, 2: 1.0})
    assert apart[1][1] == pytest.approx(1.0) and apart[2][1] == pytest.approx(6.0)  # alone: full speed
    overlap = _pool_run({1: 0.0, 2: 0.5}, {1: 1.0, 2: 0.2})
    # rank 1 alone for 0.5 s, then both: each gets 1/2 of 1/1.3 of the core until rank 2's 0.2 s is done
    both_s = 0.2 * 2 * 1.3
    assert overlap[2][1] == pytest.approx(0.5 + both_s)
    assert overlap[1][1] == pytest.approx(0.5 + both_s + (1.0 - 0.5 - 0.2))
    lone = _pool_run({0: 0.0}, {0: 1.0})  # a rank on a core of its own is never slowed
    assert lone[0][1] == pytest.approx(1.0)


def test_without_co_run_durations_are_unchanged_to_the_bit():
    plain, slowed = _model(devices=2), _model(devices=2, co_run={**CO_RUN, "undersubscribed_factor": 1.0})
    assert plain.co_run is None and slowed.co_run is None
    assert plain.duration_s(0, 7) == slowed.duration_s(0, 7)


def test_gpu_ranks_are_not_slowed_by_their_neighbours():
    platform = build_platform("dgx-a100", node={"co_run": CO_RUN})
    assert co_run_factors(platform) is None


@pytest.mark.parametrize("fields, needle", [
    ({"undersubscribed_factor": 0.9, "source": "x"}, "greater than or equal to 1"),
    ({"undersubscribed_factor": 1.1}, "source"),
])
def test_bad_co_run_is_refused(fields, needle):
    with pytest.raises(ValidationError, match=needle):
        CoRunSpec(**fields)


def test_the_cpu_share_fit_becomes_an_overlay_and_an_unmeasured_regime_claims_nothing():
    document = {"undersubscribed_factor": 1.066, "oversubscribed_factor": math.nan, "model": "mlp",
                "batch_size": 64, "description": "host", "provenance": {"generated_by": "simdist calibrate cpu-share"}}
    overlay = co_run_overlay(document, "share.yaml")
    co_run = overlay["node"]["co_run"]
    assert (co_run["undersubscribed_factor"], co_run["oversubscribed_factor"]) == (1.066, 1.0)
    assert co_run["source"].startswith("share.yaml") and CoRunSpec(**co_run)
