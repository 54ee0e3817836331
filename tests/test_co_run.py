"""Ranks that share a host slow each other: node.co_run, measured by calibrate cpu-share."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from simdist.calibrate.cpu_share import co_run_overlay
from simdist.platform.compute import ComputeModel, ModelTiming, co_run_factors
from simdist.platform.spec import CoRunSpec

from conftest import build_platform

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


def test_more_ranks_than_cores_pay_the_oversubscribed_factor_on_top_of_sharing():
    model = _model(devices=3, cores=2, co_run=CO_RUN)
    assert model.work_core_s(2, 10) == pytest.approx((T0 + 10 * T1) * 1.3)


def test_a_rank_alone_and_a_pinned_set_of_one_pay_nothing():
    assert co_run_factors(build_platform("laptop-cpu", node={"devices": 1, "co_run": CO_RUN})) is None
    pinned = build_platform("laptop-cpu", node={"devices": 3, "co_run": CO_RUN,
                                                 "core_sets": [{"cores": 1, "devices": [0]},
                                                               {"cores": 1, "devices": [1, 2]}]})
    assert list(co_run_factors(pinned)) == [1.0, 1.3, 1.3]


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
