"""Builders of the shape and layout ops (vkx.format.op_shape): each is a view where the graph allows
(`OpBuilder.alias_view`), else a copy through shape.py's machinery. View, permute, slice, select,
split, cat, expand and the dtype and dim-order copies are strided copies (`strided_copy`, through a
converted temporary where the dtypes differ, or `convert_copy`); repeat, unfold_copy and
pixel_shuffle one strided copy whose source strides say where each output element comes from (0 to
repeat, overlapping windows for unfold); constant_pad_nd a fill then a copy; flip its own shader
(flip.comp). Math is none: elements move, converted to each output's dtype.
"""
from __future__ import annotations

import struct
from typing import Iterable, Sequence

from vkx.format.contract import Call
from vkx.format.op_rules import slice_length
from vkx.format.op_shape import pad_widths, split_sizes, unfold_windows

from . import (Defines, OpBuilder, TensorArg, UnsupportedOpError, any_dtype_defines, any_dtype_variants, builds,
               dtype_spec, reads_by_words, variants)
from .elementwise import fill
from .shape import MAX_DIMS, broadcast_strides, contiguous_strides, convert_copy, dispatch_groups, normalize_dim, \
    strided_copy


@builds("aten.view_copy.default")
def view_copy(builder: OpBuilder, call: Call) -> None:
    """The bytes are unchanged: `out` is `self`'s buffer (no dispatch) where the graph allows,
    else a copy (converted when the output's dtype differs)."""
    view_or_copy(builder, call.tensor("self"), call.out)


def view_or_copy(builder: OpBuilder, src: TensorArg, out: TensorArg) -> None:
    """`out` = `src`'s bytes under another shape: an alias (`OpBuilder.alias_view`), else a copy."""
    if not builder.alias_view(out, src):
        convert_copy(builder, src, out)


@builds("aten.permute_copy.default")
def permute_copy(builder: OpBuilder, call: Call) -> None:
    """A permutation that keeps the dims of size > 1 in their order moves no element (a decode
    step's [1, 1, H, D] -> [1, H, 1, D]): a view; the others a strided copy."""
    src = call.tensor("self")
    dims = [normalize_dim(d, len(src.shape)) for d in call["dims"]]
    moved = [d for d in dims if src.shape[d] != 1]
    if moved == sorted(moved) and call.out.dtype == src.dtype:
        view_or_copy(builder, src, call.out)
        return
    strides = contiguous_strides(src.shape)
    _copy_into(builder, src, call.out, [src.shape[d] for d in dims], [strides[d] for d in dims])


@builds("aten.slice_copy.Tensor")
def slice_copy(builder: OpBuilder, call: Call) -> None:
    src = call.tensor("self")
    dim = normalize_dim(call["dim"], len(src.shape))
    step = call["step"]
    start, length = slice_length(src.shape[dim], call["start"], call["end"], step)
    if length == src.shape[dim] and call.out.dtype == src.dtype:  # every element: a view (liveness.SLICE)
        view_or_copy(builder, src, call.out)
        return
    sizes, strides = list(src.shape), list(contiguous_strides(src.shape))
    sizes[dim] = length
    offset = start * strides[dim]
    strides[dim] *= step
    _copy_into(builder, src, call.out, sizes, strides, src_offset=offset)


@builds("aten.cat.default")
def cat(builder: OpBuilder, call: Call) -> None:
    out = call.out
    dim = normalize_dim(call["dim"], len(out.shape))
    out_strides = contiguous_strides(out.shape)
    pos = 0
    for t in call["tensors"]:
        if t.numel == 0:  # torch skips empty inputs (including legacy 1-D shape (0,))
            continue
        _copy_into(builder, t, out, t.shape, contiguous_strides(t.shape),
                   dst_strides=out_strides, dst_offset=pos * out_strides[dim])
        pos += t.shape[dim]


def _copy_into(builder: OpBuilder, src: TensorArg, dst: TensorArg, sizes: Sequence[int],
               src_strides: Sequence[int], **where) -> None:
    """strided_copy, through a converted temporary when the dtypes differ (cat promotes)."""
    if src.dtype != dst.dtype:
        converted = builder.temp(src.shape, dst.dtype)
        convert_copy(builder, src, converted)
        src = converted
    strided_copy(builder, src, dst, sizes, src_strides, **where)


@builds("aten._to_copy.default")
def to_copy(builder: OpBuilder, call: Call) -> None:
    convert_copy(builder, call.tensor("self"), call.out)


@builds("aten.expand_copy.default")
def expand_copy(builder: OpBuilder, call: Call) -> None:
    """A strided copy reading broadcast dims with stride 0."""
    src, out = call.tensor("self"), call.out
    if src.dtype != out.dtype:
        converted = builder.temp(src.shape, out.dtype)
        convert_copy(builder, src, converted)
        src = converted
    strided_copy(builder, src, out, out.shape, broadcast_strides(src.shape, out.shape))


@builds("aten.unsqueeze_copy.default", "aten.squeeze_copy.dims", "aten.alias_copy.default",
        "dim_order_ops._to_dim_order_copy.default", "dim_order_ops._clone_dim_order.default")
def copy(builder: OpBuilder, call: Call) -> None:
    """The elements in order, converted to the output's dtype (a device tensor has one layout,
    whatever the dim_order); an alias where that is safe (`OpBuilder.alias_view`)."""
    convert_copy(builder, call.tensor("self"), call.out)


@builds("aten.select_copy.int")
def select_copy(builder: OpBuilder, call: Call) -> None:
    src = call.tensor("self")
    dim = normalize_dim(call["dim"], len(src.shape))
    strides = contiguous_strides(src.shape)
    index = call["index"] % src.shape[dim]
    strided_copy(builder, src, call.out, src.shape[:dim] + src.shape[dim + 1:], strides[:dim] + strides[dim + 1:],
                 src_offset=index * strides[dim])


@builds("aten.split_with_sizes_copy.default", "aten.split_copy.Tensor")
def split_copy(builder: OpBuilder, call: Call) -> None:
    """Each output is the next `size` rows along `dim`; outputs nothing reads are skipped."""
    src = call.tensor("self")
    dim = normalize_dim(call["dim"], len(src.shape))
    strides = contiguous_strides(src.shape)
    start = 0
    for out, vid, size in zip(call.outputs, call.output_vids, split_sizes(call)):
        if builder.is_read(vid):
            strided_copy(builder, src, out, out.shape, strides, src_offset=start * strides[dim])
        start += size


@builds("aten.constant_pad_nd.default")
def constant_pad_nd(builder: OpBuilder, call: Call) -> None:
    """The output filled with `value`, then the part of self it keeps copied in (a negative width crops)."""
    src, out = call.tensor("self"), call.out
    fill(builder, out, call["value"], 0)
    widths = pad_widths(call)
    sizes = [o - max(a, 0) - max(b, 0) for o, (a, b) in zip(out.shape, widths)]
    if min(sizes, default=1) <= 0:
        return
    ss, ds = contiguous_strides(src.shape), contiguous_strides(out.shape)
    strided_copy(builder, src, out, sizes, ss, src_offset=sum(max(-a, 0) * st for (a, _), st in zip(widths, ss)),
                 dst_strides=ds, dst_offset=sum(max(a, 0) * st for (a, _), st in zip(widths, ds)))


@builds("aten.repeat.default")
def repeat(builder: OpBuilder, call: Call) -> None:
    """The output as [r0, s0, r1, s1, ...]: each repeat dim reads the source with stride 0."""
    src, repeats = call.tensor("self"), list(call["repeats"])
    shape = [1] * (len(repeats) - len(src.shape)) + list(src.shape)
    strides = contiguous_strides(shape)
    sizes, src_strides = [], []
    for r, s, st in zip(repeats, shape, strides):
        sizes += [r, s]
        src_strides += [0, st]
    strided_copy(builder, src, call.out, sizes, src_strides)


@builds("aten.unfold_copy.default")
def unfold_copy(builder: OpBuilder, call: Call) -> None:
    """Window w of `dimension` starts at w * step; its `size` elements are the output's last dim."""
    src = call.tensor("self")
    shape = list(src.shape) or [1]
    dim = normalize_dim(call["dimension"], len(shape))
    strides = list(contiguous_strides(shape))
    sizes = shape[:dim] + [unfold_windows(call)] + shape[dim + 1:] + [call["size"]]
    src_strides = strides[:dim] + [strides[dim] * call["step"]] + strides[dim + 1:] + [strides[dim]]
    strided_copy(builder, src, call.out, sizes, src_strides)


@builds("aten.pixel_shuffle.default")
def pixel_shuffle(builder: OpBuilder, call: Call) -> None:
    """The output as [lead, c, h, i, w, j] reads self[lead, c*r*r + i*r + j, h, w]."""
    src, r = call.tensor("self"), call["upscale_factor"]
    *lead, channels, h, w = src.shape
    c = channels // (r * r)
    plane = h * w
    lead_strides = list(contiguous_strides(src.shape))[:len(lead)]
    sizes = [*lead, c, h, r, w, r]
    src_strides = [*lead_strides, r * r * plane, w, r * plane, 1, plane]
    strided_copy(builder, src, call.out, sizes, src_strides)


@variants("flip")
def flip_variants() -> Iterable[Defines]:
    return any_dtype_variants()


@builds("aten.flip.default")
def flip(builder: OpBuilder, call: Call) -> None:
    """One dispatch of flip.comp over the dims collapsed: neighbours both reversed, or both not, are one dim."""
    src, out = call.tensor("self"), call.out
    flipped = {normalize_dim(d, len(src.shape)) for d in call["dims"]}
    sizes: list[int] = []
    reversed_: list[bool] = []
    for d, size in enumerate(src.shape):
        if size == 1:
            continue
        if sizes and reversed_[-1] == (d in flipped):
            sizes[-1] *= size
        else:
            sizes.append(size)
            reversed_.append(d in flipped)
    if len(sizes) > MAX_DIMS:
        raise UnsupportedOpError(f"flip over {len(sizes)} dims that do not merge (at most {MAX_DIMS})")
    sizes, reversed_ = sizes or [1], reversed_ or [False]
    mask = sum(1 << d for d, r in enumerate(reversed_) if r)
    push = struct.pack(f"<3I{MAX_DIMS}I", src.numel, len(sizes), mask, *sizes, *[1] * (MAX_DIMS - len(sizes)))
    builder.dispatch("flip", [src, out], push, dispatch_groups(src.numel),
                     any_dtype_defines(WORDS=reads_by_words(builder)),
                     dtype_spec(src, out))
