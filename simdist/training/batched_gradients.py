"""The batched paths of :class:`~.gradients.GradientEvaluator`: many requests, one forward/backward.

Three ways to evaluate several gradient requests in one pass, each answering None where the
model is not one it can take (and turning itself off for that evaluator from then on):

* :meth:`BatchedGradients._fast_batched` — requests at one parameter vector through a model of
  Linear/Conv2d layers: hooks keep each layer's input and output, one ``autograd.grad`` gives
  every sample's ``dL/dz``, and the per-request weight gradients are batched products;
* :meth:`BatchedGradients._vmapped` — requests at one parameter vector through any module
  without buffers: ``torch.func.vmap`` of ``grad``;
* :meth:`BatchedGradients._stacked` — equal-size requests at *different* parameter vectors
  through an ``nn.Sequential`` of Linears: the vectors become one ``(k, P)`` tensor and each
  Linear one batched product (the backward written out in :mod:`.layer_grads`).

Which path a group of requests takes, and whether stacking is bit-exact for a shape, is the
evaluator's decision (:mod:`.gradients`). :class:`BatchedGradients` is its mixin: it reads the
evaluator's module, layer plans and loss (``module``, ``info``, ``_loss``, ``_fast_layers``,
``_stack_plan``, ``_vmap_same``) and loads parameters through its ``_load``.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .layer_grads import FastLayer, layer_grads, request_losses, stacked_backward, stacked_linear

__all__ = ["Batched", "BatchedGradients"]

Batched = tuple[torch.Tensor, list[float]]  # (k, P) gradients and k losses of one group
Request = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class BatchedGradients:
    """Batched gradient paths of a :class:`~.gradients.GradientEvaluator` (see the module docstring)."""

    def _stacked(self, requests: list[Request]) -> Batched | None:
        """Gradients of k equal-size requests at k parameter vectors from one forward/backward.

        None (and the stacked path is off from then on) if a Linear gets, or the model
        returns, other than a 2-d tensor.
        """
        k, b = len(requests), int(requests[0][1].shape[0])
        stacked = torch.stack([params for params, _x, _y in requests])
        h = torch.cat([x for _p, x, _y in requests])
        inputs, outputs = [], []
        with torch.no_grad():  # the backward below is written out (stacked_backward)
            for step in self._stack_plan:
                if isinstance(step, FastLayer) and h.dim() != 2:
                    self._stack_plan = None
                    return None
                inputs.append(h)
                h = stacked_linear(step, stacked, h, k) if isinstance(step, FastLayer) else step(h)
                outputs.append(h)
            if h.dim() != 2:
                self._stack_plan = None
                return None
            ys = [y for _p, _x, y in requests]
            target = torch.cat(ys)
            log_probs = F.log_softmax(h, dim=1)  # cross-entropy as F.cross_entropy computes it
            _per_sample, total_weight = torch.ops.aten.nll_loss_forward(log_probs, target, None, 0, -100)
            deltas = stacked_backward(self._stack_plan, stacked, inputs, outputs, log_probs, target, total_weight,
                                      k, b)
            out = torch.empty(k, self.info.param_count)  # every slice is written below
            linears = [(step, a) for step, a in zip(self._stack_plan, inputs) if isinstance(step, FastLayer)]
            for (layer, a), delta in zip(linears, deltas):
                layer_grads(layer, a, delta, k, out)
            return out, request_losses(log_probs, ys)

    def _fast_batched(self, params: torch.Tensor, xs: list[torch.Tensor], ys: list[torch.Tensor]) -> Batched | None:
        """Per-request gradients from one forward/backward; None if a layer ran twice."""
        k, b = len(xs), int(xs[0].shape[0])
        self._load(params)
        captured: dict[int, tuple[torch.Tensor, torch.Tensor, int, int]] = {}
        reused = False

        def keep(index: int) -> Callable:
            def hook(_mod: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
                nonlocal reused
                reused |= index in captured
                captured[index] = (inputs[0], output, inputs[0]._version, output._version)
            return hook

        handles = [layer.module.register_forward_hook(keep(j)) for j, layer in enumerate(self._fast_layers)]
        try:
            logits = self.module(torch.cat(xs))
            per_sample = self._loss(logits, torch.cat(ys), reduction="none")
        finally:
            for handle in handles:
                handle.remove()
        changed = any(a._version != va or z._version != vz for a, z, va, vz in captured.values())
        if reused or changed or len(captured) != len(self._fast_layers):
            self._fast_layers = None  # shared, skipped or in-place-modified layers: not this path's model
            return None
        order = sorted(captured)
        deltas = torch.autograd.grad(per_sample.sum() / b, [captured[j][1] for j in order])
        out = torch.empty(k, self.info.param_count)  # every slice is written below
        for j, delta in zip(order, deltas):
            layer_grads(self._fast_layers[j], captured[j][0].detach(), delta, k, out)
        with torch.no_grad():  # each request's loss reduced over its own rows, as a single evaluation does
            losses = [float(self._loss(rows, y)) for rows, y in zip(logits.split(b), ys)]
        return out, losses

    def _vmapped(self, params: torch.Tensor, xs: list[torch.Tensor], ys: list[torch.Tensor]) -> Batched | None:
        """``vmap`` of grad over requests at one ``params``; None (and never again) if it cannot be vmapped."""
        try:
            grads, losses = self._vmap_same(params.detach(), torch.stack(xs), torch.stack(ys))
        except RuntimeError:
            self._vmap_ok = False
            return None
        return grads, losses.tolist()
