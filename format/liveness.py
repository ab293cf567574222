"""Activation lifetimes in chain order, and the activation totals A and A_live.

Shared by the exporter's memory plan and `describe()`, so both report the same
numbers. A tensor lives from the op that writes it to the last op that reads it.
Graph inputs live over the whole chain: vkx's plan never reuses an input's
memory (a conservative rule; reuse after the last reader would also be valid,
since inputs are copied in afresh on every run), and A_live follows the same
rule so that A and A_live compare like for like. Graph outputs live from their
producer to the end (they are copied out when the run ends). Constants, prepack outputs (weights, kept for good) and state
(docs/format.md, "State") are not activations. A view (`VIEWS`: the same bytes under another shape) of an activation
that is written once is no tensor of its own: its lifetime is its source's, which
it extends (`view_sources`), so the plan gives both one memory object and the
loader binds one buffer for both (no copy). Every tensor is float32 or int32 on the GPU: 4 bytes an element.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from . import vkgraph as vk
from .op_state import STATE_OPS

PREPACK = "et_vk.prepack.default"
DEDICATED = frozenset({PREPACK}) | STATE_OPS
"""Ops whose outputs keep memory of their own: weights in device form, persistent state."""
VIEWS = frozenset({"aten.view_copy.default", "aten.squeeze_copy.dims"})
"""Ops whose output is their first argument's bytes (same dtype: then the output aliases it)."""
PERMUTE = "aten.permute_copy.default"
"""A view too where the dims of size > 1 keep their order (a decode step's [1, 1, H, D] -> [1, H, 1, D])."""
SLICE = "aten.slice_copy.Tensor"
"""A view too where it keeps every element (a decode step's last position of its one position)."""


def is_view(graph: vk.VkGraph, call: vk.OperatorCall) -> bool:
    """Whether `call`'s output is its first argument's bytes in the same order (`VIEWS`, an
    order-keeping `PERMUTE`, a `SLICE` that keeps every element)."""
    if call.name in VIEWS:
        return True
    if call.name == SLICE and len(call.args) >= 2:
        src, out = (graph.values[i] if 0 <= i < len(graph.values) else None for i in (call.args[0], call.args[-1]))
        return isinstance(src, vk.Tensor) and isinstance(out, vk.Tensor) and src.dims == out.dims
    if call.name != PERMUTE or len(call.args) < 3:
        return False
    src, dims = (graph.values[i] if 0 <= i < len(graph.values) else None for i in call.args[:2])
    if not isinstance(src, vk.Tensor) or not isinstance(dims, vk.IntList) or len(dims.items) != len(src.dims):
        return False
    rank = len(src.dims)
    if sorted(d % max(rank, 1) for d in dims.items) != list(range(rank)):
        return False
    moved = [d % rank for d in dims.items if src.dims[d % rank] != 1]
    return moved == sorted(moved)


@dataclass(frozen=True)
class Lifetime:
    value_id: int
    nbytes: int
    first: int
    last: int


def activation_ids(graph: vk.VkGraph, value_ids: Sequence[int]) -> list[int]:
    """The non-constant tensor ids among `value_ids`, looking one level into ValueLists; bad ids are skipped."""
    def tensor(value_id: int) -> bool:
        value = graph.values[value_id] if 0 <= value_id < len(graph.values) else None
        return isinstance(value, vk.Tensor) and value.constant_id < 0

    found = []
    for value_id in value_ids:
        value = graph.values[value_id] if 0 <= value_id < len(graph.values) else None
        items = value.items if isinstance(value, vk.ValueList) else (value_id,)
        found.extend(item for item in items if tensor(item))
    return found


def view_sources(graph: vk.VkGraph) -> dict[int, int]:
    """Each aliasing view's output -> the tensor whose memory it is (through chains of views).

    A view aliases when its output has its source's dtype and size and is no graph output,
    and the source is an activation that no op but its producer writes (a graph input: none).
    """
    inputs, outputs = set(graph.input_ids), set(graph.output_ids)
    writes: dict[int, int] = {}
    for call in graph.chain:
        for value_id in activation_ids(graph, call.args[-1:]):
            # state is updated in place after its op writes it: a view of it is never an alias
            writes[value_id] = writes.get(value_id, 0) + (2 if call.name in STATE_OPS else 1)
    sources: dict[int, int] = {}
    for call in graph.chain:
        if not is_view(graph, call) or len(call.args) < 2:
            continue
        src, out = call.args[0], call.args[-1]
        if not activation_ids(graph, [src]) or activation_ids(graph, [out]) != [out] or out in outputs:
            continue
        a, b = graph.values[src], graph.values[out]
        if a.datatype != b.datatype or a.nbytes != b.nbytes or writes.get(src, 0) != (0 if src in inputs else 1):
            continue
        sources[out] = sources.get(src, src)
    return sources


def lifetimes(graph: vk.VkGraph) -> list[Lifetime]:
    """The lifetime of every activation (every tensor that gets planned memory; an aliasing
    view's output is part of its source's)."""
    end = len(graph.chain)
    first: dict[int, int] = {value_id: -1 for value_id in activation_ids(graph, graph.input_ids)}
    last: dict[int, int] = {value_id: end for value_id in activation_ids(graph, [*graph.input_ids, *graph.output_ids])}
    dedicated: set[int] = set()
    for index, call in enumerate(graph.chain):
        if not call.args:
            continue
        *reads, written = call.args
        for value_id in activation_ids(graph, reads):
            last[value_id] = max(last.get(value_id, index), index)
        for value_id in activation_ids(graph, [written]):
            first.setdefault(value_id, index)
            last.setdefault(value_id, index)
            if call.name in DEDICATED:
                dedicated.add(value_id)
    for out, src in view_sources(graph).items():
        if src in first and src not in dedicated and out in first:
            first[src], last[src] = min(first[src], first.pop(out)), max(last[src], last.pop(out))
    return [Lifetime(value_id, graph.values[value_id].nbytes, first[value_id], last[value_id])
            for value_id in sorted(first) if value_id not in dedicated]


def peak_live_bytes(spans: Sequence[Lifetime]) -> int:
    """The largest sum of bytes of tensors alive at the same chain index (A_live)."""
    changes: dict[int, int] = {}
    for span in spans:
        changes[span.first] = changes.get(span.first, 0) + span.nbytes
        changes[span.last + 1] = changes.get(span.last + 1, 0) - span.nbytes
    live = peak = 0
    for index in sorted(changes):
        live += changes[index]
        peak = max(peak, live)
    return peak


def shared_object_bytes(graph: vk.VkGraph) -> int:
    """A: the bytes of all shared memory objects, each as large as its largest member."""
    objects: dict[int, int] = {}
    for value in graph.values:
        if isinstance(value, vk.Tensor) and value.constant_id < 0 and value.mem_obj_id >= 0:
            objects[value.mem_obj_id] = max(objects.get(value.mem_obj_id, 0), value.nbytes)
    return sum(objects.values())
