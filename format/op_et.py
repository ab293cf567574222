"""The op contract's declarations of the ops ExecuTorch 1.5.1's VulkanPartitioner emits beyond the
ones vkx's own exporter writes: shape copies, max-pool with indices, dtype copies, fills and the
Vulkan backend's fused ops (`et_vk.*`).

Arguments come in the schemas' order, keyword-only ones included, the output last (vkx.format.contract):
ATen's for `aten.*` and `dim_order_ops.*`, executorch/backends/vulkan/custom_ops_lib.py's for
`et_vk.*`, whose reference kernels give the semantics. docs/architecture.md lists the ops in prose.
"""
from __future__ import annotations

import math

from . import dtypes
from .contract import Arg, Call, Kind, OpDecl, Out
from .op_rules import ALL_TYPES, B, I, L, N, T, broadcast, dim_index, optional, pool_shape, same_shape

DECLS: list[OpDecl] = []
"""This module's declarations, in order (`vkx.format.opset` assembles the table)."""
declare = DECLS.append


def _unsqueeze(call: Call) -> None:
    src = call.tensor("self")
    dim = dim_index(call, call["dim"], len(src.shape) + 1)
    want = list(src.shape)
    want.insert(dim, 1)
    call.expect_shape("the output", call.out.shape, want)


def _squeeze_dims(call: Call) -> None:
    src = call.tensor("self")
    rank = len(src.shape)
    dims = {dim_index(call, d, rank) for d in call["dim"]}
    call.expect_shape("the output", call.out.shape, [s for d, s in enumerate(src.shape) if d not in dims or s != 1])


def _select(call: Call) -> None:
    src = call.tensor("self")
    call.require(len(src.shape) > 0, "select of a 0-dim tensor")
    dim = dim_index(call, call["dim"], len(src.shape))
    size, index = src.shape[dim], call["index"]
    call.require(-size <= index < size, f"index {index} out of range for size {size}")
    call.expect_shape("the output", call.out.shape, src.shape[:dim] + src.shape[dim + 1:])


def split_sizes(call: Call) -> list[int]:
    """The sizes along `dim` of the outputs of split_with_sizes_copy / split_copy."""
    size = call.tensor("self").shape[dim_index(call, call["dim"], len(call.tensor("self").shape))]
    if call.decl.has("split_sizes"):
        sizes = list(call["split_sizes"])
        call.require(all(s >= 0 for s in sizes) and sum(sizes) == size,
                     f"split_sizes {sizes} do not add up to {size}")
        return sizes
    step = call["split_size"]
    call.require(step > 0 or (step == 0 and size == 0), f"split_size {step} for size {size}")
    return [min(step, size - start) for start in range(0, size, step)] if size else [0]


def _split(call: Call) -> None:
    src = call.tensor("self")
    call.require(len(src.shape) > 0, "split of a 0-dim tensor")
    dim = dim_index(call, call["dim"], len(src.shape))
    sizes = split_sizes(call)
    call.require(len(call.outputs) == len(sizes), f"{len(call.outputs)} outputs for {len(sizes)} pieces")
    for i, (t, s) in enumerate(zip(call.outputs, sizes)):
        call.expect_shape(f"output {i}", t.shape, (*src.shape[:dim], s, *src.shape[dim + 1:]))


def _max_pool_with_indices(call: Call) -> None:
    x, (out, indices) = call.tensor("self"), call.outputs
    call.require(x.dtype.is_float and out.dtype.is_float, f"{x.dtype} input, {out.dtype} output: floats only")
    call.require(indices.dtype is dtypes.INT32, f"indices of {indices.dtype} (int32 on the device)")
    call.expect_shape("the output", out.shape, pool_shape(call))
    call.expect_shape("indices", indices.shape, out.shape)


def _dtype_copy(call: Call) -> None:
    """A copy into the output's dtype; any dim_order of the rank (a device tensor has one layout)."""
    src = call.tensor("self")
    order = call["dim_order"]
    call.require(not order or sorted(order) == list(range(len(src.shape))),
                 f"dim_order {list(order or ())} for {len(src.shape)} dims")
    same_shape(call)


def _fill_value(call: Call) -> None:
    value, out = call["fill_value"], call.out
    if not out.dtype.is_float:
        call.require(float(value).is_integer() and -2**31 <= value < 2**31,
                     f"fill_value {value!r} for a {out.dtype} output")
    same_shape(call)


def pad_widths(call: Call) -> list[tuple[int, int]]:
    """constant_pad_nd's (before, after) per dim of self, first dim first (`pad` lists the last dim's
    pair first; a negative width crops)."""
    src, pad = call.tensor("self"), list(call["pad"])
    call.require(len(pad) % 2 == 0 and len(pad) // 2 <= len(src.shape), f"pad {pad} for {len(src.shape)} dims")
    pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)][::-1]
    return [(0, 0)] * (len(src.shape) - len(pairs)) + pairs


def _pad(call: Call) -> None:
    src = call.tensor("self")
    want = [size + a + b for size, (a, b) in zip(src.shape, pad_widths(call))]
    call.require(all(w >= 0 for w in want), f"pad {list(call['pad'])} crops {list(src.shape)} below nothing")
    if not call.out.dtype.is_float:
        value = call["value"]
        call.require(float(value).is_integer() and -2**31 <= value < 2**31, f"value {value!r} for a "
                                                                            f"{call.out.dtype} output")
    call.expect_shape("the output", call.out.shape, want)


def _rms_norm(call: Call) -> None:
    x, w = call.tensor("x"), call.tensor("weight")
    call.require(len(x.shape) >= 1 and x.dtype.is_float and w.dtype.is_float, f"x {x.dtype} {list(x.shape)}")
    call.expect_shape("weight", w.shape, x.shape[-1:])
    same_shape(call, "x")


def _rotary(call: Call, interleaved: bool) -> None:
    """xq [B, S, Hq, D], xk [B, S, Hk, D]; freqs_cos/sin [T, R], one row per position (rows start_pos
    on): R = D / 2 for pairs (2i, 2i + 1) (`interleaved`), else HF's rotate_half over the first R of D
    (R even). Or, HF's heads-first layout (what the partitioner matches in a transformers model):
    xq [B, Hq, S, D], xk [B, Hk, S, D] and freqs [1, S, R] (start_pos 0), row s for position s.
    The outputs are shaped like xq and xk."""
    xq, xk = call.tensor("xq"), call.tensor("xk")
    for name, x in (("xq", xq), ("xk", xk)):
        call.require(len(x.shape) == 4 and x.dtype.is_float, f"{name} {x.dtype} {list(x.shape)} must be 4-D")
    cos, sin = call.tensor("freqs_cos"), call.tensor("freqs_sin")
    call.require(len(cos.shape) in (2, 3) and cos.shape == sin.shape and cos.dtype.is_float and sin.dtype.is_float,
                 f"freqs_cos {list(cos.shape)} and freqs_sin {list(sin.shape)} must be one 2-D or 3-D shape")
    start = call["start_pos"] if call.decl.has("start_pos") else 0
    heads_first = len(cos.shape) == 3
    seq = 2 if heads_first else 1
    call.require(xq.shape[0] == xk.shape[0] and xq.shape[seq] == xk.shape[seq] and xq.shape[3] == xk.shape[3],
                 f"xq {list(xq.shape)} and xk {list(xk.shape)} disagree")
    cols = cos.shape[-1]
    d = xq.shape[3]
    fits = d % 2 == 0 and cols == d // 2 if interleaved else cols % 2 == 0 and 0 < cols <= d
    call.require(fits, f"freqs of {cols} columns for head_dim {d}")
    if heads_first:
        call.require(not interleaved and start == 0 and cos.shape[:2] == (1, xq.shape[2]),
                     f"freqs {list(cos.shape)} for heads-first xq {list(xq.shape)} must be [1, S, R] at start_pos 0")
    else:
        call.require(0 <= start and start + xq.shape[1] <= cos.shape[0],
                     f"positions {start}..{start + xq.shape[1]} outside the {cos.shape[0]}-row tables")
    call.expect_shape("output xq_out", call.outputs[0].shape, xq.shape)
    call.expect_shape("output xk_out", call.outputs[1].shape, xk.shape)


def _sdpa(call: Call) -> None:
    """q [..., L, E], k [..., S, E], v [..., S, Ev] (batch dims broadcast), attn_mask added to the scores."""
    q, k, v = call.tensor("q"), call.tensor("k"), call.tensor("v")
    call.require(all(t.dtype.is_float for t in (q, k, v)), "q, k and v must be floating")
    call.require(len(q.shape) >= 2 and len(k.shape) == len(q.shape) == len(v.shape)
                 and q.shape[-1] == k.shape[-1] and k.shape[-2] == v.shape[-2] and k.shape[:-2] == v.shape[:-2],
                 f"q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)} disagree")
    batch = broadcast(q.shape[:-2], k.shape[:-2])
    call.require(batch is not None, f"batch dims of q {list(q.shape)} and k {list(k.shape)} do not broadcast")
    mask = call["attn_mask"]
    if mask is not None:
        want = (*batch, q.shape[-2], k.shape[-2])
        call.require(mask.dtype.is_float and broadcast(mask.shape, want) == want,
                     f"attn_mask {mask.dtype} {list(mask.shape)} is not a float mask broadcasting to {list(want)}")
    call.expect_shape("the output", call.out.shape, (*batch, q.shape[-2], v.shape[-1]))


def _float_unary(call: Call) -> None:
    src = call.tensor("self")
    call.require(src.dtype.is_float and call.out.dtype.is_float, f"{src.dtype} input: floats only")
    for name in ("negative_slope", "lambd"):
        if call.decl.has(name):
            call.require(math.isfinite(call[name]), f"{name} {call[name]!r} must be finite")
    same_shape(call)


def _repeat(call: Call) -> None:
    src, repeats = call.tensor("self"), list(call["repeats"])
    call.require(len(repeats) >= len(src.shape) and all(r >= 0 for r in repeats),
                 f"repeats {repeats} for {len(src.shape)} dims")
    padded = [1] * (len(repeats) - len(src.shape)) + list(src.shape)
    call.expect_shape("the output", call.out.shape, [s * r for s, r in zip(padded, repeats)])


def unfold_windows(call: Call) -> int:
    """How many windows unfold_copy takes along `dimension`."""
    src = call.tensor("self")
    dim = dim_index(call, call["dimension"], len(src.shape))
    length = src.shape[dim] if src.shape else 1
    size, step = call["size"], call["step"]
    call.require(step > 0 and 0 <= size <= length, f"size {size} and step {step} for a dim of {length}")
    return (length - size) // step + 1


def _unfold(call: Call) -> None:
    src = call.tensor("self")
    want = list(src.shape)
    if want:
        want[dim_index(call, call["dimension"], len(want))] = unfold_windows(call)
    else:
        unfold_windows(call)
        want = [1]
    call.expect_shape("the output", call.out.shape, [*want, call["size"]])


def _stats(call: Call) -> None:
    """amax/amin/var over the dims `dim` lists (none: every dim); argmax/argmin over one dim (None:
    the flattened tensor), an int32 index out."""
    src = call.tensor("self")
    call.require(src.dtype.is_float, f"{src.dtype} input: floats only")
    rank = len(src.shape)
    dims = call["dim"]
    if call.decl.arg("dim").kind is I:
        reduced = set(range(rank)) if dims is None else {dim_index(call, dims, rank)}
        call.require(call.out.dtype is dtypes.INT32, f"the output is {call.out.dtype}, an index is int32 on the device")
        call.require(math.prod(src.shape) > 0, "the index of an extreme of no elements")
    else:
        reduced = set(range(rank)) if not dims else {dim_index(call, d, rank) for d in dims}
        call.require(call.out.dtype.is_float, f"the output is {call.out.dtype}, the op gives floats")
    if call["keepdim"]:
        want = [1 if d in reduced else s for d, s in enumerate(src.shape)]
    else:
        want = [s for d, s in enumerate(src.shape) if d not in reduced]
    call.expect_shape("the output", call.out.shape, want)


def _pixel_shuffle(call: Call) -> None:
    src, r = call.tensor("self"), call["upscale_factor"]
    call.require(len(src.shape) >= 3 and r > 0 and src.shape[-3] % (r * r) == 0,
                 f"upscale_factor {r} for {list(src.shape)}")
    *lead, c, h, w = src.shape
    call.expect_shape("the output", call.out.shape, [*lead, c // (r * r), h * r, w * r])


def _hardtanh(call: Call) -> None:
    _float_unary(call)
    call.require(call["min_val"] <= call["max_val"], f"min_val {call['min_val']} is above max_val {call['max_val']}")


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


def _index_select(call: Call) -> None:
    src, index = call.tensor("self"), call.tensor("index")
    call.require(len(index.shape) <= 1 and not index.dtype.is_float and index.dtype is not dtypes.BOOL,
                 f"index {index.dtype} {list(index.shape)} must be a 1-D integer tensor")
    want = list(src.shape) or [1]
    want[dim_index(call, call["dim"], len(src.shape))] = math.prod(index.shape)
    call.expect_shape("the output", call.out.shape, want if src.shape else [])


def _flip(call: Call) -> None:
    src = call.tensor("self")
    dims = [dim_index(call, d, len(src.shape)) for d in call["dims"]]
    call.require(len(set(dims)) == len(dims), f"dims {list(call['dims'])} name a dim twice")
    same_shape(call)


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


UNARY: dict[str, str] = {
    "round": "round(x)",
    "log10": "log10(x)",
    "tan": "tan(x)",
}
"""The registry's unary ops beyond op_decls.UNARY, as op_decls.UNARY defines them (round: half to
even, as torch; log10(0) is -inf and log10 of a negative number NaN, as in torch)."""

LEAKY_RELU = "where(x >= 0, x, x * negative_slope)"
HARDSHRINK = "where(abs(x) > lambd, x, 0)"
"""leaky_relu and hardshrink, of x and their float argument (a NaN x gives NaN)."""

_TENSOR_OPTIONS = (optional("dtype", I, None), optional("layout", I, None), optional("device", I, None),
                   optional("pin_memory", B, None))
"""The keyword-only factory options of ATen's *_like and copy schemas (ExecuTorch writes Null; the
output tensor's dtype is the one that counts)."""

declare(OpDecl("aten.unsqueeze_copy.default", (Arg("self", T), Arg("dim", I)), dtypes=ALL_TYPES, rule=_unsqueeze))
declare(OpDecl("aten.squeeze_copy.dims", (Arg("self", T), Arg("dim", L)), dtypes=ALL_TYPES, rule=_squeeze_dims))
declare(OpDecl("aten.select_copy.int", (Arg("self", T), Arg("dim", I), Arg("index", I)), dtypes=ALL_TYPES,
               rule=_select))
declare(OpDecl("aten.split_with_sizes_copy.default", (Arg("self", T), Arg("split_sizes", L), Arg("dim", I, default=0)),
               out=Out(listed=True), dtypes=ALL_TYPES, rule=_split))
declare(OpDecl("aten.split_copy.Tensor", (Arg("self", T), Arg("split_size", I), Arg("dim", I, default=0)),
               out=Out(listed=True), dtypes=ALL_TYPES, rule=_split))
declare(OpDecl("aten.max_pool2d_with_indices.default",
               (Arg("self", T), Arg("kernel_size", L), Arg("stride", L, default=()), Arg("padding", L, default=(0,)),
                Arg("dilation", L, default=(1,)), Arg("ceil_mode", B, default=False)),
               out=Out(("out", "indices")), rule=_max_pool_with_indices))
declare(OpDecl("dim_order_ops._to_dim_order_copy.default",
               (Arg("self", T), *_TENSOR_OPTIONS, Arg("non_blocking", B, default=False),
                optional("dim_order", L, None)), dtypes=ALL_TYPES, rule=_dtype_copy))
declare(OpDecl("dim_order_ops._clone_dim_order.default",
               (Arg("self", T), Arg("non_blocking", B, default=False), optional("dim_order", L, None)),
               dtypes=ALL_TYPES, rule=_dtype_copy))
declare(OpDecl("aten.alias_copy.default", (Arg("self", T),), dtypes=ALL_TYPES, rule=same_shape))
declare(OpDecl("aten.full_like.default",
               (Arg("self", T), Arg("fill_value", N), *_TENSOR_OPTIONS, optional("memory_format", I, None)),
               dtypes=ALL_TYPES, rule=_fill_value))
for _name in ("zeros_like", "ones_like"):
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T), *_TENSOR_OPTIONS, optional("memory_format", I, None)),
                   dtypes=ALL_TYPES, rule=same_shape))
declare(OpDecl("aten.constant_pad_nd.default", (Arg("self", T), Arg("pad", L), Arg("value", N, default=0)),
               dtypes=ALL_TYPES, rule=_pad))
for _name, _math in UNARY.items():
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T),), rule=_float_unary, family="unary", math=_math))
declare(OpDecl("aten.repeat.default", (Arg("self", T), Arg("repeats", L)), dtypes=ALL_TYPES, rule=_repeat))
declare(OpDecl("aten.unfold_copy.default", (Arg("self", T), Arg("dimension", I), Arg("size", I), Arg("step", I)),
               dtypes=ALL_TYPES, rule=_unfold))
for _name in ("amax", "amin"):  # the largest / smallest element; NaN wins
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T), Arg("dim", L, default=()), Arg("keepdim", B, default=False)),
                   dtypes=ALL_TYPES, rule=_stats))
for _name in ("argmax", "argmin"):  # the first index of the largest / smallest (NaN counts as both)
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T), optional("dim", I, None), Arg("keepdim", B, default=False)),
                   dtypes=ALL_TYPES, rule=_stats))
declare(OpDecl("aten.var.correction",  # sum((x - mean)^2) / max(0, N - correction), correction None is 1
               (Arg("self", T), optional("dim", L, None), optional("correction", N, None), Arg("keepdim", B, default=False)),
               dtypes=ALL_TYPES, rule=_stats))
declare(OpDecl("aten.pixel_shuffle.default", (Arg("self", T), Arg("upscale_factor", I)), dtypes=ALL_TYPES,
               rule=_pixel_shuffle))  # out[.., c, h*r + i, w*r + j] = self[.., c*r*r + i*r + j, h, w]
declare(OpDecl("aten.hardtanh.default",  # min(max(x, min_val), max_val), NaN stays (relu6: 0, 6)
               (Arg("self", T), Arg("min_val", N, default=-1.0), Arg("max_val", N, default=1.0)), rule=_hardtanh))
declare(OpDecl("aten.upsample_nearest2d.vec",  # out[y, x] = in[min(floor(y * step_h), H - 1), same for x]
               (Arg("input", T), optional("output_size", L), optional("scale_factors", Kind.DOUBLES)), rule=_upsample))
declare(OpDecl("aten.upsample_bilinear2d.vec",  # the 4 neighbours of source (y + 0.5) * step - 0.5 (corners: y * step)
               (Arg("input", T), optional("output_size", L), Arg("align_corners", B),
                optional("scale_factors", Kind.DOUBLES)), rule=_upsample))
declare(OpDecl("aten.index_select.default", (Arg("self", T), Arg("dim", I), Arg("index", T)), dtypes=ALL_TYPES,
               rule=_index_select))  # out[.., j, ..] = self[.., index[j], ..] along dim
declare(OpDecl("aten.leaky_relu.default", (Arg("self", T), Arg("negative_slope", N, default=0.01)),
               rule=_float_unary, math=LEAKY_RELU))
declare(OpDecl("aten.hardshrink.default", (Arg("self", T), Arg("lambd", N, default=0.5)), rule=_float_unary,
               math=HARDSHRINK))
declare(OpDecl("et_vk.rms_norm.default", (Arg("x", T), Arg("weight", T), Arg("eps", N)), rule=_rms_norm))
declare(OpDecl("et_vk.apply_rotary_emb_hf.default",
               (Arg("xq", T), Arg("xk", T), Arg("freqs_cos", T), Arg("freqs_sin", T), Arg("start_pos", I)),
               out=Out(("xq_out", "xk_out")), rule=lambda call: _rotary(call, False)))
declare(OpDecl("et_vk.apply_rotary_emb.default",
               (Arg("xq", T), Arg("xk", T), Arg("freqs_cos", T), Arg("freqs_sin", T)),
               out=Out(("xq_out", "xk_out")), rule=lambda call: _rotary(call, True)))
declare(OpDecl("et_vk.sdpa.default",
               (Arg("q", T), Arg("k", T), Arg("v", T), optional("attn_mask", T, None), optional("scale", N, None)),
               rule=_sdpa))
declare(OpDecl("aten.flip.default", (Arg("self", T), Arg("dims", L)), dtypes=ALL_TYPES,
               rule=_flip))  # out[.., i, ..] = self[.., size - 1 - i, ..] along each of dims
declare(OpDecl("aten.native_group_norm.default",  # each (sample, group) normalised, then weight * y + bias per channel
               (Arg("input", T), optional("weight", T), optional("bias", T), Arg("N", I), Arg("C", I), Arg("HxW", I),
                Arg("group", I), Arg("eps", N)), out=Out(("out", "mean", "rstd")), rule=_group_norm))
declare(OpDecl("aten.grid_sampler_2d.default",  # torch's grid_sample at the grid's points
               (Arg("input", T), Arg("grid", T), Arg("interpolation_mode", I), Arg("padding_mode", I),
                Arg("align_corners", B)), rule=_grid_sampler))
