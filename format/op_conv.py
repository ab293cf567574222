"""The op contract's spatial ops on [N, C, *] images: convolution (plain, transposed, and the Vulkan
backend's `et_vk.conv_with_clamp`), 2-D max and average pooling (max-pool with indices too) and
resampling (upsample, grid_sampler_2d), each with its rule beside it.

Arguments come in the schemas' order, the output last (vkx.format.contract): ATen's, and
executorch/backends/vulkan/custom_ops_lib.py's for `et_vk.*`. docs/architecture.md lists the same
ops in prose.
"""
from __future__ import annotations

import math

from . import dtypes
from .contract import Arg, Call, Kind, OpDecl, Out
from .op_rules import B, I, L, N, T, floats, int_pairs, optional, pool_shape, window_size

DECLS: list[OpDecl] = []
"""This module's declarations, in order (`vkx.format.opset` assembles the table)."""
declare = DECLS.append


def _convolution(call: Call) -> None:
    floats(call, "input", "weight", "bias")
    x, w = call.tensor("input"), call.tensor("weight")
    spatial = len(w.shape) - 2
    call.require(spatial in (1, 2) and len(x.shape) == spatial + 2,
                 f"input {list(x.shape)} and weight {list(w.shape)}: 1-D or 2-D convolution")
    if call["transposed"]:
        _transposed_convolution(call, x, w, spatial)
        return
    groups = call["groups"]
    call.require(groups >= 1 and x.shape[1] % groups == 0 and w.shape[0] % groups == 0,
                 f"groups {groups} does not divide the channels")
    call.require(w.shape[1] * groups == x.shape[1],
                 f"weight {list(w.shape)} with groups {groups} does not take {x.shape[1]} input channels")
    if call["bias"] is not None:
        call.expect_shape("bias", call["bias"].shape, (w.shape[0],))
    stride, dilation = int_pairs(call, "stride", spatial), int_pairs(call, "dilation", spatial)
    padding = int_pairs(call, "padding", spatial, positive=False)
    sizes = [window_size(x.shape[2 + d], w.shape[2 + d], stride[d], padding[d], dilation[d], False)
             for d in range(spatial)]
    call.require(all(s > 0 for s in sizes), "the kernel is larger than the padded input")
    call.expect_shape("the output", call.out.shape, (x.shape[0], w.shape[0], *sizes))


def _transposed_convolution(call: Call, x, w, spatial: int) -> None:
    """weight [Cin, Cout / groups, *K]; each output size (in - 1) * stride - 2 * padding
    + dilation * (k - 1) + output_padding + 1, output_padding below stride or dilation."""
    groups = call["groups"]
    call.require(groups >= 1 and x.shape[1] % groups == 0 and w.shape[0] == x.shape[1],
                 f"weight {list(w.shape)} with groups {groups} does not take {x.shape[1]} input channels")
    if call["bias"] is not None:
        call.expect_shape("bias", call["bias"].shape, (w.shape[1] * groups,))
    stride, dilation = int_pairs(call, "stride", spatial), int_pairs(call, "dilation", spatial)
    padding = int_pairs(call, "padding", spatial, positive=False)
    extra = int_pairs(call, "output_padding", spatial, positive=False)
    call.require(all(e < max(s, d) for e, s, d in zip(extra, stride, dilation)),
                 f"padding {list(padding)}, output_padding {list(extra)} for stride {list(stride)}")
    sizes = [(x.shape[2 + d] - 1) * stride[d] - 2 * padding[d] + dilation[d] * (w.shape[2 + d] - 1) + extra[d] + 1
             for d in range(spatial)]
    call.require(all(s > 0 for s in sizes), f"an output of {sizes}")
    call.expect_shape("the output", call.out.shape, (x.shape[0], w.shape[1] * groups, *sizes))


def _pool(call: Call) -> None:
    floats(call, "self")
    call.expect_shape("the output", call.out.shape, pool_shape(call))


def _max_pool_with_indices(call: Call) -> None:
    x, (out, indices) = call.tensor("self"), call.outputs
    call.require(x.dtype.is_float and out.dtype.is_float, f"{x.dtype} input, {out.dtype} output: floats only")
    call.require(indices.dtype is dtypes.INT32, f"indices of {indices.dtype} (int32 on the device)")
    call.expect_shape("the output", out.shape, pool_shape(call))
    call.expect_shape("indices", indices.shape, out.shape)


def upsample_scales(call: Call) -> tuple[float, float]:
    """The source step per output pixel (height, width) of upsample_*2d.vec, as torch computes it:
    (in - 1) / (out - 1) with align_corners (0 for one output pixel), else 1 / scale_factor when
    scale_factors are given, else in / out."""
    x, out = call.tensor("input"), call.out
    factors, corners = call["scale_factors"], call["align_corners"] if call.decl.has("align_corners") else False
    steps = []
    for d in (-2, -1):
        n_in, n_out = x.shape[d], out.shape[d]
        if corners:
            steps.append((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
        elif factors is not None:
            steps.append(1.0 / factors[d])
        else:
            steps.append(n_in / n_out)
    return steps[0], steps[1]


def _upsample(call: Call) -> None:
    x = call.tensor("input")
    call.require(len(x.shape) == 4 and x.dtype.is_float, f"input {x.dtype} {list(x.shape)} must be float [N, C, H, W]")
    size, factors = call["output_size"], call["scale_factors"]
    call.require((size is None) != (factors is None), "exactly one of output_size and scale_factors")
    if size is not None:
        call.require(len(size) == 2 and all(s > 0 for s in size), f"output_size {list(size)}")
        want = list(size)
    else:
        call.require(len(factors) == 2 and all(f > 0 for f in factors), f"scale_factors {list(factors)}")
        want = [math.floor(n * f) for n, f in zip(x.shape[2:], factors)]
    call.expect_shape("the output", call.out.shape, [*x.shape[:2], *want])


GRID_MODES = {0: "bilinear", 1: "nearest"}
GRID_PADDINGS = {0: "zeros", 1: "border"}
"""grid_sampler_2d's interpolation_mode and padding_mode values vkx runs (torch's numbering)."""


def _grid_sampler(call: Call) -> None:
    x, grid = call.tensor("input"), call.tensor("grid")
    call.require(len(x.shape) == 4 and x.dtype.is_float, f"input {x.dtype} {list(x.shape)} must be float [N, C, H, W]")
    call.require(grid.dtype.is_float and len(grid.shape) == 4 and grid.shape[0] == x.shape[0] and grid.shape[3] == 2,
                 f"grid {grid.dtype} {list(grid.shape)} for input {list(x.shape)} must be [N, Ho, Wo, 2]")
    call.require(call["interpolation_mode"] in GRID_MODES and call["padding_mode"] in GRID_PADDINGS,
                 f"interpolation_mode {call['interpolation_mode']}, padding_mode {call['padding_mode']}: vkx runs "
                 "bilinear and nearest (0, 1) with zeros and border padding (0, 1)")
    call.expect_shape("the output", call.out.shape, (x.shape[0], x.shape[1], grid.shape[1], grid.shape[2]))


_CONV = (Arg("input", T), Arg("weight", T), optional("bias", T), Arg("stride", L), Arg("padding", L), Arg("dilation", L),
         Arg("transposed", B), Arg("output_padding", L), Arg("groups", I))
declare(OpDecl("aten.convolution.default", _CONV, rule=_convolution))
declare(OpDecl("et_vk.conv_with_clamp.default", _CONV + (optional("output_min", N, saturates=True),
                                                        optional("output_max", N, saturates=True)),
               rule=_convolution))
declare(OpDecl("aten.max_pool2d.default",
               (Arg("self", T), Arg("kernel_size", L), Arg("stride", L), Arg("padding", L), Arg("dilation", L),
                Arg("ceil_mode", B)), rule=_pool))
declare(OpDecl("aten.avg_pool2d.default",
               (Arg("self", T), Arg("kernel_size", L), Arg("stride", L), Arg("padding", L), Arg("ceil_mode", B),
                Arg("count_include_pad", B), optional("divisor_override", I, None)), rule=_pool))
declare(OpDecl("aten.max_pool2d_with_indices.default",
               (Arg("self", T), Arg("kernel_size", L), Arg("stride", L, default=()), Arg("padding", L, default=(0,)),
                Arg("dilation", L, default=(1,)), Arg("ceil_mode", B, default=False)),
               out=Out(("out", "indices")), rule=_max_pool_with_indices))
declare(OpDecl("aten.upsample_nearest2d.vec",  # out[y, x] = in[min(floor(y * step_h), H - 1), same for x]
               (Arg("input", T), optional("output_size", L), optional("scale_factors", Kind.DOUBLES)), rule=_upsample))
declare(OpDecl("aten.upsample_bilinear2d.vec",  # the 4 neighbours of source (y + 0.5) * step - 0.5 (corners: y * step)
               (Arg("input", T), optional("output_size", L), Arg("align_corners", B),
                optional("scale_factors", Kind.DOUBLES)), rule=_upsample))
declare(OpDecl("aten.grid_sampler_2d.default",  # torch's grid_sample at the grid's points
               (Arg("input", T), Arg("grid", T), Arg("interpolation_mode", I), Arg("padding_mode", I),
                Arg("align_corners", B)), rule=_grid_sampler))
