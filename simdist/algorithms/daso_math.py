"""DASO's math and schedule as pure functions (docs/algorithms.md §5); the protocol is in :mod:`.daso`.

* :func:`daso_merge` — the receive rule of a non-blocking global sync,
  x ← (2S·x_local + Σ_{i=1..P} x_i) / (2S + P), where the sum holds all P group members'
  copies sent S batches earlier (this GPU's own stale copy included).
* :func:`local_average` — the node-local gradient average, Σ_{i=1..G} g_i / G in float32.
* :func:`to_bf16` / :func:`bf16_average` — the blocking global sync's wire format: parameters
  cast to bfloat16 for the transfer (half the bytes), the sum cast back to float32 and
  divided by P.
* The schedule state machine: :func:`initial_schedule` for epoch 0 and :func:`next_schedule`
  at the end of every epoch, from the epoch's training loss averaged over all workers.
  Phases: ``warmup`` (the first ``warmup_epochs``: blocking global sync every batch),
  ``cycling`` (B and S steered by the plateau test), ``cooldown`` (the last
  ``cooldown_epochs``: blocking every batch); ``schedule: fixed`` is the single phase
  ``fixed`` with constant B and S. S = 0 always means a blocking sync every B batches.
* :func:`plateau_test` — the epoch loss has plateaued when it has not improved on the best
  loss seen by more than ``stability_level`` (relative) for more than ``plateau_patience``
  consecutive epochs (with the default 2: three). The test and its rules follow the
  reference implementation in Heat (``heat.optim.DASO.epoch_loss_logic`` with
  ``heat.optim.utils.DetectMetricPlateau``, a ReduceLROnPlateau-style detector in relative
  threshold mode): improvement is measured against the best loss so far, and the count of
  bad epochs restarts after each plateau.
* :func:`on_plateau` — B > 1: B ← B // 2, S ← max(1, S − 1); B = 1: reset
  B ← max_global_skips, S ← max_global_skips // 4.

**choices** (docs/algorithms.md §5 lists them):

* the plateau detector sees cycling epochs only and starts afresh when cycling starts (B and
  S exist only in cycling; warm-up losses fall fast and would only set a best that cycling
  must then beat);
* after halving, S is also capped at B (0 ≤ S ≤ B, as for fixed schedules): the rules alone
  give S > B for max_global_skips ≥ 24, e.g. 32 → (B, S) = (16, 7), (8, 6), (4, 5);
* the reset takes S = max_global_skips // 4 literally, so max_global_skips < 4 resets to
  S = 0, a blocking sync every B batches;
* without a known number of epochs (a run stopped by steps or time) there is no cool-down.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from .tensors import cast

__all__ = ["daso_merge", "local_average", "to_bf16", "bf16_average", "ScheduleOptions", "Schedule", "phase_of_epoch",
           "plateau_test", "on_plateau", "cycling_start", "initial_schedule", "next_schedule", "PHASES"]

PHASES = ("warmup", "cycling", "cooldown", "fixed")


def daso_merge(local: Any, received_sum: Any, S: int, P: int) -> Any:
    """x ← (2S·x_local + Σ x_i) / (2S + P), in float32 (phantoms stay phantoms).

    ``received_sum`` is the allreduce(sum) of the P members' copies sent S batches ago; with
    S = 0 this is the plain average Σ x_i / P.
    """
    weight = 2 * int(S)
    total = cast(received_sum, torch.float32)
    if weight == 0:
        return total / P
    return (cast(local, torch.float32) * weight + total) / (weight + P)


def local_average(received_sum: Any, G: int) -> Any:
    """The node-local allreduce's sum of the G GPUs' gradients as their float32 average."""
    return cast(received_sum, torch.float32) / G


def to_bf16(params: Any) -> Any:
    """The parameters as sent by a blocking global sync: bfloat16, half the bytes of float32."""
    return cast(params, torch.bfloat16)


def bf16_average(received_sum: Any, P: int) -> Any:
    """The blocking sync's result: the bfloat16 sum cast back to float32, divided by P."""
    return cast(received_sum, torch.float32) / P


@dataclass(frozen=True)
class ScheduleOptions:
    """What the schedule state machine needs from the config and the run."""

    adaptive: bool = True
    warmup_epochs: int = 4
    cooldown_epochs: int = 4
    max_global_skips: int = 8
    stability_level: float = 0.05
    plateau_patience: int = 2
    total_epochs: int | None = None  # None: no cool-down (the run ends by steps or time)
    fixed_B: int = 4
    fixed_S: int = 1


@dataclass(frozen=True)
class Schedule:
    """The global-sync schedule of one epoch, plus the plateau detector's state.

    ``B``: batches between global syncs; ``S``: batches a non-blocking sync waits before its
    merge (0 = blocking). ``best_loss`` / ``bad_epochs``: the plateau detector.
    """

    phase: str
    B: int
    S: int
    best_loss: float = math.inf
    bad_epochs: int = 0

    @property
    def blocking(self) -> bool:
        return self.S == 0


def phase_of_epoch(epoch: int, options: ScheduleOptions) -> str:
    """``warmup``, ``cycling`` or ``cooldown`` for 0-based ``epoch`` (``fixed`` when not adaptive).

    Warm-up wins where it overlaps the cool-down (a run shorter than both).
    """
    if not options.adaptive:
        return "fixed"
    if epoch < options.warmup_epochs:
        return "warmup"
    total = options.total_epochs
    if total is not None and epoch >= total - options.cooldown_epochs:
        return "cooldown"
    return "cycling"


def plateau_test(best: float, bad_epochs: int, loss: float, stability_level: float,
                 patience: int) -> tuple[float, int, bool]:
    """(new best, new bad-epoch count, plateau?) after an epoch with training loss ``loss``.

    An epoch improves when ``loss < best − stability_level·|best|``; it then becomes the
    best and the count restarts. Otherwise the count grows; more than ``patience`` bad epochs
    in a row is a plateau, after which the count restarts.
    """
    if math.isinf(best) or loss < best - stability_level * abs(best):
        return loss, 0, False
    bad_epochs += 1
    if bad_epochs > patience:
        return best, 0, True
    return best, bad_epochs, False


def on_plateau(B: int, S: int, max_global_skips: int) -> tuple[int, int]:
    """(B, S) after a plateau: halve B (S − 1, at least 1, at most B), or reset once B = 1."""
    if B > 1:
        B = B // 2
        return B, min(max(1, S - 1), B)
    return max_global_skips, max_global_skips // 4


def cycling_start(max_global_skips: int) -> tuple[int, int]:
    """(B, S) when cycling starts: B = max_global_skips // 2 (at least 1), S = 1."""
    return max(1, max_global_skips // 2), 1


def _for_phase(phase: str, options: ScheduleOptions) -> Schedule:
    if phase == "fixed":
        return Schedule("fixed", options.fixed_B, options.fixed_S)
    if phase == "cycling":
        return Schedule("cycling", *cycling_start(options.max_global_skips))
    return Schedule(phase, 1, 0)  # warm-up and cool-down: blocking global sync every batch


def initial_schedule(options: ScheduleOptions) -> Schedule:
    """The schedule of epoch 0."""
    return _for_phase(phase_of_epoch(0, options), options)


def next_schedule(current: Schedule, epoch_loss: float | None, next_epoch: int,
                  options: ScheduleOptions) -> Schedule:
    """The schedule of ``next_epoch``, given the one just ended and its averaged training loss.

    A phase change starts the new phase's schedule; inside cycling, the loss goes through
    the plateau test and a plateau changes (B, S) by :func:`on_plateau`.
    """
    phase = phase_of_epoch(next_epoch, options)
    if phase != current.phase:
        return _for_phase(phase, options)
    if phase != "cycling" or epoch_loss is None:
        return current
    best, bad, plateau = plateau_test(current.best_loss, current.bad_epochs, float(epoch_loss),
                                      options.stability_level, options.plateau_patience)
    B, S = on_plateau(current.B, current.S, options.max_global_skips) if plateau else (current.B, current.S)
    return replace(current, B=B, S=S, best_loss=best, bad_epochs=bad)
