"""Lowering rules for state: in-place updates of buffers the model mutates, and what a mask over
a cache is built from (static aranges; the comparisons are format/op_decls.py's). docs/format.md, "State".

torch.export functionalises in-place updates (`index_copy_` becomes `index_copy`, whose result
the graph signature names as the buffer's new content); each lowers to an update op that writes
into the state tensor itself (`Operands.update`).
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch.fx import Node

from vkx.export.operands import Operands
from vkx.export.ops import Rule, schema_values, shape
from vkx.format.op_state import COPY, INDEX_COPY

A = torch.ops.aten


def _index_copy(b: Operands, node: Node) -> None:
    values = schema_values(node)
    dim = values["dim"] % len(shape(values["self"]))
    b.update(INDEX_COPY, node, [b.tensor(values["self"]), b.int(dim), b.tensor(values["index"]),
                                b.tensor(values["source"])])


def _put_dim(node: Node) -> int | None:
    """The dim `index_put` writes along: one 1-D index tensor after Nones, values of the indexed shape."""
    values = schema_values(node)
    indices = list(values["indices"])
    given = [i for i, index in enumerate(indices) if index is not None]
    if values["accumulate"] or len(given) != 1 or given[0] != len(indices) - 1:
        return None
    dim, index = given[0], indices[given[0]]
    if len(shape(index)) != 1 or index.meta["val"].dtype.is_floating_point or index.meta["val"].dtype == torch.bool:
        return None
    target = shape(values["self"])
    if math.prod(shape(values["values"])) != math.prod(_indexed(target, dim, index)):
        return None
    return dim


def _indexed(target: tuple[int, ...], dim: int, index: Node) -> tuple[int, ...]:
    return target[:dim] + shape(index) + target[dim + 1:]


def _check_put(node: Node) -> str | None:
    if _put_dim(node) is None:
        return ("only x[:, ..., idx] = v is supported: one 1-D integer index, v with the indexed "
                "shape's elements, no accumulate")
    return None


def _index_put(b: Operands, node: Node) -> None:
    """x[..., idx] = v as an index_copy along idx's dim (v reshaped to the indexed shape: torch
    flattens a v whose leading dims are 1)."""
    values = schema_values(node)
    dim = _put_dim(node)
    index, source = values["indices"][dim], values["values"]
    want = _indexed(shape(values["self"]), dim, index)
    source_id = b.tensor(source)
    if shape(source) != want:
        fake = torch.empty(want, dtype=source.meta["val"].dtype, device="meta")
        reshaped = b.new_tensor(fake)
        b.emit("aten.view_copy.default", [source_id, b.int_list(want), reshaped])
        source_id = reshaped
    b.update(INDEX_COPY, node, [b.tensor(values["self"]), b.int(dim), b.tensor(index), source_id])


def _check_slice_scatter(node: Node) -> str | None:
    if schema_values(node)["step"] != 1:
        return "only step 1 is supported"
    return None


def _slice_scatter(b: Operands, node: Node) -> None:
    """x[:, a:b] = v as an index_copy at the constant positions a..b-1."""
    values = schema_values(node)
    target = shape(values["self"])
    dim = values["dim"] % len(target)
    start, end = slice(values["start"], values["end"]).indices(target[dim])[:2]
    positions = b.constant(f"{node.name}.positions", torch.arange(start, end, dtype=torch.int32))
    b.update(INDEX_COPY, node, [b.tensor(values["self"]), b.int(dim), positions, b.tensor(values["src"])])


def _check_copy(node: Node) -> str | None:
    values = schema_values(node)
    same_kind = values["self"].meta["val"].dtype == values["src"].meta["val"].dtype
    return None if same_kind and shape(values["self"]) == shape(values["src"]) else \
        "only a copy of the same shape and dtype is supported"


def _copy(b: Operands, node: Node) -> None:
    """copy_ into state writes it in place; a copy into any other tensor is the source itself."""
    values = schema_values(node)
    if b.state_of(values["self"]) is not None:
        b.update(COPY, node, [b.tensor(values["self"]), b.tensor(values["src"])])
    else:
        b.bind(node, b.tensor(values["src"]))


def _arange(b: Operands, node: Node) -> None:
    """Static shapes make an arange a constant."""
    fake = node.meta["val"]
    values: dict[str, Any] = schema_values(node)
    start = values.get("start", 0)
    step = values.get("step", 1)
    tensor = torch.arange(start, values["end"], step, dtype=fake.dtype)
    b.bind(node, b.constant(node.name, tensor))


STATE_RULES: dict[Any, Rule] = {
    A.index_copy.default: Rule(_index_copy),
    A.index_put.default: Rule(_index_put, _check_put),
    A.slice_scatter.default: Rule(_slice_scatter, _check_slice_scatter),
    A.copy.default: Rule(_copy, _check_copy),
    A.arange.default: Rule(_arange),
    A.arange.start: Rule(_arange),
    A.arange.start_step: Rule(_arange),
}
