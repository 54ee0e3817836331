"""Scripted loss curves for timing-only runs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate
from simdist.training.loss_curve import LossCurveConfig


def test_values_hold_per_epoch_and_the_last_one_persists():
    curve = LossCurveConfig(values=[3.0, 2.0, 1.5])
    assert [curve.loss(e) for e in (0, 0.9, 1, 2, 7)] == [3.0, 3.0, 2.0, 1.5, 1.5]


def test_laws_follow_their_formulas():
    exp = LossCurveConfig(law="exponential", start=5.0, end=1.0, scale=2.0)
    assert exp.loss(0) == pytest.approx(5.0) and exp.loss(2) == pytest.approx(1.0 + 4.0 * math.exp(-1))
    power = LossCurveConfig(law="power", start=5.0, end=1.0, scale=1.0, exponent=2.0)
    assert power.loss(1) == pytest.approx(1.0 + 4.0 / 4.0)
    step = LossCurveConfig(law="step", start=4.0, end=2.0, scale=3.0)
    assert (step.loss(2.9), step.loss(3.0)) == (4.0, 2.0)


def test_exactly_one_of_values_or_law():
    with pytest.raises(ValidationError, match="either values"):
        LossCurveConfig()
    with pytest.raises(ValidationError, match="either values"):
        LossCurveConfig(values=[1.0], law="power")


def test_timing_only_run_reports_the_scripted_loss():
    profile = str(Path(__file__).parent / "data" / "tiny_profile.yaml")
    result = simulate(scenario_from_dict({
        "platform": {"preset": "laptop-cpu", "node": {"devices": 2}},
        "workload": {"model": "mlp", "dataset": "digits", "batch_size": 256, "timing_only": True,
                     "loss_curve": {"values": [2.5, 1.25]}},
        "algorithm": "sync", "stop": {"epochs": 2}, "compute": {"profiles": [profile]}}))
    losses = [row["loss"] for row in result.recorder.updates]
    assert losses[0] == 2.5 and losses[-1] == 1.25 and set(losses) == {2.5, 1.25}
