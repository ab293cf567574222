"""Plain-torch blocks that make ExecuTorch's VulkanPartitioner emit the ops beyond vkx's own exporter
(files made by make_et_vocab_files.py; each model is built after torch.manual_seed(0))."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ResBlock(nn.Module):
    """A resnet stem and block: conv, batch norm, relu, max-pool (aten.max_pool2d_with_indices), residual add."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.fc = nn.Linear(8, 5)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y = self.pool(torch.relu(self.bn(self.stem(x))))
        y = torch.relu(y + self.conv(y))
        return self.fc(y.mean((2, 3)))


class ShapeBlock(nn.Module):
    """unsqueeze, squeeze, select, split (equal and given sizes), full_like and a cast to fp16
    (_to_dim_order_copy)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 12)

    def forward(self, x):  # x [2, 3, 12]
        y = self.fc(x).unsqueeze(1)                 # [2, 1, 3, 12]
        a, b, c = torch.split(y, [2, 4, 6], dim=-1)
        p, q = torch.split(y.squeeze(1), 6, dim=-1)  # split_copy.Tensor -> split_with_sizes
        first = y.select(2, 0)                       # [2, 1, 12]
        z = torch.cat([c, b, a], -1).squeeze(1) * torch.cat([q, p], -1)
        return (z + first + torch.full_like(first, 0.5)).to(torch.float16)


class RMSNorm(nn.Module):
    """Llama's RMSNorm, which ExecuTorch fuses into et_vk.rms_norm."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + self.eps)
        return xf.type_as(x) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def hf_rope(xq, xk, cos, sin):
    """HF's apply_rotary_pos_emb on [B, S, H, D] over the first cos.shape[-1] dims (ExecuTorch fuses it
    into et_vk.apply_rotary_emb_hf)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    r = cos.shape[-1]
    q_rot, q_pass = xq[..., :r], xq[..., r:]
    k_rot, k_pass = xk[..., :r], xk[..., r:]
    q = torch.cat([(q_rot.float() * cos) + (rotate_half(q_rot.float()) * sin), q_pass], dim=-1)
    k = torch.cat([(k_rot.float() * cos) + (rotate_half(k_rot.float()) * sin), k_pass], dim=-1)
    return q.type_as(xq), k.type_as(xk)


def attention(q, k, v, mask):
    """softmax(q @ k^T / sqrt(E) + mask) @ v, as matmuls (torch's sdpa decomposes into ops vkx lacks)."""
    return torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + mask, -1) @ v


class RopeBlock(nn.Module):
    """RMSNorm (et_vk.rms_norm), q/k/v projections, HF rotary embedding over 6 of 8 dims at positions
    from 2 on (et_vk.apply_rotary_emb_hf), causal attention: ExecuTorch's fused et_vk.sdpa when
    `et_sdpa` (needs executorch's custom ops), else the same math as matmuls."""

    def __init__(self, dim: int = 32, heads: int = 4, rotary: int = 6, start: int = 2, et_sdpa: bool = False):
        super().__init__()
        self.heads, self.head_dim, self.start, self.et_sdpa = heads, dim // heads, start, et_sdpa
        self.norm = RMSNorm(dim)
        self.q, self.k, self.v = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.o = nn.Linear(dim, dim, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, rotary, 2).float() / rotary))
        angles = torch.outer(torch.arange(16).float(), inv)
        angles = torch.cat([angles, angles], -1)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())
        self.register_buffer("mask", torch.full((8, 8), float("-inf")).triu(1))

    def forward(self, x):  # x [1, 8, dim]
        b, s, _ = x.shape
        h = self.norm(x)
        q, k, v = (proj(h).view(b, s, self.heads, self.head_dim) for proj in (self.q, self.k, self.v))
        q, k = hf_rope(q, k, self.cos[self.start:self.start + s], self.sin[self.start:self.start + s])
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        att = torch.ops.et_vk.sdpa(q, k, v, self.mask) if self.et_sdpa else attention(q, k, v, self.mask)
        return x + self.o(att.transpose(1, 2).reshape(b, s, -1))


class MobileBlock(nn.Module):
    """An inverted residual: 1x1 expand, depthwise 3x3, hardswish, squeeze-excite (sigmoid), 1x1 project."""

    def __init__(self, c: int = 8, e: int = 16):
        super().__init__()
        self.expand = nn.Conv2d(c, e, 1)
        self.dw = nn.Conv2d(e, e, 3, padding=1, groups=e)
        self.se1, self.se2 = nn.Conv2d(e, 4, 1), nn.Conv2d(4, e, 1)
        self.project = nn.Conv2d(e, c, 1)

    def forward(self, x):
        y = F.hardswish(self.dw(torch.relu(self.expand(x))))
        s = torch.sigmoid(self.se2(torch.relu(self.se1(y.mean((2, 3), keepdim=True)))))
        return x + self.project(y * s)


class ViTBlock(nn.Module):
    """Patch embedding, a class token, layer norm, multi-head attention (as matmuls), a GELU MLP, the
    class token out (select_copy)."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.patch = nn.Conv2d(3, dim, 4, stride=4)
        self.cls = nn.Parameter(torch.randn(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, 17, dim) * 0.1)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):  # x [1, 3, 16, 16]
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls, t], 1) + self.pos
        b, n, d = t.shape
        q, k, v = self.qkv(self.ln1(t)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        att = attention(q, k, v, 0.0)
        t = t + self.proj(att.transpose(1, 2).reshape(b, n, d))
        t = t + self.mlp(self.ln2(t))
        return t[:, 0]
