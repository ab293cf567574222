"""Fusion at load: chains of ops that one kernel does, found in a VkGraph's op chain and replaced
by one `Fused` step, whatever wrote the file (vkx's exporter, ExecuTorch's vocabulary).

A match replaces its ops only when its intermediates are read by nothing else (and are no graph
outputs), and the fused step runs at the position of the match's last op, reading its inputs
there: so no op between the match's first and last one may write into the memory object of an
input (a plan may reuse an input's memory once the match's first op, its last reader, is done).

Patterns:
- RMSNorm as transformers writes it, `w * to(x32 * rsqrt(mean(x32^2, -1) + eps))` with
  `x32 = to(x, fp32)` (the casts and the weight optional): one row kernel (shaders/rms_norm.comp),
  fp32 math, one rounding on the store (the unfused chain rounds before the weight too).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from vkx.format import vkgraph as g
from vkx.loader.ops import OpBuilder, TensorArg
from vkx.loader.ops.reduce import rms_norm_rows


@dataclass(frozen=True)
class Fused:
    """One step that does the work of several op calls (`node_ids`)."""
    name: str
    node_ids: tuple[int, ...]
    run: Callable[[OpBuilder, Callable[[int], TensorArg]], None]
    """Records the dispatches, given the builder and a function from value id to TensorArg."""


class _Chain:
    """Who writes and who reads each value of a graph's chain."""

    def __init__(self, graph: g.VkGraph):
        self.graph = graph
        self.writer: dict[int, int] = {}
        self.readers: dict[int, list[int]] = {}
        for i, op in enumerate(graph.chain):
            if not op.args:
                continue
            for vid in op.args[:-1]:
                for item in self._items(vid):
                    self.readers.setdefault(item, []).append(i)
            for item in self._items(op.args[-1]):
                self.writer.setdefault(item, i)
        self.outputs = set(graph.output_ids)

    def _items(self, vid: int) -> tuple[int, ...]:
        v = self.value(vid)
        return v.items if isinstance(v, g.ValueList) else (vid,)

    def value(self, vid: int):
        return self.graph.values[vid] if 0 <= vid < len(self.graph.values) else None

    def op_of(self, vid: int, *names: str) -> int | None:
        """The index of the op named one of `names` that writes `vid`, if that is how `vid` is made."""
        i = self.writer.get(vid)
        if i is None or self.graph.chain[i].name not in names:
            return None
        return i

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


_CAST = ("aten._to_copy.default",)
_MUL = ("aten.mul.Tensor",)


def _other(op: g.OperatorCall, vid: int) -> int | None:
    """The other operand of a two-operand op that reads `vid` (None when it reads it twice)."""
    a, b = op.args[0], op.args[1]
    if a == vid and b != vid:
        return b
    if b == vid and a != vid:
        return a
    return None


def _rms_norm(c: _Chain, r: int) -> tuple[list[int], list[int], Fused] | None:
    """The RMSNorm whose rsqrt is op `r`: (its op indices, the tensors it reads, the fused step)."""
    chain = c.graph.chain
    mse = chain[r].args[0]
    add = c.op_of(mse, "aten.add.Tensor")
    if add is None or not c.only_reader(mse, r):
        return None
    ms, eps_vid, alpha = chain[add].args[:3]
    eps = c.scalar(eps_vid)
    if eps is None or c.scalar(alpha) != 1.0:
        return None
    mean = c.op_of(ms, "aten.mean.dim")
    if mean is None or not c.only_reader(ms, add):
        return None
    sq, dims, keepdim = chain[mean].args[:3]
    pow_ = c.op_of(sq, "aten.pow.Tensor_Scalar")
    if pow_ is None or not c.only_reader(sq, mean) or c.scalar(chain[pow_].args[1]) != 2.0:
        return None
    h = chain[pow_].args[0]
    ht = c.tensor(h)
    dims_v, keep_v = c.value(dims), c.value(keepdim)
    if ht is None or not ht.dims or not isinstance(dims_v, g.IntList) or len(dims_v.items) != 1 \
            or dims_v.items[0] % len(ht.dims) != len(ht.dims) - 1 or not (isinstance(keep_v, g.Bool) and keep_v.value):
        return None
    rsq = chain[r].args[-1]
    readers = c.readers.get(rsq, [])
    if len(readers) != 1 or rsq in c.outputs or chain[readers[0]].name not in _MUL:
        return None
    mul = readers[0]
    if _other(chain[mul], rsq) != h or sorted(c.readers.get(h, [])) != sorted([pow_, mul]) or h in c.outputs:
        return None
    ops = [pow_, mean, add, r, mul]
    x = h
    cast_in = c.op_of(h, *_CAST)
    if cast_in is not None and c.tensor(chain[cast_in].args[0]) is not None:
        x = chain[cast_in].args[0]
        ops.insert(0, cast_in)
    y = chain[mul].args[-1]
    last = mul
    nxt = c.readers.get(y, [])
    if len(nxt) == 1 and y not in c.outputs and chain[nxt[0]].name in _CAST:
        last = nxt[0]
        y = chain[last].args[-1]
        ops.append(last)
    weight = None
    nxt = c.readers.get(y, [])
    if len(nxt) == 1 and y not in c.outputs and chain[nxt[0]].name in _MUL:
        w = _other(chain[nxt[0]], y)
        wt = c.tensor(w) if w is not None else None
        fixed = wt is not None and (wt.constant_id >= 0 or c.op_of(w, "et_vk.prepack.default") is not None)
        if fixed and tuple(wt.dims) == (ht.dims[-1],):
            weight, last = w, nxt[0]
            y = chain[last].args[-1]
            ops.append(last)
    n = int(ht.dims[-1])

    def run(builder: OpBuilder, arg: Callable[[int], TensorArg]) -> None:
        rms_norm_rows(builder, arg(x), None if weight is None else arg(weight), arg(y), n, eps)

    inputs = [x] if weight is None else [x, weight]
    return sorted(ops), inputs, Fused("rms_norm", tuple(chain[i].node_id for i in sorted(ops)), run)


def _safe(c: _Chain, ops: Sequence[int], inputs: Sequence[int]) -> bool:
    """Whether no op outside the match, between its first and last op, writes an input's memory."""
    objects = {t.mem_obj_id for t in map(c.tensor, inputs) if t is not None and t.mem_obj_id >= 0}
    inside = set(ops)
    for i in range(min(ops), max(ops)):
        if i in inside:
            continue
        for vid in c._items(c.graph.chain[i].args[-1]) if c.graph.chain[i].args else ():
            t = c.tensor(vid)
            if vid in inputs or (t is not None and t.mem_obj_id in objects):
                return False
    return True


def fuse(graph: g.VkGraph) -> list:
    """The graph's chain with every match replaced by one `Fused` step (at its last op's place)."""
    c = _Chain(graph)
    taken: set[int] = set()
    at: dict[int, Fused] = {}
    for i, op in enumerate(graph.chain):
        if op.name != "aten.rsqrt.default" or i in taken:
            continue
        found = _rms_norm(c, i)
        if found is None:
            continue
        ops, inputs, step = found
        if taken.intersection(ops) or not _safe(c, ops, inputs):
            continue
        taken.update(ops)
        at[ops[-1]] = step
    return [at[i] if i in at else op for i, op in enumerate(graph.chain) if i not in taken or i in at]
