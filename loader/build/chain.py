"""What a fusion pattern (vkx.loader.build.fuse) reads of a VkGraph's op chain: who writes and who reads
each value, which values the memory plan put in one memory object, and the `Fused` step a match
becomes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from vkx.format import opset
from vkx.format import vkgraph as g
from vkx.format.liveness import DEDICATED
from vkx.loader.ops import OpBuilder, TensorArg


@dataclass(frozen=True)
class Fused:
    """One step that does the work of several op calls (`node_ids`)."""
    name: str
    node_ids: tuple[int, ...]
    run: Callable[[OpBuilder, Callable[[int], TensorArg]], None]
    """Records the dispatches, given the builder and a function from value id to TensorArg."""
    first: bool = False
    """Runs at its first op's place (else its last's)."""


class OpChain:
    """Who writes and who reads each value of a graph's chain."""

    def __init__(self, graph: g.VkGraph):
        self.graph = graph
        self.writer: dict[int, int] = {}
        self.readers: dict[int, list[int]] = {}
        for i, op in enumerate(graph.chain):
            if not op.args:
                continue
            for vid in op.args[:-1]:
                for item in self.items(vid):
                    self.readers.setdefault(item, []).append(i)
            for item in self.items(op.args[-1]):
                self.writer.setdefault(item, i)
        self.outputs = set(graph.output_ids)

    def items(self, vid: int) -> tuple[int, ...]:
        v = self.value(vid)
        return v.items if isinstance(v, g.ValueList) else (vid,)

    def value(self, vid: int | None):
        return self.graph.values[vid] if isinstance(vid, int) and 0 <= vid < len(self.graph.values) else None

    def args(self, i: int, *names: str) -> tuple[int | None, ...]:
        """Op `i`'s arguments `names` (value ids), read by its declaration: None for one the call leaves out
        (a call may end before its trailing optional arguments; the output is always its last)."""
        op = self.graph.chain[i]
        declared = [a.name for a in opset.lookup(op.name).args]
        given = op.args[:-1]
        return tuple(given[k] if (k := declared.index(n)) < len(given) else None for n in names)

    def absent(self, vid: int | None) -> bool:
        """Whether an optional argument is left out of its call or given as Null."""
        return vid is None or isinstance(self.value(vid), g.Null)

    def number(self, i: int, name: str) -> float | None:
        """Op `i`'s number argument `name`: its value, or the declared default where the call leaves it out."""
        (vid,) = self.args(i, name)
        if vid is not None:
            return self.scalar(vid)
        default = next(a.default for a in opset.lookup(self.graph.chain[i].name).args if a.name == name)
        return float(default) if isinstance(default, (int, float)) else None

    def op_of(self, vid: int, *names: str) -> int | None:
        """The index of the op named one of `names` that writes `vid`, if that is how `vid` is made."""
        i = self.writer.get(vid)
        if i is None or self.graph.chain[i].name not in names:
            return None
        return i

    def is_weight(self, vid: int) -> bool:
        """Whether `vid` is a weight: a constant, or a load-time prepack's output."""
        t = self.tensor(vid)
        return t is not None and (t.constant_id >= 0 or self.op_of(vid, "et_vk.prepack.default") is not None)

    def only_reader(self, vid: int, i: int) -> bool:
        """Whether op `i` is the one reader of `vid` (read once) and `vid` is no graph output."""
        return self.readers.get(vid) == [i] and vid not in self.outputs

    def scalar(self, vid: int) -> float | None:
        v = self.value(vid)
        if isinstance(v, (g.Int, g.Double)):
            return float(v.value)
        return None

    def tensor(self, vid: int) -> g.Tensor | None:
        v = self.value(vid)
        return v if isinstance(v, g.Tensor) else None


CAST = ("aten._to_copy.default",)
MUL = ("aten.mul.Tensor",)


def other_operand(op: g.OperatorCall, vid: int) -> int | None:
    """The other operand of a two-operand op that reads `vid` (None when it reads it twice)."""
    a, b = op.args[0], op.args[1]
    if a == vid and b != vid:
        return b
    if b == vid and a != vid:
        return a
    return None


def shares_memory(c: OpChain, x: int, z: int) -> bool:
    """Whether the plan put `z` in the memory object of `x`."""
    xt, zt = c.tensor(x), c.tensor(z)
    return xt is not None and zt is not None and 0 <= zt.mem_obj_id == xt.mem_obj_id


def touched_between(c: OpChain, lo: int, hi: int, z: int, skip: Sequence[int]) -> bool:
    """Whether an op after `lo` and before `hi`, not in `skip`, reads or writes memory the plan gave `z`."""
    chain = c.graph.chain
    return any(j not in skip and shares_memory(c, t, z)
               for j in range(lo + 1, hi) for vid in chain[j].args for t in c.items(vid))


def safe(c: OpChain, ops: Sequence[int], inputs: Sequence[int]) -> bool:
    """Whether no op outside the match, between its first and last op, writes an input's memory
    after that input was made (the op that makes an input may sit between them)."""
    inside = set(ops)
    for i in range(min(ops), max(ops)):
        if i in inside:
            continue
        for vid in c.items(c.graph.chain[i].args[-1]) if c.graph.chain[i].args else ():
            for x in inputs:
                if (vid == x or shares_memory(c, x, vid)) and i > c.writer.get(x, -1):
                    return False
    return True


def boundary(c: OpChain, ops: list[int]) -> tuple[set[int], set[int]]:
    """(the tensors the match's ops read from outside it, what they write that outlives it: read by
    another op, or a graph output): what a fused kernel binds; intermediates are never stored."""
    inside = set(ops)
    chain = c.graph.chain
    written = {v for i in ops for v in c.items(chain[i].args[-1])}
    read = {v for i in ops for a in chain[i].args[:-1] for v in c.items(a)
            if v not in written and c.tensor(v) is not None}
    kept = {v for v in written if v in c.outputs or any(r not in inside for r in c.readers.get(v, []))}
    return read, kept


def bindings(c: OpChain, ops: list[int]) -> int:
    """The storage buffers a fused kernel binds (`boundary`)."""
    read, kept = boundary(c, ops)
    return len(read) + len(kept)


def own_memory(c: OpChain, vid: int) -> bool:
    """Whether `vid` has memory of its own whatever its `mem_obj_id` (a weight, state: `DEDICATED`)."""
    i = c.writer.get(vid)
    return c.is_weight(vid) or (i is not None and c.graph.chain[i].name in DEDICATED)


def stored_over_reads(c: OpChain, ops: list[int], in_place: bool) -> set[int]:
    """What the match's kernel stores (a value its ops write that is read after it or is a graph
    output) in the memory object of a value it reads from outside the match; with `in_place` (a kernel
    that stores each element after reading that place: vkx.loader.build.fuse), not over a value of its element
    count and size."""
    read, kept = boundary(c, ops)
    read = {v for v in read if not own_memory(c, v)}
    stored = {v for v in kept if c.tensor(v) is not None and not own_memory(c, v)}

    def same_places(x: int, z: int) -> bool:
        xt, zt = c.tensor(x), c.tensor(z)
        return in_place and xt.numel == zt.numel and xt.dtype.itemsize == zt.dtype.itemsize

    return {z for z in stored if any(shares_memory(c, x, z) and not same_places(x, z) for x in read)}
