"""bf16 weights computed in fp32: what a bf16 language model exports as.

bf16 keeps 8 bits of mantissa. Rounding every activation to it between ops moves a real model's
logits by ~0.2 (SmolLM2-135M; docs/benchmarks.md, "Quality on real weights"), enough to swap its
two top tokens, while a Vulkan device computes bf16 in fp32 anyway (its shaders widen the 16 bits
with a shift). So the matrices (Linear, Embedding and transformers' Conv1D weights: nearly all the
bytes) and the RMSNorms' weights stay bf16, and every activation, cache, bias and other small tensor
is fp32. Each matrix is read through an exact `.float()` that the export does not compute (vkx.export.ops'
WIDENED_READERS): the product and the gather read the bf16 bytes as stored. An RMSNorm multiplies its
fp32 row by its bf16 weight (the product is fp32, as torch promotes), so the loader folds it into the
products after it as it does in a 16-bit model (vkx.loader.build.fuse).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.pytorch_utils import Conv1D

from vkx.export.parallel import each


class WideLinear(nn.Linear):
    """nn.Linear with a bf16 weight and fp32 activations."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.float(), self.bias)


class WideEmbedding(nn.Embedding):
    """nn.Embedding with a bf16 table giving fp32 rows."""

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        return F.embedding(indices, self.weight.float(), self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)


class WideConv1D(Conv1D):
    """transformers' Conv1D (GPT-2's projections, weight [in, out]) with a bf16 weight."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight.float())
        return flat.view(*x.shape[:-1], self.nf)


WIDE = {nn.Linear: WideLinear, nn.Embedding: WideEmbedding, Conv1D: WideConv1D}
"""The modules whose weight stays bf16 and is read widened, by exact type (a subclass may compute
otherwise: it goes fp32)."""


def _is_rms_norm(module: nn.Module) -> bool:
    """transformers' RMSNorms (LlamaRMSNorm, Qwen3RMSNorm, ...): `weight * row`, which takes a bf16 weight
    and an fp32 row (torch promotes). LayerNorm does not: its parameters go fp32."""
    return type(module).__name__.endswith("RMSNorm")


def widen_bf16(module: nn.Module) -> None:
    """In place: the weight of each WIDE module in bf16 and read as fp32, each RMSNorm's weight bf16;
    every other floating parameter and buffer fp32. A tensor already in its dtype is kept (a
    checkpoint's bytes stay referenced); a tied one is converted once."""
    slots = [(table, name, t, _dtype(m, name, table is m._parameters)) for m in module.modules()
             for table in (m._parameters, m._buffers) for name, t in table.items() if t is not None]
    stale = {(id(t), dtype): t for _, _, t, dtype in slots if t.is_floating_point() and t.dtype != dtype}
    casts = each(lambda item: item[1].detach().to(item[0][1]), stale.items())
    converted = {key: nn.Parameter(data, requires_grad=False) if isinstance(stale[key], nn.Parameter) else data
                 for key, data in zip(stale, casts)}
    for table, name, t, dtype in slots:
        table[name] = converted.get((id(t), dtype), t)
    for m in module.modules():
        if type(m) in WIDE:
            m.__class__ = WIDE[type(m)]


def _dtype(module: nn.Module, name: str, parameter: bool) -> torch.dtype:
    """What widen_bf16 stores a tensor of `module` in: bf16 for a WIDE module's or an RMSNorm's weight."""
    narrow = type(module) in WIDE or _is_rms_norm(module)
    return torch.bfloat16 if parameter and narrow and name == "weight" else torch.float32
