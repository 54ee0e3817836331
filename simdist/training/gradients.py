"""Gradients of a model at flat parameter vectors, batched across simulated workers.

The simulator runs every worker in one Python process, so the real training math of a
step is many small forward/backward passes. :class:`GradientEvaluator` evaluates them
together where it can, with results equal to one-at-a-time evaluation within float
tolerance (tested):

* Requests at **identical parameters with equal batch sizes** (synchronous algorithms:
  every worker starts from the same weights) form a group. If every parameterised layer is
  ``nn.Linear`` or ``nn.Conv2d``, a group takes one forward pass over the concatenated
  batch; hooks keep each layer's input ``a`` and output ``z``; one ``autograd.grad`` of
  ``sum_i mean_i(loss)`` with respect to the outputs gives every sample's ``dL/dz``, and
  each request's weight gradient is a batched product (``einsum('nbo,nbi->noi')`` for
  Linear; a grouped convolution weight-gradient with the request axis moved into the
  channels for Conv2d). Other modules without buffers use ``torch.func.vmap`` of ``grad``.
* Requests at **different parameters** with equal batch sizes (asynchronous algorithms:
  every worker computes on the weights it pulled) are *stacked* when the module is an
  ``nn.Sequential`` of ``nn.Linear`` layers and exact per-sample modules (ReLU, Flatten,
  Identity): their parameter vectors become one ``(k, P)`` tensor, each Linear runs as one
  ``baddbmm`` over the k requests, one ``autograd.grad`` gives every layer's ``dL/dz`` and
  each weight gradient is the batched product above; each request's loss is reduced over
  its own rows, as a single evaluation reduces it. The batched kernels take the operand
  layouts of the single ones, but BLAS may still sum in another order for some shapes, so
  a shape is stacked only once a trial on synthetic data has shown it equal to
  one-at-a-time evaluation bit for bit. The trial is a check of the kernels BLAS picked for
  that shape, not a proof for every input: what is guaranteed (and tested) is agreement
  within float tolerance; on every run compared here the results were bit-identical. A
  trial's outcome is kept for the process (the same layers, dtype and shape give the same
  kernels). Measured here (16 workers x batch 32, ``mlp`` on digits, 1 thread, 10 requests a
  call): ~40 us a gradient stacked, ~95 us one at a time and as much with ``vmap`` of
  ``grad`` over batched parameters. The per-layer math lives in :mod:`.layer_grads`, the
  batched paths in :mod:`.batched_gradients`; this module groups requests and chooses a path.
* Other requests and modules with buffers (batch norm) are evaluated one at a time.

The evaluator takes over its module: the module's parameters become views of one flat
float32 buffer, into which each evaluation copies the requested parameter vector. Buffers
(batch-norm running statistics) stay module state shared by every replica; gradients use
batch statistics (train mode), :meth:`GradientEvaluator.evaluate` uses eval mode.

:class:`PendingGradients` (in :mod:`.pending_gradients`, re-exported here) lets independent
callers (simulated workers) queue requests and have every queued request evaluated in one
:meth:`GradientEvaluator.gradients` call the first time any result is read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from ..errors import InputError
from .batched_gradients import Batched, BatchedGradients
from .layer_grads import FastLayer, fast_layers, plan_signature, stack_plan
from .models import ModelInfo
from .pending_gradients import GradientHandle, PendingGradients  # re-exported: the public path of both

__all__ = ["GradientEvaluator", "PendingGradients", "GradientHandle"]

_NUMPY_DTYPES = frozenset({torch.float32, torch.float64, torch.float16})  # dtypes .numpy() reads as they are

Request = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
Result = tuple[torch.Tensor, float]

_LOSSES: dict[str, Callable[..., torch.Tensor]] = {"cross_entropy": F.cross_entropy}  # read-only table


@dataclass
class _Group:
    """Request indices sharing one parameter vector and one batch size."""

    params: torch.Tensor
    batch_size: int
    indices: list[int] = field(default_factory=list)


class GradientEvaluator(BatchedGradients):
    """Mean-over-batch loss gradients of ``module`` at flat parameter vectors."""

    _PROBES = 8  # parameter entries compared before a full torch.equal when grouping

    def __init__(self, module: nn.Module, info: ModelInfo, loss: str = "cross_entropy"):
        if loss not in _LOSSES:
            raise InputError(f"unknown loss {loss!r}; known: {', '.join(sorted(_LOSSES))}")
        self.module = module.float().train()
        self.info = info
        self.loss_name = loss
        self._loss = _LOSSES[loss]
        self._params = list(module.parameters())
        self._names = [name for name, _ in module.named_parameters()]
        self._flat = self._adopt_parameters()
        self._has_buffers = any(True for _ in module.buffers())
        self._fast_layers = None if self._has_buffers else fast_layers(module, info)
        stackable = not self._has_buffers and loss == "cross_entropy"
        self._stack_plan = stack_plan(module, self._params, info) if stackable else None
        self._stack_exact: dict[tuple[int, int, int], bool] = {}  # shape -> stacked == one at a time, bitwise
        self._vmap_ok = not self._has_buffers
        self._vmap_same = vmap(grad_and_value(self._functional_loss), in_dims=(None, 0, 0))
        self._probe = torch.linspace(0, max(info.param_count - 1, 0), self._PROBES).long().unique()
        self._probe_np = self._probe.numpy()

    # ------------------------------------------------------------------ parameters

    def _adopt_parameters(self) -> torch.Tensor:
        """Make every module parameter a view of one flat buffer (returned)."""
        flat = torch.cat([p.detach().reshape(-1) for p in self._params]) if self._params else torch.zeros(0)
        for layer, param in zip(self.info.layers, self._params):
            param.data = flat[layer.start : layer.stop].view(param.shape)
            param.requires_grad_(True)  # every parameter is trained
        return flat

    def _load(self, params: torch.Tensor) -> None:
        self._flat.copy_(params)

    def _views(self, params: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            name: params[layer.start : layer.stop].view(p.shape)
            for name, layer, p in zip(self._names, self.info.layers, self._params)
        }

    def _functional_loss(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self._loss(functional_call(self.module, self._views(params), (x,)), y)

    # ------------------------------------------------------------------ one request

    def gradient(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> Result:
        """Flat gradient of the batch-mean loss at ``params``, and that loss."""
        self._load(params)
        loss = self._loss(self.module(x), y)
        grads = torch.autograd.grad(loss, self._params, allow_unused=True)
        flat = torch.cat([
            (g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, self._params)
        ])
        return flat, float(loss.detach())

    # ------------------------------------------------------------------ many requests

    def gradients(self, requests: list[Request]) -> list[Result]:
        """``gradient`` of every request, in request order, batching where possible.

        Stackable models have no buffers, so the order requests are evaluated in cannot
        change any result; the others are evaluated group by group, in request order.
        """
        results: list[Result | None] = [None] * len(requests)
        singles: list[int] = []
        for group in self._groups(requests):
            if len(group.indices) > 1:
                self._same_params(group, requests, results)
            elif self._stack_plan is not None:
                singles.append(group.indices[0])
            else:
                results[group.indices[0]] = self.gradient(*requests[group.indices[0]])
        self._different_params(singles, requests, results)
        return results  # type: ignore[return-value]

    def _groups(self, requests: list[Request]) -> list[_Group]:
        groups: list[_Group] = []
        buckets: dict[tuple, list[_Group]] = {}
        keys: dict[int, tuple] = {}
        for i, (params, x, _y) in enumerate(requests):
            if id(params) not in keys:
                keys[id(params)] = self._probe_key(params)
            bucket = buckets.setdefault((int(x.shape[0]), keys[id(params)]), [])
            for group in bucket:
                if group.params is params or torch.equal(group.params, params):
                    group.indices.append(i)
                    break
            else:
                bucket.append(_Group(params, int(x.shape[0]), [i]))
                groups.append(bucket[-1])
        return groups

    def _probe_key(self, params: torch.Tensor) -> tuple:
        """A few of ``params``' values: equal parameters have equal keys (a cheap pre-filter
        before ``torch.equal``). Read through NumPy where it can: a tenth of a tensor index."""
        if not params.numel():
            return ()
        if params.dtype in _NUMPY_DTYPES and not params.requires_grad and params.device.type == "cpu":
            return tuple(params.numpy()[self._probe_np].tolist())
        return tuple(params[self._probe].tolist())

    def _same_params(self, group: _Group, requests: list[Request], results: list) -> None:
        xs = [requests[i][1] for i in group.indices]
        ys = [requests[i][2] for i in group.indices]
        if self._fast_layers is not None:
            batched = self._fast_batched(group.params, xs, ys)
            if batched is not None:
                _scatter(group.indices, batched, results)
                return
        if self._vmap_ok:
            batched = self._vmapped(group.params, xs, ys)
            if batched is not None:
                _scatter(group.indices, batched, results)
                return
        for i in group.indices:
            results[i] = self.gradient(*requests[i])

    def _different_params(self, indices: list[int], requests: list[Request], results: list) -> None:
        """Requests at pairwise different parameters, taken apart by batch size."""
        by_size: dict[int, list[int]] = {}
        for i in indices:
            by_size.setdefault(int(requests[i][1].shape[0]), []).append(i)
        for same_size in by_size.values():
            for i, result in zip(same_size, self._apart([requests[i] for i in same_size])):
                results[i] = result

    def _apart(self, requests: list[Request]) -> list[Result]:
        """Results of equal-size requests at different parameters; stacked where that is exact."""
        if len(requests) > 1 and self._stack_plan is not None and self._stacking_exact(requests):
            stacked = self._stacked(requests)
            if stacked is not None:
                return _rows(stacked)
        return [self.gradient(*r) for r in requests]

    def _stacking_exact(self, requests: list[Request]) -> bool:
        """Whether stacking requests of this shape reproduces one-at-a-time evaluation bit for bit.

        BLAS chooses its kernels, and with them the order of its sums, by shape: for some
        shapes a batched product rounds differently from the single products. So each shape
        (batch size, request count, threads) is tried once on synthetic requests, both ways,
        and stacked only if every bit agrees, in two trials (rounding can differ in some rows
        only). Positive inputs and weights scaled by 1/fan-in keep every unit active and every
        sum dense, so that two summation orders cannot agree by chance (as they can where ReLUs
        leave few nonzero terms); signed data leaves units inactive, whose zero gradients must
        carry the same sign both ways.
        """
        x = requests[0][1]
        shape = (int(x.shape[0]), len(requests), torch.get_num_threads())
        if shape not in self._stack_exact:
            tried = (plan_signature(self._stack_plan), x.dtype, shape)  # the same in every run of this process
            if tried not in _STACKING_TRIED:
                _STACKING_TRIED[tried] = all(self._agrees(self._synthetic(len(requests), x, dense))
                                             for dense in (True, False))
            self._stack_exact[shape] = _STACKING_TRIED[tried]
        return self._stack_exact[shape]

    def _agrees(self, requests: list[Request]) -> bool:
        stacked = self._stacked(requests)
        return stacked is not None and _same_bits(stacked, [self.gradient(*r) for r in requests])

    def _synthetic(self, k: int, like: torch.Tensor, dense: bool) -> list[Request]:
        """k random requests shaped like ``like``: every unit active (``dense``) or signed data."""
        gen = torch.Generator().manual_seed(0)  # a private stream: the run's randomness is untouched
        linears = [step for step in self._stack_plan if isinstance(step, FastLayer)]
        draw = _positive if dense else torch.randn
        requests = []
        for _ in range(k):
            params = draw(self.info.param_count, generator=gen)
            for layer in linears:
                params[layer.weight] /= layer.module.in_features
            target = torch.randint(0, linears[-1].module.out_features, like.shape[:1], generator=gen)
            requests.append((params, draw(*like.shape, generator=gen).to(like.dtype), target))
        return requests

    # ------------------------------------------------------------------ evaluation

    @torch.no_grad()
    def evaluate(
        self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024
    ) -> tuple[float, float]:
        """Mean loss and accuracy (fraction correct) of ``params`` on ``(x, y)``."""
        self._load(params)
        self.module.eval()
        try:
            loss_sum, correct = 0.0, 0
            for start in range(0, len(y), batch_size):
                logits = self.module(x[start : start + batch_size])
                target = y[start : start + batch_size]
                loss_sum += float(self._loss(logits, target, reduction="sum"))
                correct += int((logits.argmax(dim=1) == target).sum())
        finally:
            self.module.train()
        n = max(len(y), 1)
        return loss_sum / n, correct / n


def _positive(*shape: int, generator: torch.Generator) -> torch.Tensor:
    return torch.rand(*shape, generator=generator).add_(0.5)


def _rows(batched: Batched) -> list[Result]:
    grads, losses = batched
    return list(zip(grads.unbind(0), losses))


def _same_bits(batched: Batched, results: list[Result]) -> bool:
    """Whether batched gradients and losses equal ``results`` bit for bit (NaNs included)."""
    grads, losses = batched
    expected = torch.stack([grad for grad, _loss in results])
    if grads.dtype != expected.dtype or not torch.equal(grads.view(torch.uint8), expected.view(torch.uint8)):
        return False
    return struct.pack(f"{len(losses)}d", *losses) == struct.pack(f"{len(results)}d", *(l for _g, l in results))


def _scatter(indices: list[int], batched: Batched, results: list) -> None:
    grads, losses = batched
    for row, i in enumerate(indices):
        results[i] = (grads[row], losses[row])


_STACKING_TRIED: dict[tuple, bool] = {}  # (model layers, dtype, shape) -> stacking is bit-exact; see _stacking_exact
