"""Weight-only int8/int4 quantization of a module's Linear and Embedding weights, before torch.export.

Symmetric: w ≈ q * scale, one scale per row and group of `group_size` consecutive
input features, the last group shorter where the size does not divide K (int8 defaults to one
group per row: per output channel). Scales
are stored in fp16 (bf16 for a bf16 model) and q is computed from the stored
scale, so dequantizing the file's bytes gives exactly the weights vkx computes
with. The packing is the op contract's (vkx.format.contract, "weight-only
quantization"): int8 as is; int4 two values a byte, even k in the low nibble,
each stored as q + 8.

`quantize_module` swaps each `nn.Linear` / `nn.Embedding` for a module calling
the custom ops `vkx::linear_q` / `vkx::embedding_q`, which torch.export keeps
whole; their CPU kernels dequantize and run torch's op, so the quantized module
is also the torch reference. A tied embedding / output projection is quantized
once and stored once.
"""
from __future__ import annotations

import copy
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from vkx.export.errors import ExportError
from vkx.export.ops import Rule, same
from vkx.format.op_quant import VALUES_PER_WORD, scale_groups

BITS = {"int8": 8, "int4": 4}
GROUP_SIZES = (32, 64, 128, 256)
DEFAULT_GROUP = {8: None, 4: 32}
"""None: one group per row (per output channel)."""


def quantize_weight(weight: torch.Tensor, bits: int, group_size: int | None,
                    scale_dtype: torch.dtype = torch.float16) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed q, scales [N, ceil(K / group)]) of a 2-D weight, the last group shorter where the group
    size does not divide K; group_size None means K."""
    w = weight.detach().to(torch.float32)
    n, k = w.shape
    group = k if group_size is None else group_size
    per_word = VALUES_PER_WORD[bits]
    if group <= 0 or group % per_word:
        raise ExportError(f"group size {group} must be a multiple of {per_word} for int{bits}")
    if k % per_word:
        raise ExportError(f"a weight of {k} input features is not whole 32-bit words of int{bits} "
                          f"(a multiple of {per_word})")
    qmax = 7 if bits == 4 else 127
    groups = scale_groups(k, group)
    # the last group may be shorter: zeros after it change no group's largest magnitude
    grouped = F.pad(w, (0, groups * group - k)).reshape(n, groups, group)
    scales = (grouped.abs().amax(-1) / qmax).to(scale_dtype)
    scales = torch.where(scales == 0, torch.ones_like(scales), scales)  # an all-zero group stays zero
    q = torch.round(grouped / scales.to(torch.float32).unsqueeze(-1)).clamp(-qmax - 1, qmax)
    q = q.reshape(n, groups * group)[:, :k].to(torch.int8)
    if bits == 8:
        return q, scales
    u = (q + 8).to(torch.uint8)
    return (u[:, 0::2] | (u[:, 1::2] << 4)).contiguous(), scales


def dequantize(packed: torch.Tensor, scales: torch.Tensor, bits: int, group_size: int) -> torch.Tensor:
    """The fp32 weight that (packed, scales) stand for."""
    if bits == 8:
        q = packed.to(torch.float32)
    else:
        low = (packed & 0xF).to(torch.int16) - 8
        high = (packed >> 4).to(torch.int16) - 8
        q = torch.stack([low, high], dim=-1).reshape(packed.shape[0], -1).to(torch.float32)
    k = q.shape[1]
    return q * scales.to(torch.float32).repeat_interleave(group_size, dim=1)[:, :k]


@torch.library.custom_op("vkx::linear_q", mutates_args=())
def linear_q(input: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor, bias: Optional[torch.Tensor],
             bits: int, group_size: int) -> torch.Tensor:
    w = dequantize(weight, scales, bits, group_size)
    out = F.linear(input.to(torch.float32), w, None if bias is None else bias.to(torch.float32))
    return out.to(input.dtype)


@linear_q.register_fake
def _(input, weight, scales, bias, bits, group_size):
    return input.new_empty((*input.shape[:-1], weight.shape[0]))


@torch.library.custom_op("vkx::embedding_q", mutates_args=())
def embedding_q(weight: torch.Tensor, scales: torch.Tensor, indices: torch.Tensor, bits: int, group_size: int,
                dtype: torch.dtype) -> torch.Tensor:
    return F.embedding(indices, dequantize(weight, scales, bits, group_size)).to(dtype)


@embedding_q.register_fake
def _(weight, scales, indices, bits, group_size, dtype):
    k = weight.shape[1] * (2 if bits == 4 else 1)
    return weight.new_empty((*indices.shape, k), dtype=dtype)


class QuantLinear(nn.Module):
    def __init__(self, linear: nn.Linear, packed: torch.Tensor, scales: torch.Tensor, bits: int, group: int):
        super().__init__()
        self.register_buffer("weight_q", packed)
        self.register_buffer("scales", scales)
        self.bias = linear.bias
        self.bits, self.group = bits, group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.vkx.linear_q(x, self.weight_q, self.scales, self.bias, self.bits, self.group)


class QuantEmbedding(nn.Module):
    def __init__(self, embedding: nn.Embedding, packed: torch.Tensor, scales: torch.Tensor, bits: int, group: int):
        super().__init__()
        if embedding.max_norm is not None:
            raise ExportError("quantizing an nn.Embedding with max_norm is not supported")
        self.register_buffer("weight_q", packed)
        self.register_buffer("scales", scales)
        self.bits, self.group, self.dtype = bits, group, embedding.weight.dtype

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        return torch.ops.vkx.embedding_q(self.weight_q, self.scales, indices, self.bits, self.group, self.dtype)


def quantize_module(module: nn.Module, scheme: str, group_size: int | None = None) -> nn.Module:
    """A copy of `module` whose Linear and Embedding weights are quantized (`scheme` int8 or int4).

    The copy shares every tensor it does not quantize with `module`; a weight tied
    between several layers is quantized once and shared by their replacements.
    """
    if scheme not in BITS:
        raise ExportError(f"--quantize must be one of {', '.join(BITS)}, not {scheme!r}")
    bits = BITS[scheme]
    if group_size is not None and group_size not in GROUP_SIZES:
        raise ExportError(f"--group-size must be one of {', '.join(map(str, GROUP_SIZES))}, not {group_size}")
    done: dict[int, tuple[torch.Tensor, torch.Tensor, int]] = {}  # id(weight) -> packed, scales, group

    def replace(name: str, layer: nn.Module) -> nn.Module:
        weight = layer.weight
        if id(weight) not in done:
            scale_dtype = torch.bfloat16 if weight.dtype == torch.bfloat16 else torch.float16
            group = group_size or DEFAULT_GROUP[bits] or weight.shape[1]
            try:
                q, scales = quantize_weight(weight, bits, group, scale_dtype)
            except ExportError as error:
                raise ExportError(f"{type(layer).__name__} {name!r}: {error}") from None
            done[id(weight)] = (q, scales, group)
        q, scales, group = done[id(weight)]
        kind = QuantLinear if isinstance(layer, nn.Linear) else QuantEmbedding
        return kind(layer, q, scales, bits, group)

    def walk(parent: nn.Module, prefix: str) -> nn.Module:
        copied = copy.copy(parent)
        copied._modules = dict(parent._modules)
        for name, child in parent.named_children():
            qualified = f"{prefix}{name}"
            if isinstance(child, (nn.Linear, nn.Embedding)):
                copied._modules[name] = replace(qualified, child)
            elif child._modules:
                copied._modules[name] = walk(child, qualified + ".")
        return copied

    if isinstance(module, (nn.Linear, nn.Embedding)):
        return replace(type(module).__name__, module)
    return walk(module, "")


def _without_dtype(node, values: dict) -> dict:
    values.pop("dtype")  # the output tensor's own dtype says it
    return values


QUANT_RULES: dict[Any, Rule] = {
    torch.ops.vkx.linear_q.default: same("vkx.linear_q.default", tref={"weight", "scales", "bias"}),
    torch.ops.vkx.embedding_q.default: same("vkx.embedding_q.default", tref={"weight", "scales"},
                                            prepare=_without_dtype),
}
"""The rules of vkx's quantized ops (export/rules.py assembles the table)."""
