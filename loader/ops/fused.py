"""Kernels of fused steps (vkx.loader.fuse) that no single op of the contract has."""
from __future__ import annotations

import struct

from vkx.loader.ops import OpBuilder, TensorArg, UnsupportedOpError, elem_defines, read_defines
from vkx.loader.ops.shape import broadcast_strides, dispatch_groups

_ROTARY_PUSH = struct.Struct("<12I")


def rotate_half(builder: OpBuilder, x: TensorArg, cos: TensorArg, sin: TensorArg, out: TensorArg) -> None:
    """out = x * cos + rotate_half(x) * sin over x's last dim (even), cos and sin broadcast to x
    (shaders/fused_rotary.comp: one dispatch; out may be x's memory)."""
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
    push = _ROTARY_PUSH.pack(pairs, shape[1], shape[2], shape[3], *c, *s)
    builder.dispatch("fused_rotary", [x, cos, sin, out], push, dispatch_groups(pairs), defines)
