"""Dynamically quantized activations (ExecuTorch's 8da4w linears, vkx.format.op_quant):
`torchao.choose_qparams_affine` gives each row its int8 scale and zero point, and
`et_vk.linear_dq8ca_q4gsw` multiplies the row as those int8 values give it back by the 4-bit weight
(`shaders/act_quant.comp`, then linear_q4gsw's kernels). The product is the one torchao's quantized
model computes, in fp32: the integers are exact either way.
"""
from __future__ import annotations

import struct
from typing import Iterable

from vkx.format.contract import Call

from . import Defines, OpBuilder, any_dtype_defines, any_dtype_variants, builds, dtype_spec, reads_by_words, variants
from .quant import q4gsw
from .shape import dispatch_groups

FP32_SMALLEST_NORMAL = 1.1754943508222875e-38
"""torchao's eps when none is given (torch.finfo(float32).smallest_normal)."""


@variants("act_quant")
def act_quant_variants() -> Iterable[Defines]:
    return any_dtype_variants("CHOOSE")


@builds("torchao.choose_qparams_affine.default")
def choose_qparams_affine(builder: OpBuilder, call: Call) -> None:
    x, (scale, zero) = call.tensor("input"), call.outputs
    k = x.shape[-1]
    rows = x.numel // k if k else 0
    eps = FP32_SMALLEST_NORMAL if call["eps"] is None else float(call["eps"])
    builder.dispatch("act_quant", [x, scale, zero], struct.pack("<IIf", rows, k, eps), dispatch_groups(rows),
                     any_dtype_defines(CHOOSE=True, WORDS=reads_by_words(builder)),
                     dtype_spec(x, scale, zero))


@builds("et_vk.linear_dq8ca_q4gsw.default")
def linear_dq8ca_q4gsw(builder: OpBuilder, call: Call) -> None:
    x, scale, zero = call.tensor("self"), call.tensor("input_scales"), call.tensor("input_zp")
    quantized = builder.temp(x.shape, x.dtype)
    builder.dispatch("act_quant", [x, scale, zero, quantized], struct.pack("<IIf", x.numel, x.shape[-1], 0.0),
                     dispatch_groups(x.numel), any_dtype_defines(CHOOSE=False, WORDS=reads_by_words(builder)),
                     dtype_spec(x, scale, zero, x))
    q4gsw(builder, quantized, call)
