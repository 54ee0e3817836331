"""DASO's math and schedule (simdist.algorithms.daso_math) against docs/algorithms.md §5."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from simdist.algorithms.daso_math import (Schedule, ScheduleOptions, bf16_average, cycling_start, daso_merge,
                                          initial_schedule, next_schedule, on_plateau, phase_of_epoch, plateau_test,
                                          to_bf16)
from simdist.training.replica import PhantomTensor, payload_nbytes


# -- the merge ------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), S=st.integers(0, 32), P=st.integers(2, 64), n=st.integers(1, 50))
def test_merge_is_the_formula_for_random_tensors(seed, S, P, n):
    g = torch.Generator().manual_seed(seed)
    local = torch.randn(n, generator=g)
    copies = [torch.randn(n, generator=g) for _ in range(P)]
    received = torch.stack(copies).sum(0)
    expected = (2 * S * local.double() + torch.stack(copies).double().sum(0)) / (2 * S + P)
    merged = daso_merge(local, received, S, P)
    assert merged.dtype == torch.float32
    torch.testing.assert_close(merged.double(), expected, rtol=1e-5, atol=1e-5)


def test_merge_weights_the_local_copy_2S_against_each_received_copy():
    local, others = torch.tensor([1.0]), torch.tensor([0.0])
    # S = 1, P = 2: (2·1 + (1 + 0)) / (2 + 2) = 3/4 — the own stale copy is in the sum too
    assert daso_merge(local, local + others, S=1, P=2).item() == pytest.approx(0.75)
    assert daso_merge(local, local + others, S=0, P=2).item() == pytest.approx(0.5)  # S = 0: plain average
    same = torch.randn(7)
    torch.testing.assert_close(daso_merge(same, 4 * same, S=3, P=4), same)  # a fixed point: all copies equal


def test_merge_of_phantoms_is_a_float32_phantom():
    merged = daso_merge(PhantomTensor(10), PhantomTensor(10), S=2, P=4)
    assert isinstance(merged, PhantomTensor) and merged.numel() == 10 and merged.dtype == torch.float32


def test_bf16_wire_halves_the_bytes_and_round_trips_within_bf16_precision():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    wire = to_bf16(x)
    assert wire.dtype == torch.bfloat16 and payload_nbytes(wire) * 2 == payload_nbytes(x)
    assert payload_nbytes(to_bf16(PhantomTensor(1000))) * 2 == payload_nbytes(PhantomTensor(1000))
    back = bf16_average(wire * 4, 4)  # four identical members: the average is x, up to bf16 rounding
    assert back.dtype == torch.float32
    assert torch.all((back - x).abs() <= x.abs() * 2.0**-8)
    assert not torch.equal(back, x)  # it really went through bf16


# -- phases and the plateau test ------------------------------------------------------------


def test_phases_warmup_cycling_cooldown():
    options = ScheduleOptions(warmup_epochs=4, cooldown_epochs=4, total_epochs=90)
    phases = [phase_of_epoch(e, options) for e in range(90)]
    assert phases[:4] == ["warmup"] * 4 and phases[86:] == ["cooldown"] * 4 and set(phases[4:86]) == {"cycling"}
    assert phase_of_epoch(50, ScheduleOptions(total_epochs=None)) == "cycling"  # unknown end: no cool-down
    short = ScheduleOptions(warmup_epochs=4, cooldown_epochs=4, total_epochs=6)
    assert [phase_of_epoch(e, short) for e in range(6)] == ["warmup"] * 4 + ["cooldown"] * 2
    assert phase_of_epoch(0, ScheduleOptions(adaptive=False)) == "fixed"


def test_plateau_means_more_than_patience_epochs_without_relative_improvement():
    best, bad = math.inf, 0
    seen = []
    for loss in [10.0, 9.0, 8.8, 8.7, 8.6, 8.0, 7.9, 7.8, 7.7, 7.6]:
        best, bad, plateau = plateau_test(best, bad, loss, stability_level=0.05, patience=2)
        seen.append((best, bad, plateau))
    # 9.0 improves on 10 by 10 %; 8.8, 8.7, 8.6 improve on 9.0 by < 5 %: the third is the plateau
    assert seen[:5] == [(10.0, 0, False), (9.0, 0, False), (9.0, 1, False), (9.0, 2, False), (9.0, 0, True)]
    # 8.0 beats 9.0 by 11 %: new best; three small steps after it are the next plateau
    assert seen[5:] == [(8.0, 0, False), (8.0, 1, False), (8.0, 2, False), (8.0, 0, True), (8.0, 1, False)]


def test_on_plateau_halves_with_S_floor_then_resets():
    assert on_plateau(8, 2, 8) == (4, 1)
    assert on_plateau(4, 1, 8) == (2, 1)  # S stays at its floor of 1
    assert on_plateau(2, 1, 8) == (1, 1)
    assert on_plateau(1, 1, 8) == (8, 2)  # reset: B = max_global_skips, S = max_global_skips // 4
    assert on_plateau(1, 1, 32) == (32, 8)
    assert on_plateau(8, 6, 32) == (4, 4)  # S − 1 = 5 would exceed B = 4: capped at B
    assert cycling_start(8) == (4, 1) and cycling_start(2) == (1, 1)


def test_schedule_state_machine_on_a_scripted_loss_sequence():
    options = ScheduleOptions(warmup_epochs=2, cooldown_epochs=2, max_global_skips=8, stability_level=0.05,
                              plateau_patience=2, total_epochs=22)
    losses = [7.0, 6.0,                      # epochs 0-1: warm-up (no plateau test)
              5.0, 4.0, 3.0,                 # 2-4: cycling from B = 8 // 2 = 4, S = 1; improving
              3.0, 3.0, 3.0,                 # 5-7: flat; the third is a plateau: B 4 -> 2, S stays 1
              2.9, 2.9, 2.9,                 # 8-10: < 5 % better than 3.0: plateau, B 2 -> 1
              2.0, 2.0, 2.0, 2.0,            # 11-14: 2.0 improves; three flat after it: B = 1 -> reset 8, S 2
              2.0, 2.0, 2.0,                 # 15-17: plateau: B 8 -> 4, S 2 -> 1
              2.0, 2.0,                      # 18-19
              1.0, 1.0]                      # 20-21: cool-down
    schedule = initial_schedule(options)
    timeline = [(schedule.phase, schedule.B, schedule.S)]
    for epoch, loss in enumerate(losses[:-1]):
        schedule = next_schedule(schedule, loss, epoch + 1, options)
        timeline.append((schedule.phase, schedule.B, schedule.S))
    assert timeline == (
        [("warmup", 1, 0)] * 2
        + [("cycling", 4, 1)] * 6       # epochs 2-7
        + [("cycling", 2, 1)] * 3       # 8-10, after epoch 7's plateau
        + [("cycling", 1, 1)] * 4       # 11-14, after epoch 10's plateau
        + [("cycling", 8, 2)] * 3       # 15-17, after epoch 14's plateau: the reset
        + [("cycling", 4, 1)] * 2       # 18-19, after epoch 17's plateau: halved again, S at its floor
        + [("cooldown", 1, 0)] * 2)
    assert Schedule("cooldown", 1, 0).blocking and not Schedule("cycling", 4, 1).blocking


def test_fixed_schedule_never_changes():
    options = ScheduleOptions(adaptive=False, fixed_B=8, fixed_S=0, total_epochs=10)
    schedule = initial_schedule(options)
    for epoch in range(1, 10):
        schedule = next_schedule(schedule, 1.0, epoch, options)
        assert (schedule.phase, schedule.B, schedule.S, schedule.blocking) == ("fixed", 8, 0, True)
