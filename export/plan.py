"""Activation memory planning: tensors whose lifetimes do not overlap share one memory object.

A lifetime is the span of chain indices from the op that writes a tensor to the
last op that reads it. Graph inputs live over the whole chain, graph outputs from
their producer to the end. Prepack outputs hold weights for good and keep their
dedicated memory (mem_obj_id -1). Objects are assigned greedily by size: the
largest tensors first, each into the smallest object that is free for its whole
lifetime (best fit), or into a new one. Zero-element tensors (batch norm's unused
mean/invstd) join object 0: they touch no memory.
"""
from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass, field

from vkx.export.ops import PREPACK
from vkx.format.vkgraph import Tensor, ValueList, VkGraph

GPU_ITEMSIZE = 4
"""Every tensor is float32 or int32 on the GPU (docs/architecture.md)."""


@dataclass(frozen=True)
class Lifetime:
    value_id: int
    nbytes: int
    first: int
    last: int


@dataclass(frozen=True)
class MemoryPlan:
    mem_obj_ids: dict[int, int]
    object_nbytes: list[int]
    peak_live_nbytes: int
    """The most activation bytes alive at any one op: the lower bound for any plan."""

    @property
    def total_nbytes(self) -> int:
        """A: the bytes of all memory objects (each as large as its largest member)."""
        return sum(self.object_nbytes)


@dataclass
class _Object:
    nbytes: int
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)

    def is_free(self, first: int, last: int) -> bool:
        """Whether no member's lifetime meets [first, last] (members never overlap each other)."""
        at = bisect.bisect_right(self.starts, last)
        return at == 0 or self.ends[at - 1] < first

    def add(self, first: int, last: int) -> None:
        at = bisect.bisect_right(self.starts, first)
        self.starts.insert(at, first)
        self.ends.insert(at, last)


def lifetimes(graph: VkGraph) -> list[Lifetime]:
    """The lifetime of every tensor that gets planned memory."""
    end = len(graph.chain)
    first: dict[int, int] = {value_id: -1 for value_id in graph.input_ids}
    last: dict[int, int] = {value_id: end for value_id in [*graph.input_ids, *graph.output_ids]}
    dedicated: set[int] = set()
    for index, call in enumerate(graph.chain):
        *reads, written = call.args
        for value_id in _tensors(graph, reads):
            last[value_id] = max(last.get(value_id, index), index)
        for value_id in _tensors(graph, [written]):
            first[value_id] = index
            last.setdefault(value_id, index)
            if call.name == PREPACK:
                dedicated.add(value_id)
    return [Lifetime(value_id, graph.values[value_id].numel * GPU_ITEMSIZE, first[value_id], last[value_id])
            for value_id in sorted(first) if value_id not in dedicated]


def _tensors(graph: VkGraph, value_ids: list[int]) -> list[int]:
    """The non-constant tensor ids among `value_ids`, looking one level into ValueLists."""
    found = []
    for value_id in value_ids:
        value = graph.values[value_id]
        items = value.items if isinstance(value, ValueList) else (value_id,)
        for item in items:
            tensor = graph.values[item]
            if isinstance(tensor, Tensor) and tensor.constant_id < 0:
                found.append(item)
    return found


def plan_memory(graph: VkGraph) -> MemoryPlan:
    """Assign shared memory objects (greedy by size, best fit) and write mem_obj_ids into `graph`."""
    spans = lifetimes(graph)
    objects: list[_Object] = []
    mem_obj_ids: dict[int, int] = {}
    for span in sorted(spans, key=lambda s: (-s.nbytes, s.first, s.value_id)):
        if span.nbytes == 0 and objects:  # touches no memory: any object will do
            mem_obj_ids[span.value_id] = 0
            continue
        free = [i for i, obj in enumerate(objects) if obj.is_free(span.first, span.last)]
        if free:
            chosen = min(free, key=lambda i: objects[i].nbytes)
        else:
            chosen = len(objects)
            objects.append(_Object(span.nbytes))
        objects[chosen].add(span.first, span.last)
        mem_obj_ids[span.value_id] = chosen
    for value_id, mem_obj_id in mem_obj_ids.items():
        graph.values[value_id] = dataclasses.replace(graph.values[value_id], mem_obj_id=mem_obj_id)
    return MemoryPlan(mem_obj_ids, [obj.nbytes for obj in objects], peak_live_nbytes(spans))


def peak_live_nbytes(spans: list[Lifetime]) -> int:
    """The largest sum of bytes of tensors alive at the same chain index."""
    changes: dict[int, int] = {}
    for span in spans:
        changes[span.first] = changes.get(span.first, 0) + span.nbytes
        changes[span.last + 1] = changes.get(span.last + 1, 0) - span.nbytes
    live = peak = 0
    for index in sorted(changes):
        live += changes[index]
        peak = max(peak, live)
    return peak
