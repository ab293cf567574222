"""Elementwise ops: binary arithmetic with broadcasting, activations, clone, prepack.

Binary ops compute `out[i] = a[ia] OP b[ib]` where ia/ib come from the output
index through per-operand strides (0 on broadcast dims), after merging dims
that are contiguous in all three tensors. Same-shape float operands take a
vec4 path, and when any tensor is larger than one storage binding the flat
range is split into aligned SubRange dispatches.
"""
from __future__ import annotations

import struct
from typing import Union

from vkx.format import dtypes

from . import OpBuilder, OpFn, TensorArg, UnsupportedOpError, register
from .shape import (MAX_DIMS, bind_elems, broadcast_strides, chunk_elems, collapse_dims,
                    contiguous_strides, convert_copy, dispatch_groups, pad_dims)

Operand = Union[TensorArg, int, float, bool]

_BINARY_OPS = {"add": 0, "sub": 1, "mul": 2, "div": 3}
_UNARY_OPS = {"relu": 0, "sigmoid": 1, "tanh": 2, "silu": 3, "gelu": 4, "gelu_tanh": 5}


def operand(builder: OpBuilder, vid: int) -> Operand:
    """A tensor argument, or a Python number for an Int/Double/Bool value."""
    try:
        return builder.tensor(vid)
    except Exception:  # not a Tensor value: a scalar operand
        value = builder.scalar(vid)
        if not isinstance(value, (int, float, bool)):
            raise UnsupportedOpError(f"operand {vid} is neither a tensor nor a number: {value!r}")
        return value


def binary(builder: OpBuilder, op: str, a_vid: int, b_vid: int, out_vid: int, alpha=1) -> None:
    """Record `out = a OP b` (add/sub use `a ± alpha*b`) with numpy broadcasting."""
    out = builder.tensor(out_vid)
    a, b = operand(builder, a_vid), operand(builder, b_vid)
    n = out.numel
    if n == 0:
        return
    if not isinstance(a, TensorArg) and not isinstance(b, TensorArg):
        raise UnsupportedOpError(f"{op} of two scalars")
    out_int = not out.dtype.is_float

    def mode(x: Operand) -> int:
        if not isinstance(x, TensorArg):
            return 2  # immediate
        if x.numel == 1:
            return 1  # scalar tensor, element 0
        return 0

    ma, mb = mode(a), mode(b)
    imm = a if ma == 2 else (b if mb == 2 else 0)
    defines: dict[str, Union[str, int]] = {"OP": _BINARY_OPS[op], "A_MODE": ma, "B_MODE": mb}
    same = all(not isinstance(x, TensorArg) or x.numel in (1, n) for x in (a, b))
    all_float = (out.dtype is dtypes.FLOAT32
                 and all(not isinstance(x, TensorArg) or x.dtype is dtypes.FLOAT32 for x in (a, b)))
    if not all_float:
        defines["A_T"] = a.dtype.glsl if isinstance(a, TensorArg) else "float"
        defines["B_T"] = b.dtype.glsl if isinstance(b, TensorArg) else "float"
        defines["OUT_T"] = out.dtype.glsl
        if out_int:
            defines["OUT_INT"] = 1
            if (isinstance(imm, float) and not imm.is_integer()) or \
                    (isinstance(alpha, float) and not float(alpha).is_integer()):
                raise UnsupportedOpError(f"integer {op} with a fractional scalar")

    def push(count: int, ndim: int, sizes, sa, sb) -> bytes:
        return struct.pack("<IIfifi18I", count, ndim, float(alpha), int(alpha),
                           float(imm), int(imm), *pad_dims(sizes), *pad_dims(sa), *pad_dims(sb))

    if same:
        # Flat path: every tensor operand has the output's element order.
        vec4 = all_float and n % 4 == 0
        if vec4:
            defines["VEC4"] = 1
        big = [x for x in (a, b, out) if isinstance(x, TensorArg) and x.numel == n]
        for start, count in chunk_elems(builder, n, big):
            ob, _ = bind_elems(builder, out, start, count)
            binds = []
            for x in (a, b):
                if isinstance(x, TensorArg) and x.numel == n and n > 1:
                    binds.append(bind_elems(builder, x, start, count)[0])
                elif isinstance(x, TensorArg):
                    binds.append(x)
                else:
                    binds.append(None)
            # An immediate operand's binding is a placeholder: reuse the other operand's.
            if binds[0] is None:
                binds[0] = binds[1]
            if binds[1] is None:
                binds[1] = binds[0]
            inv = count // 4 if vec4 else count
            builder.dispatch("binary", [binds[0], binds[1], ob], push(inv, 1, [count], [1], [1]),
                             dispatch_groups(inv), defines)
        return

    shape = tuple(out.shape)
    sa = broadcast_strides(a.shape, shape) if ma == 0 else [0] * len(shape)
    sb = broadcast_strides(b.shape, shape) if mb == 0 else [0] * len(shape)
    sizes, (csa, csb, _) = collapse_dims(shape, sa, sb, contiguous_strides(shape))
    if len(sizes) > MAX_DIMS:
        raise UnsupportedOpError(f"broadcast over {len(sizes)} non-mergeable dims (max {MAX_DIMS})")
    for x in (a, b, out):
        if isinstance(x, TensorArg) and x.nbytes > builder.max_binding_bytes:
            raise UnsupportedOpError(
                f"broadcasting {op} on a tensor {x.shape} larger than one storage binding")
    ta = a if isinstance(a, TensorArg) else b
    tb = b if isinstance(b, TensorArg) else a
    builder.dispatch("binary", [ta, tb, out], push(n, len(sizes), sizes, csa, csb),
                     dispatch_groups(n), defines)


def unary(builder: OpBuilder, op: str, in_vid: int, out_vid: int) -> None:
    """Record `out = f(in)` for a float activation, split over bindings if large."""
    src, out = builder.tensor(in_vid), builder.tensor(out_vid)
    if src.numel != out.numel:
        raise UnsupportedOpError(f"{op}: input {src.shape} vs output {out.shape}")
    if src.dtype is not dtypes.FLOAT32 or out.dtype is not dtypes.FLOAT32:
        raise UnsupportedOpError(f"{op} on {src.dtype} tensors")
    n = src.numel
    vec4 = n % 4 == 0
    defines: dict[str, Union[str, int]] = {"OP": _UNARY_OPS[op]}
    if vec4:
        defines["VEC4"] = 1
    for start, count in chunk_elems(builder, n, [src, out]):
        ib, _ = bind_elems(builder, src, start, count)
        ob, _ = bind_elems(builder, out, start, count)
        inv = count // 4 if vec4 else count
        builder.dispatch("unary", [ib, ob], struct.pack("<I", inv), dispatch_groups(inv), defines)


def _alpha(builder: OpBuilder, vid: int):
    if builder.is_null(vid):
        return 1
    value = builder.scalar(vid)
    return 1 if value is None else value


def _binary_op(op: str) -> OpFn:
    def run(builder: OpBuilder, args: tuple[int, ...]) -> None:
        # self, other, [alpha,] out: only add and sub take an alpha
        alpha = _alpha(builder, args[2]) if op in ("add", "sub") and len(args) > 3 else 1
        binary(builder, op, args[0], args[1], args[-1], alpha)
    return run


def _unary_op(op: str) -> OpFn:
    def run(builder: OpBuilder, args: tuple[int, ...]) -> None:
        unary(builder, op, args[0], args[-1])
    return run


for _op in ("add", "sub", "mul", "div"):
    register(f"aten.{_op}.Tensor")(_binary_op(_op))
for _op in ("relu", "sigmoid", "tanh", "silu"):
    register(f"aten.{_op}.default")(_unary_op(_op))


@register("aten.gelu.default")
def gelu(builder: OpBuilder, args: tuple[int, ...]) -> None:
    # self, approximate, out
    approximate = "none"
    if len(args) > 2 and not builder.is_null(args[1]):
        approximate = str(builder.scalar(args[1]))
    if approximate not in ("none", "tanh"):
        raise UnsupportedOpError(f"gelu approximate={approximate!r}")
    unary(builder, "gelu" if approximate == "none" else "gelu_tanh", args[0], args[-1])


@register("aten.clone.default")
def clone(builder: OpBuilder, args: tuple[int, ...]) -> None:
    # self, memory_format, out
    convert_copy(builder, builder.tensor(args[0]), builder.tensor(args[-1]))
