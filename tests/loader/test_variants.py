"""Every shader variant a builder can request is declared (vkx issue 37), proved without a device.

The archive holds exactly the declared variants (`vkx.loader.ops.all_variants`, compiled by
vkx.loader.gpu.spirv), so a request outside them is a VariantNotBuiltError on some user's device. This
file sweeps the builders the way users reach them: every op family over random shapes (1, odd,
prime, >= 65537 on a dim), every dtype its contract declaration allows (each float operand chosen
independently), weights as constants and as activations, under every device class and profile and
over compute units 1 to 256; then every VkGraph of the ExecuTorch files in tests/data and of the
examples exported in each dtype and quantization (the fusions of vkx.loader.build.fuse). A request whose
variant text is not among its shader's declared texts is a finding; so is a builder refusing a
graph the contract accepts (UnsupportedOpError, LimitError). A graph the contract refuses is a bug
of the generators here, and fails as such. All findings of a test are listed in one message,
grouped by shader. Graphs are built with `GraphBuilder(...).build()`: no Vulkan, no glslc.
"""
from __future__ import annotations

import functools
import itertools
import math
import random
import re
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import pytest

import vkx.shaders
from vkx.format import ProgramFile, contract, dtypes, opset
from vkx.format import vkgraph as g
from vkx.format.dtypes import DType
from vkx.loader import ops
from vkx.loader.gpu import spirv
from vkx.loader.build.graph import GraphBuilder
from vkx.loader.gpu.limits import FEATURES, PROFILES, Limits

from .helpers import scalar_value

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
EXAMPLES = ROOT / "examples"
SHADERS = Path(vkx.shaders.__file__).parent

F32, F16, BF16 = dtypes.FLOAT32, dtypes.FLOAT16, dtypes.BFLOAT16
I32, I8, U8, BOOL = dtypes.INT32, dtypes.INT8, dtypes.UINT8, dtypes.BOOL
FLOATS = (F32, F16, BF16)
INTEGERS = (I32, I8, U8, BOOL)
ANY = FLOATS + INTEGERS
INDEX = (I32, I8, U8)
"""Index tensors' dtypes (vkx narrows int64 to int32; small vocabularies fit 8 bits)."""

UNITS = (1, 2, 3, 5, 7, 16, 31, 64, 108, 132, 256)
"""Compute units swept (1 to an H200's 132 and beyond)."""


# --------------------------------------------------------------------------- device classes

NARROW = frozenset({"storageBuffer16BitAccess", "storageBuffer8BitAccess"})


@dataclass(frozen=True)
class DeviceClass:
    """What GraphBuilder is given for one kind of device (vkx.loader.upload.stages.graph_builder)."""
    name: str
    limits: Limits
    is_cpu: bool = False
    coop: bool = False


def _limits(**changes) -> Limits:
    base = Limits(api_version=(1, 2, 0), max_storage_buffer_range=(1 << 32) - 1, min_storage_buffer_offset_alignment=16,
                  max_push_constants_size=128, max_compute_shared_memory_size=48 * 1024,
                  max_compute_work_group_invocations=1024, max_compute_work_group_size=(1024, 1024, 64),
                  max_compute_work_group_count=((1 << 31) - 1, 65535, 65535),
                  max_per_stage_descriptor_storage_buffers=1 << 20, max_bound_descriptor_sets=32,
                  subgroup_size=32, features=frozenset(FEATURES))
    return replace(base, **changes)


H200 = _limits()
"""A desktop GPU as an H200 reports it: every feature (cooperative matrices, subgroups, 16/8-bit
storage and arithmetic), 1024 invocations, 48 KiB shared memory; push constants as vkx's layout."""

DEVICES: tuple[DeviceClass, ...] = (
    DeviceClass("h200", H200, coop=True),
    *(DeviceClass(f"h200+{name}", H200.under(profile)) for name, profile in PROFILES.items()),
    DeviceClass("lavapipe", _limits(
        max_storage_buffer_range=1 << 27, max_compute_shared_memory_size=32 * 1024,
        max_compute_work_group_size=(1024, 1024, 1024), max_compute_work_group_count=(65535, 65535, 65535),
        subgroup_size=8, features=NARROW | {"shaderFloat16", "shaderInt8", "shaderInt16", "shaderInt64",
                                            "subgroupOperations"}), is_cpu=True),
    DeviceClass("gpu-words", _limits(
        max_storage_buffer_range=1 << 30, min_storage_buffer_offset_alignment=64,
        max_compute_shared_memory_size=32 * 1024,
        features=frozenset({"shaderInt16", "shaderInt64", "subgroupOperations"}))),
    DeviceClass("small", _limits(
        max_storage_buffer_range=1 << 27, min_storage_buffer_offset_alignment=64,
        max_compute_shared_memory_size=16 * 1024, max_compute_work_group_invocations=128,
        max_compute_work_group_size=(128, 128, 64), subgroup_size=0, features=NARROW | {"shaderInt16"})),
    DeviceClass("small-subgroups", _limits(
        max_storage_buffer_range=1 << 27, max_compute_shared_memory_size=16 * 1024,
        max_compute_work_group_invocations=128, max_compute_work_group_size=(128, 128, 64), subgroup_size=16,
        features=NARROW | {"shaderFloat16", "shaderInt16", "subgroupOperations"})),
)
"""The H200; the H200 under each profile (vkx.loader.gpu.limits.PROFILES); lavapipe; a GPU without
16/8-bit storage (the words mode); small GPUs of 128 invocations and 16 KiB shared memory."""

MAX_TENSOR_BYTES = min(d.limits.max_storage_buffer_range for d in DEVICES)
"""Generated tensors fit every class's binding range (the builders split what exceeds it)."""


# --------------------------------------------------------------------------- graphs of ops

@dataclass(eq=False)
class T:
    """A tensor of a generated graph (one value per object: an op's output may be another's input)."""
    shape: tuple[int, ...]
    dtype: DType
    const: bool = False

    def __post_init__(self):
        self.shape = tuple(int(d) for d in self.shape)

    def __repr__(self) -> str:
        return f"{'const ' if self.const else ''}{self.dtype.name}{list(self.shape)}"

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


@dataclass(frozen=True)
class Vals:
    """A ValueList of tensors."""
    items: tuple


@dataclass(frozen=True)
class Dbls:
    """A DoubleList."""
    items: tuple


@dataclass
class Op:
    name: str
    args: tuple
    out: Any
    """A T, or a list of them (a ValueList output)."""


@dataclass
class Case:
    ops: list[Op]

    def describe(self) -> str:
        return "; ".join(f"{op.name}({', '.join(map(_show, op.args))}) -> {_show(op.out)}" for op in self.ops)


def _show(a: Any) -> str:
    if isinstance(a, Vals):
        return "[" + ", ".join(map(repr, a.items)) + "]"
    if isinstance(a, list):
        return "(" + ", ".join(map(repr, a)) + ")"
    if isinstance(a, Dbls):
        return repr(list(a.items))
    return repr(a)


def one(name: str, *args: Any, out: Any) -> Case:
    return Case([Op(name, tuple(args), out)])


def graph_of(case: Case) -> g.VkGraph:
    """The VkGraph of `case`: tensors no op writes are inputs (constants: a ConstantRef of their
    size, no data), outputs no op reads are the graph's outputs."""
    values: list = []
    refs: list[g.ConstantRef] = []
    ids: dict[int, int] = {}
    produced = {id(t) for op in case.ops for t in (op.out if isinstance(op.out, list) else [op.out])}
    read: set[int] = set()
    inputs: list[int] = []

    def add(v) -> int:
        values.append(v)
        return len(values) - 1

    def tensor(t: T) -> int:
        if id(t) not in ids:
            cid = -1
            if t.const:
                refs.append(g.ConstantRef(g.NAMED_OFFSET, t.nbytes, f"c{len(refs)}"))
                cid = len(refs) - 1
            ids[id(t)] = add(g.Tensor(t.dtype.datatype, t.shape, constant_id=cid))
            if not t.const and id(t) not in produced:
                inputs.append(ids[id(t)])
        return ids[id(t)]

    def arg(a: Any) -> int:
        if isinstance(a, T):
            read.add(id(a))
            return tensor(a)
        if isinstance(a, Vals):
            return add(g.ValueList(tuple(arg(x) for x in a.items)))
        if isinstance(a, Dbls):
            return add(g.DoubleList(tuple(float(x) for x in a.items)))
        return add(scalar_value(a))

    chain, outs = [], []
    for i, op in enumerate(case.ops):
        args = [arg(a) for a in op.args]
        if isinstance(op.out, list):
            out_ids = [tensor(t) for t in op.out]
            args.append(add(g.ValueList(tuple(out_ids))))
            outs += list(zip(op.out, out_ids))
        else:
            args.append(tensor(op.out))
            outs.append((op.out, args[-1]))
        chain.append(g.OperatorCall(i, op.name, tuple(args)))
    output_ids = [vid for t, vid in outs if id(t) not in read]
    return g.VkGraph(chain=chain, values=values, input_ids=inputs, output_ids=output_ids, constants=refs)


# --------------------------------------------------------------------------- the checker

def compact(text: str) -> str:
    """A variant's text without its load/store macros' bodies (the element types say the dtypes)."""
    keep = [line for line in text.splitlines() if not re.match(r"(LOAD|LOADI|LOAD4|LOAD8|STORE)_\w*\(", line)
            and not line.startswith("DT_")]
    return " ".join(keep) or "(no defines)"


@functools.cache
def declared() -> dict[str, frozenset[str]]:
    """Each declared shader's variant texts: what the archive holds."""
    return {s: frozenset(map(spirv.variant_text, ds)) for s, ds in ops.all_variants().items()}


DTYPE_NAMES = r"\b(" + "|".join(sorted({d.name for d in dtypes.ALL} | {h.name for h in ops.HELD_IN_WORDS},
                                         key=len, reverse=True)) + r")\b"
"""A refusal's message with its dtypes elided: one finding per op and kind of refusal."""


def is_covered(shader: str, key: Sequence[tuple[str, str]], table: dict[str, frozenset[str]]) -> bool:
    """Whether a recorded request (Dispatch.shader, Dispatch.key) is among its shader's declared variants."""
    return spirv.variant_text(dict(key)) in table.get(shader, frozenset())


KNOWN_REFUSALS = {
    r"state '\w+' of \w+ with an initial value needs storageBuffer(16|8)BitAccess":
        "a 16/8-bit state with an initial value on a device without narrow storage (vkx.loader.build.graph.state)",
}
"""Refusals by design (the message names what the device lacks): counted, never findings."""


@dataclass
class Findings:
    """What a sweep saw: every request, the undeclared ones and the builders' refusals (first example each)."""
    seen: set = field(default_factory=set)
    undeclared: dict = field(default_factory=dict)
    """(shader, variant text) -> [count, example]."""
    refused: dict = field(default_factory=dict)
    """(op, error type, message with numbers elided) -> [count, example]."""
    graphs: int = 0
    expected: int = 0
    """Refusals in KNOWN_REFUSALS."""

    def check(self, label: str, graph: g.VkGraph, device: DeviceClass, units: int,
              table: dict[str, frozenset[str]]) -> None:
        """Build `graph` on `device` with `units` compute units; record its requests and any refusal."""
        self.graphs += 1
        try:
            built = GraphBuilder(graph, device.limits, compute_units=units, is_cpu=device.is_cpu,
                                 fp16_cooperative_matrix=device.coop).build()
        except Exception as error:  # a refusal of a graph the contract accepts is a finding
            if any(re.search(pattern, str(error)) for pattern in KNOWN_REFUSALS):
                self.expected += 1
                return
            ops_ = sorted({op.name for op in graph.chain})
            what = re.sub(r"\d+", "N", re.sub(DTYPE_NAMES, "T", str(error)))[:160]
            key = (",".join(ops_) if len(ops_) < 4 else label, type(error).__name__, what)
            entry = self.refused.setdefault(key, [0, f"{label} on {device.name}, {units} units: "
                                                     f"{type(error).__name__}: {error}"])
            entry[0] += 1
            return
        for d in [*built.prepack_dispatches, *built.dispatches]:
            text = spirv.variant_text(dict(d.defines))
            self.seen.add((d.shader, text))
            if not is_covered(d.shader, d.defines, table):
                entry = self.undeclared.setdefault((d.shader, text), [0, f"{label} [{d.node}] on {device.name}, "
                                                                         f"{units} units"])
                entry[0] += 1

    def merge(self, other: "Findings") -> None:
        self.seen |= other.seen
        self.graphs += other.graphs
        self.expected += other.expected
        for mine, theirs in ((self.undeclared, other.undeclared), (self.refused, other.refused)):
            for k, (n, ex) in theirs.items():
                mine.setdefault(k, [0, ex])[0] += n

    def report(self, limit_per_shader: int = 400) -> str:
        """The findings grouped by shader (each undeclared variant once, compacted, with its first example),
        then the refusals."""
        lines = []
        by_shader: dict[str, list] = {}
        for (shader, text), (n, ex) in sorted(self.undeclared.items()):
            by_shader.setdefault(shader, []).append((text, n, ex))
        table = declared()
        for shader, found in sorted(by_shader.items()):
            state = "no declaration" if shader not in table else f"{len(table[shader])} declared"
            lines.append(f"{shader} ({state}): {len(found)} undeclared variants requested")
            for text, n, ex in found[:limit_per_shader]:
                lines.append(f"    {compact(text)}   x{n}, e.g. {ex}")
            if len(found) > limit_per_shader:
                lines.append(f"    ... {len(found) - limit_per_shader} more")
        if self.refused:
            lines.append(f"builders refused {sum(n for n, _ in self.refused.values())} graphs the contract accepts:")
            for (what, kind, _), (n, ex) in sorted(self.refused.items()):
                lines.append(f"    {what} {kind} x{n}: {ex}")
        return "\n".join(lines)

    @property
    def ok(self) -> bool:
        return not self.undeclared and not self.refused


def sweep_cases(label: str, cases: Iterable[Case], units: Callable[[random.Random], Sequence[int]],
                rng: random.Random, devices: Sequence[DeviceClass] = DEVICES) -> Findings:
    """Each case built on every device class, with `units(rng)` compute units each; a case the contract
    refuses fails at once (a generator bug, never a finding)."""
    found = Findings()
    table = declared()
    for case in cases:
        graph = graph_of(case)
        try:
            opset.check_graph(graph)
        except contract.ContractError as error:
            pytest.fail(f"generator bug ({label}): the contract refuses {case.describe()}: {error}")
        for device in devices:
            for u in units(rng):
                found.check(case.describe(), graph, device, u, table)
    return found


# --------------------------------------------------------------------------- sizes and dtypes

ODD = (3, 5, 9, 15, 21, 33, 45, 63, 99)
PRIME = (2, 3, 5, 7, 11, 13, 17, 31, 61, 67, 127, 257, 509)
LARGE = (65537, 65539, 70001, 100003, 131071)
ROUND = (4, 8, 16, 32, 64, 128, 256)
KINDS = ("one", "odd", "prime", "round")


def size(rng: random.Random, kind: str) -> int:
    """A dim of `kind`: one, odd, prime, round (a power of two), large (>= 65537)."""
    return {"one": (1,), "odd": ODD, "prime": PRIME, "round": ROUND, "large": LARGE}[kind][rng.randrange(
        {"one": 1, "odd": len(ODD), "prime": len(PRIME), "round": len(ROUND), "large": len(LARGE)}[kind])]


def dim(rng: random.Random) -> int:
    return size(rng, rng.choice(KINDS))


def shape(rng: random.Random, rank: int | None = None, large: bool = False, budget: int = 1 << 22) -> tuple[int, ...]:
    """A random shape (rank 1 to 4); `large`: one dim >= 65537, the others kept small so the tensor
    holds at most `budget` elements."""
    rank = rng.randint(1, 4) if rank is None else rank
    dims = [dim(rng) for _ in range(rank)]
    if large:
        at = rng.randrange(rank)
        dims = [min(d, 7) for d in dims]
        dims[at] = size(rng, "large")
    while math.prod(dims) > budget:
        i = max(range(rank), key=lambda j: dims[j])
        dims[i] = max(1, dims[i] // 3) | 1
    return tuple(dims)


def combos(rng: random.Random, choices: Sequence[Sequence[Any]], limit: int = 81) -> list[tuple]:
    """Every combination of one item of each of `choices` (one per operand), or `limit` of them at random
    when there are more, each item of each operand still among them."""
    every = list(itertools.product(*choices))
    if len(every) <= limit:
        return every
    picked = rng.sample(every, limit)
    for i, items in enumerate(choices):  # each operand's each item at least once
        for item in items:
            if not any(c[i] == item for c in picked):
                picked.append(next(c for c in every if c[i] == item))
    return picked


def sizes_cycle(n: int) -> Iterator[str]:
    """Size classes for `n` cases in turn, one in five large."""
    cycle = itertools.cycle(("one", "odd", "prime", "large", "round"))
    return (next(cycle) for _ in range(n))


def few_units(rng: random.Random) -> list[int]:
    return [rng.choice(UNITS)]


def some_units(rng: random.Random) -> list[int]:
    """Three compute-unit counts (products choose tiles, split-K and rows a workgroup by them)."""
    return rng.sample(UNITS, 3)


def maybe(rng: random.Random, p: float = 0.5) -> bool:
    return rng.random() < p


# --------------------------------------------------------------------------- generators: elementwise

def _names(family: str) -> list[str]:
    return sorted(n for n, d in opset.OPS.items() if d.family == family)


def gen_unary(rng: random.Random) -> Iterator[Case]:
    """The unary family and the ops unary.comp builds with a number (gelu, leaky_relu, hardshrink,
    hardtanh, clamp, pow), every float in and out; logical_not from any dtype."""
    calls: list[tuple[str, tuple]] = [(n, ()) for n in _names("unary") if n != "aten.logical_not.default"]
    calls += [("aten.gelu.default", ("none",)), ("aten.gelu.default", ("tanh",)),
              ("aten.leaky_relu.default", (0.2,)), ("aten.hardshrink.default", (0.5,)),
              ("aten.hardtanh.default", (-1.0, 6.0)), ("aten.clamp.default", (-1.0, None)),
              ("aten.clamp.default", (None, 2.5)), ("aten.clamp.default", (-3.0, 3.0))]
    calls += [("aten.pow.Tensor_Scalar", (e,)) for e in (0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, -0.5, 1.7)]
    for name, extra in calls:
        for (ti, to), kind in zip(combos(rng, [FLOATS, FLOATS]), sizes_cycle(9)):
            s = shape(rng, large=kind == "large")
            yield one(name, T(s, ti, const=maybe(rng, 0.25)), *extra, out=T(s, to))
    for ti, kind in zip(ANY, sizes_cycle(len(ANY))):
        s = shape(rng, large=kind == "large")
        yield one("aten.logical_not.default", T(s, ti, const=maybe(rng, 0.25)), out=T(s, BOOL))


def _binary_shapes(rng: random.Random) -> tuple[tuple, tuple, tuple]:
    """(self, other, out) shapes: equal (vec4 or not), broadcast, a one-element tensor, large."""
    kind = rng.choice(("same", "same4", "broadcast", "scalar", "large"))
    if kind == "same4":
        s = (*shape(rng, rng.randint(0, 2)), 4 * rng.choice((1, 3, 16, 31)))
        return s, s, s
    if kind == "large":
        s = shape(rng, large=True)
        return s, s, s
    s = shape(rng)
    if kind == "same":
        return s, s, s
    if kind == "scalar":
        return (s, (1,), s) if maybe(rng) else ((1,), s, s)
    other = tuple(d if maybe(rng) else 1 for d in s[rng.randrange(len(s)):])
    return (s, other, s) if maybe(rng) else (other, s, s)


def _binary_dtypes(name: str, rng: random.Random) -> tuple[Sequence[DType], Sequence[DType], Sequence[DType]]:
    op = name.split(".")[1]
    if op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        return INTEGERS, INTEGERS, INTEGERS
    if op in ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"):
        return ANY, ANY, (BOOL,)
    if op in ("minimum", "maximum"):
        return (FLOATS,) * 3 if maybe(rng) else (INTEGERS,) * 3
    return ANY, ANY, ANY


def gen_binary(rng: random.Random) -> Iterator[Case]:
    """Each binary-family op: operands of any allowed dtypes, tensor or number on either side (where
    the op takes numbers), shapes equal, broadcast, one-element, large."""
    for name in _names("binary"):
        decl = opset.OPS[name]
        numbers = decl.arg("self").kind is contract.Kind.SCALAR_OR_TENSOR
        for _ in range(24):
            da, db, do = _binary_dtypes(name, rng)
            ta, tb, to = rng.choice(da), rng.choice(db), rng.choice(do)
            sa, sb, so = _binary_shapes(rng)
            a: Any = T(sa, ta, const=maybe(rng, 0.2))
            b: Any = T(sb, tb, const=maybe(rng, 0.3))
            integer = not to.is_float or name.split(".")[1].startswith("bitwise")
            number = rng.choice((2, -3, 7)) if integer or maybe(rng) else rng.choice((0.5, 2.25, -1.5))
            if numbers and maybe(rng, 0.3):
                if maybe(rng):
                    b, so = number, sa
                else:
                    a, so = number, sb
            extra = ()
            if decl.has("alpha"):
                extra = (rng.choice((1, 2)) if integer else rng.choice((1, 0.5)),)
            yield one(name, a, b, *extra, out=T(so, to))


def gen_copies(rng: random.Random) -> Iterator[Case]:
    """Casts, copies and fills (cast.comp, copy_strided.comp, fill.comp, flip.comp, gather.comp):
    every shape op with its input and output of any dtype each, large ones too."""
    for ti, to in combos(rng, [ANY, ANY], limit=49):
        kind = rng.choice(("one", "odd", "prime", "large", "round"))
        s = shape(rng, rng.randint(2, 4), large=kind == "large")
        pick = rng.randrange(16)
        if pick in (4, 8, 9, 11, 12, 13) and maybe(rng):
            to = ti  # strided copies keep the dtype in ExecuTorch's files: sweep their variants too
        x = T(s, ti, const=maybe(rng, 0.2))
        r = len(s)
        if pick == 0:
            yield one("aten._to_copy.default", x, out=T(s, to))
        elif pick == 1:
            yield one("aten.clone.default", x, None, out=T(s, to))
        elif pick == 2:
            yield one("aten.view_copy.default", x, [math.prod(s)], out=T((math.prod(s),), to))
        elif pick == 3:
            perm = list(range(r))
            rng.shuffle(perm)
            yield one("aten.permute_copy.default", x, perm, out=T([s[p] for p in perm], to))
        elif pick == 4:
            d = rng.randrange(r)
            start, step = rng.randrange(s[d]), rng.choice((1, 2, 3))
            n = len(range(start, s[d], step))
            yield one("aten.slice_copy.Tensor", x, d, start, None, step,
                      out=T([n if i == d else v for i, v in enumerate(s)], to))
        elif pick == 5:
            d = rng.randrange(r)
            y = T([v if i != d else dim(rng) for i, v in enumerate(s)], rng.choice(ANY))
            yield one("aten.cat.default", Vals((x, y)), d,
                      out=T([v + y.shape[d] if i == d else v for i, v in enumerate(s)], to))
        elif pick == 6:
            yield one("aten.alias_copy.default", x, out=T(s, to))
        elif pick == 7:
            yield one("dim_order_ops._to_dim_order_copy.default", x, None, None, None, None, False,
                      list(range(r)), out=T(s, to))
        elif pick == 8:
            d = rng.randrange(r)
            yield one("aten.select_copy.int", x, d, rng.randrange(s[d]), out=T(s[:d] + s[d + 1:], to))
        elif pick == 9:
            d = rng.randrange(r)
            cut = rng.randint(0, s[d])
            outs = [T([cut if i == d else v for i, v in enumerate(s)], to),
                    T([s[d] - cut if i == d else v for i, v in enumerate(s)], to)]
            yield one("aten.split_with_sizes_copy.default", x, [cut, s[d] - cut], d, out=outs)
        elif pick == 10:
            small = tuple(1 if maybe(rng) else v for v in s)
            y = T(small, ti, const=x.const)
            yield one("aten.expand_copy.default", y, list(s), out=T(s, to))
        elif pick == 11:
            reps = [rng.choice((1, 2, 3)) for _ in s]
            small = tuple(max(1, v // 4) for v in s)
            yield one("aten.repeat.default", T(small, ti), reps, out=T([a * b for a, b in zip(small, reps)], to))
        elif pick == 12:
            d = rng.randrange(r)
            sz = rng.randint(1, min(s[d], 5))
            st = rng.choice((1, 2, 3))
            windows = (s[d] - sz) // st + 1
            yield one("aten.unfold_copy.default", x, d, sz, st,
                      out=T([windows if i == d else v for i, v in enumerate(s)] + [sz], to))
        elif pick == 13:
            pads = [rng.randint(0, 3) for _ in range(2 * min(r, 2))]
            out_shape = list(s)
            for i in range(len(pads) // 2):
                out_shape[r - 1 - i] += pads[2 * i] + pads[2 * i + 1]
            value = rng.choice((0, 1, -2)) if not to.is_float else rng.choice((0.0, 1.5))
            yield one("aten.constant_pad_nd.default", T(s, ti), pads, value, out=T(out_shape, to))
        elif pick == 14:
            dims_ = rng.sample(range(r), rng.randint(1, r))
            yield one("aten.flip.default", x, dims_, out=T(s, to))
        else:
            d = rng.randrange(r)
            idx = T((rng.choice((1, 3, 7)),), rng.choice(INDEX), const=maybe(rng))
            yield one("aten.index_select.default", x, d, idx,
                      out=T([idx.shape[0] if i == d else v for i, v in enumerate(s)], to))
    for to in ANY:  # factories
        s = shape(rng)
        v = rng.choice((0, 3, -1)) if not to.is_float else rng.choice((0.0, 2.5))
        yield one("aten.full.default", list(s), v, None, None, None, None, out=T(s, to))
        yield one("aten.full_like.default", T(s, rng.choice(ANY)), v, None, None, None, None, None, out=T(s, to))
        yield one(rng.choice(("aten.zeros_like.default", "aten.ones_like.default")), T(s, rng.choice(ANY)),
                  out=T(s, to))
        yield one("aten.scalar_tensor.default", v, None, None, None, None, out=T((), to))
        n = rng.choice((1, 7, 65537))
        yield one("aten.arange.start_step", 0, n, 1, None, None, None, None, out=T((n,), to))
        yield one("aten.squeeze_copy.dims", T((1, *s), rng.choice(ANY)), [0], out=T(s, to))
        yield one("aten.unsqueeze_copy.default", T(s, rng.choice(ANY)), 0, out=T((1, *s), to))
        r = rng.choice((1, 2))
        yield one("aten.pixel_shuffle.default", T((2, 3 * r * r, 5, 7), rng.choice(ANY)), r,
                  out=T((2, 3, 5 * r, 7 * r), to))
        yield one("aten.split_copy.Tensor", T((7, 3), rng.choice(ANY)), 3, 0,
                  out=[T((3, 3), to), T((3, 3), to), T((1, 3), to)])
        yield one("dim_order_ops._clone_dim_order.default", T(s, rng.choice(ANY)), False, None, out=T(s, to))
    for to in ANY:  # prepack: a weight converted at load, or used as stored
        s = shape(rng)
        yield one("et_vk.prepack.default", T(s, rng.choice(ANY), const=True), out=T(s, to))


# --------------------------------------------------------------------------- generators: products

def _k(rng: random.Random, kind: str) -> int:
    """A reduction length: 8-aligned or not, long enough for split-K."""
    return {"one": 1, "odd": rng.choice((3, 9, 33, 99)), "prime": rng.choice((7, 61, 127, 509)),
            "large": rng.choice((4096, 8192, 4104)), "round": rng.choice((8, 64, 256, 2048))}[kind]


def _mnk(rng: random.Random, kind: str) -> tuple[int, int, int]:
    """(M, N, K) for one of the product paths: matvec (M 1), small (matmul.comp), tiled (>= 32 each,
    split-K when K is long), a large dim."""
    path = rng.choice(("matvec", "small", "tiled", "tiled", "large"))
    k = _k(rng, kind)
    if path == "matvec":
        return 1, rng.choice((1, 7, 31, 64, 257, 2048)), k
    if path == "small":
        return rng.choice((2, 3, 5, 17, 31)), rng.choice((1, 4, 7, 31)), k
    if path == "tiled":
        return rng.choice((32, 33, 64, 127, 256)), rng.choice((32, 48, 61, 128, 256)), k
    big = rng.choice(LARGE)
    return (1, big, rng.choice((8, 64, 7))) if maybe(rng) else (big, rng.choice((3, 32, 64)), rng.choice((8, 61)))


def gen_linear(rng: random.Random) -> Iterator[Case]:
    """aten.linear: x, weight, bias and out each of any float dtype, the weight and bias constants or
    activations, on every product path (matvec, matmul, tiled, split-K, cooperative)."""
    for (tx, tw, to), kind in zip(combos(rng, [FLOATS] * 3), itertools.cycle(KINDS + ("large",))):
        for _ in range(4):
            m, n, k = _mnk(rng, kind)
            lead = (m,) if maybe(rng) else ((1, m) if m == 1 else (m // 2 or 1, 2) if m % 2 == 0 else (m,))
            bias = None
            if maybe(rng, 0.6):
                bias = T((n,), rng.choice(FLOATS), const=maybe(rng, 0.7))
            yield one("aten.linear.default", T((*lead, k), tx), T((n, k), tw, const=maybe(rng, 0.8)), bias,
                      out=T((*lead, n), to))


def gen_matmul(rng: random.Random) -> Iterator[Case]:
    """addmm, mm, bmm, matmul (batched, broadcast, vector operands), every float combination."""
    for (ta, tb, to), kind in zip(combos(rng, [FLOATS] * 3) * 3, itertools.cycle(KINDS + ("large",))):
        m, n, k = _mnk(rng, kind)
        if m * n > 1 << 22 or m * k > 1 << 22 or n * k > 1 << 22:
            m, n = min(m, 64), min(n, 64)
        a, b = T((m, k), ta, const=maybe(rng, 0.1)), T((k, n), tb, const=maybe(rng, 0.5))
        pick = rng.randrange(4)
        if pick == 0:
            bias = T(rng.choice(((n,), (m, n), (1, n), (m, 1))), rng.choice(FLOATS), const=maybe(rng))
            yield one("aten.addmm.default", bias, a, b, rng.choice((1, 0.5, 0.0)), rng.choice((1, 2.0)),
                      out=T((m, n), to))
        elif pick == 1:
            yield one("aten.mm.default", a, b, out=T((m, n), to))
        elif pick == 2:
            nb = rng.choice((1, 2, 3, 7))
            m, n = min(m, 256), min(n, 256)
            yield one("aten.bmm.default", T((nb, m, k), ta), T((nb, k, n), tb, const=maybe(rng, 0.3)),
                      out=T((nb, m, n), to))
        else:
            m, n = min(m, 128), min(n, 128)
            form = rng.randrange(4)
            if form == 0:  # broadcast batch
                yield one("aten.matmul.default", T((2, 1, m, k), ta), T((3, k, n), tb), out=T((2, 3, m, n), to))
            elif form == 1:  # vector @ matrix
                yield one("aten.matmul.default", T((k,), ta), T((2, k, n), tb), out=T((2, n), to))
            elif form == 2:  # matrix @ vector
                yield one("aten.matmul.default", T((3, m, k), ta), T((k,), tb), out=T((3, m), to))
            else:  # a shared B folds A's batches into rows
                yield one("aten.matmul.default", T((5, m, k), ta), T((k, n), tb, const=True), out=T((5, m, n), to))


# --------------------------------------------------------------------------- generators: quantized

def _quant_shape(rng: random.Random, bits: int) -> tuple[int, int, int]:
    """(N, K, group) of a packed weight: groups of whole 16-byte chunks (matvec_q) or not."""
    per_word = 8 if bits == 4 else 4
    group = rng.choice((per_word, 2 * per_word, 32, 64, 128))
    k = group * rng.choice((1, 2, 3, 5))
    n = rng.choice((1, 3, 7, 31, 64, 257, 65537)) if maybe(rng, 0.9) else rng.choice(LARGE)
    return n, k, group


def _rows(rng: random.Random) -> tuple[int, ...]:
    """Activation rows: one (matvec_q), a few (linear_q), many (dequantized, then the float products)."""
    return rng.choice(((1,), (1, 1), (3,), (2, 5), (16,), (2, 33), (64,)))


def gen_quant(rng: random.Random) -> Iterator[Case]:
    """vkx.linear_q (4 and 8 bits), _weight_int8pack_mm, linear_qcs4w, linear_q4gsw, linear_dq8ca_q4gsw
    and choose_qparams_affine: activations, scales, bias and out each of any float dtype."""
    for tx, ts, to in combos(rng, [FLOATS] * 3):
        for bits in (4, 8):
            n, k, group = _quant_shape(rng, bits)
            rows = _rows(rng)
            wq = T((n, k // 2) if bits == 4 else (n, k), U8 if bits == 4 else I8, const=maybe(rng, 0.9))
            bias = T((n,), rng.choice(FLOATS), const=maybe(rng)) if maybe(rng, 0.4) else None
            yield one("vkx.linear_q.default", T((*rows, k), tx), wq, T((n, k // group), ts, const=True), bias, bits,
                      group, out=T((*rows, n), to))
        n, k, _ = _quant_shape(rng, 8)
        rows = _rows(rng)
        yield one("aten._weight_int8pack_mm.default", T((*rows, k), tx), T((n, k), I8, const=True),
                  T((n,), ts, const=True), out=T((*rows, n), to))
        n, k, _ = _quant_shape(rng, 4)
        yield one("et_vk.linear_qcs4w.default", T((*rows, k), tx), T((n, k // 2), U8, const=True),
                  T((n,), ts, const=True), out=T((*rows, n), to))
        n, k, group = _quant_shape(rng, 4)
        n4 = -(-n // 4) * 4
        bias = rng.choice((None, T((n,), rng.choice(FLOATS), const=True), T((n4,), rng.choice(FLOATS), const=True)))
        x = T((*rows, k), tx)
        w, sc = T((n, k // 2), U8, const=True), T((k // group, n4), ts, const=True)
        yield one("et_vk.linear_q4gsw.default", x, w, sc, group, bias, out=T((*rows, n), to))
        count = math.prod(rows)
        zp_t = rng.choice((I8, I32))
        yield one("et_vk.linear_dq8ca_q4gsw.default", x, T((count,), rng.choice(FLOATS)), T((count,), zp_t), w,
                  T((n,), I32, const=True), sc, group, bias, out=T((*rows, n), to))
        keep = maybe(rng)
        stats = (*rows, 1) if keep else rows
        yield one("torchao.choose_qparams_affine.default", T((*rows, k), tx), "ASYMMETRIC", [1] * len(rows) + [k],
                  None, -128, 127, 1e-5, None, None, keep, out=[T(stats, ts), T(stats, zp_t)])


def gen_quant_tables(rng: random.Random) -> Iterator[Case]:
    """embedding_q (4, 8 bits), embedding_q4gsw (either nibble order, padded rows) and torchao's
    dequantize_affine: scales and out of any float dtype, indices of any integer dtype."""
    for ts, to in combos(rng, [FLOATS, FLOATS]):
        for idx_t in INDEX:
            bits = rng.choice((4, 8))
            vocab, k, group = _quant_shape(rng, bits)
            idx = T(rng.choice(((1,), (7,), (2, 3), (65537,))), idx_t, const=maybe(rng, 0.2))
            w = T((vocab, k // 2) if bits == 4 else (vocab, k), U8 if bits == 4 else I8, const=True)
            yield one("vkx.embedding_q.default", w, T((vocab, k // group), ts, const=True), idx, bits, group,
                      out=T((*idx.shape, k), to))
            d = rng.choice((8, 24, 64, 100))
            group = rng.choice([gs for gs in (4, 8, 32, 50, d) if d % gs == 0])
            stored = -(-d // 8) * 4
            yield one("et_vk.embedding_q4gsw.default", T((vocab, stored), U8, const=True),
                      T((vocab, d // group), ts, const=True), group, idx, maybe(rng), out=T((*idx.shape, d), to))
        rows, cols = rng.choice(((8, 64), (3, 5), (1, 33), (65537, 4), (64, 128)))
        br = rng.choice([b for b in (1, rows) if rows % b == 0])
        bc = rng.choice([b for b in (1, cols, 32) if cols % b == 0])
        grid = (rows // br) * (cols // bc)
        zp = rng.choice((None, T((grid,), rng.choice(INDEX), const=True), T((grid,), rng.choice(FLOATS), const=True)))
        yield one("torchao.dequantize_affine.default", T((rows, cols), rng.choice(INDEX), const=maybe(rng, 0.8)),
                  [br, bc], T((grid,), ts, const=True), zp, None, None, None, None, out=T((rows, cols), to))


# --------------------------------------------------------------------------- generators: rows and reductions

def _row_shape(rng: random.Random, kind: str) -> tuple[tuple[int, ...], int]:
    """(shape, n): rows of n elements, n under ROW_MIN (an invocation a row), up to 1024, over (a
    workgroup a row), or large."""
    n = {"one": 1, "odd": rng.choice((15, 99, 1025)), "prime": rng.choice((61, 67, 509, 4099)),
         "large": rng.choice(LARGE), "round": rng.choice((64, 128, 1024, 4096))}[kind]
    rows = 1 if kind == "large" else rng.choice((1, 3, 7, 64, 257))
    lead = (rows,) if maybe(rng) else (1, rows) if rows < 8 else (rows // 3 or 1, 3)
    return (*lead, n), n


def gen_norms(rng: random.Random) -> Iterator[Case]:
    """layer norm, RMS norm (aten's and ExecuTorch's), softmax, log-softmax: input, weight, bias and
    outputs each of any float dtype, weights constants or activations, rows short and long."""
    kinds = itertools.cycle(KINDS + ("large",))
    for tx, tw, tb, to, tm in combos(rng, [FLOATS] * 5, limit=60):
        s, n = _row_shape(rng, next(kinds))
        w = T((n,), tw, const=maybe(rng, 0.7)) if maybe(rng, 0.8) else None
        b = T((n,), tb, const=maybe(rng, 0.7)) if maybe(rng, 0.6) else None
        stats = (*s[:-1], 1)
        yield one("aten.native_layer_norm.default", T(s, tx), [n], w, b, 1e-5,
                  out=[T(s, to), T(stats, tm), T(stats, rng.choice(FLOATS))])
    for tx, tw, to in combos(rng, [FLOATS] * 3):
        s, n = _row_shape(rng, next(kinds))
        w = T((n,), tw, const=maybe(rng, 0.7))
        yield one("aten.rms_norm.default", T(s, tx), [n], w if maybe(rng, 0.8) else None,
                  rng.choice((None, 1e-6)), out=T(s, to))
        s, n = _row_shape(rng, next(kinds))
        yield one("et_vk.rms_norm.default", T(s, tx), T((n,), tw, const=maybe(rng, 0.7)), 1e-5, out=T(s, to))
    for tx, to in combos(rng, [FLOATS] * 2):
        for name in ("aten._softmax.default", "aten._log_softmax.default"):
            s, n = _row_shape(rng, next(kinds))
            d = rng.choice((-1, len(s) - 1, 0))
            yield one(name, T(s, tx, const=maybe(rng, 0.1)), d, False, out=T(s, to))


def gen_channel_norms(rng: random.Random) -> Iterator[Case]:
    """batch norm (inference) and group norm: every float operand independently."""
    for tx, tw, tb, tm, to in combos(rng, [FLOATS] * 5, limit=40):
        c = rng.choice((1, 3, 16, 31))
        spatial = rng.choice(((), (5,), (3, 5), (16, 16), (1, 65537)))
        s = (rng.choice((1, 2)), c, *spatial)
        w = T((c,), tw, const=maybe(rng, 0.8)) if maybe(rng, 0.8) else None
        b = T((c,), tb, const=maybe(rng, 0.8)) if maybe(rng, 0.7) else None
        yield one("aten._native_batch_norm_legit_no_training.default", T(s, tx), w, b,
                  T((c,), tm, const=True), T((c,), rng.choice(FLOATS), const=True), 0.1, 1e-5,
                  out=[T(s, to), T((0,), to), T((0,), to)])
        c = rng.choice((4, 6, 32))
        groups = rng.choice([gg for gg in (1, 2, c) if c % gg == 0])
        s = (rng.choice((1, 3)), c, *rng.choice(((7,), (3, 5), (32, 32), (1, 65537))))
        hw = math.prod(s[2:])
        w = T((c,), tw, const=maybe(rng, 0.8)) if maybe(rng, 0.7) else None
        b = T((c,), tb, const=maybe(rng, 0.8)) if maybe(rng, 0.7) else None
        yield one("aten.native_group_norm.default", T(s, tx), w, b, s[0], c, hw, groups, 1e-5,
                  out=[T(s, to), T((s[0], groups), tm), T((s[0], groups), rng.choice(FLOATS))])


def _reduce_dims(rng: random.Random, s: tuple) -> Any:
    r = len(s)
    return rng.choice((None, [], sorted(rng.sample(range(r), rng.randint(1, r))), [-1]))


def _reduced(s: tuple, dims: Any, keep: bool) -> tuple:
    r = len(s)
    red = set(range(r)) if not dims else {d % r for d in dims}
    return tuple(1 if i in red else v for i, v in enumerate(s)) if keep else \
        tuple(v for i, v in enumerate(s) if i not in red)


def gen_reductions(rng: random.Random) -> Iterator[Case]:
    """sum and mean (reduce_dims.comp), amax, amin, argmax, argmin, var (reduce_stats.comp: one
    invocation or one workgroup an output, split in two passes for few outputs over long rows)."""
    kinds = itertools.cycle(KINDS + ("large",))
    for ti, to in combos(rng, [FLOATS, FLOATS]):
        for name in ("aten.mean.dim", "aten.sum.dim_IntList", "aten.amax.default", "aten.amin.default",
                     "aten.var.correction"):
            for _ in range(2):
                kind = next(kinds)
                s = shape(rng, rng.randint(1, 4), large=kind == "large") if maybe(rng) else \
                    (rng.choice((1, 3)), rng.choice((4096, 5000, 65537, 63, 1024)))
                dims = _reduce_dims(rng, s)
                keep = maybe(rng)
                out = T(_reduced(s, dims, keep), to)
                x = T(s, ti, const=maybe(rng, 0.1))
                if name == "aten.var.correction":
                    yield one(name, x, dims, rng.choice((None, 0, 1)), keep, out=out)
                elif name in ("aten.amax.default", "aten.amin.default"):
                    yield one(name, x, dims or [], keep, out=out)
                else:
                    yield one(name, x, dims, keep, None, out=out)
        for name in ("aten.argmax.default", "aten.argmin.default"):
            s = shape(rng, large=maybe(rng, 0.3)) if maybe(rng) else (1, rng.choice((4096, 65537, 151936 // 2)))
            d = rng.choice((None, -1, 0))
            keep = maybe(rng)
            yield one(name, T(s, ti), d, keep, out=T(_reduced(s, None if d is None else [d], keep), I32))


# --------------------------------------------------------------------------- generators: images

def _conv_case(rng: random.Random, tx, tw, tb, to, clamp: bool, transposed: bool) -> Case:
    n = rng.choice((1, 2))
    groups = rng.choice((1, 1, 2, 3))
    cin = groups * rng.choice((1, 3, 4))
    cout = groups * rng.choice((1, 2, 5, 8))
    if rng.random() < 0.2:  # depthwise
        cin = cout = groups = rng.choice((3, 16))
    nd = 1 if rng.random() < 0.2 else 2
    hw = rng.choice(((3, 5), (7, 7), (16, 9), (1, 31), (2, 65537)))[2 - nd:]
    k = rng.choice(((1, 1), (3, 3), (1, 3), (5, 2)))[2 - nd:]
    stride = [rng.choice((1, 2))] * nd
    dil = [rng.choice((1, 1, 2))] * nd
    pad = [rng.choice((0, 1))] * nd
    if max(hw) > 1000:
        cin = cout = groups = 1
        k, dil = (1,) * nd, [1] * nd
    x = T((n, cin, *hw), tx, const=maybe(rng, 0.05))
    bias = T((cout,), tb, const=maybe(rng, 0.8)) if maybe(rng, 0.7) else None
    if transposed:
        extra = [rng.randrange(max(s, d)) for s, d in zip(stride, dil)]
        w = T((cin, cout // groups, *k), tw, const=maybe(rng, 0.8))
        sizes = [(h - 1) * s - 2 * p + d * (kk - 1) + e + 1 for h, s, p, d, kk, e in zip(hw, stride, pad, dil, k, extra)]
        if min(sizes) <= 0:
            pad = [0] * nd
            sizes = [(h - 1) * s + d * (kk - 1) + e + 1 for h, s, d, kk, e in zip(hw, stride, dil, k, extra)]
        return one("aten.convolution.default", x, w, bias, stride, pad, dil, True, extra, groups,
                   out=T((n, cout, *sizes), to))
    w = T((cout, cin // groups, *k), tw, const=maybe(rng, 0.8))
    sizes = [(h + 2 * p - d * (kk - 1) - 1) // s + 1 for h, s, p, d, kk in zip(hw, stride, pad, dil, k)]
    if min(sizes) <= 0:
        k, dil = (1,) * nd, [1] * nd
        w = T((cout, cin // groups, *k), tw, const=w.const)
        sizes = [(h + 2 * p - 1) // s + 1 for h, s, p in zip(hw, stride, pad)]
    args = (x, w, bias, stride, pad, dil, False, [0] * nd, groups)
    if clamp:
        return one("et_vk.conv_with_clamp.default", *args, rng.choice((0.0, None, -1.8e308)),
                   rng.choice((6.0, None, 1.8e308)), out=T((n, cout, *sizes), to))
    return one("aten.convolution.default", *args, out=T((n, cout, *sizes), to))


def gen_conv(rng: random.Random) -> Iterator[Case]:
    """Convolutions 1-D and 2-D (groups, depthwise, 1x1 on 3x5 maps, strides, padding, dilation),
    with a clamp (ExecuTorch's conv_with_clamp), transposed: x, weight, bias and out of any float each."""
    for tx, tw, tb, to in combos(rng, [FLOATS] * 4):
        yield _conv_case(rng, tx, tw, tb, to, clamp=maybe(rng, 0.3), transposed=False)
        if maybe(rng, 0.4):
            yield _conv_case(rng, tx, tw, tb, to, clamp=False, transposed=True)
    yield one("aten.convolution.default", T((1, 4, 3, 5), F16), T((8, 4, 1, 1), BF16, const=True), None, [1, 1],
              [0, 0], [1, 1], False, [0, 0], 1, out=T((1, 8, 3, 5), F32))


def gen_pool(rng: random.Random) -> Iterator[Case]:
    """max and average pooling, max with indices (read and unread), upsample nearest and bilinear
    (corners aligned or not, by size or by factors), grid_sampler_2d."""
    for ti, to in combos(rng, [FLOATS, FLOATS]):
        for _ in range(3):
            s = rng.choice(((1, 3, 7, 7), (2, 16, 32, 32), (5, 9, 11), (1, 1, 3, 65537)))
            k = rng.choice(((2, 2), (3, 3), (1, 3)))
            st = rng.choice(([], [1, 1], [2, 2]))
            pad = [rng.choice((0, k[0] // 2)), rng.choice((0, k[1] // 2))]
            ceil = maybe(rng)
            x = T(s, ti, const=maybe(rng, 0.1))
            kernel, stride = list(k), st or list(k)
            outs = [_window(s[-2 + i], kernel[i], stride[i], pad[i], 1, ceil) for i in range(2)]
            o = T((*s[:-2], *outs), to)
            pick = rng.randrange(3)
            if pick == 0:
                yield one("aten.max_pool2d.default", x, kernel, st, pad, [1, 1], ceil, out=o)
            elif pick == 1:
                yield one("aten.avg_pool2d.default", x, kernel, st, pad, ceil, maybe(rng), rng.choice((None, 3)),
                          out=o)
            else:
                yield one("aten.max_pool2d_with_indices.default", x, kernel, st, pad, [1, 1], ceil,
                          out=[o, T(o.shape, I32)])
        s = rng.choice(((1, 3, 4, 5), (2, 8, 16, 16), (1, 1, 1, 65537)))
        x = T(s, ti, const=maybe(rng, 0.1))
        size = [s[2] * 2, s[3] * 3] if s[3] < 1000 else [2, s[3]]
        yield one("aten.upsample_nearest2d.vec", x, size, None, out=T((*s[:2], *size), to))
        yield one("aten.upsample_nearest2d.vec", x, None, Dbls((2.0, 1.5)),
                  out=T((*s[:2], s[2] * 2, math.floor(s[3] * 1.5)), to))
        yield one("aten.upsample_bilinear2d.vec", x, size, maybe(rng), None, out=T((*s[:2], *size), to))
        yield one("aten.upsample_bilinear2d.vec", x, None, maybe(rng), Dbls((2.0, 2.0)),
                  out=T((*s[:2], s[2] * 2, s[3] * 2), to))
        grid = T((s[0], 5, 7, 2), rng.choice(FLOATS), const=maybe(rng, 0.3))
        yield one("aten.grid_sampler_2d.default", x, grid, rng.choice((0, 1)), rng.choice((0, 1)), maybe(rng),
                  out=T((s[0], s[1], 5, 7), to))


def _window(size_: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    span = size_ + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size_ + p:
        out -= 1
    return out


# --------------------------------------------------------------------------- generators: indexing

def gen_indexing(rng: random.Random) -> Iterator[Case]:
    """embedding, cumsum, gather, index.Tensor (1 to 3 index tensors), where, and the state updates
    (vkx.index_copy, vkx.copy into a vkx.state): every dtype the contract allows each operand."""
    for ti, to in combos(rng, [ANY, ANY]):
        idx_t = rng.choice(INDEX)
        vocab, d = rng.choice(((7, 3), (1000, 64), (65537, 8), (3, 65537), (50, 33)))
        idx = T(rng.choice(((1,), (5,), (2, 3), (1, 1))), idx_t, const=maybe(rng, 0.2))
        yield one("aten.embedding.default", T((vocab, d), ti, const=maybe(rng, 0.8)), idx, -1, False, False,
                  out=T((*idx.shape, d), to))
        s = shape(rng, large=maybe(rng, 0.2))
        yield one("aten.cumsum.default", T(s, ti, const=maybe(rng, 0.1)), rng.randrange(len(s)), None,
                  out=T(s, to))
        s = shape(rng, rng.randint(1, 3), large=maybe(rng, 0.2))
        gd = rng.randrange(len(s))
        ishape = tuple(rng.randint(1, v) if i != gd else rng.choice((1, 4, 9)) for i, v in enumerate(s))
        yield one("aten.gather.default", T(s, ti, const=maybe(rng, 0.3)), gd, T(ishape, rng.choice(INDEX)), False,
                  out=T(ishape, to))
        s = shape(rng, rng.randint(1, 4))
        k = rng.randint(1, min(3, len(s)))
        batch = rng.choice(((4,), (2, 3), (1,), (7, 1)))
        indices = tuple(T(batch if j == 0 or maybe(rng) else batch[-1:], rng.choice(INDEX), const=maybe(rng, 0.3))
                        for j in range(k))
        yield one("aten.index.Tensor", T(s, ti, const=maybe(rng, 0.3)), Vals(indices), out=T((*batch, *s[k:]), to))
        s = shape(rng, large=maybe(rng, 0.2))
        other = tuple(v if maybe(rng) else 1 for v in s)
        yield one("aten.where.self", T(other if maybe(rng) else s, BOOL, const=maybe(rng, 0.3)),
                  T(s, ti, const=maybe(rng, 0.3)), T(other, rng.choice(ANY), const=maybe(rng, 0.3)), out=T(s, to))
        cache = (rng.choice((1, 2)), rng.choice((8, 64, 65537)), rng.choice((4, 16)))
        st = T(cache, ti)
        init = T(cache, ti, const=True) if maybe(rng, 0.3) else None
        pos = rng.choice((1, 3))
        updated = T(cache, ti)
        yield Case([Op("vkx.state.default", ("cache", init), st),
                    Op("vkx.index_copy.default", (st, 1, T((pos,), I32), T((cache[0], pos, cache[2]), ti)), updated)])
        st2, out2 = T(cache, to), T(cache, to)
        yield Case([Op("vkx.state.default", ("buf", None), st2),
                    Op("vkx.copy.default", (st2, T(cache, ti)), out2)])


def gen_rotary(rng: random.Random) -> Iterator[Case]:
    """ExecuTorch's rotary embeddings (interleaved pairs; HF's rotate_half by positions and
    heads-first): xq, xk, the tables and both outputs of any float dtype each."""
    for tq, tk, tc, to in combos(rng, [FLOATS] * 4):
        b, seq, hq, hk = rng.choice((1, 2)), rng.choice((1, 7, 64)), rng.choice((1, 4, 8)), rng.choice((1, 2))
        d = rng.choice((8, 64, 128))
        rows = rng.choice((seq, 4096))
        cos_t = tc if maybe(rng) else rng.choice(FLOATS)
        tables = [T((rows, d // 2), tc, const=maybe(rng, 0.7)), T((rows, d // 2), cos_t, const=maybe(rng, 0.7))]
        q, k = T((b, seq, hq, d), tq), T((b, seq, hk, d), tk)
        yield one("et_vk.apply_rotary_emb.default", q, k, *tables,
                  out=[T(q.shape, to), T(k.shape, rng.choice(FLOATS))])
        r = rng.choice((d, d // 2))
        start = rng.choice((0, rows - seq))
        tables = [T((rows, r), tc, const=maybe(rng, 0.7)), T((rows, r), cos_t, const=maybe(rng, 0.7))]
        yield one("et_vk.apply_rotary_emb_hf.default", q, k, *tables, start,
                  out=[T(q.shape, to), T(k.shape, rng.choice(FLOATS))])
        q, k = T((b, hq, seq, d), tq), T((b, hk, seq, d), tk)
        tables = [T((1, seq, r), tc), T((1, seq, r), cos_t)]
        yield one("et_vk.apply_rotary_emb_hf.default", q, k, *tables, 0,
                  out=[T(q.shape, to), T(k.shape, rng.choice(FLOATS))])


def gen_attention(rng: random.Random) -> Iterator[Case]:
    """scaled_dot_product_attention (decode: one kernel; prefill: products and softmax; masks bool or
    float, causal, grouped heads) and et_vk.sdpa: q, k, v, mask and out of any float each; one dtype
    for all (the decode kernel's case) half the time."""
    for tq, tk, tv, to in combos(rng, [FLOATS] * 4, limit=40):
        if maybe(rng, 0.4):
            tk = tv = to = tq
        b, hq = rng.choice((1, 2)), rng.choice((1, 4, 8))
        hk = rng.choice([h for h in (1, 2, hq) if hq % h == 0])
        L = rng.choice((1, 2, 8, 9, 64))
        S = rng.choice((1, 7, 64, 1000, 4097))
        e = rng.choice((8, 64, 128, 12, 264))
        gqa = hq != hk
        q, k, v = T((b, hq, L, e), tq), T((b, hk, S, e), tk, const=maybe(rng, 0.1)), T((b, hk, S, e), tv)
        mask = None
        if maybe(rng, 0.5):
            mt = rng.choice((BOOL, *FLOATS))
            mask = T(rng.choice(((L, S), (1, 1, L, S), (b, 1, L, S))), mt, const=maybe(rng, 0.3))
        yield one("aten.scaled_dot_product_attention.default", q, k, v, mask, 0.0, maybe(rng, 0.4),
                  rng.choice((None, 0.125)), gqa, out=T((b, hq, L, e), to))
        if not gqa:
            fmask = T((1, 1, L, S), rng.choice(FLOATS), const=maybe(rng, 0.3)) if maybe(rng) else None
            yield one("et_vk.sdpa.default", q, k, v, fmask, rng.choice((None, 0.25)), out=T((b, hq, L, e), to))


FAMILIES: dict[str, tuple[Callable[[random.Random], Iterable[Case]], Callable]] = {
    "unary": (gen_unary, few_units),
    "binary": (gen_binary, few_units),
    "copies": (gen_copies, few_units),
    "linear": (gen_linear, some_units),
    "matmul": (gen_matmul, some_units),
    "quant": (gen_quant, some_units),
    "quant_tables": (gen_quant_tables, few_units),
    "norms": (gen_norms, few_units),
    "channel_norms": (gen_channel_norms, few_units),
    "reductions": (gen_reductions, few_units),
    "conv": (gen_conv, few_units),
    "pool": (gen_pool, few_units),
    "indexing": (gen_indexing, few_units),
    "rotary": (gen_rotary, few_units),
    "attention": (gen_attention, some_units),
}
"""Each op family's generator and the compute units its cases are built with."""


@functools.cache
def sweep_family(family: str) -> Findings:
    generate, units = FAMILIES[family]
    rng = random.Random(zlib.crc32(family.encode()))
    return sweep_cases(family, list(generate(rng)), units, rng)


# --------------------------------------------------------------------------- real graphs

@functools.cache
def pte_graphs() -> tuple[list[tuple[str, g.VkGraph]], list[str]]:
    """Every VulkanBackend delegate's VkGraph of every .pte under tests/data that the contract accepts,
    and the labels of those it refuses (files of ops vkx does not run: their loads fail by design)."""
    out, refused = [], []
    for path in sorted(DATA.rglob("*.pte")):
        with ProgramFile.open(path) as pf:
            for d in pf.vulkan_delegates:
                label = f"{path.relative_to(DATA)}[{d.plan_index}.{d.delegate_index}]"
                try:
                    opset.check_graph(d.graph)
                except contract.ContractError:
                    refused.append(label)
                    continue
                out.append((label, d.graph))
    return out, refused


EXPORTS = (("mlp", {"dtype": "fp32"}), ("mlp", {"dtype": "fp16"}), ("mlp", {"dtype": "bf16"}),
           ("mlp", {"quantize": "int4"}), ("mlp", {"quantize": "int8"}), ("llama_block", {"dtype": "fp32"}),
           ("llama_block", {"dtype": "fp16"}), ("llama_block", {"dtype": "bf16", "quantize": "int8"}),
           ("kv_decoder", {"quantize": "int4"}))
"""The smallest examples in each dtype and quantization: the MLP in all five; the Llama block (the
fusions: RMSNorm into products, SwiGLU, rotary tables) in fp32, fp16 and bf16 with int8 weights (its
MLP's 172 features take no int4 group size); the two-method decoder with state in int4."""


def rotary_module():
    """transformers' rotary embedding, as its models write it: the cos and sin tables of the positions
    (one rotary_table.comp dispatch, vkx.loader.build.fuse_rotary) turning q and k (fused_rotary.comp)."""
    import torch

    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    class Rotary(torch.nn.Module):
        def forward(self, q, k, positions):
            inv = 1.0 / (10000 ** (torch.arange(0, q.shape[-1], 2, dtype=torch.float32) / q.shape[-1]))
            freqs = positions[:, :, None].float() * inv[None, None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos().to(q.dtype)[:, None], emb.sin().to(q.dtype)[:, None]
            return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    return Rotary(), (torch.randn(1, 4, 5, 64), torch.randn(1, 2, 5, 64), torch.arange(40, 45)[None])


def rotary_tables_module():
    """A rotary module's cos and sin tables of the positions as transformers returns them, scaled and
    cast (one rotary_table.comp dispatch)."""
    import torch

    class RotaryTables(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("inv_freq", 1 / 10000 ** (torch.arange(0, 64, 2).float() / 64), persistent=False)

        def forward(self, x, positions):
            freqs = positions[:, :, None].float() * self.inv_freq[None, None, :].float()
            emb = torch.cat((freqs, freqs), dim=-1)
            return (emb.cos() * 1.1386).to(x.dtype), (emb.sin() * 1.1386).to(x.dtype)

    return RotaryTables(), (torch.randn(1, 3, 64), torch.tensor([[0, 1, 700]]))


ROTARY_DTYPES = ("fp32", "fp16", "bf16")


@pytest.fixture(scope="module")
def example_graphs(tmp_path_factory) -> list[tuple[str, g.VkGraph]]:
    """The VkGraphs of EXPORTS, and of `rotary_module` and `rotary_tables_module` in ROTARY_DTYPES,
    exported once."""
    import vkx
    from vkx.export.model_file import load_model_file
    out = []
    folder = tmp_path_factory.mktemp("variants")
    exports = [(f"{name}.py", lambda name=name: load_model_file(EXAMPLES / f"{name}.py"), options)
               for name, options in EXPORTS]
    exports += [(name, make, {"dtype": dtype}) for dtype in ROTARY_DTYPES
                for name, make in (("rotary", rotary_module), ("rotary tables", rotary_tables_module))]
    for i, (name, make, options) in enumerate(exports):
        module, inputs = make()
        label = f"{name} {' '.join(f'{k}={v}' for k, v in options.items())}"
        path = folder / f"{i}.pte"
        vkx.export_model(module, inputs, str(path), **options)
        with ProgramFile.open(path) as pf:
            out += [(f"{label} [{d.plan_index}]", d.graph) for d in pf.vulkan_delegates]
    return out


REAL_UNITS = (1, 7, 132)


def sweep_graphs(graphs: Sequence[tuple[str, g.VkGraph]], device: DeviceClass) -> Findings:
    found = Findings()
    table = declared()
    for label, graph in graphs:
        for u in REAL_UNITS:
            found.check(label, graph, device, u, table)
    return found


# --------------------------------------------------------------------------- tests

def test_every_shader_declares_its_variants():
    """No shader is left to recorded variants: each shaders/*.comp has a @variants declaration."""
    missing = sorted(p.stem for p in SHADERS.glob("*.comp") if p.stem not in declared())
    assert not missing, f"{len(missing)} shaders without a @variants declaration: {missing}"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_single_ops_request_only_declared_variants(family):
    found = sweep_family(family)
    assert found.graphs, f"{family}: nothing was built"
    assert found.ok, f"{family} ({found.graphs} builds):\n{found.report()}"


@pytest.mark.parametrize("device", DEVICES, ids=lambda d: d.name)
def test_executorch_files_request_only_declared_variants(device):
    graphs, refused = pte_graphs()
    assert len(graphs) > 200 and len(refused) < 10, f"{len(graphs)} VkGraphs under {DATA}; refused: {refused}"
    found = sweep_graphs(graphs, device)
    assert found.ok, f"tests/data on {device.name} ({found.graphs} builds):\n{found.report()}"


@pytest.mark.parametrize("device", DEVICES, ids=lambda d: d.name)
def test_examples_request_only_declared_variants(example_graphs, device):
    found = sweep_graphs(example_graphs, device)
    fused = {s for s, _ in found.seen} & {"fused_rotary", "rotary_table"}
    assert fused == {"fused_rotary", "rotary_table"} or not found.ok, \
        f"the rotary embedding was not fused on {device.name}: {sorted(fused)}"
    assert found.ok, f"examples on {device.name} ({found.graphs} builds):\n{found.report()}"


def test_the_checker_reports_a_request_outside_the_declared_space():
    """Negative control: the same checker flags a variant no declaration has (so no sweep passes
    vacuously), and passes a declared one."""
    table = {"relu_like": frozenset({spirv.variant_text({"A_T": "float", "OP": "x"})})}
    found = Findings()
    graph = graph_of(one("aten.relu.default", T((8,), F32), out=T((8,), F16)))
    found.check("relu", graph, DEVICES[0], 1, table)
    assert found.undeclared and {s for s, _ in found.undeclared} == {"unary"}, found.report()
    real = declared()
    if "unary" in real:
        clean = Findings()
        clean.check("relu", graph, DEVICES[0], 1, real)
        assert clean.ok, clean.report()
        shader, text = next(iter(clean.seen))
        key = tuple(line.split("=", 1) for line in text.splitlines())
        assert is_covered(shader, key, real)
        assert not is_covered(shader, (*key, ("BOGUS", "1")), real)
        assert not is_covered("no_such_shader", key, real)


def test_the_sweep_is_broad():
    """The single-op sweep requested many distinct variants of most shaders (it cannot pass by
    requesting little)."""
    seen = set()
    for family in FAMILIES:
        seen |= sweep_family(family).seen
    shaders = {s for s, _ in seen}
    unreached = {p.stem for p in SHADERS.glob("*.comp")} - shaders
    assert len(seen) >= 500 and len(shaders) >= 38 and unreached <= NOT_SINGLE_OPS, \
        f"{len(seen)} distinct requests of {len(shaders)} shaders; never requested: {sorted(unreached)}"


NOT_SINGLE_OPS = {"fused_rotary", "rotary_table", "next_token", "sample"}
"""Shaders no single op requests: the fused rotary embedding and its tables (vkx.loader.build.fuse_rotary,
reached by `rotary_module`'s exports), the greedy decode's hand-over (vkx.loader.lm.greedy) and the
device sampler (vkx.loader.ops.sample, tests/ops/test_sample.py)."""
