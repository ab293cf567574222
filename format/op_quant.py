"""The op contract's weight-only quantized ops: vkx's own (`vkx.linear_q`, `vkx.embedding_q`) and
the ones ExecuTorch 1.5.1's Vulkan backend writes. docs/format.md, "Quantized weights"."""
from __future__ import annotations

import math

from . import dtypes
from .contract import Arg, Call, OpDecl, Out, Rule, TensorLike
from .op_rules import ALL_TYPES, B, I, L, N, S, T, optional, same_shape

DECLS: list[OpDecl] = []
"""This module's declarations, in order (`vkx.format.opset` assembles the table)."""
declare = DECLS.append


# --------------------------------------------------------------------------- weight-only quantization
# Weight-only, per group of `group_size` consecutive k of a row (the last group shorter where group_size does
# not divide K): symmetric w[n, k] = q[n, k] * scale[n, g] with scales [N, G], or affine w[n, k] =
# q[n, k] * scale[n, g] + offset[n, g] with scales [N, G, 2] holding (scale, offset) pairs; g = k // group_size,
# G = ceil(K / group_size). bits 8: `weight` is int8 [N, K]; bits 4: `weight` is uint8 [N, K / 2], two values
# per byte (even k in the low nibble), each stored as q + 8 (q in [-8, 7]). Per-channel is group_size = K.
# docs/format.md, "Quantized weights".

QUANT_BITS = {4: dtypes.UINT8, 8: dtypes.INT8}
"""bits -> the dtype of the packed weight."""
VALUES_PER_WORD = {4: 8, 8: 4}
"""Values in one 32-bit word of packed weight: shaders read whole words, so K and the group size
are multiples of it."""


def scale_groups(k: int, group: int) -> int:
    """Scale groups of a row of K values: the last is shorter where `group` does not divide K."""
    return -(-k // group)


def is_affine(scales: TensorLike) -> bool:
    """Whether `scales` holds (scale, offset) pairs, [N, G, 2] (else one scale a group, [N, G])."""
    return len(scales.shape) == 3


def quant_layout(call: Call, weight: TensorLike) -> tuple[int, int, int]:
    """(N, K, groups per row) of a packed weight; checks bits, dtype, group size and scales."""
    bits, group = call["bits"], call["group_size"]
    call.require(bits in QUANT_BITS, f"bits {bits}: 4 or 8")
    call.require(weight.dtype is QUANT_BITS[bits] and len(weight.shape) == 2,
                 f"a {bits}-bit weight is a 2-D {QUANT_BITS[bits]} tensor, not {weight.dtype} {list(weight.shape)}")
    n, stored = weight.shape
    k = stored * 2 if bits == 4 else stored
    per_word = VALUES_PER_WORD[bits]
    call.require(group > 0 and group % per_word == 0 and k % per_word == 0,
                 f"group_size {group} and K = {k} must be multiples of {per_word}")
    scales = call.tensor("scales")
    call.require(scales.dtype.is_float, f"scales of {scales.dtype}")
    call.expect_shape("scales", scales.shape, (n, scale_groups(k, group), *((2,) if is_affine(scales) else ())))
    return n, k, scale_groups(k, group)


def _linear_q(call: Call) -> None:
    x = call.tensor("input")
    n, k, _ = quant_layout(call, call.tensor("weight"))
    call.require(len(x.shape) >= 1 and x.shape[-1] == k and x.dtype.is_float,
                 f"input {x.dtype} {list(x.shape)} does not have K = {k}")
    if call["bias"] is not None:
        call.expect_shape("bias", call["bias"].shape, (n,))
    call.require(call.out.dtype.is_float, f"output of {call.out.dtype}")
    call.expect_shape("the output", call.out.shape, (*x.shape[:-1], n))


def _embedding_q(call: Call) -> None:
    _, k, _ = quant_layout(call, call.tensor("weight"))
    idx = call.tensor("indices")
    call.require(not idx.dtype.is_float, f"indices of {idx.dtype}")
    call.require(call.out.dtype.is_float, f"output of {call.out.dtype}")
    call.expect_shape("the output", call.out.shape, (*idx.shape, k))


declare(OpDecl("vkx.linear_q.default",
               (Arg("input", T), Arg("weight", T), Arg("scales", T), optional("bias", T, None), Arg("bits", I),
                Arg("group_size", I)), dtypes=ALL_TYPES, rule=_linear_q))
declare(OpDecl("vkx.embedding_q.default",
               (Arg("weight", T), Arg("scales", T), Arg("indices", T), Arg("bits", I), Arg("group_size", I)),
               dtypes=ALL_TYPES, rule=_embedding_q))


# --------------------------------------------------------------------------- ExecuTorch's quantized ops
# As ExecuTorch 1.5.1's Vulkan backend writes them (arguments in its schemas' order, semantics of its
# reference kernels in executorch/backends/vulkan/custom_ops_lib.py; the packing is applied at export by
# its patterns/quantized_linear.py and quantized_embedding.py). docs/format.md, "Quantized weights".

ET_SCALE_ALIGN = 4
"""ExecuTorch pads the width of linear_q4gsw's scales (N) and bias to a multiple of 4."""


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def _linear_q4gsw(call: Call) -> None:
    """weights uint8 [N, K / 2] (value k at byte k / 2, even k in the low nibble, stored as q + 8),
    weight_scales [K / group_size, N padded to 4] (transposed), bias [N] or [N padded to 4]."""
    x, w, s = call.tensor("self"), call.tensor("weights"), call.tensor("weight_scales")
    call.require(len(x.shape) >= 1 and x.dtype.is_float, f"input {x.dtype} {list(x.shape)}")
    k = x.shape[-1]
    call.require(w.dtype is dtypes.UINT8 and len(w.shape) == 2,
                 f"weights must be 2-D uint8, not {w.dtype} {list(w.shape)}")
    n = w.shape[0]
    call.require(k % 8 == 0 and w.shape[1] * 2 == k,
                 f"weights {list(w.shape)} for K = {k}: vkx runs K a multiple of 8 (unpadded rows)")
    group = call["group_size"]
    call.require(group > 0 and k % group == 0 and group % 8 == 0,
                 f"group_size {group} must divide K = {k} and be a multiple of 8")
    call.require(s.dtype.is_float, f"weight_scales of {s.dtype}")
    call.expect_shape("weight_scales", s.shape, (k // group, _round_up(n, ET_SCALE_ALIGN)))
    bias = call["bias"]
    if bias is not None:
        call.require(bias.dtype.is_float and tuple(bias.shape) in ((n,), (_round_up(n, ET_SCALE_ALIGN),)),
                     f"bias {bias.dtype} {list(bias.shape)} for N = {n}")
    call.require(call.out.dtype.is_float, f"output of {call.out.dtype}")
    call.expect_shape("the output", call.out.shape, (*x.shape[:-1], n))


def _embedding_q4gsw(call: Call) -> None:
    """weight uint8 [vocab, D / 2 padded to 4 bytes], weight_scales [vocab, D / group_size];
    is_linear_weight: even d in the low nibble (else the high one)."""
    w, s, idx = call.tensor("weight"), call.tensor("weight_scales"), call.tensor("indices")
    call.require(w.dtype is dtypes.UINT8 and len(w.shape) == 2 and w.shape[1] % 4 == 0,
                 f"weight must be 2-D uint8 of whole 32-bit words a row, not {w.dtype} {list(w.shape)}")
    call.require(not idx.dtype.is_float, f"indices of {idx.dtype}")
    call.require(call.out.dtype.is_float and len(call.out.shape) == len(idx.shape) + 1,
                 f"output {call.out.dtype} {list(call.out.shape)}")
    d = call.out.shape[-1]
    call.require(0 < d <= w.shape[1] * 2, f"embedding width {d} for weight {list(w.shape)}")
    group = call["group_size"]
    call.require(group > 0 and d % group == 0, f"group_size {group} must divide the width {d}")
    call.require(s.dtype.is_float, f"weight_scales of {s.dtype}")
    call.expect_shape("weight_scales", s.shape, (w.shape[0], d // group))
    call.expect_shape("the output", call.out.shape, (*idx.shape, d))


def _dequantize_affine(call: Call) -> None:
    """out = (input - zero_point) * scale per block of `block_size` (2-D input; torchao's op)."""
    q, s = call.tensor("input"), call.tensor("scale")
    call.require(not q.dtype.is_float and len(q.shape) == 2, f"input must be a 2-D integer tensor, not "
                                                             f"{q.dtype} {list(q.shape)}")
    block = call["block_size"]
    call.require(len(block) == 2 and all(b > 0 and d % b == 0 for b, d in zip(block, q.shape)),
                 f"block_size {list(block)} does not tile {list(q.shape)}")
    grid = math.prod(d // b for d, b in zip(q.shape, block))
    call.require(s.dtype.is_float and math.prod(s.shape) == grid, f"scale {s.dtype} {list(s.shape)} "
                                                                  f"for {grid} blocks")
    if call["zero_point"] is not None:
        call.require(math.prod(call["zero_point"].shape) == grid, f"zero_point {list(call['zero_point'].shape)} "
                                                                  f"for {grid} blocks")
    call.require(call.out.dtype.is_float, f"output of {call.out.dtype}")
    same_shape(call, "input")


declare(OpDecl("et_vk.linear_q4gsw.default",
               (Arg("self", T), Arg("weights", T), Arg("weight_scales", T), Arg("group_size", I),
                optional("bias", T, None)), dtypes=ALL_TYPES, rule=_linear_q4gsw))
declare(OpDecl("et_vk.embedding_q4gsw.default",
               (Arg("weight", T), Arg("weight_scales", T), Arg("group_size", I), Arg("indices", T),
                Arg("is_linear_weight", B, default=False)), dtypes=ALL_TYPES, rule=_embedding_q4gsw))
declare(OpDecl("torchao.dequantize_affine.default",
               (Arg("input", T), Arg("block_size", L), Arg("scale", T), optional("zero_point", T),
                optional("input_dtype", I, None), optional("quant_min", N, None), optional("quant_max", N, None),
                optional("output_dtype", I, 6)), dtypes=ALL_TYPES, rule=_dequantize_affine))


def _per_channel(bits: int, weight: str) -> Rule:
    """ExecuTorch's per-channel weight-only linears (its PT2E VulkanQuantizer flow): self [..., K],
    a packed weight [N, K / (8 / bits)] (4-bit: even k in the high nibble, q + 8), scales [N]."""
    def rule(call: Call) -> None:
        x, w, s = call.tensor("self"), call.tensor(weight), call.tensor("scales")
        call.require(len(x.shape) >= 1 and x.dtype.is_float, f"input {x.dtype} {list(x.shape)}")
        k = x.shape[-1]
        call.require(w.dtype is QUANT_BITS[bits] and len(w.shape) == 2 and w.shape[1] * (8 // bits) == k,
                     f"{weight} {w.dtype} {list(w.shape)} is not a {bits}-bit [N, K] weight for K = {k}")
        call.require(k % VALUES_PER_WORD[bits] == 0, f"K = {k} must be a multiple of {VALUES_PER_WORD[bits]}")
        call.require(s.dtype.is_float, f"scales of {s.dtype}")
        call.expect_shape("scales", s.shape, (w.shape[0],))
        call.require(call.out.dtype.is_float, f"output of {call.out.dtype}")
        call.expect_shape("the output", call.out.shape, (*x.shape[:-1], w.shape[0]))
    return rule


declare(OpDecl("aten._weight_int8pack_mm.default", (Arg("self", T), Arg("mat2", T), Arg("scales", T)),
               dtypes=ALL_TYPES, rule=_per_channel(8, "mat2")))
declare(OpDecl("et_vk.linear_qcs4w.default", (Arg("self", T), Arg("weight", T), Arg("scales", T)),
               dtypes=ALL_TYPES, rule=_per_channel(4, "weight")))


# --------------------------------------------------------------------------- dynamically quantized activations
# ExecuTorch's 8da4w linears (its LLM recipe's `-qmode 8da4w`): each row of activations gets an int8 scale
# and zero point from torchao.choose_qparams_affine, and et_vk.linear_dq8ca_q4gsw multiplies the row as
# quantized with them, (clamp(round(x * (1 / scale)) + zp, -128, 127) - zp) * scale, by the 4-bit weight
# of linear_q4gsw. docs/format.md, "Quantized weights".

ACT_QMIN, ACT_QMAX = -128, 127
"""The int8 range the recipe quantizes activations to."""


def _choose_qparams(call: Call) -> None:
    """Per block of `block_size` (1 in every dim but the last, which it covers): ASYMMETRIC int8
    scale = (max(x, 0) - min(x, 0)) / 255 (at least eps), zero_point = -128 - round(min(x, 0) / scale)."""
    x, (scale, zero) = call.tensor("input"), call.outputs
    block = list(call["block_size"])
    call.require(call["mapping_type"] == "ASYMMETRIC", f"mapping_type {call['mapping_type']!r}: vkx runs ASYMMETRIC")
    call.require(x.dtype.is_float and len(x.shape) >= 1 and block == [1] * (len(x.shape) - 1) + [x.shape[-1]],
                 f"block_size {block} for input {x.dtype} {list(x.shape)}: vkx takes whole last-dim rows")
    call.require((call["quant_min"], call["quant_max"]) == (ACT_QMIN, ACT_QMAX),
                 f"range [{call['quant_min']}, {call['quant_max']}]: vkx runs int8's [-128, 127]")
    call.require(scale.dtype.is_float and zero.dtype in (dtypes.INT8, dtypes.INT32),
                 f"scale of {scale.dtype}, zero_point of {zero.dtype}")
    rows = tuple(x.shape[:-1]) + ((1,) if call["keepdim"] else ())
    call.expect_shape("scale", scale.shape, rows)
    call.expect_shape("zero_point", zero.shape, rows)


def _linear_dq8ca_q4gsw(call: Call) -> None:
    _linear_q4gsw(call)
    x, s, z = call.tensor("self"), call.tensor("input_scales"), call.tensor("input_zp")
    rows = math.prod(x.shape[:-1])
    call.require(s.dtype.is_float and math.prod(s.shape) == rows, f"input_scales {s.dtype} {list(s.shape)} for "
                                                                   f"{rows} rows")
    call.require(z.dtype in (dtypes.INT8, dtypes.INT32) and math.prod(z.shape) == rows,
                 f"input_zp {z.dtype} {list(z.shape)} for {rows} rows")


declare(OpDecl("torchao.choose_qparams_affine.default",
               (Arg("input", T), Arg("mapping_type", S), Arg("block_size", L), optional("target_dtype", I, None),
                optional("quant_min", I, None), optional("quant_max", I, None), optional("eps", N, None),
                optional("scale_dtype", I, None), optional("zero_point_dtype", I, None),
                Arg("keepdim", B, default=False)),
               out=Out(("scale", "zero_point")), dtypes=ALL_TYPES, rule=_choose_qparams))
declare(OpDecl("et_vk.linear_dq8ca_q4gsw.default",
               (Arg("self", T), Arg("input_scales", T), Arg("input_zp", T), Arg("weights", T), Arg("weight_sums", T),
                Arg("weight_scales", T), Arg("group_size", I), optional("bias", T, None)),
               dtypes=ALL_TYPES, rule=_linear_dq8ca_q4gsw))
