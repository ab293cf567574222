"""Elementwise ops (vkx.format.op_decls): binary arithmetic, comparisons and masks with broadcasting,
unary activations, clamps and scalar powers, clone; where (shaders/where.comp) and the fills (full,
arange, *_like: shaders/fill.comp, out[i] = start + i * step).

Each op's operation is a GLSL expression in UNARY_GLSL or BINARY_GLSL below, compiled into
shaders/unary.comp or shaders/binary.comp as `OP`: adding an elementwise op is its declaration in
vkx.format (names, dtypes, its math) and its expression here. Numbers an op takes (leaky_relu's
slope, clamp's bounds, pow's exponent) reach the shader as push constants `p.a`, `p.b`, so the
set of shader variants stays finite (docs/architecture.md, "Shader variants").

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

import math
import struct
from typing import Iterable, Union

from vkx.format import opset
from vkx.format.contract import Call
from vkx.format.dtypes import DType

from . import (DTYPE_CODES, OpBuilder, TensorArg, UnsupportedOpError, any_dtype_defines, any_dtype_variants, builds,
               builds_family, dtype_spec, elem_defines, reads_by_words, variants)
from .shape import (MAX_DIMS, bind_elems, broadcast_strides, chunk_elems, collapse_dims,
                    contiguous_strides, convert_copy, dispatch_groups, pad_dims, whole)

Operand = Union[TensorArg, int, float, bool]
Defines = dict[str, Union[str, int]]

UNARY_GLSL: dict[str, str] = {
    "relu": "mix(max(x, 0.0), x, isnan(x))",
    "sigmoid": "sigmoid_(x)",
    "tanh": "tanh_(x)",
    "silu": "(x * sigmoid_(x))",
    "neg": "(-x)",
    "abs": "abs(x)",
    "exp": "exp(x)",
    "log": "log_(x)",
    "sqrt": "mix(sqrt(abs(x)), T(uintBitsToFloat(0x7FC00000u)), LT(x, T(0.0)))",
    "rsqrt": "rsqrt_(x)",
    "sin": "sin_(x)",
    "cos": "cos_(x)",
    "hardswish": "(x * clamp(x + 3.0, 0.0, 6.0) / 6.0)",
    "hardsigmoid": "mix(clamp(x + 3.0, 0.0, 6.0) / 6.0, x, isnan(x))",
    "round": "roundEven(x)",
    "log10": "(log_(x) * 0.43429448190325176)",
    "tan": "(sin_(x) / cos_(x))",
    "logical_not": "T(EQ(x, T(0.0)))",
    "leaky_relu": "mix(x * p.a, x, GE(x, T(0.0)))",
    "hardshrink": "mix(x, T(0.0), GE(T(p.a), abs(x)))",
}
"""`aten.<name>.default` ops built by shaders/unary.comp: the GLSL expression of x, a float or a vec4
(helpers in unary.comp; GLSL's max/clamp leave NaN undefined, so NaN is kept with mix). `p.a` is
the op's number (leaky_relu's negative_slope, hardshrink's lambd)."""

GELU_GLSL: dict[str, str] = {
    "none": "gelu_erf_(x)",
    "tanh": "(x * sigmoid_(2.0 * (0.79788456080286536 * (x + 0.044715 * x * x * x))))",
}
"""aten.gelu.default by `approximate` (0.5 * (1 + tanh(u)) == sigmoid(2u): no cancellation in the
negative tail)."""

POW_GLSL: dict[float, str] = {0.0: "T(1.0)", 1.0: "x", 2.0: "(x * x)", 3.0: "(x * x * x)", -1.0: "(1.0 / x)",
                              -2.0: "(1.0 / (x * x))", 0.5: UNARY_GLSL["sqrt"], -0.5: UNARY_GLSL["rsqrt"]}
"""aten.pow.Tensor_Scalar: the exponents torch computes as products, reciprocals and square roots
(so sqrt(-inf) is NaN where C's pow(-inf, 0.5) is inf); any other is `POW_ANY`."""

POW_ANY = "pow_(x)"
"""x ** p.a (unary.comp's pow_)."""

CLAMP = "mix(min(max(x, T(p.a)), T(p.b)), x, isnan(x))"
"""aten.clamp.default: min(max(x, lo), hi) in that order (torch's, for lo > hi too), NaN kept; a
missing bound is an infinity."""

BINARY_GLSL: dict[str, str] = {
    "add": "(x + y * ALPHA)",
    "sub": "(x - y * ALPHA)",
    "mul": "(x * y)",
    "div": "(x / y)",
    "eq": "C_T(x == y)",
    "ne": "C_T(x != y)",
    "lt": "C_T(x < y)",
    "le": "C_T(x <= y)",
    "gt": "C_T(x > y)",
    "ge": "C_T(x >= y)",
    "bitwise_and": "(x & y)",
    "bitwise_or": "(x | y)",
    "bitwise_xor": "(x ^ y)",
    "logical_and": "C_T((!(x == 0)) && (!(y == 0)))",  # NaN is true, as in torch
    "logical_or": "C_T((!(x == 0)) || (!(y == 0)))",
    "logical_xor": "C_T((!(x == 0)) != (!(y == 0)))",
    "minimum": "min_(x, y)",
    "maximum": "max_(x, y)",
}
"""Ops of the contract's "binary" family, by the op's name: the GLSL expression of x, y (both float,
or both int with INT_MATH; vec4 on the float fast path). ALPHA is add/sub's alpha; C_T the compute
type; min_/max_ (NaN wins) are helpers in shaders/binary.comp."""


def _family_names(family: str) -> set[str]:
    return {n.split(".")[1] for n, d in opset.OPS.items() if d.family == family}


def _check_table(family: str, table: dict[str, str]) -> None:
    """Each op the contract puts in `family` has its expression, and each expression its op."""
    declared = _family_names(family)
    if declared != set(table):
        raise ValueError(f"{family} ops without GLSL: {sorted(declared - set(table))}; "
                         f"GLSL without a {family} op: {sorted(set(table) - declared)}")


_check_table("binary", BINARY_GLSL)
_check_table("unary", {k: v for k, v in UNARY_GLSL.items() if k not in ("leaky_relu", "hardshrink")})


def op_glsl(call: Call, table: dict[str, str]) -> str:
    """The GLSL expression of `call`'s op in `table`."""
    return table[call.decl.name.split(".")[1]]


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
    expr = op_glsl(call, BINARY_GLSL)
    alpha = call["alpha"] if call.decl.has("alpha") else None
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
    defines = _binary_defines(expr, int_math, vec4 and all(not isinstance(x, TensorArg) or x.numel in (1, n)
                                                         for x in (a, b)), reads_by_words(builder))
    spec = (*dtype_spec(ta, tb, out), ma, mb)
    push_alpha = (float(alpha), int(alpha) if int_math else 0)
    push_imm = (float(imm), int(imm) if int_math else 0)

    def push(count: int, sizes, sa, sb) -> bytes:
        return struct.pack("<IIfifi18I", count, len(sizes), *push_alpha, *push_imm,
                           *pad_dims(sizes), *pad_dims(sa), *pad_dims(sb))

    flat = all(not isinstance(x, TensorArg) or x.numel in (1, n) for x in (a, b))
    if flat:
        # Every indexed operand has the output's element order (read as vec4s with VEC4).
        big = [x for x, m in ((ta, ma), (tb, mb), (out, INDEXED)) if m == INDEXED]
        for start, count in chunk_elems(builder, n, big):
            ob, _ = bind_elems(builder, out, start, count)
            ab = bind_elems(builder, ta, start, count)[0] if ma == INDEXED else ta
            bb = bind_elems(builder, tb, start, count)[0] if mb == INDEXED else tb
            binds = [bb if ma == IMMEDIATE else ab, ab if mb == IMMEDIATE else bb]
            inv = count // 4 if vec4 else count
            builder.dispatch("binary", [*binds, ob], push(inv, [count], [1], [1]), dispatch_groups(inv), defines,
                             spec)
        return

    shape = tuple(out.shape)
    sa = broadcast_strides(ta.shape, shape) if ma == INDEXED else [0] * len(shape)
    sb = broadcast_strides(tb.shape, shape) if mb == INDEXED else [0] * len(shape)
    sizes, (csa, csb, _) = collapse_dims(shape, sa, sb, contiguous_strides(shape))
    if len(sizes) > MAX_DIMS:
        raise UnsupportedOpError(f"broadcast over {len(sizes)} non-mergeable dims (max {MAX_DIMS})")
    for x in (ta, tb, out):
        if x.nbytes > builder.limits.max_storage_buffer_range:
            raise UnsupportedOpError(f"broadcasting on a tensor {x.shape} larger than one storage binding")
    builder.dispatch("binary", [ta, tb, out], push(n, sizes, csa, csb), dispatch_groups(n), defines, spec)


def _binary_defines(expr: str, int_math: bool, vec4: bool, words: bool) -> Defines:
    """binary.comp's defines; the dtypes and operand modes are specialization constants."""
    return {"OP(x,y)": expr, **any_dtype_defines(INT_MATH=int_math, VEC4=vec4, WORDS=words)}


BINARY_INT_ONLY = {"bitwise_and", "bitwise_or", "bitwise_xor"}
"""Ops whose operands are never floating (the contract's rule)."""
BINARY_NO_VEC4 = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"}
"""Ops whose output is bool, so never on the float vec4 path."""


@variants("binary")
def binary_variants() -> Iterable[Defines]:
    for op, expr in BINARY_GLSL.items():
        for words in (False, True):
            yield _binary_defines(expr, True, False, words)
            if op not in BINARY_INT_ONLY:
                yield _binary_defines(expr, False, False, words)
            if op not in BINARY_INT_ONLY | BINARY_NO_VEC4:
                yield _binary_defines(expr, False, True, words)


def unary(builder: OpBuilder, call: Call, expr: str, a: float = 0.0, b: float = 0.0) -> None:
    """Record `out = expr(self)` (a GLSL expression of x and of the numbers p.a = `a`, p.b = `b`),
    split over bindings if large."""
    src, out = call.tensor("self"), call.out
    n = src.numel
    vec4 = n % 4 == 0 and src.dtype.is_float and out.dtype.is_float
    defines = _unary_defines(expr, vec4, reads_by_words(builder))
    spec = dtype_spec(src, out)
    for start, count in chunk_elems(builder, n, [src, out]):
        ib, _ = bind_elems(builder, src, start, count)
        ob, _ = bind_elems(builder, out, start, count)
        inv = count // 4 if vec4 else count
        builder.dispatch("unary", [ib, ob], struct.pack("<Iff", inv, _f32(a), _f32(b)), dispatch_groups(inv),
                         defines, spec)


def _unary_defines(expr: str, vec4: bool, words: bool) -> Defines:
    """unary.comp's defines; the dtypes are specialization constants."""
    return {"OP(x)": expr, **any_dtype_defines(VEC4=vec4, WORDS=words)}


@variants("unary")
def unary_variants() -> Iterable[Defines]:
    expressions = [*UNARY_GLSL.values(), *GELU_GLSL.values(), *POW_GLSL.values(), POW_ANY, CLAMP]
    for expr in expressions:
        for vec4 in (False, True):
            for words in (False, True):
                yield _unary_defines(expr, vec4, words)


def _f32(x: float) -> float:
    """`x` as an fp32 push constant: past fp32's range it is an infinity (as a GLSL literal would be)."""
    try:
        struct.pack("<f", x)
    except OverflowError:
        return math.copysign(math.inf, x)
    return x


@builds_family("unary")
def unary_op(builder: OpBuilder, call: Call) -> None:
    unary(builder, call, op_glsl(call, UNARY_GLSL))


@builds("aten.gelu.default")
def gelu(builder: OpBuilder, call: Call) -> None:
    unary(builder, call, GELU_GLSL[call["approximate"]])


@builds("aten.clone.default")
def clone(builder: OpBuilder, call: Call) -> None:
    convert_copy(builder, call.tensor("self"), call.out)


@builds("aten.pow.Tensor_Scalar")
def pow_scalar(builder: OpBuilder, call: Call) -> None:
    e = float(call["exponent"])
    unary(builder, call, POW_GLSL.get(e, POW_ANY), e)


@builds("aten.clamp.default")
def clamp(builder: OpBuilder, call: Call) -> None:
    lo, hi = call["min"], call["max"]
    unary(builder, call, CLAMP, -math.inf if lo is None else float(lo), math.inf if hi is None else float(hi))


@builds("aten.hardtanh.default")
def hardtanh(builder: OpBuilder, call: Call) -> None:
    """min(max(x, min_val), max_val), NaN kept (ExecuTorch's relu6)."""
    unary(builder, call, CLAMP, float(call["min_val"]), float(call["max_val"]))


@builds("aten.leaky_relu.default", "aten.hardshrink.default")
def unary_with_argument(builder: OpBuilder, call: Call) -> None:
    """The op's GLSL expression with its float argument (the second) as p.a."""
    unary(builder, call, op_glsl(call, UNARY_GLSL), float(call[call.decl.args[1].name]))


# --------------------------------------------------------------------------- where, fills: shaders of their own

def select_defines(builder: OpBuilder, out: TensorArg) -> Defines:
    """The defines of where.comp, gather.comp, index.comp and cumsum.comp: INT_PATH for an integer
    output; the dtypes of their bindings are specialization constants (`dtype_code`)."""
    return any_dtype_defines(INT_PATH=not out.dtype.is_float, WORDS=reads_by_words(builder))


@variants("where")
def select_variants() -> Iterable[Defines]:
    """select_defines' space (gather.comp's and cumsum.comp's too)."""
    return any_dtype_variants("INT_PATH")


@builds("aten.where.self")
def where(builder: OpBuilder, call: Call) -> None:
    cond, a, b, out = call.tensor("condition"), call.tensor("self"), call.tensor("other"), call.out
    if out.numel == 0:
        return
    whole(builder, cond, a, b, out)
    shape = tuple(out.shape) or (1,)
    strides = [broadcast_strides(t.shape, shape) for t in (cond, a, b)]
    sizes, (sc, sa, sb, _) = collapse_dims(shape, *strides, contiguous_strides(shape))
    if len(sizes) > MAX_DIMS:
        raise UnsupportedOpError(f"where over {len(sizes)} non-mergeable dims (max {MAX_DIMS})")
    push = struct.pack("<26I", out.numel, len(sizes), *pad_dims(sizes), *pad_dims(sc), *pad_dims(sa), *pad_dims(sb))
    builder.dispatch("where", [cond, a, b, out], push, dispatch_groups(out.numel), select_defines(builder, out),
                     dtype_spec(cond, a, b, out))


def fill(builder: OpBuilder, out: TensorArg, start: float | int, step: float | int) -> None:
    """out[i] = start + i * step."""
    if out.numel == 0:
        return
    whole(builder, out)
    defines = _fill_defines(out.dtype)
    int_math = not out.dtype.is_float
    push = struct.pack("<Iffii", out.numel, float(start), float(step), int(start) if int_math else 0,
                       int(step) if int_math else 0)
    builder.dispatch("fill", [out], push, dispatch_groups(out.numel), defines)


def _fill_defines(dtype: DType) -> Defines:
    return {**elem_defines("O", "o", dtype), **({} if dtype.is_float else {"INT_PATH": 1})}


@variants("fill")
def fill_variants() -> Iterable[Defines]:
    for dtype in DTYPE_CODES:
        yield _fill_defines(dtype)


@builds("aten.full.default")
def full(builder: OpBuilder, call: Call) -> None:
    fill(builder, call.out, call["fill_value"], 0)


@builds("aten.scalar_tensor.default")
def scalar_tensor(builder: OpBuilder, call: Call) -> None:
    fill(builder, call.out, call["s"], 0)


@builds("aten.arange.start_step")
def arange(builder: OpBuilder, call: Call) -> None:
    fill(builder, call.out, call["start"], call["step"])


@builds("aten.full_like.default")
def full_like(builder: OpBuilder, call: Call) -> None:
    fill(builder, call.out, call["fill_value"], 0)


@builds("aten.zeros_like.default", "aten.ones_like.default")
def zeros_ones_like(builder: OpBuilder, call: Call) -> None:
    fill(builder, call.out, 1 if call.decl.name == "aten.ones_like.default" else 0, 0)
