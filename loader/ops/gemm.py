"""The matrix-product kernels behind `gemm()`, the one entry point (vkx.loader.ops.matmul's ops and
attention call it).

Four shaders: `shaders/matmul_tiled.comp` for products of at least TILED_MIN rows
and columns (vkx.loader.ops.gemm_tiled: register-blocked tiles of C per workgroup, A's
and B's slices staged through shared memory with coalesced loads whichever way B is laid
out, split-K with a reduce pass when there are too few tiles for the device), or for fp16
ones `shaders/matmul_coop.comp` on the tensor cores where the device has them
(vkx.loader.ops.gemm_coop: the same tiles and split-K, products of 16 x 16 fragments),
`shaders/matmul.comp` for the rest, a strided batched matmul with a 4x4 register
tile per invocation, and `shaders/matvec.comp` for one row of activations against
a k-contiguous B (the LLM decode case: x[1, K] @ W[N, K]^T), which splits K over a
workgroup so the weight streams once with 16-byte loads. Operands of any float
dtype are described by element strides, so linear's W[N, K] is read in place
(B[k, n] = W[n, k]) and broadcast batch dims are stride 0; products accumulate in
fp32 and round once on the store. `gemm()` is the one entry point; it also
splits a dispatch whose operands do not fit one storage-buffer binding
(`builder.limits.max_storage_buffer_range`): W by output rows (each chunk writes its column
slice of C), A and C by rows, and batches one by one.
"""
from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, replace
from typing import Collection, Iterable, Optional, Sequence

from vkx.format import dtypes
from vkx.format.dtypes import DType
from vkx.loader.ops import (FLOATS, GLSL_TYPES, WORDS_MODES, Binding, Defines, OpBuilder, TensorArg, UnsupportedOpError,
                            any_dtype_defines, dtype_code, held_dtype, read_form, reads_by_words,
                            storage_features, variants)
from vkx.loader.ops.gemm_coop import coop_layout, fits, record_coop
from vkx.loader.ops.gemm_tiled import dtype_codes, record_tiled
from vkx.loader.ops.shape import MAX_GROUPS, bind_elems, fits_binding

_PUSH = struct.Struct("<21i2f")


@dataclass(frozen=True)
class Operand:
    """A strided view of a GPU tensor: element (i, j, b1, b2) is at
    off + i*si + j*sj + b1*sb1 + b2*sb2 (elements, not bytes)."""
    tensor: TensorArg
    off: int
    si: int
    sj: int
    sb1: int = 0
    sb2: int = 0

    def shifted(self, delta: int) -> "Operand":
        return replace(self, off=self.off + delta)


def _span(op: Operand, ni: int, nj: int, nb1: int, nb2: int) -> tuple[int, int]:
    """(first element, element count) of the range `op` touches."""
    hi = op.off + op.si * (ni - 1) + op.sj * (nj - 1) + op.sb1 * (nb1 - 1) + op.sb2 * (nb2 - 1) + 1
    return op.off, hi - op.off


def _fits(builder: OpBuilder, op: Operand, ni: int, nj: int, nb1: int, nb2: int) -> bool:
    return fits_binding(builder, op.tensor, *_span(op, ni, nj, nb1, nb2))


def _bind(builder: OpBuilder, op: Operand, ni: int, nj: int, nb1: int, nb2: int) -> tuple[Binding, int]:
    """Bind the range `op` touches; returns (binding, op.off relative to the binding)."""
    binding, shift = bind_elems(builder, op.tensor, *_span(op, ni, nj, nb1, nb2))
    return binding, op.off - shift


def gemm(builder: OpBuilder, a: Operand, b: Operand, c: Operand, M: int, N: int, K: int,
         nb1: int = 1, nb2: int = 1, bias: Optional[Operand] = None,
         alpha: float = 1.0, beta: float = 1.0) -> None:
    """Record C[b1,b2,m,n] = alpha * sum_k A[b1,b2,m,k] B[b1,b2,k,n] + beta * bias[m,n].

    `a` is indexed (m, k), `b` (k, n), `c` (m, n) with c.sj == 1, `bias` (m, n) and
    has no batch strides. K == 0 reads neither A nor B (the result is beta * bias or 0).
    """
    if M == 0 or N == 0 or nb1 == 0 or nb2 == 0:
        return
    fit_a = _fits(builder, a, M, K, nb1, nb2)
    fit_b = _fits(builder, b, K, N, nb1, nb2)
    fit_c = _fits(builder, c, M, N, nb1, nb2)
    fit_bias = bias is None or _fits(builder, bias, M, N, 1, 1)
    if nb1 * nb2 <= MAX_GROUPS and fit_a and fit_b and fit_c and fit_bias:
        _record(builder, a, b, c, M, N, K, nb1, nb2, bias, alpha, beta)
    elif nb1 > 1:
        # Too many batches for one grid, or an operand too large: one call per b1.
        for i in range(nb1):
            gemm(builder, a.shifted(i * a.sb1), b.shifted(i * b.sb1), c.shifted(i * c.sb1),
                 M, N, K, 1, nb2, bias, alpha, beta)
    elif nb2 > 1:
        # Grid-sized chunks of b2 when there are too many, else one b2 at a time.
        step = MAX_GROUPS if nb2 > MAX_GROUPS else 1
        for s in range(0, nb2, step):
            gemm(builder, a.shifted(s * a.sb2), b.shifted(s * b.sb2), c.shifted(s * c.sb2),
                 M, N, K, 1, min(step, nb2 - s), bias, alpha, beta)
    else:
        _split(builder, a, b, c, M, N, K, bias, alpha, beta, fit_a, fit_b, fit_c)


def _split(builder, a, b, c, M, N, K, bias, alpha, beta, fit_a, fit_b, fit_c) -> None:
    """One batch whose operands do not all fit a binding: split by output columns or rows."""
    align = builder.limits.min_storage_buffer_offset_alignment
    limit = builder.limits.max_storage_buffer_range - align
    if not fit_b and b.sj >= b.si * K and N > 1:
        # B's columns are contiguous blocks (linear's W[N, K] rows): split by output columns.
        # Chunks start on aligned bytes when W's row size and offset are aligned.
        col_bytes = b.tensor.dtype.itemsize * b.sj
        exact = col_bytes % align == 0 and (b.tensor.dtype.itemsize * b.off) % align == 0
        step = max(1, (builder.limits.max_storage_buffer_range if exact else limit) // col_bytes)
        if step >= 4:
            step -= step % 4
        if step < N:
            for n0 in range(0, N, step):
                n = min(step, N - n0)
                gemm(builder, a, b.shifted(n0 * b.sj), c.shifted(n0 * c.sj), M, n, K, 1, 1,
                     bias.shifted(n0 * bias.sj) if bias is not None else None, alpha, beta)
            return
    elif fit_b and M > 1:
        # A and/or C (or the bias) too large: split by output rows.
        row_bytes = max(_row_bytes(a) if not fit_a else 1, _row_bytes(c) if not fit_c else 1,
                        _row_bytes(bias) if bias is not None else 1)
        step = max(1, limit // row_bytes)
        if step < M:
            for m0 in range(0, M, step):
                m = min(step, M - m0)
                gemm(builder, a.shifted(m0 * a.si), b, c.shifted(m0 * c.si), m, N, K, 1, 1,
                     bias.shifted(m0 * bias.si) if bias is not None else None, alpha, beta)
            return
    raise UnsupportedOpError(
        f"matmul operands ({M}x{K} @ {K}x{N}) cannot be split into storage-buffer bindings "
        f"of at most {builder.limits.max_storage_buffer_range} bytes")


def _row_bytes(op: Operand) -> int:
    return max(op.si, 1) * op.tensor.dtype.itemsize


def _vec_ok(off: int, strides: Sequence[tuple[int, int]], n: int = 4) -> bool:
    """True when every offset reachable through (stride, count) pairs is a multiple of `n`."""
    return off % n == 0 and all(count <= 1 or stride % n == 0 for stride, count in strides)


_PAIRS = {dtypes.FLOAT16: "half2", dtypes.BFLOAT16: "bf162"}
"""GLSL helper (shaders/pairs.glslh) unpacking two 16-bit floats of one 32-bit word."""


def load4(prefix: str, buffer: str, dtype) -> dict[str, str]:
    """`<P>_V` and `LOAD4_<P>(i)`: elements i..i+3 of `buffer` (i a multiple of 4) as a vec4,
    in one load: a vec4, or a uvec2 of two 16-bit pairs."""
    if dtype is dtypes.FLOAT32:
        return {f"{prefix}_V": "vec4", f"LOAD4_{prefix}(i)": f"{buffer}[(i) >> 2]"}
    pair, word = _PAIRS[dtype], f"{buffer}[(i) >> 2]"
    return {f"{prefix}_V": "uvec2", f"LOAD4_{prefix}(i)": f"vec4({pair}({word}.x), {pair}({word}.y))"}


B_LAYOUTS = (None, "B_VEC_K", "B_VEC_N")
"""How shaders/matmul.comp and matmul_tiled.comp read B: by elements, or 4 at a time along k or n."""


def product_defines(words: bool, a: DType, b: DType, a_vec: bool, b_layout: Optional[str], bias: bool) -> dict:
    """shaders/matmul.comp's and matmul_tiled.comp's defines: A's and B's read defines (typed: their
    loads are the k loop's), A_VEC and `b_layout` with their 4-element loads, HAS_BIAS, and WORDS and
    DT_* for C and the bias (ANY_OUT / ANY_IN: their dtypes are specialization constants)."""
    defines = {**any_dtype_defines(HAS_BIAS=bias, WORDS=words), **read_form("A", "a", a, words),
               **read_form("B", "b", b, words)}
    if a_vec:
        defines.update(A_VEC=1, **load4("A", "a4", a))
    if b_layout is not None:
        defines.update({b_layout: 1}, **load4("B", "b4", b))
    return defines


def _product_variants() -> Iterable[Defines]:
    for words, a, b, a_vec, b_layout, bias in itertools.product(WORDS_MODES, FLOATS, FLOATS, (False, True), B_LAYOUTS,
                                                                (False, True)):
        yield product_defines(words, a, b, a_vec, b_layout, bias)


@variants("matmul")
def matmul_variants() -> Iterable[Defines]:
    """A and B each of any float dtype (the contract lets them differ), read as stored or by words, each
    way it may be laid out (A_VEC, B_LAYOUTS); a bias or none: 216. C's and the bias's dtypes, the
    workgroup and TM are specialization constants."""
    return _product_variants()


@variants("matmul_tiled")
def matmul_tiled_variants() -> Iterable[Defines]:
    """matmul's (vkx.loader.ops.gemm_tiled.record_tiled takes gemm's defines): 216; the tiling (RT, CT,
    BK) and C's and the bias's dtypes are specialization constants."""
    return _product_variants()


def _record(builder, a, b, c, M, N, K, nb1, nb2, bias, alpha, beta) -> None:
    bind_a, aoff = _bind(builder, a, M, K, nb1, nb2)
    bind_b, boff = _bind(builder, b, K, N, nb1, nb2)
    bind_c, coff = _bind(builder, c, M, N, nb1, nb2)
    bindings: list[Binding] = [bind_a, bind_b, bind_c]
    biasoff = sbm = sbn = 0
    if bias is not None:
        bind_bias, biasoff = _bind(builder, bias, M, N, 1, 1)
        bindings.append(bind_bias)
        sbm, sbn = bias.si, bias.sj
    if use_matvec(a, b, M, N, K):
        _record_matvec(builder, bindings, a, aoff, b, boff, c, coff, N, K, nb1, nb2, bias, biasoff, sbn, alpha, beta)
        return
    a_vec = a.sj == 1 and K % 4 == 0 and _vec_ok(aoff, [(a.si, M), (a.sb1, nb1), (a.sb2, nb2)])
    b_layout = None
    if b.si == 1 and K % 4 == 0 and _vec_ok(boff, [(b.sj, N), (b.sb1, nb1), (b.sb2, nb2)]):
        b_layout = "B_VEC_K"
    elif b.sj == 1 and N % 4 == 0 and _vec_ok(boff, [(b.si, K), (b.sb1, nb1), (b.sb2, nb2)]):
        b_layout = "B_VEC_N"
    defines = product_defines(reads_by_words(builder), a.tensor.dtype, b.tensor.dtype, a_vec, b_layout,
                              bias is not None)
    if M >= TILED_MIN and N >= TILED_MIN and builder.limits.max_compute_work_group_invocations >= TILED_INVOCATIONS:
        layout = use_coop(builder, a, aoff, b, boff, c, bias, M, N, K, nb1, nb2)
        if layout is not None:
            record_coop(builder, bindings, layout, M, N, K, nb1, nb2,
                        (aoff, a.si, a.sj, a.sb1, a.sb2, boff, b.si, b.sj, b.sb1, b.sb2),
                        (coff, c.si, c.sb1, c.sb2), c.tensor.dtype,
                        None if bias is None else (biasoff, sbm, sbn, bias.tensor.dtype), alpha, beta)
            return
        record_tiled(builder, bindings, defines, M, N, K, nb1, nb2,
                     (aoff, a.si, a.sj, a.sb1, a.sb2, boff, b.si, b.sj, b.sb1, b.sb2),
                     (coff, c.si, c.sb1, c.sb2), c.tensor.dtype,
                     None if bias is None else (biasoff, sbm, sbn, bias.tensor.dtype), alpha, beta)
        return
    tm = 1 if M == 1 else 4
    tiles_m, tiles_n = -(-M // tm), -(-N // 4)
    if tiles_m == 1:
        wg = (64, 1)
    elif tiles_n == 1:
        wg = (1, 64)
    else:
        wg = (8, 8)
    groups = (-(-tiles_n // wg[0]), -(-tiles_m // wg[1]), nb1 * nb2)
    if groups[0] > MAX_GROUPS or groups[1] > MAX_GROUPS:
        raise UnsupportedOpError(f"matmul output {M}x{N} is too large for one dispatch grid")
    push = _PUSH.pack(M, N, K, nb2,
                      aoff, a.si, a.sj, a.sb1, a.sb2,
                      boff, b.si, b.sj, b.sb1, b.sb2,
                      coff, c.si, c.sb1, c.sb2,
                      biasoff, sbm, sbn,
                      float(alpha), float(beta))
    builder.dispatch("matmul", bindings, push, groups, defines,
                     (*wg, tm, *dtype_codes(c.tensor.dtype, None if bias is None else bias.tensor.dtype)))


def use_coop(builder: OpBuilder, a: Operand, aoff: int, b: Operand, boff: int, c: Operand,
             bias: Optional[Operand], M: int, N: int, K: int, nb1: int, nb2: int) -> Optional[str]:
    """The B layout define when a tiled product takes shaders/matmul_coop.comp (the device has fp16
    cooperative matrices and the shared memory of its tiles, and the operands suit it:
    vkx.loader.ops.gemm_coop.coop_layout), else None. `aoff` / `boff`: A's and B's offsets in their bindings."""
    if not builder.fp16_cooperative_matrix or not fits(builder.limits.max_compute_shared_memory_size):
        return None
    a_vec = a.sj == 1 and K % 8 == 0 and _vec_ok(aoff, [(a.si, M), (a.sb1, nb1), (a.sb2, nb2)], 8)
    b_vec_k = b.si == 1 and K % 8 == 0 and _vec_ok(boff, [(b.sj, N), (b.sb1, nb1), (b.sb2, nb2)], 8)
    b_vec_n = b.sj == 1 and N % 8 == 0 and _vec_ok(boff, [(b.si, K), (b.sb1, nb1), (b.sb2, nb2)], 8)
    return coop_layout(a.tensor.dtype, b.tensor.dtype, c.tensor.dtype, None if bias is None else bias.tensor.dtype,
                       a_vec, b_vec_k, b_vec_n)


TILED_MIN = 32
"""Products with at least this many rows and columns take shaders/matmul_tiled.comp."""
TILED_INVOCATIONS = 256
"""shaders/matmul_tiled.comp's 16 x 16 workgroup: a device (or profile) allowing fewer
invocations takes shaders/matmul.comp instead."""

@dataclass(frozen=True)
class MatvecShape:
    """A matrix-vector workgroup (shaders/partials.glslh): `rows` output rows, `invocations` (a power of
    two) splitting K, each reading `span` words of a row a step (4: 16 bytes; matvec_q's SPAN also 1)."""
    rows: int
    invocations: int
    span: int = 4


MATVEC_SHAPES: dict[tuple[str, str], MatvecShape] = {
    ("gpu", "matvec"): MatvecShape(4, 128),
    ("gpu", "matvec_q"): MatvecShape(16, 128),
    ("cpu", "matvec"): MatvecShape(16, 64),
    ("cpu", "matvec_q"): MatvecShape(16, 128),
    ("small", "matvec"): MatvecShape(8, 64),
    ("small", "matvec_q"): MatvecShape(8, 64),
}
"""The workgroup of shaders/matvec.comp and matvec_q.comp by device class (`device_class`): on a
GPU, matvec 4 rows x 128, the best of eight shapes timed in whole 1B fp16 decode calls on the H200
(1.43 ms a call against 1.87 ms for 16 x 64, the shape before: more, smaller workgroups keep more
loads in flight on products of 2,048 rows; docs/benchmarks.md); matvec_q 16 x 128 (4 x 128 timed
the same, both cut down by MATVEC_GROUPS_PER_UNIT); on a GPU, fewer rows on products of few rows
(`matvec_shape`); on a CPU device (lavapipe, where the cost is the number of loads) 16 rows, so
that the activations are loaded once per 16 rows; on devices without subgroup operations or with
fewer than 256 invocations a workgroup (the android-baseline-2022 profile) 8 rows of 64
invocations, not measured."""
MIN_INVOCATIONS = 32
"""The fewest invocations a matrix-vector workgroup is cut down to for short rows."""
MATVEC_GROUPS_PER_UNIT = 4
"""Workgroups a compute unit a GPU's product keeps (fewer rows a workgroup below it). Timed in whole
1B decode calls on the H200 against 0 (rows fixed), 8 and 16: int4 1.40 ms a call against 2.03 ms
(its 16-row workgroups left 2,048-row products 128 workgroups), fp16 1.20 against 1.23 ms
(docs/benchmarks.md)."""


def device_class(is_cpu: bool, features: Collection[str], max_invocations: int) -> str:
    """"cpu" (lavapipe), "gpu" (subgroup operations and 256 invocations a workgroup), else "small"."""
    if is_cpu:
        return "cpu"
    if "subgroupOperations" in features and max_invocations >= 256:
        return "gpu"
    return "small"


def matvec_shape(builder: OpBuilder, kernel: str, chunks: int, n: int) -> tuple[MatvecShape, bool]:
    """The workgroup of `kernel` (matvec or matvec_q) for `n` output rows of `chunks` 16-byte chunks
    each: the device class's; on a GPU, rows halved while the product would have fewer than
    MATVEC_GROUPS_PER_UNIT workgroups a compute unit; invocations halved while half of them would
    still have a step (no idle invocations on short rows). With it, whether the device has subgroup
    operations (the SUBGROUP define; the shape is specialization constants 0 and 1)."""
    limits = builder.limits
    kind = device_class(builder.is_cpu, limits.features, limits.max_compute_work_group_invocations)
    shape = MATVEC_SHAPES[(kind, kernel)]
    rows = shape.rows
    while kind == "gpu" and rows > 1 and -(-n // rows) < MATVEC_GROUPS_PER_UNIT * builder.compute_units:
        rows //= 2
    invocations = min(shape.invocations, limits.max_compute_work_group_invocations)
    while invocations > MIN_INVOCATIONS and invocations // 2 >= chunks * 4 // shape.span:  # steps a row
        invocations //= 2
    return MatvecShape(rows, invocations, shape.span), "subgroupOperations" in limits.features


MAX_MATVEC_ROWS = min(s.rows for s in MATVEC_SHAPES.values())
"""The fewest rows of a matrix-vector workgroup over a long product: the grid's bound on N (fewer
rows only where the grid is under MATVEC_GROUPS_PER_UNIT workgroups a compute unit)."""


def use_matvec(a: Operand, b: Operand, M: int, N: int, K: int) -> bool:
    """Whether a product takes shaders/matvec.comp: one k-contiguous row of A against a k-contiguous B."""
    return M == 1 and a.sj == 1 and b.si == 1 and K > 0 and -(-N // MAX_MATVEC_ROWS) <= MAX_GROUPS


_MATVEC_PUSH = struct.Struct("<15i2f3i")


def load8(prefix: str, buffer: str, dtype, vector: bool) -> dict[str, str]:
    """`<P>_V` and `LOAD8_<P>(i, lo, hi)`: elements i..i+7 of `buffer` into two vec4s
    (i a multiple of 8 when `vector`: 16-byte loads)."""
    macro = f"LOAD8_{prefix}(i,lo,hi)"
    if not vector:
        four = [", ".join(f"LOAD_{prefix}((i) + {j + h})" for j in range(4)) for h in (0, 4)]
        return {f"{prefix}_V": GLSL_TYPES[dtype], macro: f"lo = vec4({four[0]}); hi = vec4({four[1]})"}
    if dtype is dtypes.FLOAT32:
        return {f"{prefix}_V": "vec4", macro: f"lo = {buffer}[(i) >> 2]; hi = {buffer}[((i) >> 2) + 1]"}
    pair = _PAIRS[dtype]
    word = f"{buffer}[(i) >> 3]"
    return {f"{prefix}_V": "uvec4",
            macro: f"lo = vec4({pair}({word}.x), {pair}({word}.y)); hi = vec4({pair}({word}.z), {pair}({word}.w))"}


def _operand8(prefix: str, buffer: str, dtype: DType, vector: bool, words: bool) -> dict[str, str]:
    """A matvec.comp operand's read defines and load8; its array holds words where a scalar one is
    read by words."""
    defines = {**read_form(prefix, buffer, dtype, words), **load8(prefix, buffer, dtype, vector)}
    if not vector and defines[f"{prefix}_T"] == "uint":
        defines[f"{prefix}_V"] = "uint"
    return defines


def matvec_defines(words: bool, a: DType, a_vec: bool, b: DType, b_vec: bool, k_tail: bool, bias: bool,
                   subgroup: bool) -> dict:
    """shaders/matvec.comp's defines of a product: A (the activations) and B (the weight) typed, with
    their 8-element loads (16-byte ones where `a_vec` / `b_vec`), K_TAIL, HAS_BIAS, SUBGROUP, and
    WORDS and DT_* for C and the bias (ANY_OUT / ANY_IN)."""
    return {**any_dtype_defines(K_TAIL=k_tail, HAS_BIAS=bias, SUBGROUP=subgroup, WORDS=words),
            **_operand8("A", "a", a, a_vec, words), **_operand8("B", "b", b, b_vec, words)}


MATVEC_LOADS = ((False, False, True), *((a, b, False) for a, b in itertools.product((False, True), repeat=2)))
"""matvec.comp's (a_vec, b_vec, k_tail): a K tail (K % 8 != 0) loads both operands by elements."""


def _record_matvec(builder, bindings, a, aoff, b, boff, c, coff, N, K, nb1, nb2, bias, biasoff, sbn,
                   alpha, beta) -> None:
    """M == 1 against a k-contiguous B: shaders/matvec.comp (split-K, weight streamed once)."""
    a_vec = K % 8 == 0 and _vec_ok(aoff, [(a.sb1, nb1), (a.sb2, nb2)], 8)
    b_vec = K % 8 == 0 and _vec_ok(boff, [(b.sj, N), (b.sb1, nb1), (b.sb2, nb2)], 8)
    shape, subgroup = matvec_shape(builder, "matvec", -(-K // 8), N)
    defines = matvec_defines(reads_by_words(builder), a.tensor.dtype, a_vec, b.tensor.dtype, b_vec, K % 8 != 0,
                             bias is not None, subgroup)
    push = _MATVEC_PUSH.pack(N, K, nb2, aoff, a.sb1, a.sb2, boff, b.sj, b.sb1, b.sb2,
                             coff, c.sb1, c.sb2, biasoff, sbn, float(alpha), float(beta), 0, 0, 0)
    spec = (shape.invocations, shape.rows,
            *dtype_codes(c.tensor.dtype, None if bias is None else bias.tensor.dtype))
    builder.dispatch("matvec", bindings, push, (-(-N // shape.rows), 1, nb1 * nb2), defines, spec)


@dataclass(frozen=True)
class RowNorm:
    """An RMSNorm folded into the products of its output (shaders/matvec.comp's NORM): the products
    read its input x and scale by `weight` [K] and rsqrt(mean(x^2) + eps), in fp32."""
    weight: TensorArg
    eps: float


ROW_KINDS = {None: 3, "GLU": 4, "SEGMENTS": 7}
"""matvec.comp's fused row products (none: one product, with a norm), each with its bindings before
the norm's weight (NORM_BINDING, a binding index: a define)."""


def one_dtype(builder: OpBuilder, x: TensorArg, constants: Sequence[TensorArg]) -> bool:
    """Whether `constants` (weights, a norm's weight) have one dtype and x, an activation, has it as held
    (vkx.loader.ops.held_dtype) or is fp32 (vkx.export.widen): fused row products' rule (vkx.loader.build.fuse)."""
    dtype = constants[0].dtype
    return all(t.dtype == dtype for t in constants) \
        and x.dtype in (held_dtype(dtype, builder.limits.features), dtypes.FLOAT32)


def row_defines(words: bool, x: DType, w: DType, kind: Optional[str], norm: bool, subgroup: bool) -> dict:
    """matvec.comp's defines of fused row products (`kind` of ROW_KINDS) over x of device dtype `x` and
    weights (and a norm's weight) of `w`, in 16-byte loads; outputs of any dtype (ANY_OUT)."""
    defines = {**any_dtype_defines(SUBGROUP=subgroup, WORDS=words, **({kind: True} if kind else {})),
               **_operand8("A", "a", x, True, words), **_operand8("B", "b", w, True, words)}
    if kind == "GLU":
        defines.update(load8("B2", "bup", w, True))
    elif kind == "SEGMENTS":
        defines.update(**load8("B2", "w2", w, True), **load8("B3", "w3", w, True))
    if norm:
        defines.update(**read_form("G", "g", w, words), **load8("G", "g", w, True), NORM=1,
                       NORM_BINDING=ROW_KINDS[kind])
    return defines


@variants("matvec")
def matvec_variants() -> Iterable[Defines]:
    """Products: A and B each of any float dtype (the contract lets them differ; typed: the decode loop's
    loads), read as stored or by words, MATVEC_LOADS, a bias or none, subgroup sums or shared memory:
    360. Fused row products (ROW_KINDS, a norm folded in or not): the weights and the norm's weight of
    one dtype, x of it or fp32 (`one_dtype`), in 16-byte loads: 80. C's and the bias's dtypes are ANY, the workgroup
    specialization constants."""
    for words, a, b, (a_vec, b_vec, k_tail), bias, subgroup in itertools.product(
            WORDS_MODES, FLOATS, FLOATS, MATVEC_LOADS, (False, True), (False, True)):
        yield matvec_defines(words, a, a_vec, b, b_vec, k_tail, bias, subgroup)
    for words, w, kind, norm, subgroup in itertools.product(WORDS_MODES, FLOATS, ROW_KINDS, (False, True),
                                                            (False, True)):
        if kind is not None or norm:
            for x in dict.fromkeys((held_dtype(w, storage_features(words)), dtypes.FLOAT32)):  # `one_dtype`'s
                yield row_defines(words, x, w, kind, norm, subgroup)


def _row_dispatch(builder: OpBuilder, x: TensorArg, weights: Sequence[TensorArg], outs: Sequence[TensorArg],
                  bindings: list[TensorArg], kind: Optional[str], rows: Sequence[int], push: bytes,
                  norm: RowNorm | None) -> None:
    """A matvec.comp dispatch over one row x of K elements (K a multiple of 8, each tensor within one
    binding, x and the weights of one dtype: `one_dtype`) and `rows` output rows (of each SEGMENTS
    product), the RMSNorm `norm` folded in where given."""
    k = x.shape[-1]
    constants = [*weights, *([norm.weight] if norm else [])]
    if k % 8 or any(w.shape[1] != k for w in weights) or not one_dtype(builder, x, constants) \
            or (norm is not None and norm.weight.shape != (k,)) \
            or any(t.nbytes > builder.limits.max_storage_buffer_range for t in (x, *outs, *constants)):
        raise UnsupportedOpError(f"row products of {[list(w.shape) for w in weights]} weights: x and the weights "
                                 f"of one dtype, K a multiple of 8, each tensor within one binding")
    shape, subgroup = matvec_shape(builder, "matvec", k // 8, sum(rows))
    defines = row_defines(reads_by_words(builder), x.dtype, weights[0].dtype, kind, norm is not None, subgroup)
    if norm is not None:
        bindings = [*bindings, norm.weight]
        push += struct.pack("<f", norm.eps)
    builder.dispatch("matvec", bindings, push, (sum(-(-n // shape.rows) for n in rows), 1, 1), defines,
                     (shape.invocations, shape.rows, *(dtype_code(o.dtype) for o in outs)))


def matvec_row(builder: OpBuilder, x: TensorArg, w: TensorArg, out: TensorArg, norm: RowNorm) -> None:
    """out[n] = norm(x) . w[n] for one row x of K elements: the RMSNorm folded into the product (an
    LM's final norm and head)."""
    n, k = w.shape
    push = _MATVEC_PUSH.pack(n, k, 1, 0, 0, 0, 0, k, 0, 0, 0, 0, 0, 0, 0, 1.0, 1.0, 0, 0, 0)
    _row_dispatch(builder, x, [w], [out], [x, w, out], None, [n], push, norm)


def matvec_glu(builder: OpBuilder, x: TensorArg, gate: TensorArg, up: TensorArg, out: TensorArg,
               norm: RowNorm | None = None) -> None:
    """out[n] = silu(x . gate[n]) * (x . up[n]) for one row x of K elements and weights [N, K]:
    shaders/matvec.comp's GLU, both weights read in one workgroup, fp32 sums, one rounding on the
    store (x the input of an RMSNorm `norm` where given)."""
    n, k = gate.shape
    push = _MATVEC_PUSH.pack(n, k, 1, 0, 0, 0, 0, k, 0, 0, 0, 0, 0, 0, 0, 1.0, 1.0, 0, 0, 0)
    _row_dispatch(builder, x, [gate, up], [out], [x, gate, out, up], "GLU", [n], push, norm)


def matvec_products(builder: OpBuilder, x: TensorArg, weights: Sequence[TensorArg], outs: Sequence[TensorArg],
                    norm: RowNorm | None = None) -> None:
    """outs[i][n] = x . weights[i][n] for one row x of K elements and three weights [N_i, K] of one
    dtype: shaders/matvec.comp's SEGMENTS, one dispatch, each workgroup on one weight's rows (x the
    input of an RMSNorm `norm` where given)."""
    k = x.shape[-1]
    rows = [w.shape[0] for w in weights]
    push = _MATVEC_PUSH.pack(rows[0], k, 1, 0, 0, 0, 0, k, 0, 0, 0, 0, 0, 0, 0, 1.0, 1.0, 0, rows[1], rows[2])
    _row_dispatch(builder, x, weights, outs, [x, weights[0], outs[0], weights[1], outs[1], weights[2], outs[2]],
                  "SEGMENTS", rows, push, norm)
