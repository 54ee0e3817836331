"""DC-S3GD's arithmetic as pure functions (docs/algorithms.md §6).

The protocol (who allreduces what, when) lives in :mod:`.dcs3gd`; the math lives here,
written from the formulas and unit-tested against them (``tests/test_dcs3gd.py``). Every
function works on real tensors and on timing-only
:class:`~simdist.training.replica.PhantomTensor` s alike (a phantom's norm is 0, so λ is 0).

With ``Δw`` the allreduced sum of the N workers' last local steps and ``Δw_i`` this
worker's own:

* distance to the average: ``D_i = Δw / N − Δw_i`` (:func:`distance_to_average`);
* compensation strength: ``λ_i = λ0 · ‖g_i‖ / ‖g_i ⊙ g_i ⊙ D_i‖``, and ``λ_i = 0`` when the
  denominator is 0 or not finite (:func:`compensation_lambda`);
* compensated gradient: ``g̃_i = g_i + λ_i · g_i ⊙ g_i ⊙ D_i`` (:func:`compensated_gradient`);
* local step: ``Δw_i = U(g̃_i)``, the optimizer's step (momentum SGD in the paper) with the
  scheduled learning rate and weight decay (:func:`local_update`);
* combined update: ``w_i ← w_i + D_i + Δw_i`` (:func:`apply_combined`); :func:`dcs3gd_update`
  does all of the above in order.

Schedule (:class:`Schedule`): the peak learning rate is ``η = N · η_1`` (``lr_scaling:
linear``; ``none`` keeps ``η_1``); a linear warm-up over ``warmup_iterations`` from
``start_fraction · η`` to ``η``, then a linear decay to ``final_fraction · η`` at
``total_iterations``; iteration-based (iteration 0 is the first local step). Weight decay
follows the same factor when ``decay_weight_decay`` is set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..training.replica import PhantomTensor

__all__ = [
    "distance_to_average",
    "compensation_lambda",
    "compensated_gradient",
    "local_update",
    "apply_combined",
    "dcs3gd_update",
    "UpdateResult",
    "Schedule",
    "schedule_factor",
    "tensor_norm",
    "overlap_fraction",
    "wait_after_compute_s",
]


def tensor_norm(t: Any) -> float:
    """The L2 norm of ``t`` as a Python float (0.0 for a phantom)."""
    value = t.norm()
    return float(value) if not isinstance(value, float) else value


def distance_to_average(total_delta: Any, own_delta: Any, n_workers: int) -> Any:
    """``D_i = Δw / N − Δw_i``: from this worker's weights to the workers' average."""
    if n_workers < 1:
        raise ValueError(f"n_workers must be at least 1, got {n_workers}")
    return total_delta / n_workers - own_delta


def compensation_lambda(grad: Any, distance: Any, lambda0: float) -> float:
    """``λ_i = λ0 · ‖g‖ / ‖g ⊙ g ⊙ D‖``, or 0 when ``λ0`` or the denominator is 0 (or not finite)."""
    if lambda0 == 0.0:
        return 0.0
    denominator = tensor_norm(grad * grad * distance)
    numerator = tensor_norm(grad)
    if denominator == 0.0 or not math.isfinite(denominator) or not math.isfinite(numerator):
        return 0.0
    return float(lambda0) * numerator / denominator


def compensated_gradient(grad: Any, distance: Any, lambda_: float) -> Any:
    """``g̃ = g + λ · g ⊙ g ⊙ D`` (``g`` itself when λ = 0)."""
    if lambda_ == 0.0:
        return grad
    return grad + lambda_ * (grad * grad * distance)


def local_update(optimizer: Any, params: Any, grad: Any, state: dict, lr: float, weight_decay: float) -> Any:
    """``U(g)``: the optimizer's step to add to ``params`` (updates its state in place).

    In timing-only runs (phantom parameters or gradient) the step is a phantom of the same size.
    """
    if isinstance(grad, PhantomTensor) or isinstance(params, PhantomTensor):
        return PhantomTensor(grad.numel(), grad.dtype)
    return optimizer.update(params, grad, state, lr=lr, weight_decay=weight_decay)


def apply_combined(params: Any, distance: Any, delta: Any) -> None:
    """``w ← w + D + Δw`` in place (nothing happens to a phantom)."""
    params.add_(distance)
    params.add_(delta)


@dataclass(frozen=True)
class UpdateResult:
    """What one DC-S3GD update did: the new local step and the figures worth recording."""

    delta: Any  # Δw_i = U(g̃_i), to allreduce next
    distance_norm: float  # ‖D_i‖
    lambda_: float  # λ_i


def dcs3gd_update(optimizer: Any, params: Any, state: dict, grad: Any, total_delta: Any, own_delta: Any,
                  n_workers: int, lambda0: float, lr: float, weight_decay: float) -> UpdateResult:
    """One DC-S3GD update after the allreduce: ``D``, ``λ``, ``g̃``, ``Δw_i = U(g̃)``, ``w += D + Δw_i``.

    ``grad`` was computed at the current ``params`` (before this update); ``own_delta`` is the
    step this worker contributed to the allreduce whose sum is ``total_delta``.
    """
    distance = distance_to_average(total_delta, own_delta, n_workers)
    lambda_ = compensation_lambda(grad, distance, lambda0)
    delta = local_update(optimizer, params, compensated_gradient(grad, distance, lambda_), state, lr, weight_decay)
    apply_combined(params, distance, delta)
    return UpdateResult(delta, tensor_norm(distance), lambda_)


def schedule_factor(iteration: int, warmup_iterations: int, total_iterations: int | None,
                    start_fraction: float, final_fraction: float) -> float:
    """The fraction of the peak learning rate at ``iteration`` (0-based).

    Linear warm-up from ``start_fraction`` at iteration 0 to 1 at ``warmup_iterations``; then,
    when ``total_iterations`` is given, linear decay from 1 at ``warmup_iterations`` to
    ``final_fraction`` at ``total_iterations`` (held there afterwards); otherwise 1.
    """
    t = max(int(iteration), 0)
    if warmup_iterations > 0 and t < warmup_iterations:
        return start_fraction + (1.0 - start_fraction) * t / warmup_iterations
    if total_iterations is None or total_iterations <= warmup_iterations:
        return 1.0
    progress = min((t - warmup_iterations) / (total_iterations - warmup_iterations), 1.0)
    return 1.0 - (1.0 - final_fraction) * progress


@dataclass(frozen=True)
class Schedule:
    """Learning rate and weight decay per iteration: linear warm-up, then linear decay."""

    peak_lr: float
    weight_decay: float
    warmup_iterations: int = 0
    total_iterations: int | None = None
    start_fraction: float = 1.0
    final_fraction: float = 0.0
    decay_weight_decay: bool = True

    @classmethod
    def build(cls, base_lr: float, weight_decay: float, n_workers: int, *, lr_scaling: str = "linear",
              warmup_iterations: int = 0, total_iterations: int | None = None,
              start_fraction: float | None = None, final_fraction: float = 0.0,
              decay_weight_decay: bool = True) -> "Schedule":
        """``η = N · η_1`` (``lr_scaling: linear``) or ``η_1`` (``none``); warm-up starts at ``1/N`` by default."""
        peak = base_lr * n_workers if lr_scaling == "linear" else base_lr
        start = (1.0 / n_workers if lr_scaling == "linear" else 1.0) if start_fraction is None else start_fraction
        return cls(peak, weight_decay, warmup_iterations, total_iterations, start, final_fraction, decay_weight_decay)

    def factor(self, iteration: int) -> float:
        return schedule_factor(iteration, self.warmup_iterations, self.total_iterations,
                               self.start_fraction, self.final_fraction)

    def lr(self, iteration: int) -> float:
        return self.peak_lr * self.factor(iteration)

    def weight_decay_at(self, iteration: int) -> float:
        return self.weight_decay * self.factor(iteration) if self.decay_weight_decay else self.weight_decay


def overlap_fraction(start_s: Any, compute_end_s: Any, allreduce_done_s: Any) -> Any:
    """Share of the allreduce hidden behind compute, both started at ``start_s``.

    ``allreduce_done_s`` is when waiting for the allreduce returned (at the earliest the end of
    compute): 1.0 when the allreduce was over by then, else compute time / allreduce time.
    Floats give a float; arrays (every member of a lockstep group) give each member's share.
    """
    start, end, done = (np.asarray(t, dtype=float) for t in (start_s, compute_end_s, allreduce_done_s))
    hidden = (done <= end) | (done <= start)
    span = np.where(hidden, 1.0, done - start)
    share = np.where(hidden, 1.0, np.maximum(end - start, 0.0) / span)
    return float(share) if share.ndim == 0 else share


def wait_after_compute_s(compute_end_s: Any, allreduce_done_s: Any) -> Any:
    """How long waiting for the allreduce lasted after compute had ended (0 when it was over)."""
    wait = np.maximum(np.asarray(allreduce_done_s, dtype=float) - np.asarray(compute_end_s, dtype=float), 0.0)
    return float(wait) if wait.ndim == 0 else wait