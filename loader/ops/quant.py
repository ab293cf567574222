"""Weight-only quantized ops: `vkx.linear_q` and `vkx.embedding_q` (layout in vkx.format.contract),
and those of ExecuTorch's quantized Vulkan files (`et_vk.linear_q4gsw`, `et_vk.embedding_q4gsw`,
`torchao.dequantize_affine`, and from its PT2E
weight-only flow `aten._weight_int8pack_mm`, `et_vk.linear_qcs4w`).

The packed weight goes to the device as its file bytes and is dequantized in the
shader, accumulating in fp32. One row of activations (decode) takes
`shaders/matvec_q.comp` (16-byte weight loads, vec4 activations, the zero point and scale
once per 16 bytes) where the row is whole 16-byte chunks inside the scale groups; other
shapes take `shaders/linear_q.comp`. A weight larger than one storage binding is
dispatched in row blocks. vkx's affine scales ([N, groups, 2] (scale, offset) pairs) take each
kernel's AFFINE variant, the pairs in the scales' one binding.
"""
from __future__ import annotations

import functools
import itertools
import struct
from typing import Iterable, Mapping, Sequence

from vkx.format import dtypes, opset
from vkx.format.contract import Call
from vkx.format.dtypes import DType
from vkx.format.op_quant import VALUES_PER_WORD, is_affine, scale_groups

from . import (FLOATS, WORDS_MODES, Defines, OpBuilder, TensorArg, UnsupportedOpError, any_dtype_defines,
               any_dtype_variants, builds, dtype_code, dtype_spec, held_dtype, read_form, reads_by_words,
               storage_features, variants)
from .elementwise import binary
from .gemm import MAX_MATVEC_ROWS, MatvecShape, Operand, RowNorm, gemm, load4, matvec_shape, one_dtype
from .shape import MAX_GROUPS, dispatch_groups, row_chunks, rows_binding

ROWS = 4
"""Output rows per linear_q workgroup (ROWS in shaders/linear_q.comp)."""

AFFINE: Mapping[str, int] = {"AFFINE": 1}
"""The defines of vkx.linear_q's / vkx.embedding_q's affine scales ([N, groups, 2] (scale, offset) pairs,
packed.glslh), at either bits."""
VKX_PACKINGS: tuple[tuple[int, Mapping[str, int]], ...] = ((4, {}), (8, {}), (4, AFFINE), (8, AFFINE))
"""vkx.linear_q's packings, (bits, their defines): symmetric or affine scales, 4 or 8 bits (the fused
forms of vkx.loader.build.fuse take these only)."""
PACKINGS: tuple[tuple[int, Mapping[str, int]], ...] = (
    *VKX_PACKINGS, (4, {"HIGH_FIRST": 1}), (4, {"SCALE_STRIDE": 1}))
"""The packed weights of the linears, (bits, their defines): vkx.linear_q's (VKX_PACKINGS; the symmetric 8
bits also _weight_int8pack_mm's), et_vk.linear_qcs4w's nibble order (HIGH_FIRST), et_vk.linear_q4gsw's
transposed scales (SCALE_STRIDE: their row length is a push constant)."""


def scales_packing(s: TensorArg) -> Mapping[str, int]:
    """The defines of vkx.linear_q's / vkx.embedding_q's scales `s`: AFFINE where they are (scale, offset)
    pairs (vkx.format.op_quant.is_affine), else none."""
    return AFFINE if is_affine(s) else {}


def _packed(words: bool, bits: int, variant: Mapping[str, int], x: DType, **flags: bool) -> dict:
    """The defines of a kernel over a packed weight and x (typed: its loads are the hot loop's): the
    packing, x's read defines, the flags, and WORDS and DT_* for its scales, output and bias (ANY_IN /
    ANY_OUT: their dtypes are specialization constants)."""
    return {"BITS": bits, **variant, **any_dtype_defines(WORDS=words, **flags), **read_form("X", "x", x, words)}


def matvec_q_defines(words: bool, bits: int, variant: Mapping[str, int], x: DType, bias: bool, subgroup: bool,
                     kind: str | None = None, norm: DType | None = None) -> dict:
    """shaders/matvec_q.comp's defines: `_packed`'s, x's 16-byte loads, HAS_BIAS, SUBGROUP; `kind` GLU or
    SEGMENTS; NORM with the norm's weight of dtype `norm` (x's as the file declares it: `one_dtype`)."""
    defines = {**_packed(words, bits, variant, x, HAS_BIAS=bias, SUBGROUP=subgroup, **({kind: True} if kind else {})),
               **load4("X", "x", x)}
    if norm is not None:
        defines.update(load4("G", "g", norm), NORM=1, NORM_BINDING=_NORM_BINDING[kind])
    return defines


_NORM_BINDING = {None: 4, "GLU": 6, "SEGMENTS": 10}
"""matvec_q.comp's bindings before the norm's weight, by kind (NORM_BINDING, a binding index)."""


@variants("matvec_q")
def matvec_q_variants() -> Iterable[Defines]:
    """Products: each of PACKINGS, x of any float dtype (read as stored or by words), a bias or none,
    subgroup sums or shared memory: 144. vkx.linear_q's fused forms (vkx.loader.build.fuse), each of
    VKX_PACKINGS: GLU and SEGMENTS with x of any float dtype, and each (or a product without a bias)
    with an RMSNorm folded in, x of the norm weight's dtype or fp32: 288. The scales, outputs and bias
    are ANY, the workgroup specialization constants."""
    for words, (bits, variant), x, bias, subgroup in itertools.product(WORDS_MODES, PACKINGS, FLOATS, (False, True),
                                                                       (False, True)):
        yield matvec_q_defines(words, bits, variant, x, bias, subgroup)
    for words, (bits, variant), d, kind, norm, subgroup in itertools.product(
            WORDS_MODES, VKX_PACKINGS, FLOATS, _NORM_BINDING, (False, True), (False, True)):
        if kind is not None or norm:
            # a folded norm's x: its weight's dtype as held, or fp32 (`one_dtype`)
            for x in dict.fromkeys((held_dtype(d, storage_features(words)), dtypes.FLOAT32)) if norm else (d,):
                yield matvec_q_defines(words, bits, variant, x, False, subgroup, kind, d if norm else None)


def linear_q_defines(words: bool, bits: int, variant: Mapping[str, int], x: DType, bias: bool, vec: bool) -> dict:
    """shaders/linear_q.comp's defines: `_packed`'s, HAS_BIAS and VEC (16-byte weight loads, 8 bits)."""
    return _packed(words, bits, variant, x, HAS_BIAS=bias, VEC=vec)


@variants("linear_q")
def linear_q_variants() -> Iterable[Defines]:
    """Each of PACKINGS (8 bits with VEC or not), x of any float dtype (read as stored or by words), a
    bias or none: 96."""
    for words, (bits, variant), x, bias in itertools.product(WORDS_MODES, PACKINGS, FLOATS, (False, True)):
        for vec in (False, True) if bits == 8 else (False,):
            yield linear_q_defines(words, bits, variant, x, bias, vec)


BIASED_BINDINGS = 5
"""The bindings of matvec_q.comp and linear_q.comp with a bias: x, weight, scales, out, bias."""


def _linear(builder: OpBuilder, x: TensorArg, w: TensorArg, s: TensorArg, bias: TensorArg | None,
            out: TensorArg, bits: int, group: int, norm: RowNorm | None = None, **variant: int) -> None:
    """A linear over a packed weight [N, K / values a byte] (`variant`: its packing defines):
    matvec_q.comp for one row of activations whose weight rows are whole 16-byte chunks, each
    inside one scale group; for DEQUANT_ROWS rows or more, the weight dequantized, then the float
    products (`_dequantized`); linear_q.comp for the rest. On a device of fewer storage buffers a
    stage than BIASED_BINDINGS, the two kernels' bias is added by a dispatch of its own. vkx.linear_q's
    affine scales (`scales_packing`) add AFFINE to the packing."""
    variant = {**variant, **scales_packing(s)}
    n_rows, stored = w.shape
    k = x.shape[-1]
    m = x.numel // k if k else 0
    if m == 0 or n_rows == 0:
        return
    chunk = 128 // bits  # values in 16 bytes: matvec_q reads rows of whole chunks, each inside a group
    if m == 1 and group % chunk == 0 and k % chunk == 0 and -(-n_rows // MAX_MATVEC_ROWS) <= MAX_GROUPS:
        kernel = functools.partial(_matvec, norm=norm)
    elif norm is not None:
        raise UnsupportedOpError(f"an RMSNorm folded into a {bits}-bit product of {m} rows of {k}")
    elif m >= DEQUANT_ROWS and _dequantized(builder, x, w, s, bias, out, bits, group, variant):
        return
    else:
        kernel = _linear_q
    if bias is not None and not builder.limits.binds(BIASED_BINDINGS):
        # the bias's binding is over the device's limit: the product into fp32 scratch, then the bias
        # added by an elementwise dispatch (in fp32, rounded once into out, as the kernel would; the
        # bias read as the kernels read it, its first N elements)
        product = builder.scratch(out.shape)
        kernel(builder, x, w, s, None, product, bits, group, variant)
        add = Call(opset.OPS["aten.add.Tensor"], "linear bias", {},
                   {"self": product, "other": TensorArg(bias.vid, (n_rows,), bias.dtype), "alpha": 1}, [out], [])
        binary(builder, add)
    else:
        kernel(builder, x, w, s, bias, out, bits, group, variant)


def _linear_q(builder: OpBuilder, x: TensorArg, w: TensorArg, s: TensorArg, bias: TensorArg | None,
              out: TensorArg, bits: int, group: int, variant: Mapping[str, int]) -> None:
    """linear_q.comp: any rows of activations."""
    n_rows, stored = w.shape
    k = x.shape[-1]
    m = x.numel // k
    words = k // VALUES_PER_WORD[bits]
    # int8: 16-byte weight loads, each inside one scale group. int4 keeps word loads: read 16 bytes
    # at a time here, an invocation's 32 activations a load were scattered across the workgroup.
    vec = bits == 8 and words % 4 == 0 and group % (4 * VALUES_PER_WORD[bits]) == 0 and stored == 4 * words
    defines = linear_q_defines(reads_by_words(builder), bits, variant, x.dtype, bias is not None, vec)
    spec = dtype_spec(s, out, *([bias] if bias is not None else []))
    stride = s.shape[1] if "SCALE_STRIDE" in variant else 0
    for r0, rc in row_chunks(builder, n_rows, stored, [w]):
        push = struct.pack("<8I", n_rows, k, k // VALUES_PER_WORD[bits], scale_groups(k, group), group, r0, rc, stride)
        bindings = [x, rows_binding(w, r0, rc, stored), s, out] + ([bias] if bias is not None else [])
        builder.dispatch("linear_q", bindings, push, (-(-rc // ROWS), m, 1), defines, spec)


DEQUANT_ROWS = 16
"""Products of at least this many rows of activations dequantize the weight once a call
(shaders/dequant_q.comp, into the graph's "dequant" scratch, in the activations' dtype) and take
the float product kernels (tiles; the tensor cores for fp16 where the device has them): linear_q.comp
reads every weight byte once a row (the H200's int4 prefill of 512 tokens: 163 of 167 ms)."""


def _packing_defines(words: bool, bits: int, variant: Mapping[str, int]) -> dict:
    """The defines of dequant_q.comp and embedding_q.comp, whose one typed binding is the packed weight: its
    packing, and WORDS and DT_* for the rest (ANY_IN / ANY_OUT)."""
    return {"BITS": bits, **variant, **any_dtype_defines(WORDS=words)}


@variants("dequant_q")
def dequant_q_variants() -> Iterable[Defines]:
    """Each of PACKINGS in each storage mode: 12."""
    for words, (bits, variant) in itertools.product(WORDS_MODES, PACKINGS):
        yield _packing_defines(words, bits, variant)


def _dequantized(builder: OpBuilder, x: TensorArg, w: TensorArg, s: TensorArg, bias: TensorArg | None,
                 out: TensorArg, bits: int, group: int, variant: Mapping[str, int]) -> bool:
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
    stride = s.shape[1] if "SCALE_STRIDE" in variant else 0
    push = struct.pack("<5I", n_rows * words, words, scale_groups(k, group), group, stride)
    builder.dispatch("dequant_q", [w, s, weight], push, dispatch_groups(n_rows * words),
                     _packing_defines(reads_by_words(builder), bits, variant),
                     dtype_spec(s, weight))
    if bias is not None:
        bias = Operand(bias, 0, 0 if bias.numel == n_rows else n_rows, 1)
    gemm(builder, Operand(x, 0, k, 1), Operand(weight, 0, 1, k), Operand(out, 0, n_rows, 1), m, n_rows, k,
         bias=bias)
    return True


def _norm(bindings: list[TensorArg], push: bytes, norm: RowNorm | None) -> tuple[list, bytes]:
    """matvec_q.comp's NORM where an RMSNorm is folded in: its weight bound after `bindings`, eps pushed."""
    if norm is None:
        return bindings, push
    return [*bindings, norm.weight], push + struct.pack("<f", norm.eps)


def _refuse_norm(builder: OpBuilder, x: TensorArg, norm: RowNorm | None, what: str) -> None:
    """UnsupportedOpError unless a folded RMSNorm's weight has x's dtype, or x is fp32 (`one_dtype`)."""
    if norm is not None and not one_dtype(builder, x, [norm.weight]):
        raise UnsupportedOpError(f"an RMSNorm of {norm.weight.dtype} weights folded into {what} of {x.dtype} x: "
                                 f"one dtype")


SPAN_CONSTANT = 8
"""matvec_q.comp's specialization constant SPAN, after the workgroup's (0, 1) and the dtypes' (2 to 7)."""


def matvec_q_spec(shape: MatvecShape, codes: Sequence[int]) -> list[int]:
    """matvec_q.comp's specialization constants: the workgroup, the dtype codes of its ANY buffers (from
    constant 2), SPAN; ids a variant does not declare are zero (Vulkan ignores them)."""
    head = [shape.invocations, shape.rows, *codes]
    return head + [0] * (SPAN_CONSTANT - len(head)) + [shape.span]


def _matvec(builder: OpBuilder, x: TensorArg, w: TensorArg, s: TensorArg, bias: TensorArg | None,
            out: TensorArg, bits: int, group: int, variant: Mapping[str, int], norm: RowNorm | None) -> None:
    """matvec_q.comp: one row of activations, rows of whole 16-byte chunks each inside a scale group
    (x an RMSNorm's input where `norm` is given, then no bias and vkx's packing)."""
    if norm is not None and (bias is not None or (bits, variant) not in VKX_PACKINGS):
        raise UnsupportedOpError("an RMSNorm folded into a product with a bias, or of another packing than vkx's")
    _refuse_norm(builder, x, norm, f"a {bits}-bit product")
    n_rows, stored = w.shape
    chunks = stored // 16
    shape, subgroup = matvec_shape(builder, "matvec_q", chunks, n_rows)
    defines = matvec_q_defines(reads_by_words(builder), bits, variant, x.dtype, bias is not None, subgroup,
                               norm=None if norm is None else norm.weight.dtype)
    spec = matvec_q_spec(shape, dtype_spec(s, out, *([bias] if bias is not None else [])))
    stride = s.shape[1] if "SCALE_STRIDE" in variant else 0
    for r0, rc in row_chunks(builder, n_rows, stored, [w]):
        push = struct.pack("<8I", chunks, scale_groups(x.shape[-1], group), group * bits // 128, r0, rc, stride,
                           0, 0)
        bindings = [x, rows_binding(w, r0, rc, stored), s, out] + ([bias] if bias is not None else [])
        bindings, push = _norm(bindings, push, norm)
        builder.dispatch("matvec_q", bindings, push, (-(-rc // shape.rows), 1, 1), defines, spec)


def linear_q_row(builder: OpBuilder, x: TensorArg, w: TensorArg, s: TensorArg, bias: TensorArg | None,
                 out: TensorArg, bits: int, group: int, norm: RowNorm | None = None) -> None:
    """vkx.linear_q's kernels on tensors (a fused step's: vkx.loader.build.fuse reads a residual as `bias`,
    or folds an RMSNorm of x in, its weight of x's dtype)."""
    _linear(builder, x, w, s, bias, out, bits, group, norm)


def _matvec_whole(builder: OpBuilder, x: TensorArg, weights: Sequence[tuple[TensorArg, TensorArg]],
                  outs: Sequence[TensorArg], bits: int, group: int, kind: str, norm: RowNorm | None) -> None:
    """matvec_q.comp's GLU (two weights, one output) or SEGMENTS (three weights, three outputs) over
    vkx's packing: weights [N_i, K / values a byte] with scales [N_i, K / group] or, all of them,
    affine [N_i, K / group, 2], each tensor within one binding, rows of whole 16-byte chunks inside the
    scale groups (a norm's weight of x's dtype)."""
    tensors = [x, *outs, *(t for pair in weights for t in pair)]
    packings = {tuple(scales_packing(s)) for _, s in weights}
    if group % (128 // bits) or x.shape[-1] % (128 // bits) \
            or any(t.nbytes > builder.limits.max_storage_buffer_range for t in tensors) \
            or any(w.shape[1] != weights[0][0].shape[1] for w, _ in weights) or len(packings) != 1:
        raise UnsupportedOpError(f"{kind} of {[list(w.shape) for w, _ in weights]} {bits}-bit weights: each "
                                 f"tensor within one binding, rows of whole 16-byte chunks a scale group, "
                                 f"the scales all affine or none")
    _refuse_norm(builder, x, norm, kind)
    chunks = weights[0][0].shape[1] // 16
    rows = [w.shape[0] for w, _ in weights]
    grid = rows if kind == "SEGMENTS" else rows[:1]  # GLU: a workgroup's rows of both weights
    shape, subgroup = matvec_shape(builder, "matvec_q", chunks, sum(grid))
    defines = matvec_q_defines(reads_by_words(builder), bits, scales_packing(weights[0][1]), x.dtype, False,
                               subgroup, kind, None if norm is None else norm.weight.dtype)
    bindings: list[TensorArg] = [x]
    codes: list[int] = []
    stores: list[TensorArg | None] = [*outs, *[None] * (len(weights) - len(outs))]  # GLU: one output
    for (w, s), out in zip(weights, stores):
        bindings += [w, s]
        codes.append(dtype_code(s.dtype))
        if out is not None:
            bindings.append(out)
            codes.append(dtype_code(out.dtype))
    spec = matvec_q_spec(shape, codes)
    push = struct.pack("<8I", chunks, scale_groups(x.shape[-1], group), group * bits // 128, 0, rows[0], 0,
                       *(rows[1:] + [0, 0])[:2])
    workgroups = sum(-(-n // shape.rows) for n in grid)
    bindings, push = _norm(bindings, push, norm)
    builder.dispatch("matvec_q", bindings, push, (workgroups, 1, 1), defines, spec)


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


EMBEDDING_PACKINGS: tuple[tuple[int, Mapping[str, int]], ...] = (*VKX_PACKINGS, (4, {"HIGH_FIRST": 1}))
"""The packed tables of the embeddings, (bits, their defines): vkx.embedding_q's (symmetric or affine
scales), and et_vk.embedding_q4gsw's of either nibble order."""


@variants("embedding_q")
def embedding_q_variants() -> Iterable[Defines]:
    """Each of EMBEDDING_PACKINGS in each storage mode: 10 (scales, indices and output ANY)."""
    for words, (bits, variant) in itertools.product(WORDS_MODES, EMBEDDING_PACKINGS):
        yield _packing_defines(words, bits, variant)


def _embedding(builder: OpBuilder, call: Call, w: TensorArg, s: TensorArg, bits: int, row_words: int,
               variant: Mapping[str, int]) -> None:
    """embedding_q.comp over the packed table `w` (rows `row_words` words apart) and its scales `s`."""
    idx, out, group = call.tensor("indices"), call.out, call["group_size"]
    vocab, stored = w.shape
    k = out.shape[-1]
    n = idx.numel * k
    if n == 0:
        return
    defines = _packing_defines(reads_by_words(builder), bits, variant)
    spec = dtype_spec(s, idx, out)
    blocks = list(row_chunks(builder, vocab, stored, [w])) or [(0, 0)]
    for r0, rc in blocks:
        last = int(r0 + rc == vocab)
        push = struct.pack("<9I", n, k, row_words, scale_groups(k, group), group, r0, rc, vocab, last)
        builder.dispatch("embedding_q", [rows_binding(w, r0, rc, stored), s, idx, out], push,
                         dispatch_groups(n), defines, spec)


@builds("vkx.embedding_q.default")
def embedding_q(builder: OpBuilder, call: Call) -> None:
    bits, s = call["bits"], call.tensor("scales")
    _embedding(builder, call, call.tensor("weight"), s, bits, call.out.shape[-1] // VALUES_PER_WORD[bits],
               scales_packing(s))


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
    w = call.tensor("weight")
    _embedding(builder, call, w, call.tensor("weight_scales"), 4, w.shape[1] // 4,
               {} if call["is_linear_weight"] else {"HIGH_FIRST": 1})


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
    bindings = [q, s, out] + ([zp] if zp is not None else [])
    push = struct.pack("<5I", out.numel, cols, block_r, block_c, cols // block_c)
    builder.dispatch("dequantize_affine", bindings, push, dispatch_groups(out.numel),
                     any_dtype_defines(HAS_ZP=zp is not None, WORDS=reads_by_words(builder)),
                     dtype_spec(*bindings))


@variants("dequantize_affine")
def dequantize_affine_variants() -> Iterable[Defines]:
    """With a zero point or without, in each storage mode: 4 (every binding ANY_IN / ANY_OUT)."""
    return any_dtype_variants("HAS_ZP")
