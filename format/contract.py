"""The op contract: every op a VkGraph may call, declared once.

An `OpDecl` names an op, its arguments by name with the kind of value each may
be, the dtypes its tensors may have, and its shape rule. The contract is part of
the file format: `validate()` binds every `OperatorCall` of a file to its
declaration and runs the rule, the loader does the same before it records
anything (a file that validates is a file that loads safely), the exporter emits
only declared ops, and each loader builder registers against a declaration.

Arguments come in schema order, the output (a Tensor, or a ValueList of them for
a multi-output op) last. Trailing arguments with a default may be left out
(ExecuTorch writes some ops with fewer arguments). docs/architecture.md lists
the ops in prose.
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
    """The output: one tensor, or (`names`) a ValueList of tensors."""
    names: tuple[str, ...] = ("out",)

    @property
    def multi(self) -> bool:
        return len(self.names) > 1


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
    glsl: str = ""
    """Elementwise ops: the operation as a GLSL expression of `x` (unary) or `x, y` (binary)."""

    def arg(self, name: str) -> Arg:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)


OPS: dict[str, OpDecl] = {}


def declare(decl: OpDecl) -> OpDecl:
    if decl.name in OPS:
        raise ValueError(f"op {decl.name} is declared twice")
    OPS[decl.name] = decl
    return decl


def lookup(name: str) -> OpDecl | None:
    return OPS.get(name)


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
    if decl.out.multi:
        if not isinstance(ov, g.ValueList) or len(ov.items) != len(decl.out.names):
            raise ContractError(f"{node}: the output must be a ValueList of {len(decl.out.names)} tensors")
        out_vids = list(ov.items)
    else:
        out_vids = [out_vid]
    outputs = [tensor(v, f"output {name}") for v, name in zip(out_vids, decl.out.names)]
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


# --------------------------------------------------------------------------- shape helpers

def broadcast(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """numpy's broadcast of `shapes`, or None when they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(rank):
        sizes = {s[len(s) - rank + d] for s in shapes if len(s) - rank + d >= 0} - {1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _dim(call: Call, dim: int, rank: int, what: str = "dim") -> int:
    n = max(rank, 1)
    call.require(-n <= dim < n, f"{what} {dim} out of range for {rank} dims")
    return dim % n


def _same_shape(call: Call, name: str = "self") -> None:
    call.expect_shape("the output", call.out.shape, call.tensor(name).shape)


def _same_numel(call: Call, name: str = "self") -> None:
    src = call.tensor(name)
    call.require(math.prod(src.shape) == math.prod(call.out.shape),
                 f"the output {list(call.out.shape)} does not hold the {list(src.shape)} elements of {name}")


# --------------------------------------------------------------------------- rules

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


def matmul_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """torch.matmul's result shape, or None when the operands do not multiply."""
    if not a or not b:
        return None
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        return None
    batch = broadcast(a2[:-2], b2[:-2])
    if batch is None:
        return None
    out = (*batch, *(a2[-2:-1] if len(a) > 1 else ()), *(b2[-1:] if len(b) > 1 else ()))
    return out


def _matmul(call: Call) -> None:
    _floats(call, "self", "other")
    a, b = call.tensor("self"), call.tensor("other")
    want = matmul_shape(a.shape, b.shape)
    call.require(want is not None, f"matmul of {list(a.shape)} by {list(b.shape)}")
    call.expect_shape("the output", call.out.shape, want)


def _softmax(call: Call) -> None:
    _floats(call, "self")
    _dim(call, call["dim"], len(call.tensor("self").shape))
    _same_shape(call)


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


def _window(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil: bool) -> int:
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    if span < 0:
        return -1
    out = (span + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and (out - 1) * stride >= size + pad:  # the last window must start inside the input
        out -= 1
    return out


def _ints(call: Call, name: str, n: int, positive: bool = True) -> tuple[int, ...]:
    v = tuple(call[name])
    if len(v) == 1:
        v = v * n
    call.require(len(v) == n, f"{name} {list(v)} must have {n} entries")
    call.require(all((x > 0) if positive else (x >= 0) for x in v), f"{name} {list(v)} out of range")
    return v


def _convolution(call: Call) -> None:
    _floats(call, "input", "weight", "bias")
    x, w = call.tensor("input"), call.tensor("weight")
    spatial = len(w.shape) - 2
    call.require(spatial in (1, 2) and len(x.shape) == spatial + 2,
                 f"input {list(x.shape)} and weight {list(w.shape)}: 1-D or 2-D convolution")
    call.require(not call["transposed"], "transposed convolution")
    groups = call["groups"]
    call.require(groups >= 1 and x.shape[1] % groups == 0 and w.shape[0] % groups == 0,
                 f"groups {groups} does not divide the channels")
    call.require(w.shape[1] * groups == x.shape[1],
                 f"weight {list(w.shape)} with groups {groups} does not take {x.shape[1]} input channels")
    if call["bias"] is not None:
        call.expect_shape("bias", call["bias"].shape, (w.shape[0],))
    stride, dilation = _ints(call, "stride", spatial), _ints(call, "dilation", spatial)
    padding = _ints(call, "padding", spatial, positive=False)
    sizes = [_window(x.shape[2 + d], w.shape[2 + d], stride[d], padding[d], dilation[d], False)
             for d in range(spatial)]
    call.require(all(s > 0 for s in sizes), "the kernel is larger than the padded input")
    call.expect_shape("the output", call.out.shape, (x.shape[0], w.shape[0], *sizes))


def _pool(call: Call) -> None:
    _floats(call, "self")
    x = call.tensor("self")
    call.require(len(x.shape) in (3, 4), f"input {list(x.shape)} must be 3-D or 4-D")
    kernel = _ints(call, "kernel_size", 2)
    stride = _ints(call, "stride", 2) if call["stride"] else kernel
    padding = _ints(call, "padding", 2, positive=False)
    dilation = _ints(call, "dilation", 2) if "dilation" in call._values else (1, 1)
    call.require(all(p * 2 <= k for p, k in zip(padding, kernel)), "padding over half the kernel")
    sizes = [_window(x.shape[-2 + d], kernel[d], stride[d], padding[d], dilation[d], call["ceil_mode"])
             for d in range(2)]
    call.require(all(s > 0 for s in sizes), "the window is larger than the padded input")
    call.require(call._values.get("divisor_override") != 0, "divisor_override 0")
    call.expect_shape("the output", call.out.shape, (*x.shape[:-2], *sizes))


def _reduce(call: Call) -> None:
    _floats(call, "self")
    x = call.tensor("self")
    rank = len(x.shape)
    dims = call["dim"]
    dims = range(rank) if dims is None or len(dims) == 0 else [_dim(call, d, rank) for d in dims]
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
    dims = [_dim(call, d, rank) for d in call["dims"]]
    call.require(sorted(dims) == list(range(rank)), f"dims {list(call['dims'])} are not a permutation")
    call.expect_shape("the output", call.out.shape, [src.shape[d] for d in dims])


def slice_length(size: int, start: int | None, end: int | None, step: int) -> tuple[int, int]:
    """(start, length) of Python's slice [start:end:step] over `size` elements (step > 0)."""
    start = 0 if start is None else start
    end = size if end is None else end
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, start), size)
    return start, -(-(end - start) // step)


def _slice(call: Call) -> None:
    src = call.tensor("self")
    call.require(len(src.shape) > 0, "slice of a 0-dim tensor")
    dim = _dim(call, call["dim"], len(src.shape))
    step = call["step"]
    call.require(step > 0, f"step {step} must be positive")
    _, length = slice_length(src.shape[dim], call["start"], call["end"], step)
    want = list(src.shape)
    want[dim] = length
    call.expect_shape("the output", call.out.shape, want)


def _cat(call: Call) -> None:
    parts = [t for t in call["tensors"] if math.prod(t.shape) > 0]
    out = call.out.shape
    dim = _dim(call, call["dim"], len(out))
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

T, TS, I, N, B, L, S = Kind.TENSOR, Kind.TENSORS, Kind.INT, Kind.NUMBER, Kind.BOOL, Kind.INTS, Kind.STRING
ALL_TYPES = dtypes.ON_DEVICE


def _opt(name: str, kind: Kind, default: Any = ..., saturates: bool = False) -> Arg:
    return Arg(name, kind, optional=True, default=default, saturates=saturates)


UNARY: dict[str, str] = {
    "relu": "mix(max(x, 0.0), x, isnan(x))",
    "sigmoid": "sigmoid_(x)",
    "tanh": "tanh_(x)",
    "silu": "(x * sigmoid_(x))",
    "neg": "(-x)",
    "abs": "abs(x)",
    "exp": "exp(x)",
    "rsqrt": "rsqrt_(x)",
    "sin": "sin_(x)",
    "cos": "cos_(x)",
    "hardswish": "(x * clamp(x + 3.0, 0.0, 6.0) / 6.0)",
    "hardsigmoid": "mix(clamp(x + 3.0, 0.0, 6.0) / 6.0, x, isnan(x))",
}
"""Unary float ops `aten.<name>.default(self)`: the GLSL expression of x, a float or a vec4
(helpers in shaders/unary.comp). NaN stays NaN, as in torch (GLSL's max/clamp leave NaN undefined)."""

GELU: dict[str, str] = {
    "none": "(x * normal_cdf(x))",
    "tanh": "(x * sigmoid_(2.0 * (0.79788456080286536 * (x + 0.044715 * x * x * x))))",
}
"""aten.gelu.default by `approximate`, as UNARY expressions (0.5 * (1 + tanh(u)) == sigmoid(2u):
no cancellation in the negative tail)."""

BINARY: dict[str, str] = {
    "add": "(x + y * ALPHA)",
    "sub": "(x - y * ALPHA)",
    "mul": "(x * y)",
    "div": "(x / y)",
}
"""Binary ops `aten.<name>.Tensor(self, other[, alpha])`: the GLSL expression of x, y (both float,
or both int for an integer output; vec4 on the fp32 fast path)."""


def _float_unary(call: Call) -> None:
    _floats(call, "self")
    _same_shape(call)


def _gelu(call: Call) -> None:
    call.require(call["approximate"] in GELU, f"approximate={call['approximate']!r}")
    _float_unary(call)


for _name, _expr in UNARY.items():
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T),), rule=_float_unary, family="unary", glsl=_expr))
for _name, _expr in BINARY.items():
    _args = (Arg("self", Kind.SCALAR_OR_TENSOR), Arg("other", Kind.SCALAR_OR_TENSOR))
    if "ALPHA" in _expr:
        _args += (_opt("alpha", N, 1),)
    declare(OpDecl(f"aten.{_name}.Tensor", _args, dtypes=ALL_TYPES, rule=_binary, family="binary", glsl=_expr))

declare(OpDecl("aten.gelu.default", (Arg("self", T), Arg("approximate", S, default="none")), rule=_gelu))
declare(OpDecl("aten.linear.default", (Arg("input", T), Arg("weight", T), _opt("bias", T, None)), rule=_linear))
declare(OpDecl("aten.addmm.default", (Arg("self", T), Arg("mat1", T), Arg("mat2", T),
                                      Arg("beta", N, default=1), Arg("alpha", N, default=1)), rule=_addmm))
declare(OpDecl("aten.mm.default", (Arg("self", T), Arg("mat2", T)), rule=_mm))
declare(OpDecl("aten.bmm.default", (Arg("self", T), Arg("mat2", T)), rule=_bmm))
declare(OpDecl("aten.matmul.default", (Arg("self", T), Arg("other", T)), rule=_matmul))
for _name in ("_softmax", "_log_softmax"):
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T), Arg("dim", I), Arg("half_to_float", B, default=False)),
                   rule=_softmax))
declare(OpDecl("aten.native_layer_norm.default",
               (Arg("input", T), Arg("normalized_shape", L), _opt("weight", T), _opt("bias", T), Arg("eps", N)),
               out=Out(("out", "mean", "rstd")), rule=_layer_norm))
declare(OpDecl("aten.rms_norm.default",
               (Arg("input", T), Arg("normalized_shape", L), _opt("weight", T, None), _opt("eps", N, None)),
               rule=_rms_norm))
declare(OpDecl("aten._native_batch_norm_legit_no_training.default",
               (Arg("input", T), _opt("weight", T), _opt("bias", T), Arg("running_mean", T), Arg("running_var", T),
                Arg("momentum", N), Arg("eps", N)),
               out=Out(("out", "mean", "invstd")), rule=_batch_norm))
_CONV = (Arg("input", T), Arg("weight", T), _opt("bias", T), Arg("stride", L), Arg("padding", L), Arg("dilation", L),
         Arg("transposed", B), Arg("output_padding", L), Arg("groups", I))
declare(OpDecl("aten.convolution.default", _CONV, rule=_convolution))
declare(OpDecl("et_vk.conv_with_clamp.default", _CONV + (_opt("output_min", N, saturates=True),
                                                        _opt("output_max", N, saturates=True)),
               rule=_convolution))
declare(OpDecl("aten.max_pool2d.default",
               (Arg("self", T), Arg("kernel_size", L), Arg("stride", L), Arg("padding", L), Arg("dilation", L),
                Arg("ceil_mode", B)), rule=_pool))
declare(OpDecl("aten.avg_pool2d.default",
               (Arg("self", T), Arg("kernel_size", L), Arg("stride", L), Arg("padding", L), Arg("ceil_mode", B),
                Arg("count_include_pad", B), _opt("divisor_override", I, None)), rule=_pool))
for _name in ("aten.mean.dim", "aten.sum.dim_IntList"):
    declare(OpDecl(_name, (Arg("self", T), _opt("dim", L), Arg("keepdim", B, default=False),
                           _opt("dtype", I, None)), rule=_reduce))
declare(OpDecl("aten.view_copy.default", (Arg("self", T), Arg("size", L)), dtypes=ALL_TYPES, rule=_view))
declare(OpDecl("aten.permute_copy.default", (Arg("self", T), Arg("dims", L)), dtypes=ALL_TYPES, rule=_permute))
declare(OpDecl("aten.slice_copy.Tensor",
               (Arg("self", T), Arg("dim", I, default=0), _opt("start", I, None), _opt("end", I, None),
                Arg("step", I, default=1)), dtypes=ALL_TYPES, rule=_slice))
declare(OpDecl("aten.cat.default", (Arg("tensors", TS), Arg("dim", I, default=0)), dtypes=ALL_TYPES, rule=_cat))
declare(OpDecl("aten.clone.default", (Arg("self", T), _opt("memory_format", I, None)), dtypes=ALL_TYPES,
               rule=_same_shape))
declare(OpDecl("aten.embedding.default",
               (Arg("weight", T), Arg("indices", T), Arg("padding_idx", I, default=-1),
                Arg("scale_grad_by_freq", B, default=False), Arg("sparse", B, default=False)),
               dtypes=ALL_TYPES, rule=_embedding))
declare(OpDecl("aten.scaled_dot_product_attention.default",
               (Arg("query", T), Arg("key", T), Arg("value", T), _opt("attn_mask", T, None),
                Arg("dropout_p", N, default=0.0), Arg("is_causal", B, default=False), _opt("scale", N, None),
                Arg("enable_gqa", B, default=False)),
               dtypes=ALL_TYPES, rule=_sdpa))
declare(OpDecl("et_vk.prepack.default", (Arg("tref", T),), dtypes=ALL_TYPES,
               rule=lambda call: _same_shape(call, "tref")))


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


def check_graph(graph: g.VkGraph) -> list[Call]:
    """Bind every op of `graph` to its declaration (ContractError for the first that fails)."""
    specs: dict[int, Spec] = {}

    def make(vid: int, t: g.Tensor) -> Spec:
        if vid not in specs:
            specs[vid] = check_tensor(vid, t)
        return specs[vid]

    unknown = list(dict.fromkeys(op.name for op in graph.chain if op.name not in OPS))
    if unknown:
        raise ContractError(f"op{'s' if len(unknown) > 1 else ''} not in vkx's op contract: {', '.join(unknown)}")
    return [bind(OPS[op.name], op, graph.values, make) for op in graph.chain]




# --------------------------------------------------------------------------- weight-only quantization
# Symmetric, weight-only: w[n, k] = q[n, k] * scales[n, k // group_size]. bits 8: `weight` is int8
# [N, K]; bits 4: `weight` is uint8 [N, K / 2], two values per byte (even k in the low nibble), each
# stored as q + 8 (q in [-8, 7]). Per-channel int8 is group_size = K. docs/format.md, "Quantized weights".

QUANT_BITS = {4: dtypes.UINT8, 8: dtypes.INT8}
"""bits -> the dtype of the packed weight."""
VALUES_PER_WORD = {4: 8, 8: 4}
"""Values in one 32-bit word of packed weight: shaders read whole words, so K and the group size
are multiples of it."""


def quant_layout(call: Call, weight: TensorLike) -> tuple[int, int, int]:
    """(N, K, groups per row) of a packed weight; checks bits, dtype, group size and scales."""
    bits, group = call["bits"], call["group_size"]
    call.require(bits in QUANT_BITS, f"bits {bits}: 4 or 8")
    call.require(weight.dtype is QUANT_BITS[bits] and len(weight.shape) == 2,
                 f"a {bits}-bit weight is a 2-D {QUANT_BITS[bits]} tensor, not {weight.dtype} {list(weight.shape)}")
    n, stored = weight.shape
    k = stored * 2 if bits == 4 else stored
    per_word = VALUES_PER_WORD[bits]
    call.require(group > 0 and k % group == 0 and group % per_word == 0,
                 f"group_size {group} must divide K = {k} and be a multiple of {per_word}")
    scales = call.tensor("scales")
    call.require(scales.dtype.is_float, f"scales of {scales.dtype}")
    call.expect_shape("scales", scales.shape, (n, k // group))
    return n, k, k // group


def _linear_q(call: Call) -> None:
    x = call.tensor("input")
    n, k, _ = quant_layout(call, call.tensor("weight"))
    call.require(len(x.shape) >= 1 and x.shape[-1] == k and x.dtype.is_float,
                 f"input {x.dtype} {list(x.shape)} does not have K = {k}")
    if call["bias"] is not None:
        call.expect_shape("bias", call["bias"].shape, (n,))
    call.require(call.out.dtype.is_float, f"output of {call.out.dtype}")
    call.expect_shape("the output", call.out.shape, (*x.shape[:-1], n))


def _embedding_q(call: Call) -> None:
    _, k, _ = quant_layout(call, call.tensor("weight"))
    idx = call.tensor("indices")
    call.require(not idx.dtype.is_float, f"indices of {idx.dtype}")
    call.require(call.out.dtype.is_float, f"output of {call.out.dtype}")
    call.expect_shape("the output", call.out.shape, (*idx.shape, k))


declare(OpDecl("vkx.linear_q.default",
               (Arg("input", T), Arg("weight", T), Arg("scales", T), _opt("bias", T, None), Arg("bits", I),
                Arg("group_size", I)), dtypes=ALL_TYPES, rule=_linear_q))
declare(OpDecl("vkx.embedding_q.default",
               (Arg("weight", T), Arg("scales", T), Arg("indices", T), Arg("bits", I), Arg("group_size", I)),
               dtypes=ALL_TYPES, rule=_embedding_q))


# --------------------------------------------------------------------------- ExecuTorch's quantized ops
# As ExecuTorch 1.5.1's Vulkan backend writes them (arguments in its schemas' order, semantics of its
# reference kernels in executorch/backends/vulkan/custom_ops_lib.py; the packing is applied at export by
# its patterns/quantized_linear.py and quantized_embedding.py). docs/format.md, "Quantized weights".

ET_SCALE_ALIGN = 4
"""ExecuTorch pads the width of linear_q4gsw's scales (N) and bias to a multiple of 4."""


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def _linear_q4gsw(call: Call) -> None:
    """weights uint8 [N, K / 2] (value k at byte k / 2, even k in the low nibble, stored as q + 8),
    weight_scales [K / group_size, N padded to 4] (transposed), bias [N] or [N padded to 4]."""
    x, w, s = call.tensor("self"), call.tensor("weights"), call.tensor("weight_scales")
    call.require(len(x.shape) >= 1 and x.dtype.is_float, f"input {x.dtype} {list(x.shape)}")
    k = x.shape[-1]
    call.require(w.dtype is dtypes.UINT8 and len(w.shape) == 2,
                 f"weights must be 2-D uint8, not {w.dtype} {list(w.shape)}")
    n = w.shape[0]
    call.require(k % 8 == 0 and w.shape[1] * 2 == k,
                 f"weights {list(w.shape)} for K = {k}: vkx runs K a multiple of 8 (unpadded rows)")
    group = call["group_size"]
    call.require(group > 0 and k % group == 0 and group % 8 == 0,
                 f"group_size {group} must divide K = {k} and be a multiple of 8")
    call.require(s.dtype.is_float, f"weight_scales of {s.dtype}")
    call.expect_shape("weight_scales", s.shape, (k // group, _round_up(n, ET_SCALE_ALIGN)))
    bias = call["bias"]
    if bias is not None:
        call.require(bias.dtype.is_float and tuple(bias.shape) in ((n,), (_round_up(n, ET_SCALE_ALIGN),)),
                     f"bias {bias.dtype} {list(bias.shape)} for N = {n}")
    call.require(call.out.dtype.is_float, f"output of {call.out.dtype}")
    call.expect_shape("the output", call.out.shape, (*x.shape[:-1], n))


def _embedding_q4gsw(call: Call) -> None:
    """weight uint8 [vocab, D / 2 padded to 4 bytes], weight_scales [vocab, D / group_size];
    is_linear_weight: even d in the low nibble (else the high one)."""
    w, s, idx = call.tensor("weight"), call.tensor("weight_scales"), call.tensor("indices")
    call.require(w.dtype is dtypes.UINT8 and len(w.shape) == 2 and w.shape[1] % 4 == 0,
                 f"weight must be 2-D uint8 of whole 32-bit words a row, not {w.dtype} {list(w.shape)}")
    call.require(not idx.dtype.is_float, f"indices of {idx.dtype}")
    call.require(call.out.dtype.is_float and len(call.out.shape) == len(idx.shape) + 1,
                 f"output {call.out.dtype} {list(call.out.shape)}")
    d = call.out.shape[-1]
    call.require(0 < d <= w.shape[1] * 2, f"embedding width {d} for weight {list(w.shape)}")
    group = call["group_size"]
    call.require(group > 0 and d % group == 0, f"group_size {group} must divide the width {d}")
    call.require(s.dtype.is_float, f"weight_scales of {s.dtype}")
    call.expect_shape("weight_scales", s.shape, (w.shape[0], d // group))
    call.expect_shape("the output", call.out.shape, (*idx.shape, d))


def _dequantize_affine(call: Call) -> None:
    """out = (input - zero_point) * scale per block of `block_size` (2-D input; torchao's op)."""
    q, s = call.tensor("input"), call.tensor("scale")
    call.require(not q.dtype.is_float and len(q.shape) == 2, f"input must be a 2-D integer tensor, not "
                                                             f"{q.dtype} {list(q.shape)}")
    block = call["block_size"]
    call.require(len(block) == 2 and all(b > 0 and d % b == 0 for b, d in zip(block, q.shape)),
                 f"block_size {list(block)} does not tile {list(q.shape)}")
    grid = math.prod(d // b for d, b in zip(q.shape, block))
    call.require(s.dtype.is_float and math.prod(s.shape) == grid, f"scale {s.dtype} {list(s.shape)} "
                                                                  f"for {grid} blocks")
    if call["zero_point"] is not None:
        call.require(math.prod(call["zero_point"].shape) == grid, f"zero_point {list(call['zero_point'].shape)} "
                                                                  f"for {grid} blocks")
    call.require(call.out.dtype.is_float, f"output of {call.out.dtype}")
    _same_shape(call, "input")


def _squeeze_dims(call: Call) -> None:
    src = call.tensor("self")
    rank = len(src.shape)
    dims = {_dim(call, d, rank) for d in call["dim"]}
    call.expect_shape("the output", call.out.shape, [s for d, s in enumerate(src.shape) if d not in dims or s != 1])


declare(OpDecl("et_vk.linear_q4gsw.default",
               (Arg("self", T), Arg("weights", T), Arg("weight_scales", T), Arg("group_size", I),
                _opt("bias", T, None)), dtypes=ALL_TYPES, rule=_linear_q4gsw))
declare(OpDecl("et_vk.embedding_q4gsw.default",
               (Arg("weight", T), Arg("weight_scales", T), Arg("group_size", I), Arg("indices", T),
                Arg("is_linear_weight", B, default=False)), dtypes=ALL_TYPES, rule=_embedding_q4gsw))
declare(OpDecl("torchao.dequantize_affine.default",
               (Arg("input", T), Arg("block_size", L), Arg("scale", T), _opt("zero_point", T),
                _opt("input_dtype", I, None), _opt("quant_min", N, None), _opt("quant_max", N, None),
                _opt("output_dtype", I, 6)), dtypes=ALL_TYPES, rule=_dequantize_affine))
declare(OpDecl("aten.squeeze_copy.dims", (Arg("self", T), Arg("dim", L)), dtypes=ALL_TYPES, rule=_squeeze_dims))


def _per_channel(bits: int, weight: str) -> Rule:
    """ExecuTorch's per-channel weight-only linears (its PT2E VulkanQuantizer flow): self [..., K],
    a packed weight [N, K / (8 / bits)] (4-bit: even k in the high nibble, q + 8), scales [N]."""
    def rule(call: Call) -> None:
        x, w, s = call.tensor("self"), call.tensor(weight), call.tensor("scales")
        call.require(len(x.shape) >= 1 and x.dtype.is_float, f"input {x.dtype} {list(x.shape)}")
        k = x.shape[-1]
        call.require(w.dtype is QUANT_BITS[bits] and len(w.shape) == 2 and w.shape[1] * (8 // bits) == k,
                     f"{weight} {w.dtype} {list(w.shape)} is not a {bits}-bit [N, K] weight for K = {k}")
        call.require(k % VALUES_PER_WORD[bits] == 0, f"K = {k} must be a multiple of {VALUES_PER_WORD[bits]}")
        call.require(s.dtype.is_float, f"scales of {s.dtype}")
        call.expect_shape("scales", s.shape, (w.shape[0],))
        call.require(call.out.dtype.is_float, f"output of {call.out.dtype}")
        call.expect_shape("the output", call.out.shape, (*x.shape[:-1], w.shape[0]))
    return rule


declare(OpDecl("aten._weight_int8pack_mm.default", (Arg("self", T), Arg("mat2", T), Arg("scales", T)),
               dtypes=ALL_TYPES, rule=_per_channel(8, "mat2")))
declare(OpDecl("et_vk.linear_qcs4w.default", (Arg("self", T), Arg("weight", T), Arg("scales", T)),
               dtypes=ALL_TYPES, rule=_per_channel(4, "weight")))
