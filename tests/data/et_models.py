"""The models behind the ExecuTorch sample files (made by make_et_files.py, seeded with 0)."""
from __future__ import annotations

import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return self.fc(y.reshape(1, -1))


class CumsumMLP(MLP):
    """The MLP with a cumsum between its layers: two Vulkan delegates around a CPU aten::cumsum.out."""

    def forward(self, x):
        return self.fc2(torch.cumsum(torch.relu(self.fc1(x)), 1))


class TopkSortCNN(torch.nn.Module):
    """Three Vulkan delegates around CPU aten::topk.values and aten::sort.values (two returns each)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc1 = torch.nn.Linear(4 * 8 * 4, 16)
        self.fc2 = torch.nn.Linear(16, 5)

    def forward(self, x):
        y = torch.topk(torch.relu(self.conv(x)), 4, -1)[0]
        y = torch.relu(self.fc1(y.reshape(1, -1)))
        return self.fc2(torch.sort(y, 1, descending=True)[0])


class IndexPutMLP(torch.nn.Module):
    """Two Vulkan delegates around a CPU aten::index_put.out whose indices and values are plan constants."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)
        self.register_buffer("rows", torch.tensor([1]))
        self.register_buffer("fill", torch.randn(16))

    def forward(self, x):
        y = torch.relu(self.fc1(x))
        return self.fc2(y.index_put((self.rows,), self.fill))


class _LayerNorm2d(torch.nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor (torchvision's ConvNeXt)."""

    def forward(self, x):
        x = torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class _ConvNeXtBlock(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = torch.nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = torch.nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = torch.nn.Linear(dim, 4 * dim)
        self.fc2 = torch.nn.Linear(4 * dim, dim)
        self.layer_scale = torch.nn.Parameter(torch.full((dim, 1, 1), 0.5))

    def forward(self, x):
        y = self.norm(self.dwconv(x).permute(0, 2, 3, 1))
        y = self.fc2(torch.nn.functional.gelu(self.fc1(y))).permute(0, 3, 1, 2)
        return self.layer_scale * y + x


class MiniConvNeXt(torch.nn.Module):
    """torchvision's ConvNeXt layout, tiny: the partitioner leaves the [1, C, 1, 1] pooled tensor's
    flatten to a CPU aten::as_strided_copy.out between two delegates (issue 11's convnext_tiny)."""

    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 4, 4), _LayerNorm2d(8, eps=1e-6), _ConvNeXtBlock(8),
            _LayerNorm2d(8, eps=1e-6), torch.nn.Conv2d(8, 16, 2, 2), _ConvNeXtBlock(16))
        self.avgpool = torch.nn.AdaptiveAvgPool2d(1)
        self.norm = _LayerNorm2d(16, eps=1e-6)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.norm(self.avgpool(self.features(x))), 1))
