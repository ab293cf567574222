"""Kernels of fused steps (vkx.loader.fuse) that no single op of the contract has."""
from __future__ import annotations

import struct

from vkx.loader.ops import OpBuilder, TensorArg, UnsupportedOpError, elem_defines, read_defines
from vkx.loader.ops.gemm import Operand, gemm, matvec_glu
from vkx.loader.ops.shape import broadcast_strides, dispatch_groups

_ROTARY_PUSH = struct.Struct("<13I")


def rotate_half(builder: OpBuilder, x: TensorArg, cos: TensorArg, sin: TensorArg, out: TensorArg,
                index: TensorArg | None = None) -> None:
    """out = x * cos + rotate_half(x) * sin over x's last dim (even), cos and sin broadcast to x
    (shaders/fused_rotary.comp: one dispatch; out may be x's memory). With `index`, out is a
    KV cache [d0, d1, size, d3] and x [d0, d1, n, d3]'s row i goes to its row index[i] (the cache
    write, vkx.index_copy along dim 2, in the same dispatch)."""
    if len(x.shape) > 4 or x.shape[-1] % 2:
        raise UnsupportedOpError(f"rotary over x {x.shape}: at most four dims and an even last one")
    if any(t.nbytes > builder.max_binding_bytes for t in (x, cos, sin, out)):
        raise UnsupportedOpError(f"rotary over x {x.shape}: a tensor larger than one storage binding")
    shape = (1,) * (4 - len(x.shape)) + tuple(x.shape)
    c = broadcast_strides(cos.shape, shape)
    s = broadcast_strides(sin.shape, shape)
    defines = {**read_defines(builder, "X", "x", x), **read_defines(builder, "C", "cs", cos),
               **read_defines(builder, "S", "sn", sin), **elem_defines("Y", "y", out.dtype)}
    pairs = x.numel // 2
    bindings = [x, cos, sin, out]
    if index is not None:
        if len(x.shape) != 4 or len(out.shape) != 4 or (out.shape[:2], out.shape[3]) != (x.shape[:2], x.shape[3]) \
                or index.shape != (x.shape[2],):
            raise UnsupportedOpError(f"rotary of {x.shape} into a cache {out.shape} at {index.shape} positions")
        defines.update(INDEXED=1, **elem_defines("I", "idx", index.dtype))
        bindings.append(index)
    push = _ROTARY_PUSH.pack(pairs, shape[1], shape[2], shape[3], *c, *s, out.shape[2] if index is not None else 0)
    builder.dispatch("fused_rotary", bindings, push, dispatch_groups(pairs), defines)


def linear_add(builder: OpBuilder, x: TensorArg, w: TensorArg, residual: TensorArg, out: TensorArg) -> None:
    """out = x @ w^T + residual (residual of out's shape): the residual is the product's bias,
    element (m, n), added in fp32 before the one rounding of the store."""
    n, k = w.shape
    gemm(builder, Operand(x, 0, k, 1), Operand(w, 0, 1, k), Operand(out, 0, n, 1), x.numel // k, n, k,
         bias=Operand(residual, 0, n, 1))


def swiglu_row(builder: OpBuilder, x: TensorArg, gate: TensorArg, up: TensorArg, out: TensorArg) -> None:
    """out = silu(x @ gate^T) * (x @ up^T) for one row of activations, in one dispatch."""
    matvec_glu(builder, x, gate, up, out)
