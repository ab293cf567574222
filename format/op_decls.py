"""The op contract's elementwise declarations: unary maps, binary arithmetic, comparisons and masks,
clamps and scalar powers, where, clone and the fills (full, arange, *_like), each with its rule
beside it. The exporter folds factories into constants (vkx.export.fold); ExecuTorch files may call
them. The other groups: `op_reduce`, `op_norm`, `op_shape`, `op_gather`, `op_linalg`, `op_conv`,
`op_attention`, `op_quant`, `op_state`.

Arguments come in ATen schema order, the output last (vkx.format.contract). docs/architecture.md
lists the same ops in prose.
"""
from __future__ import annotations

import math

from . import dtypes
from .contract import Arg, Call, Kind, OpDecl
from .op_rules import ALL_TYPES, I, L, N, S, T, TENSOR_OPTIONS, broadcast, floats, optional, same_shape

DECLS: list[OpDecl] = []
"""This module's declarations, in order (`vkx.format.opset` assembles the table)."""
declare = DECLS.append


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

EXTRA_UNARY: dict[str, str] = {
    "round": "round(x)",
    "log10": "log10(x)",
    "tan": "tan(x)",
}
"""The unary ops of ExecuTorch's op set beyond UNARY, as UNARY defines them (round: half to even, as
torch; log10(0) is -inf and log10 of a negative number NaN, as in torch)."""

GELU: dict[str, str] = {
    "none": "x * (1 + erf(x / sqrt(2))) / 2",
    "tanh": "x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))) / 2",
}
"""aten.gelu.default by `approximate`, as UNARY definitions."""

LEAKY_RELU = "where(x >= 0, x, x * negative_slope)"
HARDSHRINK = "where(abs(x) > lambd, x, 0)"
"""leaky_relu and hardshrink, of x and their float argument (a NaN x gives NaN)."""

BINARY: dict[str, str] = {
    "add": "x + alpha * y",
    "sub": "x - alpha * y",
    "mul": "x * y",
    "div": "x / y",
}
"""Binary ops `aten.<name>.Tensor(self, other[, alpha])`: the value at x = self, y = other (an op
whose definition reads `alpha` takes that argument)."""

COMPARE: dict[str, str] = {"eq": "x == y", "ne": "x != y", "lt": "x < y", "le": "x <= y", "gt": "x > y",
                           "ge": "x >= y"}
"""Comparisons `aten.<name>.Tensor(self, other)` (either side a number), in numpy's notation; the
result is bool, computed in fp32 when an operand is floating, else in int32."""

LOGICAL: dict[str, str] = {"bitwise_and": "x & y", "bitwise_or": "x | y", "bitwise_xor": "x ^ y"}
"""Bitwise ops on integer and bool tensors `aten.<name>.Tensor(self, other)`."""

LOGICAL_ANY: dict[str, str] = {"logical_and": "(x != 0) & (y != 0)", "logical_or": "(x != 0) | (y != 0)",
                               "logical_xor": "(x != 0) ^ (y != 0)"}
"""`aten.<name>.default(self, other)` on tensors of any dtype (nonzero and NaN are true), a bool
result (ExecuTorch's attention masks have logical_and)."""

MIN_MAX: dict[str, str] = {"minimum": "minimum(x, y)", "maximum": "maximum(x, y)"}
"""`aten.<name>.default(self, other)`: NaN wins, as in torch and numpy."""

LOGICAL_NOT = "x == 0"
"""`aten.logical_not.default(self)`: a bool result."""


# --------------------------------------------------------------------------- rules

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


def _float_unary(call: Call) -> None:
    floats(call, "self")
    same_shape(call)


def _float_in_out(call: Call) -> None:
    """Float input and output; a float argument (negative_slope, lambd) finite."""
    src = call.tensor("self")
    call.require(src.dtype.is_float and call.out.dtype.is_float, f"{src.dtype} input: floats only")
    for name in ("negative_slope", "lambd"):
        if call.decl.has(name):
            call.require(math.isfinite(call[name]), f"{name} {call[name]!r} must be finite")
    same_shape(call)


def _gelu(call: Call) -> None:
    call.require(call["approximate"] in GELU, f"approximate={call['approximate']!r}")
    _float_unary(call)


def _hardtanh(call: Call) -> None:
    _float_in_out(call)
    call.require(call["min_val"] <= call["max_val"], f"min_val {call['min_val']} is above max_val {call['max_val']}")


def _broadcast_out(call: Call) -> None:
    shapes = [call[n].shape for n in ("self", "other") if call.is_tensor(n)]
    call.require(bool(shapes), "two scalar operands")
    want = broadcast(*shapes)
    call.require(want is not None, f"operands {[list(s) for s in shapes]} do not broadcast")
    call.expect_shape("the output", call.out.shape, want)


def _compare(call: Call) -> None:
    call.require(call.out.dtype is dtypes.BOOL, f"the output is {call.out.dtype}, a comparison gives bool")
    _broadcast_out(call)


def _logical(call: Call) -> None:
    bad = [str(call[n].dtype) for n in ("self", "other") if call.is_tensor(n) and call[n].dtype.is_float]
    call.require(not bad and not call.out.dtype.is_float, f"{', '.join(bad) or call.out.dtype} tensors: "
                 "the op takes integer and bool tensors")
    for name in ("self", "other"):
        if not call.is_tensor(name):
            call.require(isinstance(call[name], int), f"{name} = {call[name]!r} is not an integer")
    _broadcast_out(call)


def _min_max(call: Call) -> None:
    kinds = {call[n].dtype.is_float for n in ("self", "other")} | {call.out.dtype.is_float}
    call.require(len(kinds) == 1, "floating and integer operands (the exporter casts them to one type)")
    _broadcast_out(call)


def _logical_not(call: Call) -> None:
    call.require(call.out.dtype is dtypes.BOOL, f"the output is {call.out.dtype}, logical_not gives bool")
    same_shape(call)


def _float_same(call: Call) -> None:
    bad = [str(t.dtype) for t in (call.tensor("self"), call.out) if not t.dtype.is_float]
    call.require(not bad, f"{', '.join(bad)} tensors: the op computes on floats")
    same_shape(call)


def _clamp(call: Call) -> None:
    _float_same(call)
    lo, hi = call["min"], call["max"]
    call.require(lo is None or hi is None or lo <= hi, f"min {lo} is above max {hi}")


def _where(call: Call) -> None:
    call.require(call.tensor("condition").dtype is dtypes.BOOL, "condition must be a bool tensor")
    shapes = [call[n].shape for n in ("condition", "self", "other")]
    want = broadcast(*shapes)
    call.require(want is not None, f"operands {[list(s) for s in shapes]} do not broadcast")
    call.expect_shape("the output", call.out.shape, want)


def _fits(call: Call, *names: str) -> None:
    """The named numbers are numbers, and int32s for an integer output."""
    for name in names:
        v = call[name]
        call.require(not call.is_tensor(name) and v is not None, f"{name} must be a number")
        if not call.out.dtype.is_float:
            call.require(float(v).is_integer() and -2**31 <= v < 2**31, f"{name} = {v!r} for a {call.out.dtype} output")


def _full(call: Call) -> None:
    _fits(call, "fill_value")
    call.expect_shape("the output", call.out.shape, call["size"])


def _scalar_tensor(call: Call) -> None:
    _fits(call, "s")
    call.expect_shape("the output", call.out.shape, ())


def _arange(call: Call) -> None:
    start, end, step = call["start"], call["end"], call["step"]
    call.require(step != 0 and (end - start) * step >= 0, f"arange({start}, {end}, {step}) is empty or endless")
    call.expect_shape("the output", call.out.shape, (math.ceil((end - start) / step),))
    _fits(call, "start", "step")


def _fill_value(call: Call) -> None:
    value, out = call["fill_value"], call.out
    if not out.dtype.is_float:
        call.require(float(value).is_integer() and -2**31 <= value < 2**31,
                     f"fill_value {value!r} for a {out.dtype} output")
    same_shape(call)


# --------------------------------------------------------------------------- the ops

for _name, _math in UNARY.items():
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T),), rule=_float_unary, family="unary", math=_math))
for _name, _math in BINARY.items():
    _args = (Arg("self", Kind.SCALAR_OR_TENSOR), Arg("other", Kind.SCALAR_OR_TENSOR))
    if "alpha" in _math:
        _args += (optional("alpha", N, 1),)
    declare(OpDecl(f"aten.{_name}.Tensor", _args, dtypes=ALL_TYPES, rule=_binary, family="binary", math=_math))
declare(OpDecl("aten.gelu.default", (Arg("self", T), Arg("approximate", S, default="none")), rule=_gelu))
declare(OpDecl("aten.clone.default", (Arg("self", T), optional("memory_format", I, None)), dtypes=ALL_TYPES,
               rule=same_shape))
for _name, _math in EXTRA_UNARY.items():
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T),), rule=_float_in_out, family="unary", math=_math))
declare(OpDecl("aten.leaky_relu.default", (Arg("self", T), Arg("negative_slope", N, default=0.01)),
               rule=_float_in_out, math=LEAKY_RELU))
declare(OpDecl("aten.hardshrink.default", (Arg("self", T), Arg("lambd", N, default=0.5)), rule=_float_in_out,
               math=HARDSHRINK))
declare(OpDecl("aten.hardtanh.default",  # min(max(x, min_val), max_val), NaN stays (relu6: 0, 6)
               (Arg("self", T), Arg("min_val", N, default=-1.0), Arg("max_val", N, default=1.0)), rule=_hardtanh))
declare(OpDecl("aten.pow.Tensor_Scalar", (Arg("self", T), Arg("exponent", N)), rule=_float_same))
declare(OpDecl("aten.clamp.default", (Arg("self", T), optional("min", N, None, saturates=True),
                                      optional("max", N, None, saturates=True)), rule=_clamp))

for _name in COMPARE:
    for _overload in ("Tensor", "Scalar"):  # vkx writes .Tensor; ExecuTorch's files have .Scalar too
        declare(OpDecl(f"aten.{_name}.{_overload}",
                       (Arg("self", Kind.SCALAR_OR_TENSOR), Arg("other", Kind.SCALAR_OR_TENSOR)),
                       dtypes=ALL_TYPES, rule=_compare, family="binary", math=COMPARE[_name]))
for _name, _math in LOGICAL.items():
    declare(OpDecl(f"aten.{_name}.Tensor", (Arg("self", Kind.SCALAR_OR_TENSOR), Arg("other", Kind.SCALAR_OR_TENSOR)),
                   dtypes=ALL_TYPES, rule=_logical, family="binary", math=_math))
for _name, _math in LOGICAL_ANY.items():
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T), Arg("other", T)), dtypes=ALL_TYPES, rule=_compare,
                   family="binary", math=_math))
for _name, _math in MIN_MAX.items():
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T), Arg("other", T)), dtypes=ALL_TYPES, rule=_min_max,
                   family="binary", math=_math))
declare(OpDecl("aten.logical_not.default", (Arg("self", T),), dtypes=ALL_TYPES, rule=_logical_not,
               family="unary", math=LOGICAL_NOT))
declare(OpDecl("aten.where.self", (Arg("condition", T), Arg("self", T), Arg("other", T)), dtypes=ALL_TYPES,
               rule=_where))

declare(OpDecl("aten.full.default", (Arg("size", L), Arg("fill_value", Kind.SCALAR_OR_TENSOR), *TENSOR_OPTIONS),
               dtypes=ALL_TYPES, rule=_full))
declare(OpDecl("aten.scalar_tensor.default", (Arg("s", Kind.SCALAR_OR_TENSOR), *TENSOR_OPTIONS), dtypes=ALL_TYPES,
               rule=_scalar_tensor))
declare(OpDecl("aten.arange.start_step", (Arg("start", N), Arg("end", N), Arg("step", N, default=1), *TENSOR_OPTIONS),
               dtypes=ALL_TYPES, rule=_arange))
declare(OpDecl("aten.full_like.default",
               (Arg("self", T), Arg("fill_value", N), *TENSOR_OPTIONS, optional("memory_format", I, None)),
               dtypes=ALL_TYPES, rule=_fill_value))
for _name in ("zeros_like", "ones_like"):
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T), *TENSOR_OPTIONS, optional("memory_format", I, None)),
                   dtypes=ALL_TYPES, rule=same_shape))
