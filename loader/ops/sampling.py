"""Builders of the resampling ops (vkx.format.op_conv): upsample_nearest2d and upsample_bilinear2d,
one invocation per output element (shaders/upsample.comp), the steps from op_conv.upsample_scales
in push constants; grid_sampler_2d (shaders/grid_sampler.comp), an invocation per output element,
its mode, padding and corners in push constants. The input's and output's dtypes are
specialization constants (ANY_IN / ANY_OUT)."""
from __future__ import annotations

import struct
from typing import Iterable

from vkx.format.contract import Call
from vkx.format.op_conv import upsample_scales

from . import (WORDS_MODES, Defines, OpBuilder, UnsupportedOpError, any_dtype_defines, any_dtype_variants, builds,
               dtype_spec, reads_by_words, variants)
from .shape import dispatch_groups


def _upsample_defines(bilinear: bool, align_corners: bool, words: bool) -> Defines:
    """upsample's defines: the op kind (BILINEAR, else nearest) and its ALIGN_CORNERS flag."""
    return any_dtype_defines(BILINEAR=bilinear, ALIGN_CORNERS=bilinear and align_corners, WORDS=words)


@variants("upsample")
def upsample_variants() -> Iterable[Defines]:
    """Nearest, bilinear, bilinear with aligned corners; each storage mode: 6."""
    for words in WORDS_MODES:
        for bilinear, align_corners in ((False, False), (True, False), (True, True)):
            yield _upsample_defines(bilinear, align_corners, words)


@builds("aten.upsample_nearest2d.vec", "aten.upsample_bilinear2d.vec")
def upsample(builder: OpBuilder, call: Call) -> None:
    src, out = call.tensor("input"), call.out
    if out.numel == 0:
        return
    for t in (src, out):
        if t.nbytes > builder.limits.max_storage_buffer_range:
            raise UnsupportedOpError(f"resampling a tensor {t.shape} larger than one storage binding")
    bilinear = call.decl.name == "aten.upsample_bilinear2d.vec"
    defines = _upsample_defines(bilinear, bilinear and bool(call["align_corners"]), reads_by_words(builder))
    step_h, step_w = upsample_scales(call)
    push = struct.pack("<5I2f", out.numel, *src.shape[2:], *out.shape[2:], step_h, step_w)
    builder.dispatch("upsample", [src, out], push, dispatch_groups(out.numel), defines,
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
