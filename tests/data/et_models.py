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


class CumsumMLP(torch.nn.Module):
    """Two Vulkan delegates around a CPU aten::cumsum.out."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

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
