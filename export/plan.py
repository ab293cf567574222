"""Activation memory planning: tensors whose lifetimes do not overlap share one memory object.

Lifetimes come from `vkx.format.liveness` (so `vkx inspect` reports the same
A and A_live). Prepack outputs hold weights for good and keep their dedicated
memory (mem_obj_id -1). Objects are assigned greedily, each tensor
into an object that is free for its whole lifetime, in two orders (largest
first, earliest first); the smaller plan wins. An aliasing view's output takes its source's object (their
lifetimes are one: vkx.format.liveness). Zero-element tensors (batch norm's unused
mean/invstd) join object 0: they touch no memory.
"""
from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass, field

from vkx.format.liveness import Lifetime, lifetimes, peak_live_bytes, view_sources
from vkx.format.vkgraph import VkGraph


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


def plan_memory(graph: VkGraph) -> MemoryPlan:
    """Assign shared memory objects and write mem_obj_ids into `graph`.

    Two greedy orders are tried (largest tensor first; earliest first use first)
    and the plan with fewer total bytes is kept.
    """
    spans = lifetimes(graph)
    peak = peak_live_bytes(spans)
    orders = [sorted(spans, key=lambda s: (-s.nbytes, s.first, s.value_id)),
              sorted(spans, key=lambda s: (s.first, -s.nbytes, s.value_id))]
    plan = min((MemoryPlan(*_assign(order), peak) for order in orders), key=lambda p: p.total_nbytes)
    for out, src in view_sources(graph).items():  # a view shares its source's object (liveness)
        if src in plan.mem_obj_ids:
            plan.mem_obj_ids[out] = plan.mem_obj_ids[src]
    for value_id, mem_obj_id in plan.mem_obj_ids.items():
        graph.values[value_id] = dataclasses.replace(graph.values[value_id], mem_obj_id=mem_obj_id)
    return plan


def _assign(spans: list[Lifetime]) -> tuple[dict[int, int], list[int]]:
    """Place each span, in the given order, into a free object: the smallest one that
    already holds it, else the largest one (which then grows), else a new one."""
    objects: list[_Object] = []
    mem_obj_ids: dict[int, int] = {}
    for span in spans:
        if span.nbytes == 0 and objects:  # touches no memory: any object will do
            mem_obj_ids[span.value_id] = 0
            continue
        free = [i for i, obj in enumerate(objects) if obj.is_free(span.first, span.last)]
        fitting = [i for i in free if objects[i].nbytes >= span.nbytes]
        if fitting:
            chosen = min(fitting, key=lambda i: objects[i].nbytes)
        elif free:
            chosen = max(free, key=lambda i: objects[i].nbytes)
            objects[chosen].nbytes = span.nbytes
        else:
            chosen = len(objects)
            objects.append(_Object(span.nbytes))
        objects[chosen].add(span.first, span.last)
        mem_obj_ids[span.value_id] = chosen
    return mem_obj_ids, [obj.nbytes for obj in objects]
