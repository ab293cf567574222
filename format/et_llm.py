"""ExecuTorch's LLM programs (its Llama recipe, `export_llama --vulkan -kv --use_sdpa_with_kv_cache`) as
static graphs of vkx's ops.

Such a graph is dynamic in its sequence length: its token input's dim 1 is a bound (`sym_size.int` of it
gives the length), the position comes in as a tensor (`et_vk.select_as_symint.default` turns an element
of it into a symbolic int, `add` adds to one), and `sdpa_with_kv_cache.default` writes each layer's
key/value cache (a constant of zeros that ExecuTorch's runtime keeps as a tensor across calls) at the
position and attends causally over it. `static_graph` builds the graph for one sequence length n: every
activation dim that was the bound is n, the symbolic ints known from shapes become numbers, and the ones
that hold a position become device work on a positions tensor `input_pos[0] + arange(n)`:

* `slice_copy(x, dim, pos, pos + n)` is `index_select(x, dim, positions)`;
* `sdpa_with_kv_cache` is each cache made state (`vkx.state`, its constant the initial value), written
  at the positions (`vkx.index_copy`), and `scaled_dot_product_attention` of the heads-first q and cache
  (grouped heads as they are) under the mask `positions[:, None] >= arange(cache length)`.

The methods ExecuTorch's recipe adds beside `forward` (no inputs, one constant output: `use_kv_cache`,
`get_max_context_len`, `get_eos_ids`, ...) are read by `llm_info`.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import vkgraph as g
from .contract import ContractError
from .op_state import INDEX_COPY, STATE
from .program import DecodedProgram

SYM_SIZE = "sym_size.int"
SYM_ADD = "add"
SELECT_AS_SYMINT = "et_vk.select_as_symint.default"
SDPA_WITH_KV_CACHE = "sdpa_with_kv_cache.default"
SYMBOLIC = frozenset({SYM_SIZE, SYM_ADD, SELECT_AS_SYMINT})
"""Ops whose output is a symbolic int, not a tensor."""


@dataclass(frozen=True)
class Position:
    """A symbolic int held on the device: element `index` of 1-D int tensor `vid`, plus `offset`."""
    vid: int
    index: int
    offset: int


@dataclass(frozen=True)
class LLMInfo:
    """What ExecuTorch's LLM recipe records in its constant methods (`get_eos_ids`: one output per id)."""
    max_context_len: int
    eos_token_ids: tuple[int, ...]


def llm_info(program: DecodedProgram) -> LLMInfo | None:
    """The recipe's metadata methods, when the program has them (`use_kv_cache` true)."""
    consts = {}  # each constant method's outputs (get_eos_ids has one Int output per id)
    for plan in program.execution_plan:
        if not plan.inputs and plan.outputs and not plan.delegates:
            consts[plan.name] = tuple(plan.values[i].value for i in plan.outputs)
    if consts.get("use_kv_cache") != (True,) or len(consts.get("get_max_context_len", ())) != 1:
        return None
    eos = tuple(int(e) for e in consts.get("get_eos_ids", ()) if isinstance(e, int))
    return LLMInfo(int(consts["get_max_context_len"][0]), eos)


def sequence_bound(graph: g.VkGraph) -> int | None:
    """The bound of the graph's dynamic sequence dim (the dim `sym_size.int` reads), None for a static graph."""
    bounds = set()
    for op in graph.chain:
        if op.name == SYM_SIZE and len(op.args) == 3:
            t, dim = (graph.values[a] if 0 <= a < len(graph.values) else None for a in op.args[:2])
            if not isinstance(t, g.Tensor) or not isinstance(dim, g.Int) or not -len(t.dims) <= dim.value < len(t.dims):
                raise ContractError(f"node {op.node_id} ({op.name}): not the size of a dim of a tensor")
            bounds.add(t.dims[dim.value])
    if len(bounds) > 1:
        raise ContractError(f"the graph's dynamic sizes have different bounds {sorted(bounds)}")
    return bounds.pop() if bounds else None


def static_graph(graph: g.VkGraph, seq_len: int | None = None) -> g.VkGraph:
    """`graph` built for `seq_len` tokens (None: its bound); a graph without symbolic ints as it is.
    ContractError for a dynamic graph vkx cannot make static."""
    if not any(op.name in SYMBOLIC or op.name == SDPA_WITH_KV_CACHE for op in graph.chain):
        return graph
    return _Static(graph, seq_len).graph


class _Static:
    def __init__(self, graph: g.VkGraph, seq_len: int | None):
        bound = sequence_bound(graph)
        n = bound if seq_len is None else seq_len
        if bound is not None and not 1 <= n <= bound:
            raise ContractError(f"a sequence of {n} tokens: this program takes 1 to {bound}")
        self.n = n
        self.values: list[g.Value] = [
            g.Tensor(v.datatype, tuple(n if d == bound else d for d in v.dims), v.constant_id, v.mem_obj_id,
                     v.storage_type, v.memory_layout, v.staging_datatype)
            if isinstance(v, g.Tensor) and v.constant_id < 0 and bound is not None else v for v in graph.values]
        self.syms: dict[int, int | Position] = {}
        self.chain: list[g.OperatorCall] = []
        self.head: list[g.OperatorCall] = []  # the state declarations, first in the chain
        self.positions: dict[tuple[Position, int], int] = {}
        self.masks: dict[tuple[int, int], int] = {}
        self.caches: dict[int, int] = {}  # a cache constant -> its state tensor as last written
        self.node = max((op.node_id for op in graph.chain), default=0) + 1
        for op in graph.chain:
            self._op(op)
        self.graph = g.VkGraph(self.head + self.chain, self.values, list(graph.input_ids), list(graph.output_ids),
                               list(graph.constants), graph.version)

    # -- values ------------------------------------------------------------------
    def _new(self, v: g.Value) -> int:
        self.values.append(v)
        return len(self.values) - 1

    def _tensor(self, like: int | g.DataType, dims) -> int:
        datatype = like if isinstance(like, g.DataType) else self.values[like].datatype
        return self._new(g.Tensor(datatype, tuple(int(d) for d in dims)))

    def _emit(self, name: str, *args: int, head: bool = False) -> None:
        (self.head if head else self.chain).append(g.OperatorCall(self.node, name, tuple(args)))
        self.node += 1

    def _sym(self, vid: int, where: str) -> int | Position:
        v = self.values[vid]
        if vid in self.syms:
            return self.syms[vid]
        if isinstance(v, g.Int):
            return v.value
        raise ContractError(f"{where}: value {vid} is {type(v).__name__}, not a symbolic int computed before it")

    # -- ops ---------------------------------------------------------------------
    def _op(self, op: g.OperatorCall) -> None:
        where = f"node {op.node_id} ({op.name})"
        args, out = op.args[:-1], op.args[-1] if op.args else -1
        if op.name in SYMBOLIC and not isinstance(self.values[out], g.SymInt):
            raise ContractError(f"{where}: the output must be a SymInt")
        if op.name == SYM_SIZE:
            self._set(out, self.n)
        elif op.name == SELECT_AS_SYMINT:
            x, dim, index = (self.values[a] for a in args)
            if not (isinstance(x, g.Tensor) and len(x.dims) == 1 and x.datatype == g.DataType.INT32
                    and isinstance(dim, g.Int) and dim.value in (0, -1) and isinstance(index, g.Int)
                    and -x.dims[0] <= index.value < x.dims[0]):
                raise ContractError(f"{where}: vkx takes a position from an element of a 1-D int tensor")
            self.syms[out] = Position(args[0], index.value % x.dims[0], 0)
        elif op.name == SYM_ADD:
            a, b = (self._sym(v, where) for v in args)
            if isinstance(a, Position) and isinstance(b, Position):
                raise ContractError(f"{where}: the sum of two positions")
            if isinstance(b, Position):
                a, b = b, a
            self._set(out, Position(a.vid, a.index, a.offset + b) if isinstance(a, Position) else a + b)
        elif op.name == SDPA_WITH_KV_CACHE:
            self._sdpa(op, where)
        elif op.name == "aten.slice_copy.Tensor" and any(isinstance(self.syms.get(a), Position) for a in args):
            self._slice(op, where)
        else:
            for a in self._scalar_ids(args):
                if isinstance(self.syms.get(a), Position):
                    raise ContractError(f"{where}: vkx takes a position here only in slice_copy and sdpa_with_kv_cache")
            self.chain.append(op)

    def _scalar_ids(self, args):
        for a in args:
            v = self.values[a]
            yield from v.items if isinstance(v, g.ValueList) else (a,)

    def _set(self, vid: int, value: int | Position) -> None:
        self.syms[vid] = value
        if isinstance(value, int):
            self.values[vid] = g.SymInt(value)

    def _positions(self, pos: Position, length: int) -> int:
        """The int32 tensor [length] of positions pos, pos + 1, ..., made once."""
        key = (pos, length)
        if key not in self.positions:
            src = pos.vid
            if self.values[src].dims[0] != 1:
                src = self._tensor(pos.vid, (1,))
                self._emit("aten.slice_copy.Tensor", pos.vid, self._new(g.Int(0)), self._new(g.Int(pos.index)),
                           self._new(g.Int(pos.index + 1)), self._new(g.Int(1)), src)
            steps = self._tensor(g.DataType.INT32, (length,))
            null = self._new(g.Null())
            self._emit("aten.arange.start_step", self._new(g.Int(pos.offset)), self._new(g.Int(pos.offset + length)),
                       self._new(g.Int(1)), null, null, null, null, steps)
            out = self._tensor(g.DataType.INT32, (length,))
            self._emit("aten.add.Tensor", src, steps, self._new(g.Int(1)), out)
            self.positions[key] = out
        return self.positions[key]

    def _slice(self, op: g.OperatorCall, where: str) -> None:
        src, dim, start, end, step, out = op.args
        begin, stop = self._sym(start, where), self._sym(end, where)
        out_t = self.values[out]
        d = self.values[dim].value if isinstance(self.values[dim], g.Int) else None
        length = out_t.dims[d] if d is not None and -len(out_t.dims) <= d < len(out_t.dims) else -1
        if not (isinstance(begin, Position) and isinstance(stop, Position) and (begin.vid, begin.index) ==
                (stop.vid, stop.index) and stop.offset - begin.offset == length
                and isinstance(self.values[step], g.Int) and self.values[step].value == 1):
            raise ContractError(f"{where}: vkx slices at a position only [pos, pos + the output's length), step 1")
        self._emit("aten.index_select.default", src, dim, self._positions(begin, length), out)

    def _sdpa(self, op: g.OperatorCall, where: str) -> None:
        if len(op.args) != 12:
            raise ContractError(f"{where}: {len(op.args) - 1} arguments before the output, the op takes 11")
        q, k, v, k_cache, v_cache, start_pos, _seq_len, mask, dropout, causal, scale, out = op.args
        tensors = [self.values[a] for a in (q, k, v, k_cache, v_cache, out)]
        if not all(isinstance(t, g.Tensor) and len(t.dims) == 4 for t in tensors):
            raise ContractError(f"{where}: q, k, v, the caches and the output must be [B, S, H, D] tensors")
        qt, kt, vt, kct, vct, _ = tensors
        pos = self._sym(start_pos, where)
        if not isinstance(pos, Position):
            pos = None
        drop = self.values[dropout]
        if (not isinstance(self.values[mask], g.Null) or not isinstance(self.values[causal], g.Bool)
                or not self.values[causal].value or (isinstance(drop, (g.Int, g.Double)) and drop.value != 0)):
            raise ContractError(f"{where}: vkx runs the causal form without a mask or dropout")
        if pos is None or kct.dims != vct.dims or kct.dims[0] != 1 or kt.dims[1] != qt.dims[1]:
            raise ContractError(f"{where}: caches {list(kct.dims)} and {list(vct.dims)} at a position from an "
                                "input tensor are what vkx runs")
        seq, length = qt.dims[1], kct.dims[1]
        positions = self._positions(pos, seq)
        one, heads_first = self._new(g.Int(1)), self._new(g.IntList((0, 2, 1, 3)))
        cached = []
        for cache, new in ((k_cache, k), (v_cache, v)):
            if cache not in self.caches:
                if self.values[cache].constant_id < 0:
                    raise ContractError(f"{where}: a cache that is not a constant")
                state = self._tensor(cache, self.values[cache].dims)
                name = f"{'k' if cache == k_cache else 'v'}_cache_{len(self.caches) // 2}"
                self._emit(STATE, self._new(g.String(name)), cache, state, head=True)
                self.caches[cache] = state
            written = self._tensor(cache, self.values[cache].dims)
            self._emit(INDEX_COPY, self.caches[cache], one, positions, new, written)
            self.caches[cache] = written
            t = self.values[written]
            cached.append(self._tensor(written, (t.dims[0], t.dims[2], t.dims[1], t.dims[3])))
            self._emit("aten.permute_copy.default", written, heads_first, cached[-1])
        query = self._tensor(q, (qt.dims[0], qt.dims[2], qt.dims[1], qt.dims[3]))
        self._emit("aten.permute_copy.default", q, heads_first, query)
        attended = self._tensor(out, (qt.dims[0], qt.dims[2], qt.dims[1], vt.dims[3]))
        self._emit("aten.scaled_dot_product_attention.default", query, cached[0], cached[1],
                   self._mask(positions, seq, length), self._new(g.Double(0.0)), self._new(g.Bool(False)), scale,
                   self._new(g.Bool(True)), attended)
        self._emit("aten.permute_copy.default", attended, heads_first, out)

    def _mask(self, positions: int, seq: int, length: int) -> int:
        """bool [seq, length]: query i sees cache slots 0..positions[i]."""
        key = (positions, length)
        if key not in self.masks:
            column = self._tensor(positions, (seq, 1))
            self._emit("aten.view_copy.default", positions, self._new(g.IntList((seq, 1))), column)
            slots = self._tensor(g.DataType.INT32, (length,))
            null = self._new(g.Null())
            self._emit("aten.arange.start_step", self._new(g.Int(0)), self._new(g.Int(length)), self._new(g.Int(1)),
                       null, null, null, null, slots)
            mask = self._tensor(g.DataType.BOOL, (seq, length))
            self._emit("aten.ge.Tensor", column, slots, mask)
            self.masks[key] = mask
        return self.masks[key]
