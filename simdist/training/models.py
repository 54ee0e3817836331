"""The model zoo and what the simulator needs to know about a model.

Models register by name in :data:`MODELS` with a frozen, documented pydantic config; a
factory builds a ``torch.nn.Module`` from ``(input_shape, num_classes, config)``. Any other
module can be used through an import path ``"package.module:factory"``
(:func:`load_import_model`); whether a scenario may import code is the scenario's call.

:func:`model_info` describes a built module the way the rest of simdist sees it: a flat
parameter vector cut into one :class:`LayerInfo` per parameter tensor (offsets in
``module.parameters()`` order) with the forward FLOPs of that layer, so the compute model,
layer-wise communication (DASO, wait-free backprop) and timing-only mode can all work from
the same numbers without touching tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Callable

import torch
from pydantic import BaseModel, Field, field_validator
from torch import nn

from ..config import FROM_LIST, USER_CONFIG
from ..errors import InputError
from ..importpath import import_object
from ..registry import Registry

__all__ = [
    "MODELS",
    "MLPConfig",
    "CNNConfig",
    "LayerInfo",
    "ModelInfo",
    "model_info",
    "load_import_model",
]

ModelFactory = Callable[[tuple[int, ...], int, object], nn.Module]

MODELS: Registry[ModelFactory] = Registry("model")

MAX_WIDTH = 2**24  # units or channels of one layer: 16 M, beyond any model trained here (and PyTorch's limits)


# --------------------------------------------------------------------------- configs


class MLPConfig(BaseModel):
    """Options of the ``mlp`` model."""

    model_config = USER_CONFIG

    hidden: list[int] = Field(
        default_factory=lambda: [128],
        max_length=1024,
        description="Width of each hidden layer (units), input to output; [] is a linear model. Default [128].",
    )

    @field_validator("hidden")
    @classmethod
    def _positive(cls, widths: list[int]) -> list[int]:
        if any(not 1 <= w <= MAX_WIDTH for w in widths):
            raise ValueError(f"hidden layer widths must be integers from 1 to {MAX_WIDTH}, got {widths}")
        return widths


class CNNConfig(BaseModel):
    """Options of the ``cnn`` (LeNet-like) model."""

    model_config = USER_CONFIG

    channels: Annotated[tuple[int, int], FROM_LIST] = Field(
        (6, 16), description="Output channels of the two conv layers (LeNet-5: 6, 16). Default (6, 16)."
    )
    kernel_size: int = Field(
        3,
        ge=1,
        le=255,
        description="Side of the square conv kernels (pixels), odd; 'same' padding keeps the image size "
        "so 8x8 digits survive two 2x2 poolings. Default 3.",
    )
    fc: Annotated[tuple[int, ...], FROM_LIST] = Field(
        (120, 84), max_length=1024, description="Widths of the fully connected hidden layers (LeNet-5: 120, 84). Default (120, 84)."
    )

    @field_validator("kernel_size")
    @classmethod
    def _odd(cls, k: int) -> int:
        if k % 2 == 0:
            raise ValueError(f"kernel_size must be odd (so 'same' padding is symmetric), got {k}")
        return k

    @field_validator("channels", "fc")
    @classmethod
    def _positive(cls, widths: tuple[int, ...]) -> tuple[int, ...]:
        if any(not 1 <= w <= MAX_WIDTH for w in widths):
            raise ValueError(f"widths must be integers from 1 to {MAX_WIDTH}, got {list(widths)}")
        return widths


# --------------------------------------------------------------------------- factories


def _dense_stack(in_features: int, widths: list[int] | tuple[int, ...], num_classes: int) -> list[nn.Module]:
    layers: list[nn.Module] = []
    for width in widths:
        layers += [nn.Linear(in_features, width), nn.ReLU()]
        in_features = width
    layers.append(nn.Linear(in_features, num_classes))
    return layers


@MODELS.register(
    "mlp",
    "Multi-layer perceptron: flatten, then Linear+ReLU per hidden width, then a Linear classifier.",
    config=MLPConfig,
)
def mlp(input_shape: tuple[int, ...], num_classes: int, config: MLPConfig) -> nn.Module:
    """An MLP over the flattened input."""
    return nn.Sequential(nn.Flatten(), *_dense_stack(math.prod(input_shape), config.hidden, num_classes))


@MODELS.register(
    "cnn",
    "LeNet-like CNN: (conv-ReLU-maxpool2) x2, then fully connected 120-84-classes; "
    "'same' padding so it fits 8x8 digits.",
    citation="LeCun, Bottou, Bengio, Haffner: Gradient-based learning applied to document recognition. "
    "Proc. IEEE 86(11), 1998 (LeNet-5).",
    config=CNNConfig,
)
def cnn(input_shape: tuple[int, ...], num_classes: int, config: CNNConfig) -> nn.Module:
    """LeNet-5-like network for small (C, H, W) images with H, W >= 4."""
    if len(input_shape) != 3 or min(input_shape[1:]) < 4:
        raise InputError(
            f"model 'cnn' needs image input of shape (channels, height, width) with height and width >= 4, "
            f"got {tuple(input_shape)}; use a dataset like 'digits' or the 'mlp' model"
        )
    c_in, height, width = input_shape
    c1, c2 = config.channels
    k = config.kernel_size
    features = nn.Sequential(
        nn.Conv2d(c_in, c1, k, padding=k // 2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, k, padding=k // 2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
    )
    flat = c2 * (height // 2 // 2) * (width // 2 // 2)
    return nn.Sequential(*features, *_dense_stack(flat, config.fc, num_classes))


def load_import_model(path: str) -> Callable[..., nn.Module]:
    """The callable named by ``"package.module:factory"`` (importing the module runs its code)."""
    target = import_object(path, "model")
    if not callable(target):
        raise InputError(f"model {path!r} is not callable; it must be a factory returning a torch.nn.Module")
    return target


# --------------------------------------------------------------------------- model info


@dataclass(frozen=True)
class LayerInfo:
    """One parameter tensor: its name, its slice of the flat parameter vector and its FLOPs.

    ``forward_flops_per_sample`` is 2 x multiply-accumulates of the owning Linear/Conv2d
    forward for one sample, given to the weight tensor; biases and other parameters get 0.
    """

    name: str
    start: int
    stop: int
    forward_flops_per_sample: float

    @property
    def numel(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class ModelInfo:
    """Parameter count, per-tensor layout and total forward FLOPs per sample of a model."""

    param_count: int
    layers: tuple[LayerInfo, ...]
    forward_flops_per_sample: float


def _layer_flops(layer: nn.Module, output: torch.Tensor) -> float:
    """2 x MACs of one Linear/Conv2d call on a batch of one sample."""
    if isinstance(layer, nn.Linear):
        return 2.0 * output.numel() * layer.in_features
    if isinstance(layer, nn.Conv2d):
        kh, kw = layer.kernel_size
        return 2.0 * output.numel() * (layer.in_channels // layer.groups) * kh * kw
    return 0.0


def _count_flops(module: nn.Module, input_shape: tuple[int, ...]) -> dict[int, float]:
    """Forward FLOPs per weight tensor (keyed by ``id``), from hooks on one dummy sample.

    The sample runs on the ``meta`` device (shapes only, no arithmetic), so ImageNet-sized
    models cost nothing to describe; modules whose operations have no meta kernel fall back
    to a real forward pass on the CPU.
    """
    by_layer: dict[int, float] = {}
    layers = [m for m in module.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]

    def hook(layer: nn.Module, _inputs: object, output: torch.Tensor) -> None:
        by_layer[id(layer)] = by_layer.get(id(layer), 0.0) + _layer_flops(layer, output)

    handles = [m.register_forward_hook(hook) for m in layers]
    was_training = module.training
    try:
        module.eval()
        with torch.no_grad():
            try:
                state = {name: t.to("meta") for name, t in [*module.named_parameters(), *module.named_buffers()]}
                torch.func.functional_call(module, state, (torch.zeros((1, *input_shape), device="meta"),))
            except (NotImplementedError, RuntimeError):
                by_layer.clear()
                module(torch.zeros((1, *input_shape)))
    finally:
        module.train(was_training)
        for handle in handles:
            handle.remove()
    return {id(layer.weight): by_layer.get(id(layer), 0.0) for layer in layers}


def model_info(module: nn.Module, input_shape: tuple[int, ...]) -> ModelInfo:
    """Describe ``module`` for inputs of ``input_shape`` (one sample, without the batch axis)."""
    flops = _count_flops(module, tuple(input_shape))
    layers = []
    offset = 0
    for name, param in module.named_parameters():
        layers.append(LayerInfo(name, offset, offset + param.numel(), flops.get(id(param), 0.0)))
        offset += param.numel()
    return ModelInfo(offset, tuple(layers), sum(layer.forward_flops_per_sample for layer in layers))
