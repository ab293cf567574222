"""The op contract's declarations of the ops real models add: broadcasting copies, comparisons and
masks, selection, casts, clamps, scalar powers and tensor factories (full, arange), each with its
rule beside it. The exporter folds factories into constants (vkx.export.fold); ExecuTorch files
may call them.

Arguments come in ATen schema order, the output last (vkx.format.contract). docs/architecture.md
lists the same ops in prose.
"""
from __future__ import annotations

import math

from . import dtypes
from .contract import Arg, Call, Kind, OpDecl
from .op_rules import ALL_TYPES, B, I, L, N, T, TS, broadcast, dim_index, optional, same_shape

DECLS: list[OpDecl] = []
"""This module's declarations, in order (`vkx.format.opset` assembles the table)."""
declare = DECLS.append


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


def _expand(call: Call) -> None:
    src, size = call.tensor("self").shape, tuple(call["size"])
    lead = len(size) - len(src)
    call.require(lead >= 0, f"size {list(size)} has fewer dims than {list(src)}")
    want = list(size[:lead])
    for s, n in zip(src, size[lead:]):
        call.require(n in (-1, s) or s == 1, f"{list(src)} does not expand to {list(size)}")
        want.append(s if n == -1 else n)
    call.require(all(n >= 0 for n in want), f"size {list(size)}")
    call.expect_shape("the output", call.out.shape, want)


def _where(call: Call) -> None:
    call.require(call.tensor("condition").dtype is dtypes.BOOL, "condition must be a bool tensor")
    shapes = [call[n].shape for n in ("condition", "self", "other")]
    want = broadcast(*shapes)
    call.require(want is not None, f"operands {[list(s) for s in shapes]} do not broadcast")
    call.expect_shape("the output", call.out.shape, want)


def _gather(call: Call) -> None:
    src, index = call.tensor("self"), call.tensor("index")
    call.require(not index.dtype.is_float, f"index of {index.dtype}")
    call.require(len(index.shape) == len(src.shape), f"index {list(index.shape)} and self {list(src.shape)} "
                 "differ in rank")
    dim = dim_index(call, call["dim"], len(src.shape))
    call.require(all(i <= s for d, (i, s) in enumerate(zip(index.shape, src.shape)) if d != dim),
                 f"index {list(index.shape)} is larger than self {list(src.shape)} off dim {dim}")
    call.expect_shape("the output", call.out.shape, index.shape)


MAX_INDICES = 3
"""aten.index.Tensor: index tensors on at most this many leading dims."""


def _index(call: Call) -> None:
    src, indices = call.tensor("self"), call["indices"]
    call.require(1 <= len(indices) <= min(MAX_INDICES, len(src.shape)),
                 f"{len(indices)} index tensors for self {list(src.shape)} (1 to {MAX_INDICES}, one per leading dim)")
    call.require(all(not i.dtype.is_float and i.dtype is not dtypes.BOOL for i in indices),
                 "index tensors must be integer (a bool mask is not supported)")
    batch = broadcast(*(i.shape for i in indices))
    call.require(batch is not None, f"index tensors {[list(i.shape) for i in indices]} do not broadcast")
    call.expect_shape("the output", call.out.shape, (*batch, *src.shape[len(indices):]))


def _cumsum(call: Call) -> None:
    dim_index(call, call["dim"], len(call.tensor("self").shape))
    same_shape(call)


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


_FACTORY = (optional("dtype", I, None), optional("layout", I, None), optional("device", I, None),
            optional("pin_memory", B, None))
"""The trailing arguments of ops that make a tensor: the output's dtype says everything (ExecuTorch
writes them Null)."""

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
declare(OpDecl("aten.pow.Tensor_Scalar", (Arg("self", T), Arg("exponent", N)), rule=_float_same))
declare(OpDecl("aten.clamp.default", (Arg("self", T), optional("min", N, None, saturates=True),
                                      optional("max", N, None, saturates=True)), rule=_clamp))
declare(OpDecl("aten._to_copy.default", (Arg("self", T),), dtypes=ALL_TYPES, rule=same_shape))
declare(OpDecl("aten.expand_copy.default", (Arg("self", T), Arg("size", L), Arg("implicit", B, default=False)),
               dtypes=ALL_TYPES, rule=_expand))
declare(OpDecl("aten.where.self", (Arg("condition", T), Arg("self", T), Arg("other", T)), dtypes=ALL_TYPES,
               rule=_where))
declare(OpDecl("aten.gather.default", (Arg("self", T), Arg("dim", I), Arg("index", T),
                                       Arg("sparse_grad", B, default=False)), dtypes=ALL_TYPES, rule=_gather))
declare(OpDecl("aten.index.Tensor", (Arg("self", T), Arg("indices", TS)), dtypes=ALL_TYPES, rule=_index))
declare(OpDecl("aten.full.default", (Arg("size", L), Arg("fill_value", Kind.SCALAR_OR_TENSOR), *_FACTORY),
               dtypes=ALL_TYPES, rule=_full))
declare(OpDecl("aten.scalar_tensor.default", (Arg("s", Kind.SCALAR_OR_TENSOR), *_FACTORY), dtypes=ALL_TYPES,
               rule=_scalar_tensor))
declare(OpDecl("aten.arange.start_step", (Arg("start", N), Arg("end", N), Arg("step", N, default=1), *_FACTORY),
               dtypes=ALL_TYPES, rule=_arange))
declare(OpDecl("aten.cumsum.default", (Arg("self", T), Arg("dim", I), optional("dtype", I, None)),
               dtypes=ALL_TYPES, rule=_cumsum))
