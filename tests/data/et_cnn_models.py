"""Plain-torch image classifiers with torchvision's published layouts, at tiny widths (torchvision itself
is not installed here: its wheel is a CUDA build): ShuffleNetV2, SqueezeNet 1.0 / 1.1, DenseNet,
MobileNetV2, MobileNetV3-small, ResNet-18 and an EfficientNet-B0-like net.

Each follows torchvision's module of the same name (layer order, kernels, strides, paddings, ceil-mode
pools, activations, squeeze-excitation, residual rules), with its widths cut down so that a model has a
few ten thousand parameters and runs on a 64x64 (or 32x32) image in a second.

`build(name)` makes one as the suite uses it: built after torch.manual_seed(0), every parameter drawn
again by tests/models/test_hf_vision.py's `randomized` (fan-in scaled normal weights, batch-norm
statistics measured on random batches) so that logits have real magnitude, in eval mode, with its input
(`image`). tests/data/make_et_cnn_files.py lowers these with ExecuTorch's VulkanPartitioner into
et_cnn_<name>.pte, tests/regression/test_et_cnns.py rebuilds them as the oracle and
tests/models/test_classic_cnns.py exports them with vkx.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


def make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    """torchvision's _make_divisible: round to a multiple of `divisor`, never below 90% of `v`."""
    min_value = divisor if min_value is None else min_value
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: Callable | None = nn.ReLU,
            eps: float = 1e-5) -> nn.Sequential:
    """torchvision's Conv2dNormActivation: conv (padding (k-1)//2, no bias), batch norm, activation."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(cout, eps=eps)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------- ShuffleNetV2

def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    b, c, h, w = x.shape
    x = x.view(b, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(b, c, h, w)


class ShuffleUnit(nn.Module):
    """torchvision's shufflenetv2.InvertedResidual: stride 1 splits the channels in two and transforms
    one half; stride 2 runs both branches (a depthwise 3x3 stride-2 one on the input); concat, shuffle."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.stride = stride
        branch = cout // 2
        assert stride != 1 or cin == branch * 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                nn.Conv2d(cin, branch, 1, bias=False), nn.BatchNorm2d(branch), nn.ReLU(inplace=True))
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(
            nn.Conv2d(cin if stride > 1 else branch, branch, 1, bias=False), nn.BatchNorm2d(branch),
            nn.ReLU(inplace=True),
            nn.Conv2d(branch, branch, 3, stride, 1, groups=branch, bias=False), nn.BatchNorm2d(branch),
            nn.Conv2d(branch, branch, 1, bias=False), nn.BatchNorm2d(branch), nn.ReLU(inplace=True))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """torchvision's ShuffleNetV2: 3x3 stride-2 stem, 3x3 stride-2 max pool, three stages (a stride-2 unit
    then stride-1 units), 1x1 conv5, global mean, linear. torchvision's x0.5 is repeats [4, 8, 4] and
    widths [24, 48, 96, 192, 1024]; here [2, 3, 2] and [8, 16, 32, 64, 128]."""

    def __init__(self, repeats=(2, 3, 2), widths=(8, 16, 32, 64, 128), num_classes: int = 10):
        super().__init__()
        cin = 3
        self.conv1 = nn.Sequential(nn.Conv2d(cin, widths[0], 3, 2, 1, bias=False), nn.BatchNorm2d(widths[0]),
                                   nn.ReLU(inplace=True))
        cin = widths[0]
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        stages = []
        for n, cout in zip(repeats, widths[1:4]):
            units = [ShuffleUnit(cin, cout, 2)] + [ShuffleUnit(cout, cout, 1) for _ in range(n - 1)]
            stages.append(nn.Sequential(*units))
            cin = cout
        self.stage2, self.stage3, self.stage4 = stages
        self.conv5 = nn.Sequential(nn.Conv2d(cin, widths[-1], 1, bias=False), nn.BatchNorm2d(widths[-1]),
                                   nn.ReLU(inplace=True))
        self.fc = nn.Linear(widths[-1], num_classes)

    def forward(self, x):
        x = self.maxpool(self.conv1(x))
        x = self.stage4(self.stage3(self.stage2(x)))
        x = self.conv5(x)
        return self.fc(x.mean([2, 3]))


# --------------------------------------------------------------------------- SqueezeNet

class Fire(nn.Module):
    """Squeeze 1x1 + ReLU, then expand 1x1 and expand 3x3 (each + ReLU) concatenated."""

    def __init__(self, cin: int, squeeze: int, e1: int, e3: int):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze, e1, 1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze, e3, 3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    """torchvision's SqueezeNet 1.0 (7x7 stride-2 stem of 96, pools after fires 3 and 7) and 1.1 (3x3
    stride-2 stem of 64, pools after fires 2 and 4), ceil-mode 3x3 stride-2 max pools, a 1x1 conv
    classifier + ReLU + adaptive average pool (dropout left out: identity in eval). Every width is
    torchvision's divided by `div`."""

    def __init__(self, version: str = "1_0", div: int = 8, num_classes: int = 10):
        super().__init__()

        def fire(cin, s, e1, e3):
            return Fire(cin // div, s // div, e1 // div, e3 // div)

        def pool():
            return nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True)

        if version == "1_0":
            self.features = nn.Sequential(
                nn.Conv2d(3, 96 // div, kernel_size=7, stride=2), nn.ReLU(inplace=True), pool(),
                fire(96, 16, 64, 64), fire(128, 16, 64, 64), fire(128, 32, 128, 128), pool(),
                fire(256, 32, 128, 128), fire(256, 48, 192, 192), fire(384, 48, 192, 192),
                fire(384, 64, 256, 256), pool(), fire(512, 64, 256, 256))
        elif version == "1_1":
            self.features = nn.Sequential(
                nn.Conv2d(3, 64 // div, kernel_size=3, stride=2), nn.ReLU(inplace=True), pool(),
                fire(64, 16, 64, 64), fire(128, 16, 64, 64), pool(),
                fire(128, 32, 128, 128), fire(256, 32, 128, 128), pool(),
                fire(256, 48, 192, 192), fire(384, 48, 192, 192), fire(384, 64, 256, 256),
                fire(512, 64, 256, 256))
        else:
            raise ValueError(version)
        self.classifier = nn.Sequential(nn.Conv2d(512 // div, num_classes, kernel_size=1), nn.ReLU(inplace=True),
                                        nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


# --------------------------------------------------------------------------- DenseNet

class DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv (bn_size * growth) - BN-ReLU-3x3 conv (growth) on the concatenation of all
    earlier features."""

    def __init__(self, cin: int, growth: int, bn_size: int):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(features, 1)
        return self.conv2(self.relu2(self.norm2(self.conv1(self.relu1(self.norm1(x))))))


class DenseBlock(nn.ModuleDict):
    def __init__(self, layers: int, cin: int, growth: int, bn_size: int):
        super().__init__()
        for i in range(layers):
            self.add_module(f"denselayer{i + 1}", DenseLayer(cin + i * growth, growth, bn_size))

    def forward(self, x):
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class Transition(nn.Sequential):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(cin)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)


class DenseNet(nn.Module):
    """torchvision's DenseNet: 7x7 stride-2 stem conv, BN, ReLU, 3x3 stride-2 max pool, dense blocks with
    halving transitions between them, final BN, ReLU, adaptive average pool, linear. DenseNet-121 is
    growth 32, blocks (6, 12, 24, 16), 64 initial features, bn_size 4; here 8, (2, 3, 4, 3), 16, 2."""

    def __init__(self, growth: int = 8, blocks=(2, 3, 4, 3), init_features: int = 16, bn_size: int = 2,
                 num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential()
        self.features.add_module("conv0", nn.Conv2d(3, init_features, 7, 2, 3, bias=False))
        self.features.add_module("norm0", nn.BatchNorm2d(init_features))
        self.features.add_module("relu0", nn.ReLU(inplace=True))
        self.features.add_module("pool0", nn.MaxPool2d(kernel_size=3, stride=2, padding=1))
        c = init_features
        for i, n in enumerate(blocks):
            self.features.add_module(f"denseblock{i + 1}", DenseBlock(n, c, growth, bn_size))
            c += n * growth
            if i != len(blocks) - 1:
                self.features.add_module(f"transition{i + 1}", Transition(c, c // 2))
                c //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(c))
        self.classifier = nn.Linear(c, num_classes)

    def forward(self, x):
        x = F.relu(self.features(x), inplace=True)
        x = torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1)
        return self.classifier(x)


# --------------------------------------------------------------------------- MobileNetV2

class InvertedResidualV2(nn.Module):
    """1x1 expand + ReLU6 (when t != 1), 3x3 depthwise + ReLU6, 1x1 linear project; residual when
    stride 1 and in == out."""

    def __init__(self, cin: int, cout: int, stride: int, t: int):
        super().__init__()
        hidden = int(round(cin * t))
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if t != 1:
            layers.append(conv_bn(cin, hidden, 1, act=nn.ReLU6))
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's MobileNetV2: all 17 inverted residuals of its (t, c, n, s) table at `width`, 3x3
    stride-2 stem of 32 * width, a 1x1 conv to `last_channel` (torchvision: 1280), global average pool,
    linear."""

    SETTINGS = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
                [6, 320, 1, 1]]

    def __init__(self, width: float = 0.125, last_channel: int = 128, num_classes: int = 10):
        super().__init__()
        cin = make_divisible(32 * width)
        features: list[nn.Module] = [conv_bn(3, cin, 3, 2, act=nn.ReLU6)]
        for t, c, n, s in self.SETTINGS:
            cout = make_divisible(c * width)
            for i in range(n):
                features.append(InvertedResidualV2(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(conv_bn(cin, last_channel, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Linear(last_channel, num_classes)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


# --------------------------------------------------------------------------- MobileNetV3-small

class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation: global average pool, 1x1 conv, activation, 1x1 conv, scale
    activation (MobileNetV3: ReLU and hardsigmoid; EfficientNet: SiLU and sigmoid), times the input."""

    def __init__(self, channels: int, squeeze: int, activation=nn.ReLU, scale_activation=nn.Hardsigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def forward(self, x):
        s = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return s * x


class InvertedResidualV3(nn.Module):
    """1x1 expand (when expanded != in), k x k depthwise (stride), squeeze-excitation (squeeze =
    make_divisible(expanded // 4)), 1x1 project; ReLU or hardswish; residual when stride 1 and in == out."""

    def __init__(self, cin: int, k: int, expanded: int, cout: int, se: bool, act: str, stride: int):
        super().__init__()
        activation = nn.Hardswish if act == "HS" else nn.ReLU
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(conv_bn(cin, expanded, 1, act=activation, eps=0.001))
        layers.append(conv_bn(expanded, expanded, k, stride, groups=expanded, act=activation, eps=0.001))
        if se:
            layers.append(SqueezeExcitation(expanded, make_divisible(expanded // 4, 8)))
        layers.append(conv_bn(expanded, cout, 1, act=None, eps=0.001))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_res_connect else y


class MobileNetV3Small(nn.Module):
    """torchvision's mobilenet_v3_small: its 11 bneck blocks (kernels 3 and 5, SE, ReLU / hardswish, four
    stride-2 blocks) at `width` (channels made divisible by 8), 3x3 stride-2 stem with hardswish, 1x1 conv
    to 6x the last block's width + hardswish, global average pool, Linear + hardswish + Linear
    (torchvision's last_channel 1024 * width)."""

    CONFIG = [  # in, kernel, expanded, out, SE, activation, stride
        (16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
        (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
        (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1), (48, 5, 288, 96, True, "HS", 2),
        (96, 5, 576, 96, True, "HS", 1), (96, 5, 576, 96, True, "HS", 1)]

    def __init__(self, width: float = 0.125, num_classes: int = 10):
        super().__init__()

        def ch(c):
            return make_divisible(c * width, 8)

        layers: list[nn.Module] = [conv_bn(3, ch(16), 3, 2, act=nn.Hardswish, eps=0.001)]
        for cin, k, e, cout, se, act, s in self.CONFIG:
            layers.append(InvertedResidualV3(ch(cin), k, ch(e), ch(cout), se, act, s))
        last_conv = 6 * ch(96)
        layers.append(conv_bn(ch(96), last_conv, 1, act=nn.Hardswish, eps=0.001))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        last_channel = make_divisible(1024 * width, 8)
        self.classifier = nn.Sequential(nn.Linear(last_conv, last_channel), nn.Hardswish(inplace=True),
                                        nn.Linear(last_channel, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# --------------------------------------------------------------------------- ResNet-18

class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision's resnet18: 7x7 stride-2 stem, BN, ReLU, 3x3 stride-2 max pool, basic blocks [2, 2, 2, 2]
    (1x1 stride-2 shortcuts), adaptive average pool, linear; widths [64, 128, 256, 512] cut to `widths`."""

    def __init__(self, widths=(8, 16, 24, 32), num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        cin = widths[0]
        layers = []
        for i, cout in enumerate(widths):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# --------------------------------------------------------------------------- EfficientNet-B0-like

class MBConv(nn.Module):
    """torchvision's efficientnet.MBConv: 1x1 expand + SiLU (ratio != 1), k x k depthwise + SiLU,
    squeeze-excitation (squeeze max(1, in // 4), SiLU, sigmoid), 1x1 project; residual (stochastic depth:
    identity in eval) when stride 1 and in == out."""

    def __init__(self, ratio: int, k: int, stride: int, cin: int, cout: int):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        expanded = make_divisible(cin * ratio, 8)
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(conv_bn(cin, expanded, 1, act=nn.SiLU, eps=1e-3))
        layers.append(conv_bn(expanded, expanded, k, stride, groups=expanded, act=nn.SiLU, eps=1e-3))
        layers.append(SqueezeExcitation(expanded, max(1, cin // 4), activation=nn.SiLU, scale_activation=nn.Sigmoid))
        layers.append(conv_bn(expanded, cout, 1, act=None, eps=1e-3))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res_connect else y


class EfficientNet(nn.Module):
    """torchvision's efficientnet_b0 block table (expand, kernel, stride, in, out, layers) scaled by
    `width` (channels made divisible by 8) and `depth` (layers rounded up): 3x3 stride-2 stem with SiLU,
    seven stages of MBConv (kernels 3 and 5), 1x1 head conv to 4x the last width + SiLU, global average
    pool, linear."""

    SETTINGS = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
                (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]

    def __init__(self, width: float = 0.125, depth: float = 0.5, num_classes: int = 10):
        super().__init__()

        def ch(c):
            return make_divisible(c * width, 8)

        layers: list[nn.Module] = [conv_bn(3, ch(32), 3, 2, act=nn.SiLU, eps=1e-3)]
        for ratio, k, stride, cin, cout, n in self.SETTINGS:
            cin, cout = ch(cin), ch(cout)
            for i in range(int(math.ceil(n * depth))):
                layers.append(MBConv(ratio, k, stride if i == 0 else 1, cin if i == 0 else cout, cout))
        last = ch(320)
        layers.append(conv_bn(last, 4 * last, 1, act=nn.SiLU, eps=1e-3))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(4 * last, num_classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# --------------------------------------------------------------------------- the suite's instances

MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {  # name -> (model, input shape)
    "shufflenet_v2": (ShuffleNetV2, (1, 3, 64, 64)),
    "squeezenet1_0": (lambda: SqueezeNet("1_0"), (1, 3, 64, 64)),
    "squeezenet1_1": (lambda: SqueezeNet("1_1"), (1, 3, 64, 64)),
    "densenet": (DenseNet, (1, 3, 64, 64)),
    "mobilenet_v2": (MobileNetV2, (1, 3, 32, 32)),
    "mobilenet_v3_small": (MobileNetV3Small, (1, 3, 64, 64)),
    "resnet18": (ResNet18, (1, 3, 64, 64)),
    "efficientnet": (EfficientNet, (1, 3, 32, 32)),
}


def image(shape: tuple[int, ...], seed: int = 1) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def build(name: str) -> tuple[nn.Module, torch.Tensor]:
    """(model, input) of MODELS[name]: built after torch.manual_seed(0), its parameters and batch-norm
    statistics drawn again by test_hf_vision's `randomized`, in eval mode, in fp32."""
    from tests.models.test_hf_vision import randomized
    make, shape = MODELS[name]
    torch.manual_seed(0)
    return randomized(make(), shape).eval(), image(shape)
