"""A worker's (or server's) copy of the model, and its stand-in for timing-only runs.

:class:`Replica` is one flat float32 parameter vector plus its optimizer state; algorithms
move whole vectors (or slices of them, per :class:`~simdist.training.models.LayerInfo`).

Timing-only mode runs the same algorithm code without tensors: a :class:`PhantomReplica`
holds a :class:`~simdist.runtime.phantom.PhantomTensor` (a size and a dtype, no values) and
accepts every call and does nothing.

What a message payload weighs and what a send copies are the runtime's rules
(:mod:`simdist.runtime.payloads`); the names are still importable from here. A replica
whose weights are sent without a copy (``rt.send(..., handover=True)``) updates them with
:meth:`Replica.apply_gradient_fresh`, which leaves the tensor it replaces untouched.
"""

from __future__ import annotations

import torch

from ..runtime.payloads import Deferred, payload_nbytes, resolved, sent_copy, snapshot
from ..runtime.phantom import PhantomTensor
from .optim import Optimizer

__all__ = ["Replica", "PhantomTensor", "PhantomReplica", "Deferred", "resolved", "payload_nbytes", "snapshot",
           "sent_copy"]


class Replica:
    """A flat float32 parameter vector and the optimizer state that goes with it."""

    def __init__(self, params: torch.Tensor, optimizer: Optimizer):
        self.params = params
        self.optimizer = optimizer
        self.opt_state = optimizer.init_state(params)

    @property
    def numel(self) -> int:
        return self.params.numel()

    @property
    def nbytes(self) -> int:
        """Bytes of the parameter vector (optimizer state not included)."""
        return self.params.numel() * self.params.element_size()

    def apply_gradient(self, grad: torch.Tensor, lr: float | None = None) -> None:
        """One optimizer step on ``params`` in place."""
        self.optimizer.step(self.params, grad, self.opt_state, lr=lr)

    def apply_gradient_fresh(self, grad: torch.Tensor, lr: float | None = None) -> None:
        """One optimizer step into a new tensor that becomes ``params`` (same values as
        :meth:`apply_gradient`). The tensor replaced is never written again, so whoever was
        handed it (a message sent with ``handover=True``) keeps valid weights without a copy."""
        self.params = self.optimizer.stepped(self.params, grad, self.opt_state, lr=lr)

    def load(self, params: torch.Tensor) -> None:
        """Copy ``params``' values in (optimizer state is kept)."""
        self.params.copy_(params)

    def adopt(self, params: torch.Tensor) -> None:
        """Use ``params`` itself as the parameters, without a copy: for weights that nobody
        writes to any more (received from a send with ``handover=True``) and that this replica only reads."""
        self.params = params

    def clone_params(self) -> torch.Tensor:
        return self.params.clone()


class PhantomReplica:
    """Same interface as :class:`Replica`; holds a phantom and its steps do nothing."""

    def __init__(self, numel: int, optimizer: Optimizer, dtype: torch.dtype = torch.float32):
        self.params = PhantomTensor(numel, dtype)
        self.optimizer = optimizer
        self.opt_state: dict = {}

    @property
    def numel(self) -> int:
        return self.params.numel()

    @property
    def nbytes(self) -> int:
        return self.params.nbytes

    def apply_gradient(self, grad: object, lr: float | None = None) -> None:
        """Nothing to compute in timing-only mode."""

    apply_gradient_fresh = apply_gradient

    def load(self, params: object) -> None:
        """Nothing to copy in timing-only mode."""

    adopt = load

    def clone_params(self) -> PhantomTensor:
        return self.params.clone()
