"""The op contract: every op a VkGraph may call, declared once.

An `OpDecl` names an op, its arguments by name with the kind of value each may
be, the dtypes its tensors may have, and its shape rule. The contract is part of
the file format: `validate()` binds every `OperatorCall` of a file to its
declaration and runs the rule, the loader does the same before it records
anything (a file that validates is a file that loads safely), the exporter emits
only declared ops, and each loader builder registers against a declaration.

Arguments come in schema order, the output (a Tensor, or a ValueList of them for
a multi-output op) last. Trailing arguments with a default may be left out
(ExecuTorch writes some ops with fewer arguments). This module is the machinery
(declaring, binding, checking a tensor); the declarations are in the `op_*` modules, one per
kind of op (elementwise `op_decls`, `op_reduce`, `op_norm`, `op_shape`, `op_gather`, `op_linalg`,
`op_conv`, `op_attention`, `op_quant`, `op_state`), with what they share in `op_rules`; `opset`
assembles them into the table (`OPS`, `lookup`, `check_graph`). docs/architecture.md lists the ops
in prose.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Sequence

from . import dtypes, vkgraph as g
from .dtypes import DType

FLT_MAX = 3.4028234663852886e38
MAX_DIM = 2**31 - 1
"""Dims and element counts index 32-bit integers on the device."""


class ContractError(ValueError):
    """An op call does not satisfy its declaration (the callers wrap it in their typed error)."""


class Kind(Enum):
    """What one argument may be."""
    TENSOR = "Tensor"
    TENSORS = "ValueList of Tensors"
    INT = "Int"
    NUMBER = "Int or Double"
    BOOL = "Bool"
    INTS = "IntList"
    DOUBLES = "DoubleList"
    STRING = "String"
    SCALAR_OR_TENSOR = "Tensor or number"


@dataclass(frozen=True)
class Arg:
    name: str
    kind: Kind
    optional: bool = False
    """May be Null."""
    default: Any = ...
    """Value when the argument is left out of the call (`...`: it may not be)."""
    saturates: bool = False
    """A number past float32's range is taken as ±inf (clamp bounds: ExecuTorch writes ±DBL_MAX)."""


@dataclass(frozen=True)
class Out:
    """The output: one tensor, (`names`) a ValueList of that many tensors, or (`listed`) a ValueList
    of any number of them (split)."""
    names: tuple[str, ...] = ("out",)
    listed: bool = False

    @property
    def multi(self) -> bool:
        return self.listed or len(self.names) > 1


TensorLike = Any
"""Anything with `.shape` (tuple of ints) and `.dtype` (a DType): the loader passes
its TensorArgs, validate passes `Spec`s."""


@dataclass(frozen=True)
class Spec:
    shape: tuple[int, ...]
    dtype: DType
    is_constant: bool = False


class Call:
    """One OperatorCall bound to its declaration: arguments by name.

    `tensor(name)` gives what the caller's `make_tensor` made of the value id
    (with `.shape` and `.dtype`); `vid(name)` the raw value id; scalars and lists
    are plain Python values; a Null argument reads as None.
    """

    def __init__(self, decl: "OpDecl", node: str, vids: dict[str, int | None], values: dict[str, Any],
                 outputs: list[TensorLike], output_vids: list[int]):
        self.decl, self.node = decl, node
        self._vids, self._values = vids, values
        self.outputs, self.output_vids = outputs, output_vids

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def vid(self, name: str) -> int | None:
        return self._vids[name]

    def tensor(self, name: str) -> TensorLike:
        value = self._values[name]
        if value is None or isinstance(value, (int, float, bool)):
            raise ContractError(f"{self.node}: {name} is not a tensor")
        return value

    def is_tensor(self, name: str) -> bool:
        value = self._values[name]
        return value is not None and not isinstance(value, (int, float, bool, str, tuple, list))

    @property
    def out(self) -> TensorLike:
        return self.outputs[0]

    def with_tensors(self, convert: Callable[[TensorLike], TensorLike]) -> "Call":
        """This call with `convert(t)` in place of each tensor `t` of its arguments and outputs (the
        loader binds the file's tensors, then gives its builders the device's)."""
        values = dict(self._values)
        for a in self.decl.args:
            v = values[a.name]
            if a.kind is Kind.TENSORS and v is not None:
                values[a.name] = [convert(t) for t in v]
            elif a.kind in (Kind.TENSOR, Kind.SCALAR_OR_TENSOR) and self.is_tensor(a.name):
                values[a.name] = convert(v)
        return Call(self.decl, self.node, self._vids, values, [convert(t) for t in self.outputs], self.output_vids)

    def fail(self, detail: str) -> None:
        raise ContractError(f"{self.node}: {detail}")

    def require(self, ok: bool, detail: str) -> None:
        if not ok:
            self.fail(detail)

    def expect_shape(self, what: str, shape: Sequence[int], want: Sequence[int]) -> None:
        if tuple(shape) != tuple(want):
            self.fail(f"{what} has shape {list(shape)}, the op gives {list(want)}")


Rule = Callable[[Call], None]


def _no_rule(call: Call) -> None:
    pass


@dataclass(frozen=True)
class OpDecl:
    name: str
    """`namespace.op.overload`, as written in `OperatorCall.name`."""
    args: tuple[Arg, ...]
    out: Out = Out()
    dtypes: frozenset[DType] = dtypes.FLOATS
    """Types the op's floating operands and outputs may have."""
    rule: Rule = _no_rule
    """Shape rule: raises ContractError when the operands and outputs disagree."""
    family: str = ""
    """Which loader builder runs it ("unary", "binary", ... or the op's own)."""
    math: str = ""
    """Elementwise ops: the value at `x` (unary) or `x, y` (binary), in numpy's notation, the
    op's other arguments by name (tests check it against torch)."""

    def arg(self, name: str) -> Arg:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)

    def has(self, name: str) -> bool:
        return any(a.name == name for a in self.args)


# --------------------------------------------------------------------------- binding

def bind(decl: OpDecl, op: g.OperatorCall, values: Sequence[g.Value],
         make_tensor: Callable[[int, g.Tensor], TensorLike], node: str | None = None) -> Call:
    """Match an OperatorCall's value ids to `decl`'s arguments, check kinds and dtypes, run the rule."""
    node = node or f"node {op.node_id} ({op.name})"
    n_in = len(decl.args)
    if not op.args:
        raise ContractError(f"{node}: no output argument")
    given, out_vid = list(op.args[:-1]), op.args[-1]
    required = n_in
    while required > 0 and decl.args[required - 1].default is not ...:
        required -= 1
    if not required <= len(given) <= n_in:
        want = f"{n_in}" if required == n_in else f"{required} to {n_in}"
        raise ContractError(f"{node}: {len(given)} arguments before the output, the op takes {want}")

    def value(vid: int, what: str) -> g.Value:
        if not isinstance(vid, int) or not 0 <= vid < len(values):
            raise ContractError(f"{node}: {what} names value {vid}, out of range ({len(values)} values)")
        return values[vid]

    def tensor(vid: int, what: str) -> TensorLike:
        v = value(vid, what)
        if not isinstance(v, g.Tensor):
            raise ContractError(f"{node}: {what} is {type(v).__name__}, not Tensor")
        return make_tensor(vid, v)

    vids: dict[str, int | None] = {}
    bound: dict[str, Any] = {}
    for i, a in enumerate(decl.args):
        if i >= len(given):
            vids[a.name], bound[a.name] = None, a.default
            continue
        vid = given[i]
        vids[a.name] = vid
        v = value(vid, a.name)
        if isinstance(v, g.Null):
            if not a.optional:
                raise ContractError(f"{node}: {a.name} is Null, it must be {a.kind.value}")
            bound[a.name] = None
            continue
        bound[a.name] = _convert(a, vid, v, values, node, tensor)
    ov = value(out_vid, "the output")
    names = decl.out.names
    if decl.out.listed:
        if not isinstance(ov, g.ValueList):
            raise ContractError(f"{node}: the output must be a ValueList of tensors")
        out_vids = list(ov.items)
        names = tuple(f"{names[0]}[{i}]" for i in range(len(out_vids)))
    elif decl.out.multi:
        if not isinstance(ov, g.ValueList) or len(ov.items) != len(names):
            raise ContractError(f"{node}: the output must be a ValueList of {len(names)} tensors")
        out_vids = list(ov.items)
    else:
        out_vids = [out_vid]
    outputs = [tensor(v, f"output {name}") for v, name in zip(out_vids, names)]
    call = Call(decl, node, vids, bound, outputs, out_vids)
    _check_dtypes(call)
    decl.rule(call)
    return call


def _convert(a: Arg, vid: int, v: g.Value, values: Sequence[g.Value], node: str, tensor) -> Any:
    def bad() -> ContractError:
        return ContractError(f"{node}: {a.name} is {type(v).__name__}, it must be {a.kind.value}")

    k = a.kind
    if k is Kind.TENSOR:
        return tensor(vid, a.name)
    if k is Kind.SCALAR_OR_TENSOR:
        if isinstance(v, g.Tensor):
            return tensor(vid, a.name)
        if isinstance(v, (g.Int, g.Double, g.Bool, g.SymInt)):
            return _number(v.value, a, node)
        raise bad()
    if k is Kind.TENSORS:
        if not isinstance(v, g.ValueList):
            raise bad()
        return [tensor(item, f"{a.name}[{j}]") for j, item in enumerate(v.items)]
    if k is Kind.INT:
        if isinstance(v, (g.Int, g.SymInt)):
            return int(v.value)
        raise bad()
    if k is Kind.NUMBER:
        if isinstance(v, (g.Int, g.Double, g.SymInt)):
            return _number(v.value, a, node)
        raise bad()
    if k is Kind.BOOL:
        if isinstance(v, g.Bool):
            return bool(v.value)
        raise bad()
    if k is Kind.STRING:
        if isinstance(v, g.String):
            return v.value
        raise bad()
    if k is Kind.INTS:
        if isinstance(v, g.IntList):
            return tuple(int(x) for x in v.items)
        if isinstance(v, g.ValueList):
            out = []
            for item in v.items:
                iv = values[item] if isinstance(item, int) and 0 <= item < len(values) else None
                if not isinstance(iv, (g.Int, g.SymInt)):
                    raise ContractError(f"{node}: {a.name} must be a list of Ints")
                out.append(int(iv.value))
            return tuple(out)
        raise bad()
    if k is Kind.DOUBLES:
        if isinstance(v, g.DoubleList):
            return tuple(float(x) for x in v.items)
        raise bad()
    raise AssertionError(k)


def _number(x: Any, a: Arg, node: str) -> int | float | bool:
    if isinstance(x, float) and math.isfinite(x) and abs(x) > FLT_MAX and not a.saturates:
        raise ContractError(f"{node}: {a.name} = {x!r} does not fit a float32")
    return x


def _check_dtypes(call: Call) -> None:
    allowed = call.decl.dtypes
    for t in [*call.outputs, *(call[a.name] for a in call.decl.args if call.is_tensor(a.name))]:
        items = t if isinstance(t, list) else [t]
        for x in items:
            if x.dtype.is_float and x.dtype not in allowed:
                call.fail(f"{x.dtype} tensors are not supported by this op")


# --------------------------------------------------------------------------- whole graphs

def check_tensor(vid: int, t: g.Tensor) -> Spec:
    """A tensor value's Spec; ContractError for an unknown dtype or dims past 32-bit indexing."""
    try:
        dtype = dtypes.of(t.datatype)
    except Exception:
        raise ContractError(f"value {vid}: datatype {int(t.datatype)} is not an element type") from None
    if any(d < 0 or d > MAX_DIM for d in t.dims) or math.prod(t.dims) > MAX_DIM:
        raise ContractError(f"value {vid}: dims {list(t.dims)} exceed 32-bit indexing")
    return Spec(tuple(int(d) for d in t.dims), dtype, t.constant_id >= 0)
