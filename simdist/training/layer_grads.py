"""Per-request layer gradients from one batched pass: the math the fast gradient paths share.

Linear and Conv2d weight gradients are sums over samples of (activation x output gradient),
so requests evaluated together in one forward/backward get their own gradients by keeping the
request axis apart in those sums. Requests at *different* weights can be stacked only for
``nn.Sequential`` models of Linears and exact per-sample modules (:func:`stack_plan`): one
batched product per layer, each request with its own weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .models import ModelInfo

__all__ = ["FastLayer", "fast_layers", "stack_plan", "plan_signature", "stacked_linear", "layer_grads",
           "request_losses"]


@dataclass(frozen=True)
class FastLayer:
    """A Linear/Conv2d layer of the fast path and its slices of the flat vector."""

    module: nn.Module
    weight: slice
    bias: slice | None


def request_losses(log_probs: torch.Tensor, ys: list[torch.Tensor]) -> list[float]:
    """Each request's batch-mean loss, reduced over its own rows as a single evaluation does
    (a mean over a ``(k, b)`` view of per-sample losses sums in another order)."""
    rows = log_probs.split(int(ys[0].shape[0]))
    return torch.stack([F.nll_loss(request_rows, y) for request_rows, y in zip(rows, ys)]).tolist()


def plan_signature(plan: list) -> tuple:
    """What a stacking trial's outcome depends on besides the shape: the layers in call order."""
    return tuple((type(step.module).__name__, step.module.in_features, step.module.out_features,
                  step.bias is not None) if isinstance(step, FastLayer) else type(step).__name__ for step in plan)


def fast_layers(module: nn.Module, info: ModelInfo) -> list[FastLayer] | None:
    """The Linear/Conv2d layers holding all parameters, or None if the fast path does not apply."""
    slices = {layer.name: slice(layer.start, layer.stop) for layer in info.layers}
    seen: set[int] = set()
    layers = []
    for prefix, sub in module.named_modules(remove_duplicate=False):
        own = dict(sub.named_parameters(recurse=False))
        if not own:
            continue
        if not fast_layer_ok(sub) or set(own) - {"weight", "bias"} or any(id(p) in seen for p in own.values()):
            return None
        seen.update(id(p) for p in own.values())
        name = f"{prefix}." if prefix else ""
        bias = slices[name + "bias"] if "bias" in own else None
        layers.append(FastLayer(sub, slices[name + "weight"], bias))
    return layers if len(seen) == len(info.layers) else None


_PER_SAMPLE = (nn.ReLU, nn.Flatten, nn.Identity)  # parameter-free, exact, each sample on its own


def stack_plan(module: nn.Module, params: list[torch.Tensor], info: ModelInfo) -> list | None:
    """The leaves of an ``nn.Sequential`` in call order, each Linear as a :class:`FastLayer`.

    None unless every leaf is an ``nn.Linear`` used once or an exact per-sample module
    (:data:`_PER_SAMPLE`, not in place) and the Linears hold every parameter.
    """
    if type(module) is not nn.Sequential:
        return None
    slices = {id(p): slice(layer.start, layer.stop) for p, layer in zip(params, info.layers)}
    plan: list = []
    linears: set[int] = set()
    for leaf in _leaves(module):
        if type(leaf) is nn.Linear and id(leaf) not in linears:
            linears.add(id(leaf))
            bias = slices[id(leaf.bias)] if leaf.bias is not None else None
            plan.append(FastLayer(leaf, slices[id(leaf.weight)], bias))
        elif type(leaf) in _PER_SAMPLE and not getattr(leaf, "inplace", False):
            plan.append(leaf)
        else:
            return None
    held = sum(1 + (step.bias is not None) for step in plan if isinstance(step, FastLayer))
    return plan if linears and held == len(params) else None


def _leaves(sequential: nn.Sequential):
    """The modules a Sequential calls, nested Sequentials flattened, in call order."""
    for child in sequential:
        if type(child) is nn.Sequential:
            yield from _leaves(child)
        else:
            yield child


def stacked_linear(layer: FastLayer, stacked: torch.Tensor, a: torch.Tensor, k: int) -> torch.Tensor:
    """``F.linear`` of each request's rows of ``a`` with that request's weights, as one batched call."""
    mod = layer.module
    weight_t = stacked[:, layer.weight].view(k, mod.out_features, mod.in_features).transpose(1, 2)
    a = a.reshape(k, -1, mod.in_features)
    if layer.bias is None:
        return torch.bmm(a, weight_t).reshape(-1, mod.out_features)
    return torch.baddbmm(stacked[:, layer.bias].unsqueeze(1), a, weight_t).reshape(-1, mod.out_features)


def fast_layer_ok(layer: nn.Module) -> bool:
    if isinstance(layer, nn.Linear):
        return True
    return isinstance(layer, nn.Conv2d) and layer.padding_mode == "zeros" and not isinstance(layer.padding, str)


def layer_grads(layer: FastLayer, a: torch.Tensor, delta: torch.Tensor, k: int, out: torch.Tensor) -> None:
    """Write each request's weight and bias gradient of one layer into rows of ``out``."""
    mod = layer.module
    if isinstance(mod, nn.Linear):
        a = a.reshape(k, -1, mod.in_features)
        d = delta.reshape(k, -1, mod.out_features)
        weight = torch.bmm(d.transpose(1, 2), a)  # einsum('nbo,nbi->noi', d, a)
        bias = d.sum(1) if layer.bias is not None else None
    else:
        weight, bias = conv_grads(mod, a, delta, k)
    out[:, layer.weight] = weight.reshape(k, -1)
    if layer.bias is not None:
        out[:, layer.bias] = bias


def conv_grads(mod: nn.Conv2d, a: torch.Tensor, delta: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-request Conv2d gradients: the request axis moved into channels, groups times k."""
    b = a.shape[0] // k
    a_k = a.reshape(k, b, *a.shape[1:]).transpose(0, 1).reshape(b, k * a.shape[1], *a.shape[2:])
    d_k = delta.reshape(k, b, *delta.shape[1:]).transpose(0, 1).reshape(b, k * delta.shape[1], *delta.shape[2:])
    weight_size = (k * mod.out_channels, mod.in_channels // mod.groups, *mod.kernel_size)
    weight = torch.nn.grad.conv2d_weight(a_k, weight_size, d_k, mod.stride, mod.padding, mod.dilation, k * mod.groups)
    bias = delta.reshape(k, b, mod.out_channels, -1).sum(dim=(1, 3))
    return weight.reshape(k, -1), bias


def stacked_backward(plan: list, stacked: torch.Tensor, inputs: list[torch.Tensor], outputs: list[torch.Tensor],
                     log_probs: torch.Tensor, target: torch.Tensor, total_weight: torch.Tensor, k: int,
                     b: int) -> list[torch.Tensor]:
    """``dL/dz`` of every Linear in ``plan`` for ``L = sum(per-sample loss) / b``, written out.

    The same ATen operations, on the same operands, as autograd runs for the stacked forward
    (nll-loss and log-softmax backward, ``bmm`` against the stacked weights for a Linear's
    input, ``threshold_backward`` for ReLU), without recording a graph: the stacked path is
    dominated by small operations, and recording them cost as much as the products.
    ``inputs[j]``/``outputs[j]`` are step ``j``'s input and output in the forward.
    """
    seed = torch.ones((), dtype=log_probs.dtype) / b  # d(sum / b)/d(sum), broadcast to every sample below
    grad = torch.ops.aten.nll_loss_backward(seed.expand(log_probs.shape[0]), log_probs, target, None, 0, -100,
                                            total_weight)
    grad = torch.ops.aten._log_softmax_backward_data(grad, log_probs, 1, log_probs.dtype)
    deltas: list[torch.Tensor] = []
    first_linear = next(j for j, step in enumerate(plan) if isinstance(step, FastLayer))
    for j in range(len(plan) - 1, first_linear - 1, -1):
        step = plan[j]
        if isinstance(step, FastLayer):
            deltas.append(grad)
            if j > first_linear:
                grad = _linear_input_grad(step, stacked, grad, k)
        elif type(step) is nn.ReLU:
            grad = torch.ops.aten.threshold_backward(grad, outputs[j], 0)
        elif type(step) is nn.Flatten:
            grad = grad.reshape(inputs[j].shape)
    return deltas[::-1]


def _linear_input_grad(layer: FastLayer, stacked: torch.Tensor, grad: torch.Tensor, k: int) -> torch.Tensor:
    """``dL/da`` of a stacked Linear (:func:`stacked_linear`): the batched product's first-operand gradient."""
    mod = layer.module
    weight = stacked[:, layer.weight].view(k, mod.out_features, mod.in_features)  # (weight_t).transpose(1, 2)
    return grad.reshape(k, -1, mod.out_features).bmm(weight).reshape(-1, mod.in_features)
