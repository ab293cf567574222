"""Builders of the ops that rearrange elements without computing (vkx.format.op_et): repeat,
unfold_copy and pixel_shuffle, each one strided copy (shape.py's copy_strided.comp) whose source
strides say where each output element comes from (0 to repeat, overlapping windows for unfold);
index_select, its index spread to the output's shape, then torch.gather's shader."""
from __future__ import annotations

from vkx.format.contract import Call
from vkx.format.op_et import unfold_windows

from . import OpBuilder, builds
from .models import gather_along
from .shape import contiguous_strides, normalize_dim, strided_copy


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


@builds("aten.index_select.default")
def index_select(builder: OpBuilder, call: Call) -> None:
    """out[.., j, ..] = self[.., index[j], ..] along `dim`."""
    src, index, out = call.tensor("self"), call.tensor("index"), call.out
    shape = tuple(out.shape) or (1,)
    dim = normalize_dim(call["dim"], len(shape))
    spread = builder.temp(shape, index.dtype)
    strides = [0] * len(shape)
    strides[dim] = 1 if index.shape else 0
    strided_copy(builder, index, spread, shape, strides)
    gather_along(builder, src, dim, spread, out)
