"""`et_vk.prepack.default(tref, out)`: a weight in its device form, made once at load.

A weight whose device dtype is its stored dtype is used as it is: the output is
the constant's own device tensor (no second copy on the device, no work per
call). Otherwise (older files widened fp16 weights to fp32 on the device) the
conversion is a load-time dispatch, run once after the weights are uploaded.
"""
from __future__ import annotations

from vkx.format.contract import Call

from . import OpBuilder, builds
from .shape import convert_copy


@builds("et_vk.prepack.default")
def prepack(builder: OpBuilder, call: Call) -> None:
    src, out = call.tensor("tref"), call.out
    if src.dtype == out.dtype:
        builder.alias(call.output_vids[0], call.vid("tref"))
        return
    with builder.at_load():
        convert_copy(builder, src, out)
