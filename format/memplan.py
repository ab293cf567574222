"""What a VkGraph's memory plan must be for every run to read only what its own ops wrote.

A memory object (`mem_obj_id` >= 0) is one device buffer as large as its largest member; each
member starts at its offset 0, so every member's range lies inside its object by construction.
`check_memory_plan` proves the rest, in chain order (docs/safety.md, "The memory plan"):

* every tensor an op reads was written before it: by an earlier op, or it is a graph input, a
  constant, a prepack output (written at load) or state;
* every graph output is written (or is an input);
* no op writes a constant, and a prepack output or state tensor only by the op that makes it (a
  write into a weight would change it at every call; state changes only through its update ops,
  each of which makes a tensor of its own);
* two tensors of one object are never alive at the same op. A tensor lives from its first write
  (an input: before the first op) to its last read or write (an output: past the last op). An
  aliasing view (`liveness.view_sources`) and its source are the same bytes, so they may be.

Prepack outputs and state keep memory of their own whatever their `mem_obj_id` says (the loader
gives them dedicated buffers), and zero-byte tensors touch no memory: neither is checked for sharing.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from . import vkgraph as vk
from .errors import InvalidValueError
from .liveness import DEDICATED, PREPACK, activation_ids, view_sources
from .op_state import STATE


class MemoryPlanError(InvalidValueError):
    """A VkGraph's memory plan lets an op read bytes no op wrote, or two live tensors share bytes."""


@dataclass
class _Span:
    value_id: int
    first: int
    last: int


def _op(graph: vk.VkGraph, index: int) -> str:
    return f"chain[{index}] ({graph.chain[index].name})" if 0 <= index < len(graph.chain) else \
        "the graph's inputs" if index < 0 else "the graph's outputs"


def _check_read_only(graph: vk.VkGraph, path: str | None) -> None:
    """No op writes a constant; a prepack output or state tensor only its own op writes."""
    maker: dict[int, int] = {}
    for index, call in enumerate(graph.chain):
        if call.name in DEDICATED and call.args:
            for vid in activation_ids(graph, call.args[-1:]):
                maker.setdefault(vid, index)
    for index, call in enumerate(graph.chain):
        for vid in _written(graph, call):
            value = graph.values[vid]
            if value.constant_id >= 0:
                what = f"constant {value.constant_id}"
            elif maker.get(vid, index) != index:
                what = f"made by {_op(graph, maker[vid])}"
            else:
                continue
            raise MemoryPlanError(f"vkgraph.chain[{index}]", f"{call.name} writes value {vid}, {what}: "
                                  "weights are read-only and state changes only through its update ops", path)


def _written(graph: vk.VkGraph, call: vk.OperatorCall) -> list[int]:
    """The tensors (constants too) of `call`'s output argument; bad ids are skipped."""
    if not call.args:
        return []
    out = graph.values[call.args[-1]] if 0 <= call.args[-1] < len(graph.values) else None
    items = out.items if isinstance(out, vk.ValueList) else (call.args[-1],)
    return [vid for vid in items if 0 <= vid < len(graph.values) and isinstance(graph.values[vid], vk.Tensor)]


def check_memory_plan(graph: vk.VkGraph, path: str | None = None) -> None:
    """Raise MemoryPlanError (naming the tensors and ops) where the plan can give wrong answers.

    Value ids are assumed in range (validate checks them first; bad ids are skipped here)."""
    _check_read_only(graph, path)
    end = len(graph.chain)
    # written at load (prepack) or declared before any call (state): written from the start
    at_load = {vid for call in graph.chain if call.name in (PREPACK, STATE) and call.args
               for vid in activation_ids(graph, call.args[-1:])}
    written = set(activation_ids(graph, graph.input_ids)) | at_load
    spans = {vid: _Span(vid, -1, -1) for vid in written}
    dedicated: set[int] = set()
    for index, call in enumerate(graph.chain):
        if not call.args:
            continue
        for vid in activation_ids(graph, call.args[:-1]):
            if vid not in written:
                raise MemoryPlanError(f"vkgraph.chain[{index}]", f"{call.name} reads value {vid}, which no "
                                      "earlier op writes (nor is it an input, a constant or state)", path)
            spans[vid].last = index
        for vid in activation_ids(graph, call.args[-1:]):
            written.add(vid)
            span = spans.setdefault(vid, _Span(vid, index, index))
            span.last = index
            if call.name in DEDICATED:
                dedicated.add(vid)
    for k, vid in enumerate(graph.output_ids):
        if not activation_ids(graph, [vid]):
            continue  # a constant: written at load
        if vid not in written:
            raise MemoryPlanError(f"vkgraph.output_ids[{k}]", f"value {vid} is written by no op", path)
        spans[vid].last = end
    roots = view_sources(graph)
    objects: dict[int, list[_Span]] = {}
    for vid, span in spans.items():
        value = graph.values[vid]
        if value.mem_obj_id >= 0 and value.nbytes and vid not in dedicated and vid not in at_load:
            objects.setdefault(value.mem_obj_id, []).append(span)
    for obj, members in sorted(objects.items()):
        # The live members, by the tensor whose bytes they are: only one such root may be alive at a
        # time, so each member is checked against the first live one of another root, never against
        # each live member (many live views of one tensor would make that quadratic in a file's size).
        live: dict[int, dict[int, _Span]] = {}
        ending: list[tuple[int, int, int]] = []  # (last, value id, root), a heap: who stops living first
        for span in sorted(members, key=lambda s: (s.first, s.value_id)):
            while ending and ending[0][0] < span.first:
                _, vid, root = heapq.heappop(ending)
                del live[root][vid]
                if not live[root]:
                    del live[root]
            root = roots.get(span.value_id, span.value_id)
            other = next((next(iter(spans.values())) for r, spans in live.items() if r != root), None)
            if other is not None:
                raise MemoryPlanError(
                    f"vkgraph.values[{span.value_id}].mem_obj_id",
                    f"values {other.value_id} and {span.value_id} share memory object {obj} while both are "
                    f"alive: {span.value_id} is written at {_op(graph, span.first)}, {other.value_id} is "
                    f"used until {_op(graph, other.last)}", path)
            live.setdefault(root, {})[span.value_id] = span
            heapq.heappush(ending, (span.last, span.value_id, root))
