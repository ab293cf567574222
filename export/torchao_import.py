"""torchao weight-only quantized models → `vkx.linear_q` / `vkx.embedding_q`.

torch.export unwraps torchao's weight tensors into their plain parts (qdata, scale,
zero_point: parameters of the program), and vkx's decompositions turn torchao's
dequantization into aten ops. Two shapes result:

* `IntxWeightOnlyConfig` (IntxUnpackedToInt8Tensor; int1..int8 values held as int8),
  for Linear and Embedding weights:
  `W = view(mul(sub(to_f32(view(q)), to_f32(view(zp))), view(scale)), [N, K])`,
  then `linear(x, W, bias)` or `embedding(W, indices)`;
* `Int8WeightOnlyConfig` (Int8Tensor, per row), for Linear:
  `mul(mm(x, to_f32(permute(q, [1, 0]))), view(scale, [N]))`.

Importing this module wraps the lowering rules of the ops in those chains: a chain
that feeds only quantized consumers emits nothing, and its consumer emits one
`vkx.linear_q` / `vkx.embedding_q` that reads torchao's own integers and scales, so
vkx computes with exactly the weights torchao computes with. Values that fit in
[-8, 7] (torchao's int4 and narrower) are packed 4-bit, others stored as int8.
Non-zero zero points (asymmetric quantization) become affine scales, (scale, -zero_point * scale) pairs.
"""
from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx import Graph, Node

from vkx.export.errors import ExportError
from vkx.export.operands import Operands
from vkx.export.ops import Rule
from vkx.format.op_quant import VALUES_PER_WORD

A = torch.ops.aten
_IGNORED_USERS = (A._assert_tensor_metadata.default,)
"""Users that read a value without lowering to anything (they do not keep a chain alive)."""


@dataclass
class Weight:
    """One torchao weight: its integer, scale and zero-point parameters and the chain reading them."""
    q: Node
    scale: Node
    zero_point: Node | None
    chain: list[Node]
    """The nodes between the parameters and the consumer (they emit nothing)."""


@dataclass
class Consumer:
    """A node that becomes one quantized op."""
    kind: str
    """"linear", "embedding" or "int8_mm" (the mul after Int8Tensor's mm)."""
    weight: Weight
    input: Node
    bias: Node | None = None


@dataclass
class Matches:
    consumers: dict[Node, Consumer]
    skipped: set[Node]


_GRAPHS: "weakref.WeakKeyDictionary[Graph, Matches]" = weakref.WeakKeyDictionary()


def _is(node: object, *targets) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in targets


def _users(node: Node) -> list[Node]:
    return [u for u in node.users if u.target not in _IGNORED_USERS]


def _through_views(node: Node, chain: list[Node]) -> Node:
    while _is(node, A.view.default):
        chain.append(node)
        node = node.args[0]
    return node


def _as_float(node: object, chain: list[Node]) -> Node | None:
    """The placeholder under `to_f32(view*(placeholder))`, or None."""
    if not _is(node, A._to_copy.default) or node.kwargs.get("dtype") != torch.float32:
        return None
    chain.append(node)
    base = _through_views(node.args[0], chain)
    return base if base.op == "placeholder" else None


def _dequantized(w: Node) -> Weight | None:
    """The IntxUnpackedToInt8Tensor dequantization that makes `w`, or None."""
    chain: list[Node] = []
    node = _through_views(w, chain)
    if not _is(node, A.mul.Tensor):
        return None
    chain.append(node)
    values, scale = node.args
    if not isinstance(scale, Node):
        return None
    scale = _through_views(scale, chain)
    zero_point = None
    if _is(values, A.sub.Tensor):
        chain.append(values)
        zero_point = _as_float(values.args[1], chain)
        if zero_point is None:
            return None
        values = values.args[0]
    q = _as_float(values, chain)
    if q is None or scale.op != "placeholder":
        return None
    return Weight(q, scale, zero_point, chain)


def _int8_mm(mul: Node) -> Consumer | None:
    """Int8Tensor's `mul(mm(x, to_f32(permute(q, [1, 0]))), view(scale, [N]))`, or None."""
    mm, scale = mul.args
    if not _is(mm, A.mm.default) or not isinstance(scale, Node) or len(_users(mm)) != 1:
        return None
    chain = [mm]
    transposed = mm.args[1]
    if not _is(transposed, A._to_copy.default) or transposed.kwargs.get("dtype") != torch.float32:
        return None
    chain.append(transposed)
    permute = transposed.args[0]
    if not _is(permute, A.permute.default) or list(permute.args[1]) != [1, 0]:
        return None
    chain.append(permute)
    q = permute.args[0]
    scale = _through_views(scale, chain)
    if q.op != "placeholder" or scale.op != "placeholder":
        return None
    return Consumer("int8_mm", Weight(q, scale, None, chain), mm.args[0])


def _match(graph: Graph) -> Matches:
    """Every quantized consumer of `graph`; chains count only when all their users are consumers."""
    if graph in _GRAPHS:
        return _GRAPHS[graph]
    consumers: dict[Node, Consumer] = {}
    for node in graph.nodes:
        if _is(node, A.linear.default) and isinstance(node.args[1], Node):
            weight = _dequantized(node.args[1])
            bias = node.args[2] if len(node.args) > 2 else None
            if weight is not None:
                consumers[node] = Consumer("linear", weight, node.args[0], bias)
        elif _is(node, A.embedding.default) and isinstance(node.args[0], Node):
            weight = _dequantized(node.args[0])
            if weight is not None:
                consumers[node] = Consumer("embedding", weight, node.args[1])
        elif _is(node, A.mul.Tensor):
            consumer = _int8_mm(node)
            if consumer is not None:
                consumers[node] = consumer
    while True:  # drop consumers whose chain or parameters are also read as plain tensors, until none is
        skipped = {n for c in consumers.values() for n in c.weight.chain}
        plain = [node for node, c in consumers.items()
                 if any(u not in skipped and u not in consumers for n in c.weight.chain for u in _users(n))
                 or any(u not in skipped for u in _users(c.weight.q))]
        if not plain:
            break
        for node in plain:  # lowered as written (the plain ops then say what vkx lacks)
            del consumers[node]
    matches = Matches(consumers, skipped)
    _GRAPHS[graph] = matches
    return matches


# --------------------------------------------------------------------------- the parameters

@dataclass(frozen=True)
class Layout:
    bits: int
    group_size: int
    q: torch.Tensor
    """The weight in the contract's packing."""
    scales: torch.Tensor
    """[N, K / group_size], or affine (scale, offset) pairs [N, K / group_size, 2] for non-zero zero points."""


_LAYOUT_KEY = "vkx.torchao_layout"
"""node.meta key of a q placeholder's Layout (made once per program, from torchao's tensors)."""


def _layout(b: Operands, consumer: Consumer) -> Layout:
    """Check the parameters, repack them for the contract (once), and put them in the builder's constants."""
    weight = consumer.weight
    layout = weight.q.meta.get(_LAYOUT_KEY)
    if layout is None:
        layout = weight.q.meta[_LAYOUT_KEY] = _repack(b, weight)
    q_name, scale_name = b.constant_nodes[weight.q][0], b.constant_nodes[weight.scale][0]
    if _PARAMETRIZED.search(q_name):  # torch.export's names (once renamed, they stay)
        base = _PARAMETRIZED.sub(r"\1\2", q_name)
        q_name, scale_name = f"{base}.qdata" if layout.bits == 8 else f"{base}.qdata_int4_packed", f"{base}.scale"
    b.constant_nodes[weight.q] = (q_name, layout.q)
    b.constant_nodes[weight.scale] = (scale_name, layout.scales)
    return layout


_PARAMETRIZED = re.compile(r"(^|\.)parametrizations\.(\w+)\.original\d+$")
"""torch.export's name of a torchao weight's inner tensor: `fc.parametrizations.weight.original0` is `fc.weight`'s."""


def _repack(b: Operands, weight: Weight) -> Layout:
    where = f"torchao weight {weight.q.target}"
    for node in (weight.q, weight.scale, weight.zero_point):
        if node is not None and node not in b.constant_nodes:
            raise ExportError(f"{where}: {node.target} is not a parameter of the model")
    q, scale = b.constant_nodes[weight.q][1], b.constant_nodes[weight.scale][1]
    if q.dtype != torch.int8 or q.dim() != 2:
        raise ExportError(f"{where}: integer data is {q.dtype} {list(q.shape)}, not a 2-D int8 tensor")
    n, k = q.shape
    zero = None if weight.zero_point is None else b.constant_nodes[weight.zero_point][1]
    if not scale.is_floating_point() or scale.dim() == 0 or scale.shape[0] != n or scale.numel() % n:
        raise ExportError(f"{where}: scales {scale.dtype} {list(scale.shape)} do not fit a [{n}, {k}] weight")
    groups = scale.numel() // n
    bits = 4 if bool(q.ge(-8).all()) and bool(q.le(7).all()) else 8
    group = k // groups if k % groups == 0 else 0
    if not group or group % VALUES_PER_WORD[bits]:
        raise ExportError(f"{where}: groups of {k / groups:g} of {k} input features; vkx needs a group size "
                          f"that divides K and is a multiple of {VALUES_PER_WORD[bits]} for {bits}-bit weights")
    scales = scale.reshape(n, groups)
    if zero is not None and bool(zero.ne(0).any()):
        if zero.numel() != n * groups:
            raise ExportError(f"{where}: zero points {list(zero.shape)} do not fit {groups} groups of {n} rows")
        # (q - zero) * scale = q * scale + offset: affine pairs, in fp32 so that the scale is exact and the
        # offset rounded once
        wide = scales.to(torch.float32)
        scales = torch.stack([wide, -zero.reshape(n, groups).to(torch.float32) * wide], dim=-1)
    return Layout(bits, group, pack_int4(q) if bits == 4 else q, scales)


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """int8 values in [-8, 7], [N, K] → the contract's uint8 [N, K / 2] (even k low nibble, q + 8)."""
    u = (q.to(torch.int16) + 8).to(torch.uint8)
    return (u[:, 0::2] | (u[:, 1::2] << 4)).contiguous()


# --------------------------------------------------------------------------- the rules

def _emit(b: Operands, node: Node, consumer: Consumer) -> None:
    layout = _layout(b, consumer)
    weight = consumer.weight
    q, s = b.tensor(weight.q, tref=True), b.tensor(weight.scale, tref=True)
    if consumer.kind == "embedding":
        args = [q, s, b.tensor(consumer.input), b.int(layout.bits), b.int(layout.group_size)]
        b.emit("vkx.embedding_q.default", args + [b.outputs(node)])
        return
    bias = b.null() if consumer.bias is None else b.tensor(consumer.bias, tref=True)
    args = [b.tensor(consumer.input), q, s, bias, b.int(layout.bits), b.int(layout.group_size)]
    b.emit("vkx.linear_q.default", args + [b.outputs(node)])


def _wrap(original: Rule | None) -> Rule:
    """`original`, except for nodes of a matched torchao chain (nothing) or consumer (one quantized op)."""
    def lower(b: Operands, node: Node) -> None:
        matches = _match(node.graph)
        if node in matches.consumers:
            _emit(b, node, matches.consumers[node])
        elif node not in matches.skipped:
            original.lower(b, node)

    def check(node: Node) -> str | None:
        matches = _match(node.graph)
        if node in matches.consumers or node in matches.skipped:
            return None
        return "not supported" if original is None else original.check(node)
    return Rule(lower, check)


_TARGETS = (A.linear.default, A.embedding.default, A.mul.Tensor, A.sub.Tensor, A.view.default, A.mm.default,
            A.permute.default, A._to_copy.default)


def with_torchao(rules: dict[Any, Rule]) -> dict[Any, Rule]:
    """`rules` with those of the ops a torchao-quantized weight's chain is made of wrapped."""
    return {**rules, **{target: _wrap(rules.get(target)) for target in _TARGETS}}
