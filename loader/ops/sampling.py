"""Builders of the resampling ops (vkx.format.op_et): upsample_nearest2d and upsample_bilinear2d,
one invocation per output element (shaders/upsample.comp), the steps from op_et.upsample_scales
in push constants."""
from __future__ import annotations

import struct

from vkx.format.contract import Call
from vkx.format.op_et import upsample_scales

from . import OpBuilder, UnsupportedOpError, builds, elem_defines
from .shape import dispatch_groups


@builds("aten.upsample_nearest2d.vec", "aten.upsample_bilinear2d.vec")
def upsample(builder: OpBuilder, call: Call) -> None:
    src, out = call.tensor("input"), call.out
    if out.numel == 0:
        return
    for t in (src, out):
        if t.nbytes > builder.limits.max_storage_buffer_range:
            raise UnsupportedOpError(f"resampling a tensor {t.shape} larger than one storage binding")
    defines = {**elem_defines("X", "x", src.dtype), **elem_defines("Y", "y", out.dtype)}
    if call.decl.name == "aten.upsample_bilinear2d.vec":
        defines["BILINEAR"] = "1"
        if call["align_corners"]:
            defines["ALIGN_CORNERS"] = "1"
    step_h, step_w = upsample_scales(call)
    push = struct.pack("<5I2f", out.numel, *src.shape[2:], *out.shape[2:], step_h, step_w)
    builder.dispatch("upsample", [src, out], push, dispatch_groups(out.numel), defines)
