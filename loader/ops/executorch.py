"""Builders of the ops of vkx.format.op_et: what ExecuTorch's VulkanPartitioner emits beyond vkx's
own exporter.

Shape ops are copies (`convert_copy`, `strided_copy` of shape.py); max-pool with indices is
conv.py's pool shader writing the indices too; `et_vk.rms_norm` and `et_vk.sdpa` reuse the
RMS-norm rows of reduce.py and the attention of attention.py; the rotary embeddings and fills
have their own shaders (rotary.comp, fill.comp). Math is fp32, stored in each output's dtype.
"""
from __future__ import annotations

import struct
from typing import Iterable

from vkx.format.contract import Call
from vkx.format.op_et import pad_widths, split_sizes

from . import (Defines, OpBuilder, UnsupportedOpError, any_dtype_defines, any_dtype_variants, builds, dtype_spec,
               reads_by_words, variants)
from .attention import attention
from .conv import pool2d
from .elementwise import CLAMP, UNARY_GLSL, op_glsl, unary
from .models import fill
from .reduce import rms_norm_rows
from .shape import MAX_DIMS, contiguous_strides, convert_copy, dispatch_groups, normalize_dim, strided_copy


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


@builds("aten.max_pool2d_with_indices.default")
def max_pool2d_with_indices(builder: OpBuilder, call: Call) -> None:
    """The indices (flat in each H x W plane, int32) are computed only when something reads them."""
    indices = call.outputs[1] if builder.is_read(call.output_vids[1]) else None
    pool2d(builder, call, call["dilation"], False, 0, True, indices)


@builds("aten.full_like.default")
def full_like(builder: OpBuilder, call: Call) -> None:
    fill(builder, call.out, call["fill_value"], 0)


@builds("aten.zeros_like.default", "aten.ones_like.default")
def zeros_ones_like(builder: OpBuilder, call: Call) -> None:
    fill(builder, call.out, 1 if call.decl.name == "aten.ones_like.default" else 0, 0)


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


@builds("aten.leaky_relu.default", "aten.hardshrink.default")
def unary_with_argument(builder: OpBuilder, call: Call) -> None:
    """The op's GLSL expression with its float argument (the second) as p.a."""
    unary(builder, call, op_glsl(call, UNARY_GLSL), float(call[call.decl.args[1].name]))


@builds("aten.hardtanh.default")
def hardtanh(builder: OpBuilder, call: Call) -> None:
    """min(max(x, min_val), max_val), NaN kept (ExecuTorch's relu6)."""
    unary(builder, call, CLAMP, float(call["min_val"]), float(call["max_val"]))


@builds("et_vk.rms_norm.default")
def et_rms_norm(builder: OpBuilder, call: Call) -> None:
    """Over the last dim, by weight [D] (ExecuTorch's reference: fp32 math, the input's dtype out)."""
    x = call.tensor("x")
    rms_norm_rows(builder, x, call.tensor("weight"), call.out, x.shape[-1], float(call["eps"]))


@builds("et_vk.apply_rotary_emb_hf.default")
def apply_rotary_emb_hf(builder: OpBuilder, call: Call) -> None:
    _rotary(builder, call, call["start_pos"], interleaved=False)


@builds("et_vk.apply_rotary_emb.default")
def apply_rotary_emb(builder: OpBuilder, call: Call) -> None:
    _rotary(builder, call, 0, interleaved=True)


def _rotary(builder: OpBuilder, call: Call, start: int, interleaved: bool) -> None:
    """xq and xk, each turned by the same tables at rows start.. in one dispatch (rotary.comp)."""
    cos, sin = call.tensor("freqs_cos"), call.tensor("freqs_sin")
    for x, out in zip((call.tensor("xq"), call.tensor("xk")), call.outputs):
        if len(cos.shape) == 3:  # heads-first [B, H, S, D], freqs [1, S, R]: the row is the index in dim 2
            s, h, d = x.shape[2], 1, x.shape[3]
        else:
            _, s, h, d = x.shape
        push = struct.pack("<6I", x.numel, s, h, d, cos.shape[-1], start)
        builder.dispatch("rotary", [x, cos, sin, out], push, dispatch_groups(x.numel),
                         any_dtype_defines(INTERLEAVED=interleaved, WORDS=reads_by_words(builder)),
                         dtype_spec(x, cos, sin, out))


@variants("rotary")
def rotary_variants() -> Iterable[Defines]:
    """Every dtype a specialization constant: a rotary moves a token's q and k heads (elementwise,
    as binary.comp), not a bandwidth-critical stream."""
    return any_dtype_variants("INTERLEAVED")


@builds("et_vk.sdpa.default")
def et_sdpa(builder: OpBuilder, call: Call) -> None:
    """softmax(scale * q @ k^T + attn_mask) @ v: no causal mask, no grouped heads (the reference's matmuls)."""
    attention(builder, call.node, call.tensor("q"), call.tensor("k"), call.tensor("v"), call.out,
              call["attn_mask"], call["scale"], False, False)


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


@variants("grid_sampler")
def grid_sampler_variants() -> Iterable[Defines]:
    return any_dtype_variants()


@builds("aten.grid_sampler_2d.default")
def grid_sampler_2d(builder: OpBuilder, call: Call) -> None:
    """grid_sampler.comp, an invocation per output element; mode, padding and corners are push constants."""
    x, grid, out = call.tensor("input"), call.tensor("grid"), call.out
    _, c, h, w = x.shape
    push = struct.pack("<6i3I", out.numel, c, h, w, out.shape[2], out.shape[3], call["interpolation_mode"],
                       call["padding_mode"], int(call["align_corners"]))
    builder.dispatch("grid_sampler", [x, grid, out], push, dispatch_groups(out.numel),
                     any_dtype_defines(WORDS=reads_by_words(builder)),
                     dtype_spec(x, grid, out))
