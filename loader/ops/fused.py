"""Kernels of fused steps (vkx.loader.build.fuse) that no single op of the contract has."""
from __future__ import annotations

import itertools
import struct
from typing import Iterable

from vkx.format import dtypes
from vkx.format.dtypes import DType
from vkx.loader.ops import (WORDS_MODES, Defines, OpBuilder, TensorArg, UnsupportedOpError, any_dtype_defines,
                            dtype_spec, elem_defines, reads_by_words, variants)
from vkx.loader.ops.gemm import Operand, gemm
from vkx.loader.ops.shape import broadcast_strides, dispatch_groups

_ROTARY_PUSH = struct.Struct("<17I")
_TABLE_PUSH = struct.Struct("<2I2f")


def rotate_half(builder: OpBuilder, x: TensorArg, cos: TensorArg, sin: TensorArg, out: TensorArg,
                index: TensorArg | None = None, second: tuple[TensorArg, TensorArg] | None = None,
                copied: tuple[TensorArg, TensorArg] | None = None) -> None:
    """out = x * cos + rotate_half(x) * sin over x's last dim (even), cos and sin broadcast to x
    (shaders/fused_rotary.comp: one dispatch; out may be x's memory). With `index`, out is a
    KV cache [d0, d1, size, d3] and x [d0, d1, n, d3]'s row i goes to its row index[i] (the cache
    write, vkx.index_copy along dim 2, in the same dispatch). With `second` (x2, out2) beside an
    `index`: x2 [d0, h, d2, d3] (cos and sin broadcast to it as to x) rotated into out2 as well; with
    `copied` (x3, cache3) beside `second`: x3 [d0, h3, d2, d3] written, not rotated, into cache3 [d0,
    h3, size, d3] at the rows `index` gives (an attention's v into its cache)."""
    if len(x.shape) > 4 or x.shape[-1] % 2:
        raise UnsupportedOpError(f"rotary over x {x.shape}: at most four dims and an even last one")
    if any(t.nbytes > builder.limits.max_storage_buffer_range for t in (x, cos, sin, out)):
        raise UnsupportedOpError(f"rotary over x {x.shape}: a tensor larger than one storage binding")
    shape = (1,) * (4 - len(x.shape)) + tuple(x.shape)
    c = broadcast_strides(cos.shape, shape)
    s = broadcast_strides(sin.shape, shape)
    pairs = x.numel // 2
    bindings = [x, cos, sin, out]
    pairs2 = heads2 = 0
    if second is not None:
        if index is None:
            raise UnsupportedOpError("a second rotary beside one that writes no cache")
        x2, out2 = second
        shape2 = shape[:1] + (x2.shape[-3],) + shape[2:]
        if (1,) * (4 - len(x2.shape)) + tuple(x2.shape) != shape2 or out2.shape != x2.shape or \
                (c, s) != (broadcast_strides(cos.shape, shape2), broadcast_strides(sin.shape, shape2)) or \
                any(t.nbytes > builder.limits.max_storage_buffer_range for t in second):
            raise UnsupportedOpError(f"rotary of {x2.shape} beside {x.shape}: cos and sin read alike, within a binding")
        pairs2, heads2 = x2.numel // 2, shape2[1]
    pairs3 = heads3 = 0
    if copied is not None:
        x3, cache3 = copied
        if second is None or len(x3.shape) != 4 or x3.shape[2:] != x.shape[2:] or x3.shape[0] != x.shape[0] \
                or cache3.shape != x3.shape[:2] + out.shape[2:] \
                or any(t.nbytes > builder.limits.max_storage_buffer_range for t in copied):
            raise UnsupportedOpError(f"{x3.shape} into a cache {cache3.shape} beside a rotary of {x.shape}")
        pairs3, heads3 = x3.numel // 2, x3.shape[1]
    if index is not None:
        if len(x.shape) != 4 or len(out.shape) != 4 or (out.shape[:2], out.shape[3]) != (x.shape[:2], x.shape[3]) \
                or index.shape != (x.shape[2],):
            raise UnsupportedOpError(f"rotary of {x.shape} into a cache {out.shape} at {index.shape} positions")
        bindings.append(index)
    bindings += [*(second or ()), *(copied or ())]
    push = _ROTARY_PUSH.pack(pairs, shape[1], shape[2], shape[3], *c, *s, out.shape[2] if index is not None else 0,
                             pairs2, heads2, pairs3, heads3)
    builder.dispatch("fused_rotary", bindings, push, dispatch_groups(pairs + pairs2 + pairs3),
                     _rotary_defines(index is not None, second is not None, copied is not None,
                                     reads_by_words(builder)),
                     dtype_spec(*bindings))


def _rotary_defines(indexed: bool, second: bool, third: bool, words: bool) -> Defines:
    """fused_rotary.comp's defines; the dtypes of its bindings are specialization constants."""
    return any_dtype_defines(INDEXED=indexed, SECOND=second, THIRD=third, WORDS=words)


@variants("fused_rotary")
def rotary_variants() -> Iterable[Defines]:
    """The rotation alone, with its cache write, with a second rotation, with a third tensor copied
    (each needs the one before), in each storage mode. Every dtype is a specialization constant: a
    rotary moves a token's q, k (and v) heads elementwise, not a bandwidth-critical stream."""
    for parts, words in itertools.product(range(4), WORDS_MODES):
        yield _rotary_defines(parts >= 1, parts >= 2, parts >= 3, words)


def rotary_tables(builder: OpBuilder, pos: TensorArg, inv: TensorArg, cos: TensorArg, sin: TensorArg,
                  cos_scale: float, sin_scale: float) -> None:
    """A rotary embedding's tables: cos = cat(c, c) * cos_scale and sin = cat(s, s) * sin_scale over
    the last dim, of c, s = cos and sin of float(pos) * inv, for positions pos [..., 1] and
    inverse frequencies inv [h] (fp32), cos and sin [..., 2h] of one dtype
    (shaders/rotary_table.comp: one dispatch)."""
    half, rows = inv.numel, pos.numel
    if (cos.shape, cos.dtype) != (sin.shape, sin.dtype) or cos.numel != rows * 2 * half or inv.dtype != dtypes.FLOAT32:
        raise UnsupportedOpError(f"rotary tables {cos.shape} of {pos.shape} positions and {inv.shape} frequencies")
    if any(t.nbytes > builder.limits.max_storage_buffer_range for t in (pos, inv, cos, sin)):
        raise UnsupportedOpError(f"rotary tables {cos.shape}: a tensor larger than one storage binding")
    builder.dispatch("rotary_table", [pos, inv, cos, sin], _TABLE_PUSH.pack(rows, half, cos_scale, sin_scale),
                     dispatch_groups(rows * half), _table_defines(pos.dtype, cos.dtype))


def _table_defines(pos: DType, out: DType) -> Defines:
    return {**elem_defines("P", "pos", pos), **elem_defines("F", "inv", dtypes.FLOAT32),
            **elem_defines("C", "cos_out", out), **elem_defines("S", "sin_out", out)}


@variants("rotary_table")
def table_variants() -> Iterable[Defines]:
    """Positions of int32 or fp32; tables of a float dtype (16-bit ones held as fp32 too: their
    held_dtype without narrow storage)."""
    for pos, out in itertools.product((dtypes.INT32, dtypes.FLOAT32), (dtypes.FLOAT32, dtypes.FLOAT16, dtypes.BFLOAT16)):
        yield _table_defines(pos, out)


def linear_add(builder: OpBuilder, x: TensorArg, w: TensorArg, residual: TensorArg, out: TensorArg) -> None:
    """out = x @ w^T + residual (residual of out's shape): the residual is the product's bias,
    element (m, n), added in fp32 before the one rounding of the store."""
    n, k = w.shape
    gemm(builder, Operand(x, 0, k, 1), Operand(w, 0, 1, k), Operand(out, 0, n, 1), x.numel // k, n, k,
         bias=Operand(residual, 0, n, 1))
