"""The op contract's declarations of ATen and ExecuTorch float/shape ops: each op's rule beside it.

Arguments come in ATen schema order, the output last (vkx.format.contract). docs/architecture.md
lists the same ops in prose.
"""
from __future__ import annotations

import math
from typing import Sequence

from . import dtypes
from .contract import Arg, Call, Kind, OpDecl, Out, TensorLike
from .op_rules import (ALL_TYPES, B, I, L, N, S, T, TS, broadcast, dim_index, int_pairs, matmul_shape, optional,
                       pool_shape, same_shape, slice_length, window_size)

DECLS: list[OpDecl] = []
"""This module's declarations, in order (`vkx.format.opset` assembles the table)."""
declare = DECLS.append


def _floats(call: Call, *names: str) -> None:
    """The named tensor arguments (None: left out) and every output are floating."""
    tensors = [call[n] for n in names if call[n] is not None] + list(call.outputs)
    bad = [str(t.dtype) for t in tensors if not t.dtype.is_float]
    call.require(not bad, f"{', '.join(bad)} tensors: the op computes on floats")


def _binary(call: Call) -> None:
    shapes = [call[n].shape for n in ("self", "other") if call.is_tensor(n)]
    call.require(bool(shapes), "two scalar operands")
    if not call.out.dtype.is_float:  # integer math: every number must be an int32
        for name in ("self", "other", "alpha"):
            v = call[name] if any(a.name == name for a in call.decl.args) else None
            if isinstance(v, (int, float)) and not call.is_tensor(name):
                call.require(float(v).is_integer() and -2**31 <= v < 2**31,
                             f"{name} = {v!r} for a {call.out.dtype} output")
    want = broadcast(*shapes)
    call.require(want is not None, f"operands {[list(s) for s in shapes]} do not broadcast")
    call.expect_shape("the output", call.out.shape, want)


def _linear(call: Call) -> None:
    _floats(call, "input", "weight", "bias")
    x, w = call.tensor("input"), call.tensor("weight")
    call.require(len(w.shape) == 2 and len(x.shape) >= 1, f"weight {list(w.shape)} must be 2-D")
    n, k = w.shape
    call.require(x.shape[-1] == k, f"input {list(x.shape)} and weight {list(w.shape)} disagree on K")
    if call["bias"] is not None:
        call.expect_shape("bias", call["bias"].shape, (n,))
    call.expect_shape("the output", call.out.shape, (*x.shape[:-1], n))


def _mm(call: Call) -> None:
    _floats(call, "self", "mat2")
    a, b = call.tensor("self"), call.tensor("mat2")
    call.require(len(a.shape) == 2 and len(b.shape) == 2 and a.shape[1] == b.shape[0],
                 f"mm of {list(a.shape)} by {list(b.shape)}")
    call.expect_shape("the output", call.out.shape, (a.shape[0], b.shape[1]))


def _addmm(call: Call) -> None:
    _floats(call, "self", "mat1", "mat2")
    a, b, c = call.tensor("mat1"), call.tensor("mat2"), call.tensor("self")
    call.require(len(a.shape) == 2 and len(b.shape) == 2 and a.shape[1] == b.shape[0],
                 f"addmm of {list(a.shape)} by {list(b.shape)}")
    want = (a.shape[0], b.shape[1])
    call.require(broadcast(c.shape, want) == want, f"self {list(c.shape)} does not broadcast to {list(want)}")
    call.expect_shape("the output", call.out.shape, want)


def _bmm(call: Call) -> None:
    _floats(call, "self", "mat2")
    a, b = call.tensor("self"), call.tensor("mat2")
    call.require(len(a.shape) == 3 and len(b.shape) == 3 and a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1],
                 f"bmm of {list(a.shape)} by {list(b.shape)}")
    call.expect_shape("the output", call.out.shape, (a.shape[0], a.shape[1], b.shape[2]))


def _matmul(call: Call) -> None:
    _floats(call, "self", "other")
    a, b = call.tensor("self"), call.tensor("other")
    want = matmul_shape(a.shape, b.shape)
    call.require(want is not None, f"matmul of {list(a.shape)} by {list(b.shape)}")
    call.expect_shape("the output", call.out.shape, want)


def _softmax(call: Call) -> None:
    _floats(call, "self")
    dim_index(call, call["dim"], len(call.tensor("self").shape))
    same_shape(call)


def _normalized(call: Call, x: TensorLike, shape: Sequence[int]) -> int:
    k = len(shape)
    call.require(0 < k <= len(x.shape) and tuple(x.shape[len(x.shape) - k:]) == tuple(shape),
                 f"normalized_shape {list(shape)} is not the trailing dims of {list(x.shape)}")
    for name in ("weight", "bias"):
        if any(a.name == name for a in call.decl.args) and call[name] is not None:
            call.expect_shape(name, call[name].shape, shape)
    return k


def _layer_norm(call: Call) -> None:
    _floats(call, "input", "weight", "bias")
    x = call.tensor("input")
    k = _normalized(call, x, call["normalized_shape"])
    out, mean, rstd = call.outputs
    call.expect_shape("the output", out.shape, x.shape)
    stats = (*x.shape[:len(x.shape) - k], *([1] * k))
    call.expect_shape("mean", mean.shape, stats)
    call.expect_shape("rstd", rstd.shape, stats)


def _rms_norm(call: Call) -> None:
    _floats(call, "input", "weight")
    x = call.tensor("input")
    _normalized(call, x, call["normalized_shape"])
    call.expect_shape("the output", call.out.shape, x.shape)


def _batch_norm(call: Call) -> None:
    _floats(call, "input", "weight", "bias", "running_mean", "running_var")
    x = call.tensor("input")
    call.require(len(x.shape) >= 2, f"input {list(x.shape)} has no channel dim")
    c = x.shape[1]
    for name in ("weight", "bias", "running_mean", "running_var"):
        if call[name] is not None:
            call.expect_shape(name, call[name].shape, (c,))
    call.expect_shape("the output", call.outputs[0].shape, x.shape)


def _convolution(call: Call) -> None:
    _floats(call, "input", "weight", "bias")
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
    _floats(call, "self")
    call.expect_shape("the output", call.out.shape, pool_shape(call))


def _reduce(call: Call) -> None:
    _floats(call, "self")
    x = call.tensor("self")
    rank = len(x.shape)
    dims = call["dim"]
    dims = range(rank) if dims is None or len(dims) == 0 else [dim_index(call, d, rank) for d in dims]
    dims = set(dims)
    keep = call["keepdim"]
    want = [1 if d in dims else s for d, s in enumerate(x.shape)] if keep else \
        [s for d, s in enumerate(x.shape) if d not in dims]
    call.expect_shape("the output", call.out.shape, want)


def _view(call: Call) -> None:
    size = list(call["size"])
    src = call.tensor("self")
    call.require(size.count(-1) <= 1 and all(s >= -1 for s in size), f"size {size}")
    if -1 in size:
        known = math.prod(s for s in size if s != -1)
        call.require(known > 0 and math.prod(src.shape) % known == 0, f"size {size} for {list(src.shape)}")
        size[size.index(-1)] = math.prod(src.shape) // known
    call.require(math.prod(size) == math.prod(src.shape), f"size {size} does not hold {list(src.shape)}")
    call.expect_shape("the output", call.out.shape, size)


def _permute(call: Call) -> None:
    src = call.tensor("self")
    rank = len(src.shape)
    dims = [dim_index(call, d, rank) for d in call["dims"]]
    call.require(sorted(dims) == list(range(rank)), f"dims {list(call['dims'])} are not a permutation")
    call.expect_shape("the output", call.out.shape, [src.shape[d] for d in dims])


def _slice(call: Call) -> None:
    src = call.tensor("self")
    call.require(len(src.shape) > 0, "slice of a 0-dim tensor")
    dim = dim_index(call, call["dim"], len(src.shape))
    step = call["step"]
    call.require(step > 0, f"step {step} must be positive")
    _, length = slice_length(src.shape[dim], call["start"], call["end"], step)
    want = list(src.shape)
    want[dim] = length
    call.expect_shape("the output", call.out.shape, want)


def _cat(call: Call) -> None:
    parts = [t for t in call["tensors"] if math.prod(t.shape) > 0]
    out = call.out.shape
    dim = dim_index(call, call["dim"], len(out))
    total = 0
    for t in parts:
        call.require(len(t.shape) == len(out) and all(a == b for d, (a, b) in enumerate(zip(t.shape, out)) if d != dim),
                     f"cat input {list(t.shape)} does not fit the output {list(out)}")
        total += t.shape[dim]
    call.require(total == (out[dim] if out else 0) or (not parts and math.prod(out) == 0),
                 f"cat inputs cover {total} of {out[dim] if out else 0} along dim {dim}")


def _embedding(call: Call) -> None:
    w, idx = call.tensor("weight"), call.tensor("indices")
    call.require(len(w.shape) == 2, f"weight {list(w.shape)} must be 2-D")
    call.require(not idx.dtype.is_float, f"indices of {idx.dtype}")
    call.expect_shape("the output", call.out.shape, (*idx.shape, w.shape[1]))


def _sdpa(call: Call) -> None:
    _floats(call, "query", "key", "value")
    if call["attn_mask"] is not None:
        mask = call["attn_mask"].dtype
        call.require(mask.is_float or mask is dtypes.BOOL, f"attn_mask of {mask} (bool or float only)")
    q, k, v = call.tensor("query"), call.tensor("key"), call.tensor("value")
    call.require(len(q.shape) >= 2 and len(k.shape) == len(q.shape) and len(v.shape) == len(q.shape),
                 f"query {list(q.shape)}, key {list(k.shape)}, value {list(v.shape)}")
    call.require(q.shape[-1] == k.shape[-1] and k.shape[-2] == v.shape[-2],
                 f"query {list(q.shape)}, key {list(k.shape)}, value {list(v.shape)} disagree")
    batch_q, batch_k = q.shape[:-2], k.shape[:-2]
    if call["enable_gqa"] and len(q.shape) >= 3:
        hq, hk = q.shape[-3], k.shape[-3]
        call.require(hk > 0 and hq % hk == 0, f"{hq} query heads over {hk} key heads")
        batch_k = (*k.shape[:-3], hq)
    call.require(broadcast(batch_q, batch_k) == tuple(batch_q) and k.shape[:-2] == v.shape[:-2],
                 f"batch dims of query {list(q.shape)} and key {list(k.shape)}")
    if call["attn_mask"] is not None:
        m = call["attn_mask"].shape
        want = (*batch_q, q.shape[-2], k.shape[-2])
        call.require(broadcast(m, want) == want, f"attn_mask {list(m)} does not broadcast to {list(want)}")
    call.expect_shape("the output", call.out.shape, (*q.shape[:-1], v.shape[-1]))


# --------------------------------------------------------------------------- the ops

UNARY: dict[str, str] = {
    "relu": "maximum(x, 0)",
    "sigmoid": "1 / (1 + exp(-x))",
    "tanh": "tanh(x)",
    "silu": "x / (1 + exp(-x))",
    "neg": "-x",
    "abs": "abs(x)",
    "exp": "exp(x)",
    "log": "log(x)",
    "sqrt": "sqrt(x)",
    "rsqrt": "1 / sqrt(x)",
    "sin": "sin(x)",
    "cos": "cos(x)",
    "hardswish": "x * minimum(maximum(x + 3, 0), 6) / 6",
    "hardsigmoid": "minimum(maximum(x + 3, 0), 6) / 6",
}
"""Unary float ops `aten.<name>.default(self)`: each op's value at x, in numpy's notation (a NaN x
gives NaN, as in torch). The loader's shaders implement them (vkx.loader.ops.elementwise)."""

GELU: dict[str, str] = {
    "none": "x * (1 + erf(x / sqrt(2))) / 2",
    "tanh": "x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))) / 2",
}
"""aten.gelu.default by `approximate`, as UNARY definitions."""

BINARY: dict[str, str] = {
    "add": "x + alpha * y",
    "sub": "x - alpha * y",
    "mul": "x * y",
    "div": "x / y",
}
"""Binary ops `aten.<name>.Tensor(self, other[, alpha])`: the value at x = self, y = other (an op
whose definition reads `alpha` takes that argument)."""


def _float_unary(call: Call) -> None:
    _floats(call, "self")
    same_shape(call)


def _gelu(call: Call) -> None:
    call.require(call["approximate"] in GELU, f"approximate={call['approximate']!r}")
    _float_unary(call)


for _name, _math in UNARY.items():
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T),), rule=_float_unary, family="unary", math=_math))
for _name, _math in BINARY.items():
    _args = (Arg("self", Kind.SCALAR_OR_TENSOR), Arg("other", Kind.SCALAR_OR_TENSOR))
    if "alpha" in _math:
        _args += (optional("alpha", N, 1),)
    declare(OpDecl(f"aten.{_name}.Tensor", _args, dtypes=ALL_TYPES, rule=_binary, family="binary", math=_math))

declare(OpDecl("aten.gelu.default", (Arg("self", T), Arg("approximate", S, default="none")), rule=_gelu))
declare(OpDecl("aten.linear.default", (Arg("input", T), Arg("weight", T), optional("bias", T, None)), rule=_linear))
declare(OpDecl("aten.addmm.default", (Arg("self", T), Arg("mat1", T), Arg("mat2", T),
                                      Arg("beta", N, default=1), Arg("alpha", N, default=1)), rule=_addmm))
declare(OpDecl("aten.mm.default", (Arg("self", T), Arg("mat2", T)), rule=_mm))
declare(OpDecl("aten.bmm.default", (Arg("self", T), Arg("mat2", T)), rule=_bmm))
declare(OpDecl("aten.matmul.default", (Arg("self", T), Arg("other", T)), rule=_matmul))
for _name in ("_softmax", "_log_softmax"):
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T), Arg("dim", I), Arg("half_to_float", B, default=False)),
                   rule=_softmax))
declare(OpDecl("aten.native_layer_norm.default",
               (Arg("input", T), Arg("normalized_shape", L), optional("weight", T), optional("bias", T), Arg("eps", N)),
               out=Out(("out", "mean", "rstd")), rule=_layer_norm))
declare(OpDecl("aten.rms_norm.default",
               (Arg("input", T), Arg("normalized_shape", L), optional("weight", T, None), optional("eps", N, None)),
               rule=_rms_norm))
declare(OpDecl("aten._native_batch_norm_legit_no_training.default",
               (Arg("input", T), optional("weight", T), optional("bias", T), Arg("running_mean", T), Arg("running_var", T),
                Arg("momentum", N), Arg("eps", N)),
               out=Out(("out", "mean", "invstd")), rule=_batch_norm))
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
for _name in ("aten.mean.dim", "aten.sum.dim_IntList"):
    declare(OpDecl(_name, (Arg("self", T), optional("dim", L), Arg("keepdim", B, default=False),
                           optional("dtype", I, None)), rule=_reduce))
declare(OpDecl("aten.view_copy.default", (Arg("self", T), Arg("size", L)), dtypes=ALL_TYPES, rule=_view))
declare(OpDecl("aten.permute_copy.default", (Arg("self", T), Arg("dims", L)), dtypes=ALL_TYPES, rule=_permute))
declare(OpDecl("aten.slice_copy.Tensor",
               (Arg("self", T), Arg("dim", I, default=0), optional("start", I, None), optional("end", I, None),
                Arg("step", I, default=1)), dtypes=ALL_TYPES, rule=_slice))
declare(OpDecl("aten.cat.default", (Arg("tensors", TS), Arg("dim", I, default=0)), dtypes=ALL_TYPES, rule=_cat))
declare(OpDecl("aten.clone.default", (Arg("self", T), optional("memory_format", I, None)), dtypes=ALL_TYPES,
               rule=same_shape))
declare(OpDecl("aten.embedding.default",
               (Arg("weight", T), Arg("indices", T), Arg("padding_idx", I, default=-1),
                Arg("scale_grad_by_freq", B, default=False), Arg("sparse", B, default=False)),
               dtypes=ALL_TYPES, rule=_embedding))
declare(OpDecl("aten.scaled_dot_product_attention.default",
               (Arg("query", T), Arg("key", T), Arg("value", T), optional("attn_mask", T, None),
                Arg("dropout_p", N, default=0.0), Arg("is_causal", B, default=False), optional("scale", N, None),
                Arg("enable_gqa", B, default=False)),
               dtypes=ALL_TYPES, rule=_sdpa))
declare(OpDecl("et_vk.prepack.default", (Arg("tref", T),), dtypes=ALL_TYPES,
               rule=lambda call: same_shape(call, "tref")))
