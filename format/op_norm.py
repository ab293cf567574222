"""The op contract's normalisations: layer, RMS (ATen's and the Vulkan backend's `et_vk.rms_norm`),
batch (inference) and group norm, each with its rule beside it.

Arguments come in the schemas' order, the output last (vkx.format.contract): ATen's, and
executorch/backends/vulkan/custom_ops_lib.py's for `et_vk.*`, whose reference kernels give the
semantics. docs/architecture.md lists the same ops in prose.
"""
from __future__ import annotations

import math
from typing import Sequence

from .contract import Arg, Call, OpDecl, Out, TensorLike
from .op_rules import I, L, N, T, floats, optional, same_shape

DECLS: list[OpDecl] = []
"""This module's declarations, in order (`vkx.format.opset` assembles the table)."""
declare = DECLS.append


def _normalized(call: Call, x: TensorLike, shape: Sequence[int]) -> int:
    k = len(shape)
    call.require(0 < k <= len(x.shape) and tuple(x.shape[len(x.shape) - k:]) == tuple(shape),
                 f"normalized_shape {list(shape)} is not the trailing dims of {list(x.shape)}")
    for name in ("weight", "bias"):
        if any(a.name == name for a in call.decl.args) and call[name] is not None:
            call.expect_shape(name, call[name].shape, shape)
    return k


def _layer_norm(call: Call) -> None:
    floats(call, "input", "weight", "bias")
    x = call.tensor("input")
    k = _normalized(call, x, call["normalized_shape"])
    out, mean, rstd = call.outputs
    call.expect_shape("the output", out.shape, x.shape)
    stats = (*x.shape[:len(x.shape) - k], *([1] * k))
    call.expect_shape("mean", mean.shape, stats)
    call.expect_shape("rstd", rstd.shape, stats)


def _rms_norm(call: Call) -> None:
    floats(call, "input", "weight")
    x = call.tensor("input")
    _normalized(call, x, call["normalized_shape"])
    call.expect_shape("the output", call.out.shape, x.shape)


def _vk_rms_norm(call: Call) -> None:
    x, w = call.tensor("x"), call.tensor("weight")
    call.require(len(x.shape) >= 1 and x.dtype.is_float and w.dtype.is_float, f"x {x.dtype} {list(x.shape)}")
    call.expect_shape("weight", w.shape, x.shape[-1:])
    same_shape(call, "x")


def _batch_norm(call: Call) -> None:
    floats(call, "input", "weight", "bias", "running_mean", "running_var")
    x = call.tensor("input")
    call.require(len(x.shape) >= 2, f"input {list(x.shape)} has no channel dim")
    c = x.shape[1]
    for name in ("weight", "bias", "running_mean", "running_var"):
        if call[name] is not None:
            call.expect_shape(name, call[name].shape, (c,))
    call.expect_shape("the output", call.outputs[0].shape, x.shape)


def _group_norm(call: Call) -> None:
    """input [N, C, *] in `group` groups of C / group channels; weight, bias [C]; mean, rstd [N, group]."""
    x, (out, mean, rstd) = call.tensor("input"), call.outputs
    n, c, hw, groups = call["N"], call["C"], call["HxW"], call["group"]
    call.require(x.dtype.is_float and len(x.shape) >= 2 and (n, c) == tuple(x.shape[:2])
                 and hw == math.prod(x.shape[2:]), f"N {n}, C {c}, HxW {hw} for input {x.dtype} {list(x.shape)}")
    call.require(groups > 0 and c % groups == 0, f"{groups} groups of {c} channels")
    for name in ("weight", "bias"):
        if call[name] is not None:
            call.expect_shape(name, call[name].shape, (c,))
    call.require(math.isfinite(call["eps"]) and call["eps"] >= 0, f"eps {call['eps']!r}")
    call.expect_shape("the output", out.shape, x.shape)
    call.expect_shape("mean", mean.shape, (n, groups))
    call.expect_shape("rstd", rstd.shape, (n, groups))


declare(OpDecl("aten.native_layer_norm.default",
               (Arg("input", T), Arg("normalized_shape", L), optional("weight", T), optional("bias", T), Arg("eps", N)),
               out=Out(("out", "mean", "rstd")), rule=_layer_norm))
declare(OpDecl("aten.rms_norm.default",
               (Arg("input", T), Arg("normalized_shape", L), optional("weight", T, None), optional("eps", N, None)),
               rule=_rms_norm))
declare(OpDecl("et_vk.rms_norm.default", (Arg("x", T), Arg("weight", T), Arg("eps", N)), rule=_vk_rms_norm))
declare(OpDecl("aten._native_batch_norm_legit_no_training.default",
               (Arg("input", T), optional("weight", T), optional("bias", T), Arg("running_mean", T), Arg("running_var", T),
                Arg("momentum", N), Arg("eps", N)),
               out=Out(("out", "mean", "invstd")), rule=_batch_norm))
declare(OpDecl("aten.native_group_norm.default",  # each (sample, group) normalised, then weight * y + bias per channel
               (Arg("input", T), optional("weight", T), optional("bias", T), Arg("N", I), Arg("C", I), Arg("HxW", I),
                Arg("group", I), Arg("eps", N)), out=Out(("out", "mean", "rstd")), rule=_group_norm))
