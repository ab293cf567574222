"""Vision families in plain torch (no torchvision): MobileNetV2 and MobileNetV3 blocks and a small
ViT with a class token, random weights, exported by vkx, run on the device, compared with torch."""
from __future__ import annotations

from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from .conftest import calibrated, check_model

pytestmark = pytest.mark.vulkan


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: type | None = None) -> nn.Module:
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([act()] if act else []))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, ReLU6, 3x3 depthwise, ReLU6, 1x1 project, residual."""

    def __init__(self, channels: int, expand: int = 4):
        super().__init__()
        hidden = channels * expand
        self.body = nn.Sequential(_conv_bn(channels, hidden, 1, act=nn.ReLU6),
                                  _conv_bn(hidden, hidden, 3, groups=hidden, act=nn.ReLU6),
                                  _conv_bn(hidden, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(channels, squeezed, 1), nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.expand(F.relu(self.reduce(scale))))


class MobileNetV3Block(nn.Module):
    """MobileNetV3's block: 1x1 expand, hardswish, 5x5 depthwise, squeeze-excitation, 1x1 project."""

    def __init__(self, channels: int, hidden: int):
        super().__init__()
        self.expand = _conv_bn(channels, hidden, 1, act=nn.Hardswish)
        self.depthwise = _conv_bn(hidden, hidden, 5, groups=hidden, act=nn.Hardswish)
        self.se = SqueezeExcite(hidden, hidden // 4)
        self.project = _conv_bn(hidden, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.project(self.se(self.depthwise(self.expand(x))))


class Net(nn.Module):
    """A stem, two blocks and a classifier head over global average pooling."""

    def __init__(self, block: Callable[[], nn.Module], channels: int, stem_act: type):
        super().__init__()
        self.stem = _conv_bn(3, channels, 3, stride=2, act=stem_act)
        self.blocks = nn.Sequential(block(), block())
        self.head = nn.Linear(channels, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))


def _image(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(0))


def _net(kind: str) -> Net:
    torch.manual_seed(0)
    if kind == "v2":
        return Net(lambda: InvertedResidual(16), 16, nn.ReLU6)
    return Net(lambda: MobileNetV3Block(16, 48), 16, nn.Hardswish)


@pytest.mark.parametrize("kind", ["v2", "v3"])
def test_mobilenet(kind):
    shape = (1, 3, 32, 32)
    check_model(calibrated(_net(kind), shape), (_image(shape),))


class ViT(nn.Module):
    """Patch embedding by a strided conv, a class token, learned positions, pre-norm encoder
    blocks (scaled-dot-product attention, GELU MLP) and a head on the class token."""

    def __init__(self, dim: int = 64, heads: int = 4, depth: int = 2, patch: int = 8, image: int = 32):
        super().__init__()
        self.heads = heads
        self.patches = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.5)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.5)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "norm1": nn.LayerNorm(dim), "qkv": nn.Linear(dim, 3 * dim), "proj": nn.Linear(dim, dim),
            "norm2": nn.LayerNorm(dim), "fc1": nn.Linear(dim, 2 * dim), "fc2": nn.Linear(2 * dim, dim),
        }) for _ in range(depth))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patches(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        b, n, d = x.shape
        for block in self.blocks:
            q, k, v = block["qkv"](block["norm1"](x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            attended = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
            x = x + block["proj"](attended)
            x = x + block["fc2"](F.gelu(block["fc1"](block["norm2"](x))))
        return self.head(self.norm(x)[:, 0])


def test_vit():
    torch.manual_seed(0)
    check_model(ViT(), (_image((2, 3, 32, 32)),))
