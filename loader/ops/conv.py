"""Convolution and 2-D pooling (NCHW contiguous).

aten.convolution.default runs `shaders/conv2d.comp`, a direct convolution where
each invocation computes up to 4 output channels of one group x 4 output columns
(register tile). 1-D convolutions run as 2-D ones with H = 1. Pools run
`shaders/pool2d.comp`, one invocation per output element; the output size comes
from the output tensor (so ceil_mode needs no recomputation here).
"""
from __future__ import annotations

import struct
from typing import Sequence

from vkx.loader.ops import OpBuilder, TensorArg, UnsupportedOpError, register
from vkx.loader.ops.matmul import require_float
from vkx.loader.ops.shape import MAX_GROUPS, bind_elems, dispatch_groups

_CONV_PUSH = struct.Struct("<24i2f")
_FLOAT32_MAX = 3.4028234663852886e38  # ExecuTorch writes "no bound" as the float64 maximum
_POOL_PUSH = struct.Struct("<15i")


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _pair(values: Sequence[int], nd: int, name: str, op: str) -> tuple[int, ...]:
    values = tuple(int(v) for v in values)
    if len(values) == 1:
        return values * nd
    if len(values) != nd:
        raise UnsupportedOpError(f"{op}: {name} {values} does not match {nd} spatial dims")
    return values


@register("aten.convolution.default")
def convolution(builder: OpBuilder, args: tuple[int, ...]) -> None:
    _convolution(builder, args, None)


@register("et_vk.conv_with_clamp.default")
def convolution_with_clamp(builder: OpBuilder, args: tuple[int, ...]) -> None:
    """ExecuTorch's fused conv + clamp: convolution args, then output_min, output_max (each may be Null)."""
    low, high = (builder.scalar(v) for v in args[9:11])
    _convolution(builder, args[:9] + args[11:], (-_FLOAT32_MAX if low is None else max(float(low), -_FLOAT32_MAX),
                                                   _FLOAT32_MAX if high is None else min(float(high), _FLOAT32_MAX)))


def _convolution(builder: OpBuilder, args: tuple[int, ...], clamp: tuple[float, float] | None) -> None:
    x = builder.tensor(args[0])
    w = builder.tensor(args[1])
    out = builder.tensor(args[-1])
    require_float("aten.convolution", x, w, out)
    if builder.scalar(args[6]):
        raise UnsupportedOpError(
            "aten.convolution: transposed convolution (ConvTranspose1d/2d) is not supported by vkx")
    nd = len(w.shape) - 2
    if nd not in (1, 2):
        raise UnsupportedOpError(f"aten.convolution: only 1-D and 2-D convolutions are supported "
                                 f"(weight shape {tuple(w.shape)})")
    op = "aten.convolution"
    stride = _pair(builder.int_list(args[3]), nd, "stride", op)
    padding = _pair(builder.int_list(args[4]), nd, "padding", op)
    dilation = _pair(builder.int_list(args[5]), nd, "dilation", op)
    groups = int(builder.scalar(args[8]) or 1)
    bias = None if builder.is_null(args[2]) else builder.tensor(args[2])
    if bias is not None:
        require_float("aten.convolution", bias)

    if len(x.shape) == nd + 1:          # unbatched input
        xs, os_ = (1,) + tuple(x.shape), (1,) + tuple(out.shape)
    elif len(x.shape) == nd + 2:
        xs, os_ = tuple(x.shape), tuple(out.shape)
    else:
        raise UnsupportedOpError(f"{op}: input shape {tuple(x.shape)} does not match weight {tuple(w.shape)}")
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
    if Cout != w.shape[0] or cin_g * groups != Cin or cout_g * groups != Cout:
        raise UnsupportedOpError(f"{op}: input {tuple(x.shape)}, weight {tuple(w.shape)} and "
                                 f"groups={groups} do not agree")
    if out.numel == 0:
        return
    if x.numel == 0 or cin_g == 0:
        raise UnsupportedOpError(f"{op}: empty input {tuple(x.shape)} is not supported")

    ocb = min(4, cout_g)
    oc_tiles = -(-cout_g // ocb)
    per_n = groups * oc_tiles
    tiles_x = -(-OW // 4)
    limit = builder.max_binding_bytes
    wbind, _ = bind_elems(builder, w, 0, w.numel)  # the whole weight must fit one binding
    bbind = None
    if bias is not None:
        bbind, _ = bind_elems(builder, bias, 0, bias.numel)

    # Samples per dispatch: all of them unless x/out exceed a binding or the grid.
    xn, on = Cin * H * W, Cout * OH * OW
    if x.nbytes <= limit and out.nbytes <= limit:
        step = N
    else:
        step = max(1, (limit - builder.offset_alignment) // (4 * max(xn, on)))
    step = max(1, min(step, MAX_GROUPS // per_n if per_n <= MAX_GROUPS else 1))
    if per_n > MAX_GROUPS:
        raise UnsupportedOpError(f"{op}: {Cout} output channels x {groups} groups is too many for one grid")

    defines: dict[str, int] = {"OCB": ocb}
    if bias is not None:
        defines["HAS_BIAS"] = 1
    if clamp is not None:
        defines["CLAMP"] = 1
    wg_x = min(8, _pow2_at_least(tiles_x))
    wg_y = min(64 // wg_x, _pow2_at_least(OH))
    defines["WG_X"], defines["WG_Y"] = wg_x, wg_y
    for n0 in range(0, N, step):
        n = min(step, N - n0)
        nz = n * per_n
        wg_z = max(1, min(64 // (wg_x * wg_y), _pow2_at_least(nz)))
        defines["WG_Z"] = wg_z
        xbind, xshift = bind_elems(builder, x, n0 * xn, n * xn)
        obind, oshift = bind_elems(builder, out, n0 * on, n * on)
        bindings = [xbind, wbind, obind]
        if bias is not None:
            bindings.append(bbind)
        push = _CONV_PUSH.pack(n, Cin, H, W, Cout, OH, OW, kh, kw, sy, sx, py, px, dy, dx,
                               groups, cin_g, cout_g, oc_tiles, nz,
                               n0 * xn - xshift, 0, n0 * on - oshift, 0,
                               *(clamp or (0.0, 0.0)))
        groups_xyz = (-(-tiles_x // wg_x), -(-OH // wg_y), -(-nz // wg_z))
        if max(groups_xyz) > MAX_GROUPS:
            raise UnsupportedOpError(f"{op}: output {tuple(out.shape)} is too large for one grid")
        builder.dispatch("conv2d", bindings, push, groups_xyz, dict(defines))


def _pool(builder: OpBuilder, name: str, x: TensorArg, out: TensorArg, kernel, stride, padding,
          dilation, count_include_pad: bool, divisor_override: int, is_max: bool) -> None:
    require_float(name, x, out)
    if len(x.shape) not in (3, 4) or len(out.shape) != len(x.shape):
        raise UnsupportedOpError(f"{name}: expected a 3-D or 4-D input, got {tuple(x.shape)}")
    kh, kw = _pair(kernel, 2, "kernel_size", name)
    sy, sx = _pair(stride, 2, "stride", name) if len(stride) else (kh, kw)
    py, px = _pair(padding, 2, "padding", name)
    dy, dx = _pair(dilation, 2, "dilation", name)
    H, W = x.shape[-2:]
    OH, OW = out.shape[-2:]
    total = out.numel
    if total == 0:
        return
    for t in (x, out):
        if t.nbytes > builder.max_binding_bytes:
            raise UnsupportedOpError(f"{name}: a {t.nbytes}-byte tensor exceeds the "
                                     f"{builder.max_binding_bytes}-byte storage-buffer binding limit")
    push = _POOL_PUSH.pack(total, H, W, OH, OW, kh, kw, sy, sx, py, px, dy, dx,
                           int(count_include_pad), int(divisor_override))
    builder.dispatch("pool2d", [x, out], push, dispatch_groups(total), {"MAX_POOL": 1} if is_max else {})


@register("aten.max_pool2d.default")
def max_pool2d(builder: OpBuilder, args: tuple[int, ...]) -> None:
    x = builder.tensor(args[0])
    out = builder.tensor(args[-1])
    _pool(builder, "aten.max_pool2d", x, out, builder.int_list(args[1]), builder.int_list(args[2]),
          builder.int_list(args[3]), builder.int_list(args[4]), False, 0, True)


@register("aten.avg_pool2d.default")
def avg_pool2d(builder: OpBuilder, args: tuple[int, ...]) -> None:
    x = builder.tensor(args[0])
    out = builder.tensor(args[-1])
    divisor = 0 if builder.is_null(args[6]) else int(builder.scalar(args[6]))
    _pool(builder, "aten.avg_pool2d", x, out, builder.int_list(args[1]), builder.int_list(args[2]),
          builder.int_list(args[3]), (1, 1), bool(builder.scalar(args[5])), divisor, False)
