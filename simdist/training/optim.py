"""Optimizers on flat parameter vectors, as functions of tensors.

Distributed algorithms need the optimizer's step as a value, not only as a side effect:
DC-S3GD sends and corrects the update ``U(g)``, parameter servers apply a worker's update
to their own copy, local-SGD methods average steps. So an :class:`Optimizer` here computes
the step ``delta`` to *add* to the parameters (``update``) and updates its state (momentum
buffers) in place; ``step`` is ``params += update(...)`` and ``stepped`` is
``params + update(...)`` as a new tensor (same values; the old one is left as it was).

The arithmetic follows ``torch.optim.SGD`` (momentum with dampening 0, Nesterov, L2 weight
decay added to the gradient) and ``torch.optim.Adam`` (L2 weight decay, no AMSGrad) exactly,
so a flat-vector replica trains like a module under ``torch.optim`` (tested).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, Protocol

import torch
from pydantic import BaseModel, Field, model_validator

from ..config import FROM_LIST, USER_CONFIG

__all__ = ["OptimizerConfig", "Optimizer", "SGD", "Adam", "make_optimizer"]


MAX_LR = 1e6
"""Above this a step is no longer a step: float32 parameters overflow within an update or two, and
a rate near float32's range (3.4e38) cannot even be passed to the update kernels."""


class OptimizerConfig(BaseModel):
    """Which optimizer each replica runs, and its hyper-parameters."""

    model_config = USER_CONFIG

    name: Literal["sgd", "adam"] = Field(
        "sgd", description="'sgd' (torch.optim.SGD) or 'adam' (torch.optim.Adam). Default 'sgd'."
    )
    lr: float = Field(0.1, gt=0.0, le=MAX_LR, description="Learning rate (step size per update), in (0, 1e6]. Default 0.1.")
    momentum: float = Field(
        0.0, ge=0.0, lt=1.0, description="SGD momentum factor in [0, 1); dampening is 0. Default 0.0."
    )
    weight_decay: float = Field(
        0.0, ge=0.0, description="L2 penalty added to the gradient as wd * params, >= 0. Default 0.0."
    )
    nesterov: bool = Field(False, description="SGD Nesterov momentum (needs momentum > 0). Default false.")
    betas: Annotated[tuple[float, float], FROM_LIST] = Field(
        (0.9, 0.999),
        description="Adam decay rates of the first and second moment, each in [0, 1). Default (0.9, 0.999).",
    )
    eps: float = Field(1e-8, gt=0.0, description="Adam term added to the denominator for stability, > 0. Default 1e-8.")

    @model_validator(mode="after")
    def _consistent(self) -> "OptimizerConfig":
        if self.nesterov and self.momentum <= 0.0:
            raise ValueError("nesterov momentum needs momentum > 0")
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must each be in [0, 1), got {list(self.betas)}")
        return self


class Optimizer(Protocol):
    """An update rule on flat tensors; its state is a dict the caller keeps."""

    config: OptimizerConfig

    def init_state(self, params: torch.Tensor) -> dict: ...

    def update(self, params: torch.Tensor, grad: torch.Tensor, state: dict,
               lr: float | None = None, weight_decay: float | None = None) -> torch.Tensor: ...

    def step(self, params: torch.Tensor, grad: torch.Tensor, state: dict, lr: float | None = None) -> None: ...

    def stepped(self, params: torch.Tensor, grad: torch.Tensor, state: dict,
                lr: float | None = None) -> torch.Tensor: ...


class _Base:
    def __init__(self, config: OptimizerConfig):
        self.config = config

    def step(self, params: torch.Tensor, grad: torch.Tensor, state: dict, lr: float | None = None) -> None:
        """Apply one update to ``params`` in place."""
        params.add_(self.update(params, grad, state, lr=lr))

    def stepped(self, params: torch.Tensor, grad: torch.Tensor, state: dict, lr: float | None = None) -> torch.Tensor:
        """The parameters after one update, as a new tensor; ``params`` is not written."""
        return params.add(self.update(params, grad, state, lr=lr))

    def _decayed(self, params: torch.Tensor, grad: torch.Tensor, weight_decay: float | None) -> torch.Tensor:
        wd = self.config.weight_decay if weight_decay is None else weight_decay
        return grad.add(params, alpha=wd) if wd != 0.0 else grad


class SGD(_Base):
    """SGD with optional momentum / Nesterov / weight decay, as ``torch.optim.SGD`` (dampening 0)."""

    def init_state(self, params: torch.Tensor) -> dict:
        """A zero momentum buffer (equivalent to torch's lazy first-step copy when dampening is 0)."""
        return {"step": 0, "momentum_buffer": torch.zeros_like(params)} if self.config.momentum else {"step": 0}

    def update(self, params, grad, state, lr=None, weight_decay=None):
        """The step ``-lr * d`` where ``d`` is the (momentum) direction; updates the buffer in place."""
        direction, lr = self._direction(params, grad, state, lr, weight_decay)
        return direction.mul(-lr)

    def step(self, params, grad, state, lr=None):
        """``params -= lr * d`` in place, as ``torch.optim.SGD`` writes it (one fused operation)."""
        direction, lr = self._direction(params, grad, state, lr, None)
        params.add_(direction, alpha=-lr)

    def stepped(self, params, grad, state, lr=None):
        """``params - lr * d`` as a new tensor, rounded as :meth:`step` rounds it."""
        direction, lr = self._direction(params, grad, state, lr, None)
        return params.add(direction, alpha=-lr)

    def _direction(self, params, grad, state, lr, weight_decay) -> tuple[torch.Tensor, float]:
        """(the (momentum) direction ``d``, the learning rate); updates the buffer in place."""
        lr = self.config.lr if lr is None else lr
        direction = self._decayed(params, grad, weight_decay)
        momentum = self.config.momentum
        if momentum:
            buf = state["momentum_buffer"]
            buf.mul_(momentum).add_(direction)
            direction = direction.add(buf, alpha=momentum) if self.config.nesterov else buf
        state["step"] += 1
        return direction, lr


class Adam(_Base):
    """Adam with L2 weight decay, as ``torch.optim.Adam`` (amsgrad off)."""

    def init_state(self, params: torch.Tensor) -> dict:
        return {"step": 0, "exp_avg": torch.zeros_like(params), "exp_avg_sq": torch.zeros_like(params)}

    def update(self, params, grad, state, lr=None, weight_decay=None):
        """The bias-corrected Adam step; updates the moment estimates in place."""
        lr = self.config.lr if lr is None else lr
        beta1, beta2 = self.config.betas
        grad = self._decayed(params, grad, weight_decay)
        state["step"] += 1
        step = state["step"]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step_size = lr / (1 - beta1**step)
        denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(self.config.eps)
        return exp_avg.div(denom).mul_(-step_size)


def make_optimizer(config: OptimizerConfig) -> Optimizer:
    """The optimizer ``config.name`` names."""
    return {"sgd": SGD, "adam": Adam}[config.name](config)
