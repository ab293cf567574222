"""Reductions and normalisations: softmax, log-softmax, layer/RMS/batch norm, sum, mean.

Row-wise ops (softmax, layer norm, RMS norm) run one invocation per row, looping
over the reduced elements; tensors larger than one storage binding are split
into blocks of whole rows. `sum`/`mean` walk any set of dims with strides.
"""
from __future__ import annotations

import struct

from vkx.format import dtypes

from . import OpBuilder, TensorArg, UnsupportedOpError, register
from .shape import (MAX_DIMS, bind_elems, chunk_elems, contiguous_strides, dispatch_groups,
                    normalize_dim, pad_dims, prod, row_chunks, rows_binding)

FLOAT32_EPS = 1.1920928955078125e-07  # torch.finfo(torch.float32).eps


def _float_tensor(builder: OpBuilder, vid: int, what: str) -> TensorArg:
    t = builder.tensor(vid)
    if t.dtype is not dtypes.FLOAT32:
        raise UnsupportedOpError(f"{what} on a {t.dtype} tensor")
    return t


def _optional_tensor(builder: OpBuilder, vid: int) -> TensorArg | None:
    if builder.is_null(vid):
        return None
    try:
        return builder.tensor(vid)
    except Exception:  # not a tensor value
        return None


def _softmax(builder: OpBuilder, args: tuple[int, ...], log: bool) -> None:
    # self, dim, half_to_float, out
    src = _float_tensor(builder, args[0], "softmax")
    out = builder.tensor(args[-1])
    shape = tuple(src.shape)
    if not shape:
        shape = (1,)
    dim = normalize_dim(int(builder.scalar(args[1])), len(shape))
    outer, d, inner = prod(shape[:dim]), shape[dim], prod(shape[dim + 1:])
    if src.numel == 0:
        return
    defines = {"LOG": 1} if log else {}
    slab = d * inner  # one outer index: whole rows of the softmax
    for o0, oc in row_chunks(builder, outer, slab, [src, out]):
        rows = oc * inner
        push = struct.pack("<III", rows, d, inner)
        builder.dispatch("softmax", [rows_binding(src, o0, oc, slab), rows_binding(out, o0, oc, slab)],
                         push, dispatch_groups(rows), defines)


@register("aten._softmax.default")
def softmax(builder: OpBuilder, args: tuple[int, ...]) -> None:
    _softmax(builder, args, log=False)


@register("aten._log_softmax.default")
def log_softmax(builder: OpBuilder, args: tuple[int, ...]) -> None:
    _softmax(builder, args, log=True)


@register("aten.native_layer_norm.default")
def native_layer_norm(builder: OpBuilder, args: tuple[int, ...]) -> None:
    # input, normalized_shape, weight|Null, bias|Null, eps, ValueList(out, mean, rstd)
    src = _float_tensor(builder, args[0], "layer_norm")
    norm_shape = builder.int_list(args[1])
    weight = _optional_tensor(builder, args[2])
    bias = _optional_tensor(builder, args[3])
    eps = float(builder.scalar(args[4]))
    outs = builder.value_list(args[5])
    out = builder.tensor(outs[0])
    n = prod(norm_shape)
    if tuple(src.shape[len(src.shape) - len(norm_shape):]) != tuple(norm_shape):
        raise UnsupportedOpError(f"layer_norm over {norm_shape} of {src.shape}")
    if src.numel == 0 or n == 0:
        return
    rows = src.numel // n
    stats = []
    for vid in outs[1:3]:
        t = _optional_tensor(builder, vid)
        stats.append(t if t is not None and t.numel == rows else None)
    mean, rstd = stats
    defines = {}
    if weight is not None:
        defines["HAS_W"] = 1
    if bias is not None:
        defines["HAS_B"] = 1
    if mean is not None:
        defines["WRITE_MEAN"] = 1
    if rstd is not None:
        defines["WRITE_RSTD"] = 1
    for r0, rc in row_chunks(builder, rows, n, [src, out]):
        xb = rows_binding(src, r0, rc, n)
        yb = rows_binding(out, r0, rc, n)
        mb, m_shift = bind_elems(builder, mean, r0, rc) if mean is not None else (yb, r0)
        sb, s_shift = bind_elems(builder, rstd, r0, rc) if rstd is not None else (yb, r0)
        # mean and rstd both hold `rows` elements, so they always split at the same shift.
        stat_off = r0 - (m_shift if mean is not None else s_shift)
        binds = [xb, yb, weight if weight is not None else xb, bias if bias is not None else xb,
                 mb, sb]
        push = struct.pack("<IIfI", rc, n, eps, stat_off)
        builder.dispatch("layer_norm", binds, push, dispatch_groups(rc), defines)


@register("aten.rms_norm.default")
def rms_norm(builder: OpBuilder, args: tuple[int, ...]) -> None:
    # input, normalized_shape, weight|Null, eps|Null, out
    src = _float_tensor(builder, args[0], "rms_norm")
    norm_shape = builder.int_list(args[1])
    weight = _optional_tensor(builder, args[2])
    eps = FLOAT32_EPS
    if not builder.is_null(args[3]):
        value = builder.scalar(args[3])
        if value is not None:
            eps = float(value)
    out = builder.tensor(args[-1])
    n = prod(norm_shape)
    if tuple(src.shape[len(src.shape) - len(norm_shape):]) != tuple(norm_shape):
        raise UnsupportedOpError(f"rms_norm over {norm_shape} of {src.shape}")
    if src.numel == 0 or n == 0:
        return
    rows = src.numel // n
    defines = {"HAS_W": 1} if weight is not None else {}
    for r0, rc in row_chunks(builder, rows, n, [src, out]):
        xb = rows_binding(src, r0, rc, n)
        yb = rows_binding(out, r0, rc, n)
        push = struct.pack("<IIf", rc, n, eps)
        builder.dispatch("rms_norm", [xb, yb, weight if weight is not None else xb], push, dispatch_groups(rc), defines)


@register("aten._native_batch_norm_legit_no_training.default")
def batch_norm_no_training(builder: OpBuilder, args: tuple[int, ...]) -> None:
    # input, weight|Null, bias|Null, running_mean, running_var, momentum, eps,
    # ValueList(out, mean, invstd): the saved statistics are empty in eval mode.
    src = _float_tensor(builder, args[0], "batch_norm")
    weight = _optional_tensor(builder, args[1])
    bias = _optional_tensor(builder, args[2])
    rmean, rvar = builder.tensor(args[3]), builder.tensor(args[4])
    eps = float(builder.scalar(args[6]))
    outs = builder.value_list(args[7])
    out = builder.tensor(outs[0])
    shape = tuple(src.shape)
    if len(shape) < 2:
        raise UnsupportedOpError(f"batch_norm input {shape} has no channel dim")
    channels, inner = shape[1], prod(shape[2:])
    defines = {}
    if weight is not None:
        defines["HAS_W"] = 1
    if bias is not None:
        defines["HAS_B"] = 1
    for start, count in chunk_elems(builder, src.numel, [src, out]):
        xb, _ = bind_elems(builder, src, start, count)
        yb, _ = bind_elems(builder, out, start, count)
        push = struct.pack("<IIIfI", count, channels, inner, eps, start)
        builder.dispatch("batch_norm", [xb, yb, rmean, rvar, weight if weight is not None else rmean,
                        bias if bias is not None else rmean],
                         push, dispatch_groups(count), defines)


def _reduce(builder: OpBuilder, args: tuple[int, ...], mean: bool) -> None:
    # self, dim IntList|Null, keepdim, dtype, out
    src = _float_tensor(builder, args[0], "mean" if mean else "sum")
    out = builder.tensor(args[-1])
    shape = tuple(src.shape)
    ndim = len(shape)
    dims: tuple[int, ...] = ()
    if not builder.is_null(args[1]):
        dims = tuple(builder.int_list(args[1]))
    if not dims:
        reduced = set(range(ndim))
    else:
        reduced = {normalize_dim(d, ndim) for d in dims}
    if out.numel == 0:
        return
    strides = contiguous_strides(shape)
    # Runs of adjacent kept / reduced dims merge; size-1 dims drop out.
    kept: list[list[int]] = []     # [size, stride]
    red: list[list[int]] = []
    last_kind = None
    for d in range(ndim):
        size = shape[d]
        if size == 1:
            continue
        kind = d in reduced
        group = red if kind else kept
        if last_kind is kind and group:
            group[-1][0] *= size
            group[-1][1] = strides[d]
        else:
            group.append([size, strides[d]])
        last_kind = kind
    count = prod(s for s, _ in red)
    if not red:
        red = [[1, 0]]
    if len(kept) > MAX_DIMS or len(red) > MAX_DIMS:
        raise UnsupportedOpError(f"reduction over {shape} by {sorted(reduced)}: too many dims")
    if prod(s for s, _ in kept) != out.numel:
        raise UnsupportedOpError(f"reduction of {shape} over {sorted(reduced)} is not {out.shape}")
    if count == 0:
        raise UnsupportedOpError("reduction over an empty dim")
    for t in (src, out):
        if t.nbytes > builder.max_binding_bytes:
            raise UnsupportedOpError(f"reduction of a tensor {t.shape} larger than one storage binding")
    push = struct.pack("<4I24I", out.numel, len(kept), len(red), count,
                       *pad_dims([s for s, _ in kept]), *pad_dims([st for _, st in kept]),
                       *pad_dims([s for s, _ in red]), *pad_dims([st for _, st in red]))
    builder.dispatch("reduce_dims", [src, out], push, dispatch_groups(out.numel),
                     {"MEAN": 1} if mean else {})


@register("aten.mean.dim")
def mean_dim(builder: OpBuilder, args: tuple[int, ...]) -> None:
    _reduce(builder, args, mean=True)


@register("aten.sum.dim_IntList")
def sum_dim(builder: OpBuilder, args: tuple[int, ...]) -> None:
    _reduce(builder, args, mean=False)
