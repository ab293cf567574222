"""Weight-only quantized ops: `vkx.linear_q` and `vkx.embedding_q` (layout in vkx.format.contract),
and those of ExecuTorch's quantized Vulkan files (`et_vk.linear_q4gsw`, `et_vk.embedding_q4gsw`,
`torchao.dequantize_affine`, and from its PT2E
weight-only flow `aten._weight_int8pack_mm`, `et_vk.linear_qcs4w`).

The packed weight goes to the device as its file bytes and is dequantized in the
shader, accumulating in fp32. One row of activations (decode) takes
`shaders/matvec_q.comp` (16-byte weight loads, vec4 activations, the zero point and scale
once per 16 bytes) where the row is whole 16-byte chunks inside the scale groups; other
shapes take `shaders/linear_q.comp`. A weight larger than one storage binding is
dispatched in row blocks.
"""
from __future__ import annotations

import struct
from typing import Sequence

from vkx.format.contract import Call
from vkx.format.op_quant import VALUES_PER_WORD

from . import OpBuilder, TensorArg, UnsupportedOpError, builds, elem_defines, read_defines
from .gemm import MAX_MATVEC_ROWS, Operand, RowNorm, gemm, load4, matvec_shape
from .shape import MAX_GROUPS, dispatch_groups, row_chunks, rows_binding

ROWS = 4
"""Output rows per linear_q workgroup (ROWS in shaders/linear_q.comp)."""

def _linear(builder: OpBuilder, x: TensorArg, w: TensorArg, s: TensorArg, bias: TensorArg | None,
            out: TensorArg, bits: int, group: int, norm: RowNorm | None = None, **variant: str | int) -> None:
    """A linear over a packed weight [N, K / values a byte] (`variant`: its packing defines):
    matvec_q.comp for one row of activations whose weight rows are whole 16-byte chunks, each
    inside one scale group; for DEQUANT_ROWS rows or more, the weight dequantized, then the float
    products (`_dequantized`); linear_q.comp for the rest."""
    n_rows, stored = w.shape
    k = x.shape[-1]
    m = x.numel // k if k else 0
    defines = {"BITS": bits, **variant, **elem_defines("X", "x", x.dtype), **read_defines(builder, "S", "s", s),
               **elem_defines("O", "o", out.dtype)}
    if bias is not None:
        defines.update(HAS_BIAS=1, **read_defines(builder, "B", "bias", bias))
    if m == 0 or n_rows == 0:
        return
    if m == 1 and group % (128 // bits) == 0 and -(-n_rows // MAX_MATVEC_ROWS) <= MAX_GROUPS:  # whole 16-byte chunks a group
        _matvec(builder, x, w, s, bias, out, bits, group, defines, norm)
        return
    if norm is not None:
        raise UnsupportedOpError(f"an RMSNorm folded into a {bits}-bit product of {m} rows of {k}")
    if m >= DEQUANT_ROWS and _dequantized(builder, x, w, s, bias, out, bits, group, variant):
        return
    words = k // VALUES_PER_WORD[bits]
    # int8: 16-byte weight loads, each inside one scale group. int4 keeps word loads: read 16 bytes
    # at a time here, an invocation's 32 activations a load were scattered across the workgroup.
    if bits == 8 and words % 4 == 0 and group % (4 * VALUES_PER_WORD[bits]) == 0 and stored == 4 * words:
        defines["VEC"] = 1
    stride = s.shape[1] if "SCALE_STRIDE" in defines else 0
    for r0, rc in row_chunks(builder, n_rows, stored, [w]):
        push = struct.pack("<8I", n_rows, k, k // VALUES_PER_WORD[bits], k // group, group, r0, rc, stride)
        bindings = [x, rows_binding(w, r0, rc, stored), s, out] + ([bias] if bias is not None else [])
        builder.dispatch("linear_q", bindings, push, (-(-rc // ROWS), m, 1), defines)


DEQUANT_ROWS = 16
"""Products of at least this many rows of activations dequantize the weight once a call
(shaders/dequant_q.comp, into the graph's "dequant" scratch, in the activations' dtype) and take
the float product kernels (tiles; the tensor cores for fp16 where the device has them): linear_q.comp
reads every weight byte once a row (the H200's int4 prefill of 512 tokens: 163 of 167 ms)."""


def _dequantized(builder: OpBuilder, x: TensorArg, w: TensorArg, s: TensorArg, bias: TensorArg | None,
                 out: TensorArg, bits: int, group: int, variant: dict) -> bool:
    """The product through a dequantized weight, where its rows are exactly K values in whole words
    of one scale group each and the weight and its float form fit one binding; False: not taken."""
    n_rows, stored = w.shape
    k = x.shape[-1]
    per_word = VALUES_PER_WORD[bits]
    m = x.numel // k
    limit = builder.limits.max_storage_buffer_range
    if stored * 8 // bits != k or k % per_word or group % per_word or w.nbytes > limit \
            or n_rows * k * x.dtype.itemsize > limit \
            or (bias is not None and bias.numel not in (n_rows, m * n_rows)):
        return False
    weight = builder.scratch((n_rows, k), "dequant", x.dtype)
    words = k // per_word
    defines = {"BITS": bits, **variant, **read_defines(builder, "S", "s", s), **elem_defines("O", "o", x.dtype)}
    push = struct.pack("<5I", n_rows * words, words, k // group, group, s.shape[1] if "SCALE_STRIDE" in variant else 0)
    builder.dispatch("dequant_q", [w, s, weight], push, dispatch_groups(n_rows * words), defines)
    if bias is not None:
        bias = Operand(bias, 0, 0 if bias.numel == n_rows else n_rows, 1)
    gemm(builder, Operand(x, 0, k, 1), Operand(weight, 0, 1, k), Operand(out, 0, n_rows, 1), m, n_rows, k,
         bias=bias)
    return True


def _norm(defines: dict, bindings: list[TensorArg], push: bytes, norm: RowNorm | None) -> tuple[list, bytes]:
    """matvec_q.comp's NORM where an RMSNorm is folded in: its weight bound after `bindings`, eps pushed."""
    if norm is None:
        return bindings, push
    defines.update(load4("G", "g", norm.weight.dtype), NORM=1, NORM_BINDING=len(bindings))
    return [*bindings, norm.weight], push + struct.pack("<f", norm.eps)


def _matvec(builder: OpBuilder, x: TensorArg, w: TensorArg, s: TensorArg, bias: TensorArg | None,
            out: TensorArg, bits: int, group: int, defines: dict[str, str | int], norm: RowNorm | None) -> None:
    """matvec_q.comp: one row of activations, rows of whole 16-byte chunks each inside a scale group
    (x an RMSNorm's input where `norm` is given)."""
    n_rows, stored = w.shape
    chunks = stored // 16
    shape, extra = matvec_shape(builder, "matvec_q", chunks, n_rows)
    defines = {**defines, **load4("X", "x", x.dtype), **extra}
    stride = s.shape[1] if "SCALE_STRIDE" in defines else 0
    for r0, rc in row_chunks(builder, n_rows, stored, [w]):
        push = struct.pack("<8I", chunks, x.shape[-1] // group, group * bits // 128, r0, rc, stride, 0, 0)
        bindings = [x, rows_binding(w, r0, rc, stored), s, out] + ([bias] if bias is not None else [])
        bindings, push = _norm(defines, bindings, push, norm)
        builder.dispatch("matvec_q", bindings, push, (-(-rc // shape.rows), 1, 1), defines,
                         (shape.invocations,))


def linear_q_row(builder: OpBuilder, x: TensorArg, w: TensorArg, s: TensorArg, bias: TensorArg | None,
                 out: TensorArg, bits: int, group: int, norm: RowNorm | None = None) -> None:
    """vkx.linear_q's kernels on tensors (a fused step's: vkx.loader.fuse reads a residual as `bias`,
    or folds an RMSNorm of x in)."""
    _linear(builder, x, w, s, bias, out, bits, group, norm)


def _matvec_whole(builder: OpBuilder, x: TensorArg, weights: Sequence[tuple[TensorArg, TensorArg]],
                  outs: Sequence[TensorArg], bits: int, group: int, kind: str, norm: RowNorm | None) -> None:
    """matvec_q.comp's GLU (two weights, one output) or SEGMENTS (three weights, three outputs) over
    vkx's packing: weights [N_i, K / values a byte] with scales [N_i, K / group], each tensor within
    one binding, rows of whole 16-byte chunks inside the scale groups."""
    tensors = [x, *outs, *(t for pair in weights for t in pair)]
    if group % (128 // bits) or any(t.nbytes > builder.limits.max_storage_buffer_range for t in tensors) \
            or any(w.shape[1] != weights[0][0].shape[1] for w, _ in weights):
        raise UnsupportedOpError(f"{kind} of {[list(w.shape) for w, _ in weights]} {bits}-bit weights: each "
                                 f"tensor within one binding, rows of whole 16-byte chunks a scale group")
    chunks = weights[0][0].shape[1] // 16
    rows = [w.shape[0] for w, _ in weights]
    grid = rows if kind == "SEGMENTS" else rows[:1]  # GLU: a workgroup's rows of both weights
    shape, extra = matvec_shape(builder, "matvec_q", chunks, sum(grid))
    defines = {"BITS": bits, kind: 1, **elem_defines("X", "x", x.dtype), **load4("X", "x", x.dtype), **extra}
    bindings: list[TensorArg] = [x]
    stores: list[TensorArg | None] = [*outs, *[None] * (len(weights) - len(outs))]  # GLU: one output
    for i, ((w, s), out) in enumerate(zip(weights, stores)):
        suffix = "" if i == 0 else str(i + 1)
        defines.update(read_defines(builder, "S" + suffix, "s" + suffix, s))
        bindings += [w, s]
        if out is not None:
            defines.update(elem_defines("O" + suffix, "o" + suffix, out.dtype))
            bindings.append(out)
    push = struct.pack("<8I", chunks, x.shape[-1] // group, group * bits // 128, 0, rows[0], 0,
                       *(rows[1:] + [0, 0])[:2])
    workgroups = sum(-(-n // shape.rows) for n in grid)
    bindings, push = _norm(defines, bindings, push, norm)
    builder.dispatch("matvec_q", bindings, push, (workgroups, 1, 1), defines, (shape.invocations,))


def swiglu_q_row(builder: OpBuilder, x: TensorArg, gate: tuple[TensorArg, TensorArg],
                 up: tuple[TensorArg, TensorArg], out: TensorArg, bits: int, group: int,
                 norm: RowNorm | None = None) -> None:
    """out = silu(x @ gate^T) * (x @ up^T) for one row x (an RMSNorm's input where `norm` is given),
    each weight (rows, scales) of vkx.linear_q's packing and of one shape: one dispatch."""
    _matvec_whole(builder, x, [gate, up], [out], bits, group, "GLU", norm)


def products_q_row(builder: OpBuilder, x: TensorArg, weights: Sequence[tuple[TensorArg, TensorArg]],
                   outs: Sequence[TensorArg], bits: int, group: int, norm: RowNorm | None = None) -> None:
    """outs[i] = x @ weights[i]^T for one row x (an RMSNorm's input where `norm` is given) and three
    weights (rows, scales) of vkx.linear_q's packing over the same K: one dispatch."""
    _matvec_whole(builder, x, weights, outs, bits, group, "SEGMENTS", norm)


@builds("vkx.linear_q.default")
def linear_q(builder: OpBuilder, call: Call) -> None:
    _linear(builder, call.tensor("input"), call.tensor("weight"), call.tensor("scales"), call["bias"], call.out,
            call["bits"], call["group_size"])


@builds("vkx.embedding_q.default")
def embedding_q(builder: OpBuilder, call: Call) -> None:
    w, s, idx, out = call.tensor("weight"), call.tensor("scales"), call.tensor("indices"), call.out
    bits, group = call["bits"], call["group_size"]
    vocab, stored = w.shape
    k = out.shape[-1]
    n = idx.numel * k
    if n == 0:
        return
    defines = {"BITS": bits, **read_defines(builder, "S", "s", s), **elem_defines("I", "idx", idx.dtype),
               **elem_defines("O", "o", out.dtype)}
    blocks = list(row_chunks(builder, vocab, stored, [w])) or [(0, 0)]
    for r0, rc in blocks:
        last = int(r0 + rc == vocab)
        push = struct.pack("<9I", n, k, k // VALUES_PER_WORD[bits], k // group, group, r0, rc, vocab, last)
        builder.dispatch("embedding_q", [rows_binding(w, r0, rc, stored), s, idx, out], push,
                         dispatch_groups(n), defines)


# --------------------------------------------------------------------------- ExecuTorch's quantized ops

@builds("et_vk.linear_q4gsw.default")
def linear_q4gsw(builder: OpBuilder, call: Call) -> None:
    q4gsw(builder, call.tensor("self"), call)


def q4gsw(builder: OpBuilder, x: TensorArg, call: Call) -> None:
    """`x` times the weight of a linear_q4gsw-shaped call (also linear_dq8ca_q4gsw's): vkx's 4-bit packing,
    the scales transposed, [groups, N padded to 4] (their row length a push constant)."""
    s = call.tensor("weight_scales")
    _linear(builder, x, call.tensor("weights"), s, call["bias"], call.out, 4, call["group_size"],
            SCALE_STRIDE=1)


@builds("aten._weight_int8pack_mm.default")
def weight_int8pack_mm(builder: OpBuilder, call: Call) -> None:
    """vkx's 8-bit layout with one scale per row."""
    x = call.tensor("self")
    _linear(builder, x, call.tensor("mat2"), call.tensor("scales"), None, call.out, 8, x.shape[-1])


@builds("et_vk.linear_qcs4w.default")
def linear_qcs4w(builder: OpBuilder, call: Call) -> None:
    """4-bit, even k in the high nibble, one scale per row."""
    x = call.tensor("self")
    _linear(builder, x, call.tensor("weight"), call.tensor("scales"), None, call.out, 4, x.shape[-1], HIGH_FIRST=1)


@builds("et_vk.embedding_q4gsw.default")
def embedding_q4gsw(builder: OpBuilder, call: Call) -> None:
    """embedding_q.comp; rows may be padded to whole words, and the nibble order is either."""
    w, s, idx, out = call.tensor("weight"), call.tensor("weight_scales"), call.tensor("indices"), call.out
    group = call["group_size"]
    vocab, stored = w.shape
    k = out.shape[-1]
    n = idx.numel * k
    if n == 0:
        return
    defines = {"BITS": 4, **read_defines(builder, "S", "s", s), **elem_defines("I", "idx", idx.dtype),
               **elem_defines("O", "o", out.dtype)}
    if not call["is_linear_weight"]:
        defines["HIGH_FIRST"] = 1
    blocks = list(row_chunks(builder, vocab, stored, [w])) or [(0, 0)]
    for r0, rc in blocks:
        last = int(r0 + rc == vocab)
        push = struct.pack("<9I", n, k, stored // 4, k // group, group, r0, rc, vocab, last)
        builder.dispatch("embedding_q", [rows_binding(w, r0, rc, stored), s, idx, out], push,
                         dispatch_groups(n), defines)


@builds("torchao.dequantize_affine.default")
def dequantize_affine(builder: OpBuilder, call: Call) -> None:
    """Each call, as ExecuTorch runs it: its output is an activation (planned memory may be shared)."""
    q, s, zp, out = call.tensor("input"), call.tensor("scale"), call["zero_point"], call.out
    big = [t for t in (q, s, out) if t.nbytes > builder.limits.max_storage_buffer_range]
    if big:
        raise UnsupportedOpError(f"{call.node}: a {list(big[0].shape)} tensor is larger than one storage binding")
    if out.numel == 0:
        return
    rows, cols = q.shape
    block_r, block_c = call["block_size"]
    defines = {**read_defines(builder, "Q", "q", q), **read_defines(builder, "S", "s", s),
               **elem_defines("O", "o", out.dtype)}
    bindings = [q, s, out]
    if zp is not None:
        defines.update(HAS_ZP=1, **read_defines(builder, "Z", "zp", zp))
        bindings.append(zp)
    push = struct.pack("<5I", out.numel, cols, block_r, block_c, cols // block_c)
    builder.dispatch("dequantize_affine", bindings, push, dispatch_groups(out.numel), defines)
