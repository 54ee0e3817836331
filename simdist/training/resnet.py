"""ResNet models for parameter counts, per-layer gradient sizes and FLOPs at ImageNet scale.

ResNet-50 cannot train here in useful time, but its shape matters to the simulator:
25.6 M parameters set the payload of every gradient exchange, the per-tensor sizes set
DDP/Horovod bucketing, and per-layer FLOPs set when backward produces each bucket. These
definitions follow torchvision's (ResNet-50 v1.5: the stride sits on the 3×3 convolution of
a bottleneck), so counts match the published model: 25,557,032 parameters with 1000 classes.

He, Zhang, Ren, Sun: "Deep Residual Learning for Image Recognition", CVPR 2016.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field
from torch import nn

from ..config import USER_CONFIG
from ..errors import InputError
from .models import MODELS

__all__ = ["ResNetConfig", "resnet50", "resnet18"]


class ResNetConfig(BaseModel):
    """Options of the ResNet models."""

    model_config = USER_CONFIG

    num_classes: int | None = Field(
        None, ge=1, le=2**20, description="Classifier outputs. Default: the dataset's classes (1000 for imagenet-shape).")
    width: int = Field(64, ge=1, le=2**16, description="Channels of the stem; stages use 1, 2, 4, 8 times it. Default 64.")
    stem: Literal["imagenet", "cifar"] = Field(
        "imagenet", description="imagenet: 7x7 stride-2 convolution then 3x3 stride-2 max-pool (torchvision); cifar: "
        "one 3x3 stride-1 convolution and no pooling, the usual ResNet-18 for 32x32 CIFAR images (He et al. 2016 "
        "§4.2 starts CIFAR nets with a 3x3 convolution; pytorch-cifar's ResNet18, 11,173,962 parameters with 10 "
        "classes). Default imagenet.")


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, c_in: int, width: int, stride: int):
        super().__init__()
        c_out = width * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(c_in, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, c_out, 1, bias=False), nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class _Basic(nn.Module):
    expansion = 1

    def __init__(self, c_in: int, width: int, stride: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or c_in != width:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, width, 1, stride, bias=False), nn.BatchNorm2d(width))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


def _resnet(block, depths: tuple[int, ...], input_shape, num_classes: int, config: ResNetConfig) -> nn.Module:
    if len(input_shape) != 3 or min(input_shape[1:]) < 32:
        raise InputError(f"ResNet needs image input (channels, height, width) of at least 32x32, got "
                         f"{tuple(input_shape)}; use the 'imagenet-shape' dataset", field="workload.model")
    classes = config.num_classes or num_classes
    w = config.width
    layers: list[nn.Module] = [nn.Conv2d(input_shape[0], w, 7, 2, 3, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
                               nn.MaxPool2d(3, 2, 1)] if config.stem == "imagenet" else \
        [nn.Conv2d(input_shape[0], w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU()]
    c_in = w
    for stage, depth in enumerate(depths):
        width = w * 2**stage
        for i in range(depth):
            layers.append(block(c_in, width, 2 if stage > 0 and i == 0 else 1))
            c_in = width * block.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes)]
    return nn.Sequential(*layers)


@MODELS.register("resnet50", "ResNet-50 v1.5 (25.6 M parameters with 1000 classes); bottleneck blocks [3, 4, 6, 3]",
                 citation="He et al., CVPR 2016; torchvision resnet50 layout", config=ResNetConfig)
def resnet50(input_shape: tuple[int, ...], num_classes: int, config: ResNetConfig) -> nn.Module:
    """ResNet-50 for (C, H, W) images."""
    return _resnet(_Bottleneck, (3, 4, 6, 3), input_shape, num_classes, config)


@MODELS.register("resnet18", "ResNet-18 (11.7 M parameters with 1000 classes); basic blocks [2, 2, 2, 2]",
                 citation="He et al., CVPR 2016; torchvision resnet18 layout", config=ResNetConfig)
def resnet18(input_shape: tuple[int, ...], num_classes: int, config: ResNetConfig) -> nn.Module:
    """ResNet-18 for (C, H, W) images."""
    return _resnet(_Basic, (2, 2, 2, 2), input_shape, num_classes, config)
