"""Which graph inputs index memory (token ids, cache positions, gather indices) and the range their
elements must lie in: what a call checks on the host before it runs, since on the device an index
outside its table reads zeros or writes nothing (docs/safety.md, "Inputs that index memory")."""
from __future__ import annotations

from dataclasses import dataclass

from . import vkgraph as vk


@dataclass(frozen=True)
class IndexRange:
    """Every element of graph input `input` (its place among the inputs) must lie in [low, high): it
    reaches an op that indexes memory with it (`index_ranges`)."""
    input: int
    low: int
    high: int
    what: str
    """What an element is, and of what: "token id" and "the vocabulary", "position" and "the cache"."""
    of: str

    def refusal(self, value: int) -> str:
        """The one line that refuses `value`, an element outside the range."""
        return f"{self.what} {value} is outside {self.of} ({self.low}..{self.high - 1})"


_INDEXING = {
    "aten.embedding.default": (1, 0, None, False, "token id", "the vocabulary"),
    "vkx.embedding_q.default": (2, 0, None, False, "token id", "the vocabulary"),
    "et_vk.embedding_q4gsw.default": (3, 0, None, False, "token id", "the vocabulary"),
    "vkx.index_copy.default": (2, 0, 1, False, "position", "the cache"),
    "aten.index_select.default": (2, 0, 1, False, "index", "the indexed dim"),
    "aten.gather.default": (2, 0, 1, True, "index", "the indexed dim"),
}
"""An op that indexes a tensor with a tensor -> (the index's argument, the indexed tensor's, its dim's
(None: dim 0), whether a negative index counts from the end, what an index is, of what).
`aten.index.Tensor` (a list of index tensors, one a leading dim, negatives from the end) is its own case."""
_INDEX = "aten.index.Tensor"
_SAME_VALUES = frozenset({"aten.view_copy.default", "aten.unsqueeze_copy.default", "aten.squeeze_copy.dims",
                          "aten.permute_copy.default", "aten.clone.default", "aten.alias_copy.default",
                          "aten.expand_copy.default", "aten._to_copy.default",
                          "dim_order_ops._to_dim_order_copy.default", "dim_order_ops._clone_dim_order.default"})
"""Ops whose output holds every element of their first argument and no other (a cast between integer
types keeps every value the check accepts)."""
_ARANGE = "aten.arange.start_step"
_INTEGERS = frozenset({vk.DataType.INT32, vk.DataType.INT64, vk.DataType.INT8, vk.DataType.UINT8})


def index_ranges(graph: vk.VkGraph) -> list[IndexRange]:
    """The range of each integer graph input whose elements an index op uses (`_INDEXING`,
    `aten.index.Tensor`), as they are or plus a number or an arange (a position and the steps after
    it), through `_SAME_VALUES` ops: what a call checks on the host, since on the device an index
    outside its table reads zeros or writes nothing. Bad value ids are skipped."""
    def value(vid: int):
        return graph.values[vid] if 0 <= vid < len(graph.values) else None

    def integer(vid: int) -> bool:
        v = value(vid)
        return isinstance(v, vk.Tensor) and v.datatype in _INTEGERS

    writer = {call.args[-1]: call for call in graph.chain if call.args}
    inputs = {vid: k for k, vid in enumerate(graph.input_ids)}

    def numbers(vid: int) -> tuple[int, int] | None:
        """The least and the most `vid` holds: an Int, or an arange of Ints."""
        v = value(vid)
        if isinstance(v, vk.Int):
            return v.value, v.value
        call = writer.get(vid)
        bounds = [value(a) for a in call.args[:3]] if call is not None and call.name == _ARANGE else []
        if len(bounds) < 3 or not all(isinstance(x, vk.Int) for x in bounds) or bounds[2].value == 0:
            return None
        start, end, step = (x.value for x in bounds)
        count = -(-(end - start) // step)
        if count <= 0:
            return None
        last = start + (count - 1) * step
        return min(start, last), max(start, last)

    def source(vid: int) -> tuple[int, int, int] | None:
        """(input, least, most) when `vid`'s elements are an input's plus a number in [least, most]."""
        least = most = 0
        for _ in range(len(graph.chain) + 1):  # a malformed chain may loop
            if vid in inputs:
                return (inputs[vid], least, most) if integer(vid) else None
            call = writer.get(vid)
            if call is None:
                return None
            if call.name in _SAME_VALUES and integer(call.args[0]) and integer(vid):
                vid = call.args[0]
                continue
            alpha = value(call.args[2]) if call.name == "aten.add.Tensor" and len(call.args) == 4 else None
            if not isinstance(alpha, vk.Int) or alpha.value != 1:
                return None
            a, b = call.args[:2]
            added = [(x, numbers(other)) for x, other in ((a, b), (b, a)) if integer(x)]
            added = [(x, n) for x, n in added if n is not None]
            if not added:
                return None
            vid, (low, high) = added[0]
            least, most = least + low, most + high
        return None

    found = []
    for call in graph.chain:
        if call.name == _INDEX and len(call.args) == 3:
            indices = value(call.args[1])
            uses = [(d, vid, True) for d, vid in enumerate(indices.items)] if isinstance(indices, vk.ValueList) else []
            table, what, of = value(call.args[0]), "index", "the indexed dim"
        elif call.name in _INDEXING and len(call.args) > 3:
            at, t, dim_at, wraps, what, of = _INDEXING[call.name]
            table, dim = value(call.args[t]), 0 if dim_at is None else value(call.args[dim_at])
            dim = dim if isinstance(dim, int) else dim.value if isinstance(dim, vk.Int) else None
            uses = [] if dim is None else [(dim, call.args[at], wraps)]
        else:
            continue
        for dim, vid, wraps in uses:
            if not isinstance(table, vk.Tensor) or not -len(table.dims) <= dim < len(table.dims):
                continue
            size, reached = table.dims[dim], source(vid)
            if reached is not None:
                k, least, most = reached
                found.append(IndexRange(k, (-size if wraps else 0) - least, size - most, what, of))
    # each input's tightest range first (a cache's before a table's of one size): a call's first
    # refusal names the bound it is furthest outside of
    return sorted(set(found), key=lambda r: (r.input, r.high - r.low, r.what != "position", r.low))
