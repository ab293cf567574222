"""Image classifiers that users bring: Hugging Face transformers' pure-torch vision families (ResNet-18's
layout, MobileNetV1/V2, EfficientNet-B0's block list, RegNet X and Y, ConvNeXt, ViT, Swin, DINOv2, BiT,
MobileViT), built from small configurations with random weights (no downloads), exported by vkx, run on
the device in fp32, fp16 and bf16 and compared with torch.

Each keeps its real model's layout where that is cheap (ResNet-18's basic blocks and depths [2, 2, 2, 2],
MobileNetV2's inverted residuals with ReLU6 and depthwise convs, EfficientNet-B0's seven stages with
their kernels, strides and squeeze-excitation, RegNet's grouped convs), at small widths and 32x32 or
64x64 inputs, so the kernels see the op kinds, groups, strides and odd map sizes the real ones do.

transformers' own initialization gives outputs of no magnitude (~1e-26 for some), so every parameter is
drawn again (`randomized`): fan-in scaled normal weights, random norm affines, random layer scales, and
batch-norm statistics measured on random batches. fp16 / bf16 are compared with the fp32 model within
`tests.models.conftest.HALF`'s tolerance, or three times the error of torch running the model in that dtype
on the CPU where that is larger (a deep net in 16 bits drifts from fp32 in torch too).
"""
from __future__ import annotations

import copy
import math

import pytest
import torch
import transformers
from torch import nn

from tests.ops.conftest import run_vkx
from .conftest import HALF, check_model

pytestmark = pytest.mark.vulkan

GAIN = 1.5
"""The fan-in scaled weights' gain."""
DTYPES = ["fp32", "fp16", "bf16"]


class Logits(nn.Module):
    """The classifier's `.logits` from `pixel_values`."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).logits


def randomized(model: nn.Module, shape: tuple[int, ...], seed: int = 0) -> nn.Module:
    """Every parameter drawn again so that the logits have real magnitude; batch-norm statistics from
    a few random batches."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if p.dim() >= 2 and leaf == "weight":  # convs, linears, embeddings: fan-in scaled
                fan_in = p[0].numel() if p.dim() > 2 or "embed" not in name else p.shape[1]
                p.copy_(torch.randn(p.shape, generator=g) * (GAIN / math.sqrt(max(fan_in, 1))))
            elif p.dim() >= 2:  # class tokens, position embeddings, relative position tables
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif leaf == "weight":  # norms' scales
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif leaf == "bias":
                p.copy_((torch.rand(p.shape, generator=g) - 0.5) * 0.4)
            else:  # layer scales and the like
                p.copy_(torch.rand(p.shape, generator=g) * 0.5 + 0.5)
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if norms:
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # a cumulative average
        model.train()
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn((4, *shape[1:]), generator=g))
            for m in norms:  # no channel scaled up by a near-zero variance (a dead channel's): well conditioned
                m.running_var.clamp_(min=float(m.running_var.mean()) * 0.1 + 1e-3)
    return model.eval()


def image(shape: tuple[int, ...], seed: int = 1) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def check(module: nn.Module, x: torch.Tensor, dtype: str) -> None:
    """`check_model` in fp32; in fp16 / bf16, the error against the fp32 model within HALF's tolerance or
    three times torch's own error in that dtype, whichever is larger."""
    if dtype == "fp32":
        check_model(module, (x,))
        return
    half, rtol = HALF[dtype]
    with torch.no_grad():
        want = module(x)
        torch_half = copy.deepcopy(module).to(half)(x.to(half)).float()
    scale = float(want.abs().max())
    assert scale > 0.1 and float(want.std()) > 0.01, f"the output has no real magnitude (max {scale})"
    assert torch.isfinite(torch_half).all()
    torch_error = float((torch_half - want).abs().max()) / scale
    got = run_vkx(module, (x,), dtype=dtype)
    assert got.dtype == half and got.shape == want.shape
    error = float((got.float() - want).abs().max()) / scale
    bound = max(rtol, 3 * torch_error)
    assert error < bound, f"max error {error:.3g} of the output's scale {scale:.3g} (torch in {dtype}: {torch_error:.3g})"


def _num_labels(config) -> None:
    config.num_labels = 10
    return config


def resnet18() -> nn.Module:
    """ResNet-18's layout: 7x7 stride-2 stem, max pool, basic blocks [2, 2, 2, 2], 1x1 stride-2 shortcuts."""
    config = transformers.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[2, 2, 2, 2],
                                       layer_type="basic", hidden_act="relu", downsample_in_first_stage=False)
    return transformers.ResNetForImageClassification(_num_labels(config))


def resnet_bottleneck() -> nn.Module:
    """ResNet-50's bottleneck blocks (1x1 → 3x3 → 1x1, 4x expansion), one per stage."""
    config = transformers.ResNetConfig(embedding_size=16, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1],
                                       layer_type="bottleneck", hidden_act="relu")
    return transformers.ResNetForImageClassification(_num_labels(config))


def mobilenet_v1() -> nn.Module:
    """Depthwise-separable convs, ReLU6, TensorFlow 'same' padding (an asymmetric pad before strided convs)."""
    config = transformers.MobileNetV1Config(image_size=32, depth_multiplier=0.25, min_depth=8,
                                            classifier_dropout_prob=0.0)
    return transformers.MobileNetV1ForImageClassification(_num_labels(config))


def mobilenet_v2() -> nn.Module:
    """Inverted residuals (1x1 expand, ReLU6, 3x3 depthwise, 1x1 project), all 17 blocks at a quarter width."""
    config = transformers.MobileNetV2Config(image_size=32, depth_multiplier=0.25, classifier_dropout_prob=0.0)
    return transformers.MobileNetV2ForImageClassification(_num_labels(config))


def efficientnet_b0() -> nn.Module:
    """B0's seven stages (kernels 3/5, strides, expansion 1 and 6, squeeze-excitation, swish) at a quarter
    width and half depth; the head's average pool has a kernel larger than the map (ceil mode)."""
    config = transformers.EfficientNetConfig(image_size=32, width_coefficient=0.25, depth_coefficient=0.5,
                                             hidden_dim=320, dropout_rate=0.0, drop_connect_rate=0.0)
    return transformers.EfficientNetForImageClassification(_num_labels(config))


def regnet(layer_type: str) -> nn.Module:
    """RegNet X (grouped 3x3 convs, groups of width 8) and Y (the same with squeeze-excitation)."""
    config = transformers.RegNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1],
                                       groups_width=8, layer_type=layer_type)
    return transformers.RegNetForImageClassification(_num_labels(config))


def convnext() -> nn.Module:
    """4x4 patchify stem, 7x7 depthwise convs, channels-first and -last layer norms, GELU MLPs, layer scale."""
    config = transformers.ConvNextConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1], image_size=32)
    return transformers.ConvNextForImageClassification(_num_labels(config))


def vit() -> nn.Module:
    config = transformers.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                    image_size=32, patch_size=8, attn_implementation="sdpa")
    return transformers.ViTForImageClassification(_num_labels(config))


def swin() -> nn.Module:
    """Shifted windows (roll, window partition, relative position bias, the shift mask), patch merging."""
    config = transformers.SwinConfig(image_size=32, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 4],
                                     window_size=4, drop_path_rate=0.0)
    return transformers.SwinForImageClassification(_num_labels(config))


def dinov2() -> nn.Module:
    """Patch 14 on a 28x28 image (2x2 patches), class token, layer scale, the mean of the patch tokens."""
    config = transformers.Dinov2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2,
                                       image_size=28, patch_size=14)
    return transformers.Dinov2ForImageClassification(_num_labels(config))


def bit() -> nn.Module:
    """Big Transfer: weight-standardized convs, group norm, pre-activation bottlenecks."""
    config = transformers.BitConfig(embedding_size=16, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1],
                                    num_groups=8)
    return transformers.BitForImageClassification(_num_labels(config))


def mobilevit() -> nn.Module:
    """MobileNetV2 blocks, then unfolded 2x2 patches through transformer layers and folded back."""
    config = transformers.MobileViTConfig(image_size=64, patch_size=2, hidden_sizes=[32, 48, 64],
                                          neck_hidden_sizes=[8, 16, 24, 32, 40, 48, 96], num_attention_heads=4,
                                          hidden_dropout_prob=0.0, classifier_dropout_prob=0.0)
    return transformers.MobileViTForImageClassification(_num_labels(config))


MODELS = {
    "resnet18": (resnet18, (1, 3, 32, 32)),
    "resnet-bottleneck": (resnet_bottleneck, (1, 3, 32, 32)),
    "mobilenet_v1": (mobilenet_v1, (1, 3, 32, 32)),
    "mobilenet_v2": (mobilenet_v2, (1, 3, 32, 32)),
    "efficientnet_b0": (efficientnet_b0, (1, 3, 32, 32)),
    "regnet_x": (lambda: regnet("x"), (1, 3, 32, 32)),
    "regnet_y": (lambda: regnet("y"), (1, 3, 32, 32)),
    "convnext": (convnext, (1, 3, 32, 32)),
    "vit": (vit, (2, 3, 32, 32)),
    "swin": (swin, (1, 3, 32, 32)),
    "dinov2": (dinov2, (1, 3, 28, 28)),
    "bit": (bit, (1, 3, 32, 32)),
    "mobilevit": (mobilevit, (1, 3, 64, 64)),
}


def build(name: str) -> tuple[nn.Module, torch.Tensor]:
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = randomized(make(), shape)
    return Logits(model).eval(), image(shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", MODELS)
def test_hf_vision(name, dtype):
    module, x = build(name)
    check(module, x, dtype)
