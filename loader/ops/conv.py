"""Convolution and 2-D pooling (NCHW contiguous; vkx.format.op_conv, whose resampling ops are sampling.py's).

aten.convolution.default runs `shaders/conv2d.comp`, a direct convolution where
each invocation computes up to 4 output channels of one group x 4 output columns
(register tile); a transposed one runs `shaders/conv_transpose2d.comp`, an invocation per output
element gathering the inputs that scatter onto it. 1-D convolutions run as 2-D ones with H = 1. Pools run
`shaders/pool2d.comp`, one invocation per output element (max-pool with indices writes those too); the
output size comes from the output tensor (so ceil_mode needs no recomputation here). Every tensor
may have any float dtype (input, weight and bias need not agree); sums are fp32,
rounded once on the store. Shape-derived numbers (conv2d's workgroup size and output
channels an invocation) and the dtypes of the buffers off the hot loop (conv2d's bias, every
buffer of the pools and of conv_transpose2d) are specialization constants.
"""
from __future__ import annotations

import itertools
import math
import struct
from typing import Iterable, Sequence

from vkx.format.contract import FLT_MAX, Call
from vkx.loader.ops import (FLOATS, WORDS_MODES, Defines, OpBuilder, TensorArg, UnsupportedOpError, any_dtype_defines,
                            any_dtype_variants, binding_forms, builds, dtype_code, dtype_spec, elem_defines, product,
                            read_defines, reads_by_words, variants)
from vkx.loader.ops.shape import MAX_GROUPS, bind_elems, dispatch_groups

_CONV_PUSH = struct.Struct("<24i2f")
_POOL_PUSH = struct.Struct("<15i")


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _pair(values: Sequence[int], nd: int) -> tuple[int, ...]:
    """A per-dim int list (the rule checked it has 1 or `nd` entries)."""
    values = tuple(values)
    return values * nd if len(values) == 1 else values


@builds("aten.convolution.default")
def convolution(builder: OpBuilder, call: Call) -> None:
    if call["transposed"]:
        _transposed(builder, call)
    else:
        _convolution(builder, call, None)


@variants("conv_transpose2d")
def conv_transpose2d_variants() -> Iterable[Defines]:
    return any_dtype_variants("HAS_BIAS")


def _transposed(builder: OpBuilder, call: Call) -> None:
    """conv_transpose2d.comp, an invocation per output element; 1-D as 2-D with H = 1."""
    x, w, out, bias = call.tensor("input"), call.tensor("weight"), call.out, call["bias"]
    nd = len(w.shape) - 2
    stride, padding, dilation = (_pair(call[n], nd) for n in ("stride", "padding", "dilation"))
    if nd == 1:
        stride, padding, dilation = (1, *stride), (0, *padding), (1, *dilation)
    h, wd = (1, x.shape[2]) if nd == 1 else x.shape[2:]
    oh, ow = (1, out.shape[2]) if nd == 1 else out.shape[2:]
    kh, kw = (1, w.shape[2]) if nd == 1 else w.shape[2:]
    groups = call["groups"]
    push = struct.pack("<I16i", out.numel, x.shape[1], h, wd, out.shape[1], oh, ow, kh, kw, stride[0], stride[1],
                       padding[0], padding[1], dilation[0], dilation[1], x.shape[1] // groups, w.shape[1])
    bound = [x, w, out, bias or x]
    builder.dispatch("conv_transpose2d", bound, push, dispatch_groups(out.numel),
                     any_dtype_defines(HAS_BIAS=bias is not None, WORDS=reads_by_words(builder)),
                     dtype_spec(*bound))


@builds("et_vk.conv_with_clamp.default")
def convolution_with_clamp(builder: OpBuilder, call: Call) -> None:
    """ExecuTorch's fused conv + clamp; a Null bound does not clamp, and one past float32's
    range (ExecuTorch writes ±DBL_MAX for "none") is ±inf."""
    def bound(name: str, none: float) -> float:
        v = call[name]
        return none if v is None else math.copysign(math.inf, v) if abs(v) > FLT_MAX else float(v)

    _convolution(builder, call, (bound("output_min", -math.inf), bound("output_max", math.inf)))


@variants("conv2d")
def conv2d_variants() -> Iterable[Defines]:
    """x, weight and out each of any float dtype, typed (the hot loads: 27 with narrow storage, 9 without,
    where out is held in fp32), times a bias or not (its dtype a specialization constant) and a clamp
    or not: 144."""
    for words in WORDS_MODES:
        for types in product(binding_forms("X", "x", FLOATS, words), binding_forms("W", "w", FLOATS, words),
                             binding_forms("O", "o", FLOATS, words, writes=True)):
            for has_bias, clamp in itertools.product((False, True), repeat=2):
                yield {**types, **_conv_flags(has_bias, clamp, words)}


def _conv_flags(has_bias: bool, clamp: bool, words: bool) -> Defines:
    """conv2d's defines besides the typed bindings: the bias is an ANY_IN buffer (dtype.glslh)."""
    return any_dtype_defines(HAS_BIAS=has_bias, CLAMP=clamp, WORDS=words)


def _convolution(builder: OpBuilder, call: Call, clamp: tuple[float, float] | None) -> None:
    """The rule has checked the shapes (1-D or 2-D, groups, output size) and that it is not transposed."""
    x, w, out = call.tensor("input"), call.tensor("weight"), call.out
    bias = call["bias"]
    nd = len(w.shape) - 2
    stride, padding, dilation = (_pair(call[n], nd) for n in ("stride", "padding", "dilation"))
    groups = call["groups"]
    xs, os_ = tuple(x.shape), tuple(out.shape)
    if nd == 1:                          # [N, C, L] -> [N, C, 1, L]
        xs, os_ = xs[:2] + (1,) + xs[2:], os_[:2] + (1,) + os_[2:]
        kh, kw = 1, w.shape[2]
        sy, sx, py, px, dy, dx = 1, stride[0], 0, padding[0], 1, dilation[0]
    else:
        kh, kw = w.shape[2], w.shape[3]
        (sy, sx), (py, px), (dy, dx) = stride, padding, dilation
    N, Cin, H, W = xs
    _, Cout, OH, OW = os_
    cout_g, cin_g = w.shape[0] // groups, w.shape[1]
    if out.numel == 0:
        return
    if x.numel == 0 or cin_g == 0:
        raise UnsupportedOpError(f"{call.node}: empty input {tuple(x.shape)} is not supported")

    ocb = min(4, cout_g)
    oc_tiles = -(-cout_g // ocb)
    per_n = groups * oc_tiles
    if per_n > MAX_GROUPS:
        raise UnsupportedOpError(f"{call.node}: {Cout} output channels x {groups} groups is too many for one grid")
    tiles_x = -(-OW // 4)
    wbind, _ = bind_elems(builder, w, 0, w.numel)  # the whole weight must fit one binding
    bias_binding = [] if bias is None else [bind_elems(builder, bias, 0, bias.numel)[0]]
    defines = {**read_defines(builder, "X", "x", x), **read_defines(builder, "W", "w", w),
               **elem_defines("O", "o", out.dtype),
               **_conv_flags(bias is not None, clamp is not None, reads_by_words(builder))}
    bias_spec = () if bias is None else (dtype_code(bias.dtype),)

    # Samples per dispatch: all of them unless x/out exceed a binding or the grid.
    xn, on = Cin * H * W, Cout * OH * OW
    limit = builder.limits.max_storage_buffer_range
    if x.nbytes <= limit and out.nbytes <= limit:
        step = N
    else:
        step = max(1, (limit - builder.limits.min_storage_buffer_offset_alignment)
                   // max(xn * x.dtype.itemsize, on * out.dtype.itemsize))
    step = max(1, min(step, MAX_GROUPS // per_n))
    wg_x = min(8, _pow2_at_least(tiles_x))
    wg_y = min(64 // wg_x, _pow2_at_least(OH))
    for n0 in range(0, N, step):
        n = min(step, N - n0)
        nz = n * per_n
        wg_z = max(1, min(64 // (wg_x * wg_y), _pow2_at_least(nz)))
        xbind, xshift = bind_elems(builder, x, n0 * xn, n * xn)
        obind, oshift = bind_elems(builder, out, n0 * on, n * on)
        push = _CONV_PUSH.pack(n, Cin, H, W, Cout, OH, OW, kh, kw, sy, sx, py, px, dy, dx,
                               groups, cin_g, cout_g, oc_tiles, nz,
                               n0 * xn - xshift, 0, n0 * on - oshift, 0,
                               *(clamp or (0.0, 0.0)))
        groups_xyz = (-(-tiles_x // wg_x), -(-OH // wg_y), -(-nz // wg_z))
        if max(groups_xyz) > MAX_GROUPS:
            raise UnsupportedOpError(f"{call.node}: output {tuple(out.shape)} is too large for one grid")
        builder.dispatch("conv2d", [xbind, wbind, obind, *bias_binding], push, groups_xyz, defines,
                         (wg_x, wg_y, wg_z, ocb, *bias_spec))


def pool2d(builder: OpBuilder, call: Call, dilation: Sequence[int], count_include_pad: bool,
           divisor_override: int, is_max: bool, indices: TensorArg | None = None) -> None:
    """Max or average pooling of a call with max_pool2d's or avg_pool2d's arguments (the rule has
    checked the window sizes and the output shape); `indices` (int32, max only): also each maximum's
    flat index in its plane."""
    x, out = call.tensor("self"), call.out
    kh, kw = _pair(call["kernel_size"], 2)
    sy, sx = _pair(call["stride"], 2) if call["stride"] else (kh, kw)
    py, px = _pair(call["padding"], 2)
    dy, dx = _pair(dilation, 2)
    H, W = x.shape[-2:]
    OH, OW = out.shape[-2:]
    total = out.numel
    if total == 0:
        return
    for t in (x, out, *([indices] if indices else [])):
        if t.nbytes > builder.limits.max_storage_buffer_range:
            raise UnsupportedOpError(f"{call.node}: a {t.nbytes}-byte tensor exceeds the "
                                     f"{builder.limits.max_storage_buffer_range}-byte storage-buffer binding limit")
    push = _POOL_PUSH.pack(total, H, W, OH, OW, kh, kw, sy, sx, py, px, dy, dx,
                           int(count_include_pad), int(divisor_override))
    defines = _pool_defines(is_max, indices is not None, reads_by_words(builder))
    builder.dispatch("pool2d", [x, out, *([indices] if indices else [])], push, dispatch_groups(total), defines,
                     dtype_spec(x, out))


def _pool_defines(is_max: bool, indices: bool, words: bool) -> Defines:
    """pool2d's defines: x and out are ANY_IN / ANY_OUT buffers (their dtypes specialization constants)."""
    return any_dtype_defines(MAX_POOL=is_max, INDICES=indices, WORDS=words)


@variants("pool2d")
def pool2d_variants() -> Iterable[Defines]:
    """Average, max, max with indices; each storage mode: 6."""
    for words in WORDS_MODES:
        for is_max, indices in ((False, False), (True, False), (True, True)):
            yield _pool_defines(is_max, indices, words)


@builds("aten.max_pool2d.default")
def max_pool2d(builder: OpBuilder, call: Call) -> None:
    pool2d(builder, call, call["dilation"], False, 0, True)


@builds("aten.avg_pool2d.default")
def avg_pool2d(builder: OpBuilder, call: Call) -> None:
    pool2d(builder, call, (1, 1), call["count_include_pad"], call["divisor_override"] or 0, False)  # 0: none


@builds("aten.max_pool2d_with_indices.default")
def max_pool2d_with_indices(builder: OpBuilder, call: Call) -> None:
    """The indices (flat in each H x W plane, int32) are computed only when something reads them."""
    indices = call.outputs[1] if builder.is_read(call.output_vids[1]) else None
    pool2d(builder, call, call["dilation"], False, 0, True, indices)
