"""Weight-only int8/int4 quantization of a module's Linear and Embedding weights, before torch.export.

Per row and group of `group_size` consecutive input features (the last group shorter where the size
does not divide K): int4 is affine, w ≈ q * scale + offset with q in [-8, 7] spanning the group's
minimum to its maximum; int8 is symmetric, w ≈ q * scale with q in [-127, 127], one group per row
(per output channel) by default. Scales and offsets are stored in fp16 (bf16 for a bf16 model) and q
is computed from the stored values, so dequantizing the file's bytes gives exactly the weights vkx
computes with. The packing is the op contract's (vkx.format.op_quant): int8 as is; int4 two values a
byte, even k in the low nibble, each stored as q + 8; affine scales [N, G, 2] are (scale, offset) pairs.

The token embedding and the language-model head take their own scheme (`embedding`, `head`: int8 per
row by default, whatever `scheme`): on a trained 135M model their int4 alone cost +26% perplexity
(docs/benchmarks.md, "Quality on real weights"). A head tied to the embedding is one weight, stored
once, and takes the embedding's scheme.

`quantize_module` swaps each `nn.Linear` / `nn.Embedding` for a module calling the custom ops
`vkx::linear_q` / `vkx::embedding_q`, which torch.export keeps whole; their CPU kernels dequantize and
run torch's op, so the quantized module is also the torch reference.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from vkx.export.errors import ExportError
from vkx.export.ops import Rule, same
from vkx.export.parallel import each
from vkx.format.op_quant import VALUES_PER_WORD, scale_groups

BITS = {"int8": 8, "int4": 4}
KEEP = "none"
"""An embedding or head scheme: the weight stays as it is (floating point)."""
GROUP_SIZES = (32, 64, 128, 256)
DEFAULT_GROUP = {8: None, 4: 32}
"""None: one group per row (per output channel)."""
DEFAULT_TABLES = "int8"
"""The embedding's and the head's scheme unless told."""


@dataclass(frozen=True)
class Scheme:
    """How one weight is quantized: bits, values a scale (None: the whole row), affine or symmetric."""

    bits: int
    group: int | None
    affine: bool

    @classmethod
    def named(cls, name: str, group_size: int | None = None) -> "Scheme":
        bits = BITS[name]
        return cls(bits, group_size or DEFAULT_GROUP[bits], affine=bits == 4)


def quantize_weight(weight: torch.Tensor, bits: int, group_size: int | None,
                    scale_dtype: torch.dtype = torch.float16,
                    affine: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed q, scales) of a 2-D weight: scales [N, ceil(K / group)], or [N, ceil(K / group), 2]
    (scale, offset) pairs where `affine`; the last group shorter where the group size does not
    divide K; group_size None means K."""
    w = weight.detach().to(torch.float32)
    n, k = w.shape
    group = k if group_size is None else group_size
    per_word = VALUES_PER_WORD[bits]
    if group <= 0 or group % per_word:
        raise ExportError(f"group size {group} must be a multiple of {per_word} for int{bits}")
    if k % per_word:
        raise ExportError(f"a weight of {k} input features is not whole 32-bit words of int{bits} "
                          f"(a multiple of {per_word})")
    qmin, qmax = (-8, 7) if bits == 4 else (-127, 127)
    groups = scale_groups(k, group)
    # a short last group is filled out with its own first value: it changes neither the group's largest
    # magnitude nor its range, and the filled positions are dropped below
    if groups * group == k:
        grouped = w.reshape(n, groups, group)
    else:
        tail = w[:, (groups - 1) * group:(groups - 1) * group + 1].expand(n, groups * group - k)
        grouped = torch.cat([w, tail], dim=1).reshape(n, groups, group)
    # each pass below writes into the one new tensor the first made (grouped may be the weight itself)
    if affine:
        low, high = grouped.amin(-1), grouped.amax(-1)
        scales = ((high - low) / (qmax - qmin)).to(scale_dtype)
        scales = torch.where(scales == 0, torch.ones_like(scales), scales)  # a constant group: q = 0
        offsets = (low - qmin * scales.to(torch.float32)).to(scale_dtype)
        q = grouped.sub(offsets.to(torch.float32).unsqueeze(-1)).div_(scales.to(torch.float32).unsqueeze(-1))
        stored = torch.stack([scales, offsets], dim=-1)
    else:
        scales = (grouped.abs().amax(-1) / qmax).to(scale_dtype)
        scales = torch.where(scales == 0, torch.ones_like(scales), scales)  # an all-zero group stays zero
        q = grouped.div(scales.to(torch.float32).unsqueeze(-1))
        stored = scales
    q = q.round_().clamp_(qmin, qmax).reshape(n, groups * group)[:, :k]
    if bits == 8:
        return q.to(torch.int8), stored
    u = q.add_(8).to(torch.uint8)
    return (u[:, 0::2] | (u[:, 1::2] << 4)).contiguous(), stored


def dequantize(packed: torch.Tensor, scales: torch.Tensor, bits: int, group_size: int) -> torch.Tensor:
    """The fp32 weight that (packed, scales) stand for."""
    if bits == 8:
        q = packed.to(torch.float32)
    else:
        low = (packed & 0xF).to(torch.int16) - 8
        high = (packed >> 4).to(torch.int16) - 8
        q = torch.stack([low, high], dim=-1).reshape(packed.shape[0], -1).to(torch.float32)
    k = q.shape[1]

    def spread(table: torch.Tensor) -> torch.Tensor:
        return table.to(torch.float32).repeat_interleave(group_size, dim=1)[:, :k]
    if scales.dim() == 3:
        return q * spread(scales[..., 0]) + spread(scales[..., 1])
    return q * spread(scales)


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


def quantize_module(module: nn.Module, scheme: str, group_size: int | None = None, *,
                    embedding: str | None = None, head: str | None = None, head_name: str | None = None) -> nn.Module:
    """A copy of `module` whose Linear and Embedding weights are quantized (`scheme` int8 or int4).

    `embedding` (every nn.Embedding) and `head` (the Linear named `head_name`, a causal LM's output
    projection) are int8, int4 or "none" (kept as they are); None: DEFAULT_TABLES. A Linear whose weight
    is an Embedding's (tied) is quantized once, with the embedding's scheme. The copy shares every tensor
    it does not quantize with `module`.
    """
    if scheme not in BITS:
        raise ExportError(f"--quantize must be one of {', '.join(BITS)}, not {scheme!r}")
    if group_size is not None and group_size not in GROUP_SIZES:
        raise ExportError(f"--group-size must be one of {', '.join(map(str, GROUP_SIZES))}, not {group_size}")
    for option, value in (("--quantize-embedding", embedding), ("--quantize-head", head)):
        if value is not None and value not in (*BITS, KEEP):
            raise ExportError(f"{option} must be one of {', '.join((*BITS, KEEP))}, not {value!r}")
    body = Scheme.named(scheme, group_size)

    def table(name: str | None) -> Scheme | None:
        name = name or DEFAULT_TABLES
        return None if name == KEEP else Scheme.named(name, group_size if BITS[name] == body.bits else None)
    tables = {"embedding": table(embedding), "head": table(head)}
    embedded = {id(m.weight) for m in module.modules() if isinstance(m, nn.Embedding)}
    if head is not None and head_name is not None and head != (embedding or DEFAULT_TABLES):
        tied = dict(module.named_modules()).get(head_name)
        if tied is not None and id(getattr(tied, "weight", None)) in embedded:
            raise ExportError(f"{head_name} is tied to the token embedding (one weight): --quantize-head "
                              f"{head} differs from --quantize-embedding {embedding or DEFAULT_TABLES}")
    chosen: dict[int, tuple[str, nn.Module, Scheme | None]] = {}  # id(weight) -> the first layer of it, its scheme
    for name, layer in ([(type(module).__name__, module)] if isinstance(module, (nn.Linear, nn.Embedding))
                        else module.named_modules()):
        if isinstance(layer, (nn.Linear, nn.Embedding)) and id(layer.weight) not in chosen:
            table = "embedding" if id(layer.weight) in embedded else "head" if name == head_name else None
            chosen[id(layer.weight)] = (name, layer, body if table is None else tables[table])

    def quantized(item: tuple[str, nn.Module, Scheme | None]) -> tuple[torch.Tensor, torch.Tensor, int, int] | None:
        name, layer, scheme = item
        if scheme is None:
            return None
        weight = layer.weight
        scale_dtype = torch.bfloat16 if weight.dtype == torch.bfloat16 else torch.float16
        group = scheme.group or weight.shape[1]
        try:
            return (*quantize_weight(weight, scheme.bits, group, scale_dtype, scheme.affine), scheme.bits, group)
        except ExportError as error:
            raise ExportError(f"{type(layer).__name__} {name!r}: {error}") from None
    done = dict(zip(chosen, each(quantized, chosen.values())))

    def replace(name: str, layer: nn.Module) -> nn.Module:
        if done[id(layer.weight)] is None:
            return layer
        kind = QuantLinear if isinstance(layer, nn.Linear) else QuantEmbedding
        return kind(layer, *done[id(layer.weight)])

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
