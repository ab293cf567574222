"""Elementwise ops: binary arithmetic with broadcasting, unary activations, clone.

Each op's operation is its declaration's `glsl` expression (vkx.format.contract's
UNARY, BINARY and GELU tables), compiled into shaders/unary.comp or
shaders/binary.comp as `OP`; adding an elementwise op is one declaration.

Binary ops compute `out[i] = OP(a[ia], b[ib])` where ia/ib come from the output
index through per-operand strides (0 on broadcast dims), after merging dims
that are contiguous in all three tensors. Operands of any dtype are converted
on load, math is fp32 (int32 for an integer output), and the result converted
on store. Same-shape float operands take a vec4 path (any float types: measured
on lavapipe it cuts fp16/bf16 silu and mul time by a third to a half), and when any tensor is
larger than one storage binding the flat range is split into aligned SubRange
dispatches.
"""
from __future__ import annotations

import struct
from typing import Union

from vkx.format import dtypes, op_decls
from vkx.format.contract import Call
from vkx.format.dtypes import DType

from . import OpBuilder, TensorArg, UnsupportedOpError, builds, builds_family, elem_defines
from .shape import (MAX_DIMS, bind_elems, broadcast_strides, chunk_elems, collapse_dims,
                    contiguous_strides, convert_copy, dispatch_groups, pad_dims)

Operand = Union[TensorArg, int, float, bool]
Defines = dict[str, Union[str, int]]

INDEXED, SCALAR_TENSOR, IMMEDIATE = 0, 1, 2
"""How binary.comp reads an operand (A_MODE / B_MODE)."""


def _mode(x: Operand, n: int) -> int:
    if not isinstance(x, TensorArg):
        return IMMEDIATE
    return SCALAR_TENSOR if x.numel == 1 and n > 1 else INDEXED


@builds_family("binary")
def binary(builder: OpBuilder, call: Call) -> None:
    """Record `out = OP(self, other)` with numpy broadcasting; either side may be a number."""
    a, b, out = call["self"], call["other"], call.out
    alpha = call["alpha"] if "ALPHA" in call.decl.glsl else None
    alpha = 1 if alpha is None else alpha
    n = out.numel
    if n == 0:
        return
    imm = next((x for x in (a, b) if not isinstance(x, TensorArg)), 0)
    ma, mb = _mode(a, n), _mode(b, n)
    # float math when anything is floating (a comparison of floats has a bool output)
    int_math = not any(x.dtype.is_float if isinstance(x, TensorArg) else not float(x).is_integer()
                       for x in (a, b, out))
    ta = a if isinstance(a, TensorArg) else b  # an immediate binds the other operand (never read)
    tb = b if isinstance(b, TensorArg) else a
    vec4 = n % 4 == 0 and all(x.dtype.is_float for x in (ta, tb, out))
    defines: Defines = {"OP(x,y)": call.decl.glsl, "A_MODE": ma, "B_MODE": mb}
    if int_math:
        defines["INT_MATH"] = 1
    push_alpha = (float(alpha), int(alpha) if int_math else 0)
    push_imm = (float(imm), int(imm) if int_math else 0)

    def push(count: int, sizes, sa, sb) -> bytes:
        return struct.pack("<IIfifi18I", count, len(sizes), *push_alpha, *push_imm,
                           *pad_dims(sizes), *pad_dims(sa), *pad_dims(sb))

    flat = all(not isinstance(x, TensorArg) or x.numel in (1, n) for x in (a, b))
    if flat:
        # Every indexed operand has the output's element order.
        if vec4:
            defines["VEC4"] = 1
            # indexed operands are vec4 arrays, a scalar tensor a float array; an immediate's
            # placeholder is declared like the operand whose binding it shares
            vec_a = (mb if ma == IMMEDIATE else ma) == INDEXED
            vec_b = (ma if mb == IMMEDIATE else mb) == INDEXED
            defines.update({**(vec4_defines if vec_a else elem_defines)("A", "a", ta.dtype),
                            **(vec4_defines if vec_b else elem_defines)("B", "b", tb.dtype),
                            **vec4_defines("O", "o", out.dtype)})
        else:
            defines.update(_types(ta, tb, out))
        big = [x for x, m in ((ta, ma), (tb, mb), (out, INDEXED)) if m == INDEXED]
        for start, count in chunk_elems(builder, n, big):
            ob, _ = bind_elems(builder, out, start, count)
            ab = bind_elems(builder, ta, start, count)[0] if ma == INDEXED else ta
            bb = bind_elems(builder, tb, start, count)[0] if mb == INDEXED else tb
            binds = [bb if ma == IMMEDIATE else ab, ab if mb == IMMEDIATE else bb]
            inv = count // 4 if vec4 else count
            builder.dispatch("binary", [*binds, ob], push(inv, [count], [1], [1]), dispatch_groups(inv), defines)
        return

    shape = tuple(out.shape)
    sa = broadcast_strides(ta.shape, shape) if ma == INDEXED else [0] * len(shape)
    sb = broadcast_strides(tb.shape, shape) if mb == INDEXED else [0] * len(shape)
    sizes, (csa, csb, _) = collapse_dims(shape, sa, sb, contiguous_strides(shape))
    if len(sizes) > MAX_DIMS:
        raise UnsupportedOpError(f"broadcast over {len(sizes)} non-mergeable dims (max {MAX_DIMS})")
    for x in (ta, tb, out):
        if x.nbytes > builder.max_binding_bytes:
            raise UnsupportedOpError(f"broadcasting on a tensor {x.shape} larger than one storage binding")
    defines.update(_types(ta, tb, out))
    builder.dispatch("binary", [ta, tb, out], push(n, sizes, csa, csb), dispatch_groups(n), defines)


def _types(a: TensorArg, b: TensorArg, out: TensorArg) -> Defines:
    return {**elem_defines("A", "a", a.dtype), **elem_defines("B", "b", b.dtype), **elem_defines("O", "o", out.dtype)}


def vec4_defines(prefix: str, buffer: str, dtype: DType) -> Defines:
    """elem_defines for a float array read and written four elements at a time, as a vec4."""
    element = f"{buffer}[(i)]"
    if dtype is dtypes.FLOAT32:
        return {f"{prefix}_T": "vec4", f"LOAD_{prefix}(i)": element, f"STORE_{prefix}(i,v)": f"{element} = (v)"}
    if dtype is dtypes.FLOAT16:
        return {f"{prefix}_T": "f16vec4", f"LOAD_{prefix}(i)": f"vec4({element})",
                f"STORE_{prefix}(i,v)": f"{element} = f16vec4(v)"}
    if dtype is dtypes.BFLOAT16:  # v must be a variable: it is read once per lane
        return {f"{prefix}_T": "u16vec4", f"LOAD_{prefix}(i)": f"uintBitsToFloat(uvec4({element}) << 16)",
                f"STORE_{prefix}(i,v)": f"{element} = u16vec4(uvec4(bf16_bits((v).x), bf16_bits((v).y), "
                                        f"bf16_bits((v).z), bf16_bits((v).w)))"}
    raise UnsupportedOpError(f"no vec4 path for {dtype}")


def unary(builder: OpBuilder, call: Call, expr: str, extra: Defines | None = None) -> None:
    """Record `out = expr(self)` (a GLSL expression of x; `extra`: defines it uses), split over
    bindings if large."""
    src, out = call.tensor("self"), call.out
    n = src.numel
    vec4 = n % 4 == 0 and src.dtype.is_float and out.dtype.is_float
    types = vec4_defines if vec4 else elem_defines
    defines: Defines = {"OP(x)": expr, **types("X", "x_in", src.dtype), **types("Y", "x_out", out.dtype),
                        **(extra or {})}
    if vec4:
        defines["VEC4"] = 1
    for start, count in chunk_elems(builder, n, [src, out]):
        ib, _ = bind_elems(builder, src, start, count)
        ob, _ = bind_elems(builder, out, start, count)
        inv = count // 4 if vec4 else count
        builder.dispatch("unary", [ib, ob], struct.pack("<I", inv), dispatch_groups(inv), defines)


@builds_family("unary")
def unary_op(builder: OpBuilder, call: Call) -> None:
    unary(builder, call, call.decl.glsl)


@builds("aten.gelu.default")
def gelu(builder: OpBuilder, call: Call) -> None:
    unary(builder, call, op_decls.GELU[call["approximate"]])


@builds("aten.clone.default")
def clone(builder: OpBuilder, call: Call) -> None:
    convert_copy(builder, call.tensor("self"), call.out)
