"""Fusion at load (vkx.loader.build.fuse), the rotary pattern: rotary embedding as transformers writes it,
`x * cos + cat(-x[..., h:], x[..., :h]) * sin` (neg as a multiply by -1 or neg; cos and sin any
broadcast tensors), one elementwise kernel (shaders/fused_rotary.comp) in place of two slices, a
negation, a two-piece cat, two products and the sum (nine dispatches). Where its result is read only
by a KV-cache write (`vkx.index_copy` along dim 2 of a [B, H, S, D] cache), that dispatch writes the
cache rows too; a rotation before it from the same cos and sin whose result stays (an attention's q)
and the other cache write at the same positions (its v) run in the same dispatch, at the last one's
place.
The tables' pattern: transformers' rotary module, `cos = to(cat(f, f).cos() * scale)` and likewise
sin, of f = to(pos, fp32) times the inverse frequencies (`_frequencies`; the cast, the scales and
the final casts optional; every intermediate fp32): one kernel (shaders/rotary_table.comp) writing
both tables in place of a cast, a product, a cat, the cos and sin, their scales and casts (nine
dispatches a call).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from vkx.format import dtypes, vkgraph as g
from vkx.loader.build.chain import CAST, MUL, Fused, OpChain, touched_between
from vkx.loader.ops import OpBuilder, TensorArg
from vkx.loader.ops.fused import rotary_tables, rotate_half


ROTARY = "rotary"
"""The name of one rotation's step (no cache write beside it): each pair of y is stored by the
invocation that reads the pair of x, cos and sin at its place (shaders/fused_rotary.comp)."""


def _slice_of(c: OpChain, vid: int, src: int, start: int, length: int) -> int | None:
    """The op that makes `vid` as src[..., start:start + length] (last dim, step 1), if it is one."""
    i = c.op_of(vid, "aten.slice_copy.Tensor")
    if i is None:
        return None
    x, dim, first, end = c.args(i, "self", "dim", "start", "end")
    t = c.tensor(x)
    if x != src or t is None or c.number(i, "step") != 1.0 or c.scalar(dim) is None:
        return None
    if int(c.scalar(dim)) % len(t.dims) != len(t.dims) - 1:
        return None
    lo = 0 if isinstance(c.value(first), g.Null) else c.scalar(first)
    hi = t.dims[-1] if isinstance(c.value(end), g.Null) else c.scalar(end)
    if lo is None or hi is None:
        return None
    lo, hi = int(lo), min(int(hi), t.dims[-1])
    return i if (lo, hi - lo) == (start, length) else None


@dataclass(frozen=True)
class _Rotation:
    """A rotary embedding's match: its ops, x, cos, sin, its result y, and the op writing y into a
    KV cache (None: y stays)."""
    ops: list[int]
    x: int
    cos: int
    sin: int
    y: int
    write: int | None


def _rotation(c: OpChain, a: int, max_binding_bytes: int) -> _Rotation | None:
    """transformers' rotary embedding `x * cos + cat(-x[..., h:], x[..., :h]) * sin` whose add is op `a`."""
    chain = c.graph.chain
    left, right = c.args(a, "self", "other")
    if c.number(a, "alpha") != 1.0:
        return None
    for first, second in ((left, right), (right, left)):
        found = _rotary_terms(c, a, first, second)
        if found is not None:
            ops, x, cos, sin = found
            break
    else:
        return None
    xt = c.tensor(x)
    tensors = [xt, c.tensor(cos), c.tensor(sin), c.tensor(chain[a].args[-1])]
    if any(t is None for t in tensors) or len(xt.dims) > 4 or \
            any(t.nbytes > max_binding_bytes for t in tensors):
        return None
    y = chain[a].args[-1]
    write = _cache_write(c, y)
    return _Rotation(sorted(ops + [a] + ([write] if write is not None else [])), x, cos, sin, y, write)


def rotary(c: OpChain, a: int, max_binding_bytes: int) -> tuple[list[int], list[int], Fused] | None:
    """The rotary embedding whose add is op `a` (`_rotation`); where it writes no cache (an
    attention's q), with the rotation after it that writes a cache from the same cos and sin (its
    k) and the other cache write at the same positions (its v), where they can run at the place of
    the last of them (`_delayable`)."""
    chain = c.graph.chain
    r = _rotation(c, a, max_binding_bytes)
    if r is None:
        return None
    q, k, v = (None, r, None) if r.write is not None else (r, _cache_rotation_after(c, r, max_binding_bytes), None)
    if q is not None and k is not None:
        v = _value_write(c, k, q.ops[0], max_binding_bytes)
        if v is not None and not _delayable(c, q, k, v):
            v = None
        if not _delayable(c, q, k, v):
            k = None

    def run(builder: OpBuilder, arg: Callable[[int], TensorArg]) -> None:
        if k is None:
            rotate_half(builder, arg(r.x), arg(r.cos), arg(r.sin), arg(r.y))
            return
        target, index, updated = chain[k.write].args[0], chain[k.write].args[2], chain[k.write].args[-1]
        builder.update(updated, target)
        copied = None
        if v is not None:
            builder.update(chain[v].args[-1], chain[v].args[0])
            copied = (arg(chain[v].args[3]), arg(chain[v].args[0]))
        rotate_half(builder, arg(k.x), arg(k.cos), arg(k.sin), arg(target), arg(index),
                    None if q is None else (arg(q.x), arg(q.y)), copied)

    ops = sorted(set(r.ops + (k.ops if k is not None else []) + ([v] if v is not None else [])))
    inputs = [t for m in (q, k) if m is not None for t in (m.x, m.cos, m.sin)]
    if k is not None:
        inputs += [chain[k.write].args[0], chain[k.write].args[2]]
    if v is not None:
        inputs += [chain[v].args[0], chain[v].args[3]]
    name = ROTARY if k is None else "rotary and cache write" if q is None else \
        "q and k rotaries, k's cache write" if v is None else "q and k rotaries, k and v cache writes"
    return ops, inputs, Fused(name, tuple(chain[i].node_id for i in ops), run)


def _cache_rotation_after(c: OpChain, r: _Rotation, max_binding_bytes: int) -> _Rotation | None:
    """The next rotation after `r` from the same cos and sin, when it writes a cache: x's of 4 dims
    differing in dim 1 at most, cos and sin broadcast over that dim."""
    chain = c.graph.chain
    for b in range(r.ops[-1] + 1, len(chain)):
        if chain[b].name != "aten.add.Tensor":
            continue
        other = _rotation(c, b, max_binding_bytes)
        if other is None or (other.cos, other.sin) != (r.cos, r.sin):
            continue
        xr, xo = c.tensor(r.x), c.tensor(other.x)
        if other.write is None or len(xr.dims) != 4 or len(xo.dims) != 4 or xr.dims[:1] + xr.dims[2:] != \
                xo.dims[:1] + xo.dims[2:] or tuple(c.tensor(r.y).dims) != tuple(xr.dims) or \
                any(len(c.tensor(t).dims) >= 3 and c.tensor(t).dims[-3] != 1 for t in (r.cos, r.sin)):
            return None
        return other
    return None


def _value_write(c: OpChain, k: _Rotation, after: int, max_binding_bytes: int) -> int | None:
    """The first other `vkx.index_copy` along dim 2 after op `after` at k's cache positions (an
    attention's v into its cache), of a value shaped as k's x but for dim 1, into a cache of k's
    cache's length."""
    chain = c.graph.chain
    index = chain[k.write].args[2]
    kx, kc = c.tensor(k.x), c.tensor(chain[k.write].args[0])
    for j in sorted(set(c.readers.get(index, []))):
        op = chain[j]
        if j <= after or j == k.write or op.name != "vkx.index_copy.default" or len(op.args) < 5 or op.args[2] != index:
            continue
        target, value, dim = c.tensor(op.args[0]), c.tensor(op.args[3]), c.scalar(op.args[1])
        if target is None or value is None or dim is None or int(dim) % 4 != 2 or len(value.dims) != 4:
            continue
        if value.dims[:1] + value.dims[2:] == kx.dims[:1] + kx.dims[2:] and target.datatype == value.datatype \
                and tuple(target.dims) == (*value.dims[:2], kc.dims[2], value.dims[3]) \
                and max(target.nbytes, value.nbytes) <= max_binding_bytes:
            return j
    return None


def _delayable(c: OpChain, q: _Rotation, k: _Rotation, v: int | None) -> bool:
    """Whether q's rotation, k's and v's cache write (op `v`) can all run at the place of the last of
    them: what each writes earlier than that is read only after it, and no op in between touches
    the memory it was planned in."""
    chain = c.graph.chain
    ops = q.ops + k.ops + ([v] if v is not None else [])
    last = max(ops)
    moved = [(q.y, q.ops[-1]), (chain[k.write].args[-1], k.write)]
    if v is not None:
        moved.append((chain[v].args[-1], v))
    return all(own == last or (min(c.readers.get(z, [last + 1])) > last and not touched_between(c, own, last, z, ops))
               for z, own in moved)


def _cache_write(c: OpChain, y: int) -> int | None:
    """The op that writes `y` [B, H, n, D] into a cache [B, H, S, D] along dim 2 (`vkx.index_copy`),
    when that is y's one reader."""
    readers = c.readers.get(y, [])
    if len(readers) != 1 or y in c.outputs:
        return None
    op = c.graph.chain[readers[0]]
    if op.name != "vkx.index_copy.default" or len(op.args) < 5 or op.args[3] != y:
        return None
    target, yt, index = c.tensor(op.args[0]), c.tensor(y), c.tensor(op.args[2])
    dim = c.scalar(op.args[1])
    if target is None or yt is None or index is None or dim is None or len(yt.dims) != 4 or \
            len(target.dims) != 4 or int(dim) % 4 != 2 or target.datatype != yt.datatype or \
            (tuple(target.dims[:2]), target.dims[3]) != (tuple(yt.dims[:2]), yt.dims[3]) or \
            tuple(index.dims) != (yt.dims[2],):
        return None
    return readers[0]


def _rotary_terms(c: OpChain, a: int, plain: int, turned: int) -> tuple[list[int], int, int, int] | None:
    """(ops, x, cos, sin) when `plain` = x * cos and `turned` = rotate_half(x) * sin, each read by op `a` only."""
    chain = c.graph.chain
    m1, m2 = c.op_of(plain, *MUL), c.op_of(turned, *MUL)
    if m1 is None or m2 is None or not c.only_reader(plain, a) or not c.only_reader(turned, a):
        return None
    for rot, sin in (chain[m2].args[:2], chain[m2].args[1::-1]):
        cat = c.op_of(rot, "aten.cat.default")
        if cat is not None and c.tensor(sin) is not None:
            break
    else:
        return None
    pieces, dim = c.value(chain[cat].args[0]), chain[cat].args[1]
    if not isinstance(pieces, g.ValueList) or len(pieces.items) != 2 or not c.only_reader(rot, m2):
        return None
    neg_out, low = pieces.items
    neg = c.op_of(neg_out, "aten.neg.default", *MUL)
    if neg is None or not c.only_reader(neg_out, cat) or not c.only_reader(low, cat):
        return None
    high = chain[neg].args[0]
    if chain[neg].name in MUL and c.scalar(chain[neg].args[1]) != -1.0:
        return None
    for x, cos in (chain[m1].args[:2], chain[m1].args[1::-1]):
        xt = c.tensor(x)
        if xt is None or c.tensor(cos) is None or not xt.dims or xt.dims[-1] % 2:
            continue
        h = xt.dims[-1] // 2
        lo_op, hi_op = _slice_of(c, low, x, 0, h), _slice_of(c, high, x, h, h)
        if lo_op is None or hi_op is None or not c.only_reader(high, neg) or c.scalar(dim) is None:
            continue
        if int(c.scalar(dim)) % len(xt.dims) != len(xt.dims) - 1 or c.tensor(turned).dims != xt.dims:
            continue
        return [m1, m2, cat, neg, lo_op, hi_op], x, cos, sin
    return None


def tables(c: OpChain, i: int, max_binding_bytes: int) -> tuple[list[int], list[int], Fused] | None:
    """The rotary tables whose cat is op `i` (the module's docstring): (ops, inputs, the fused step)."""
    chain = c.graph.chain
    emb, et = chain[i].args[-1], c.tensor(chain[i].args[-1])
    pieces, dim = c.value(chain[i].args[0]), c.scalar(chain[i].args[1])
    if et is None or len(et.dims) < 2 or not isinstance(pieces, g.ValueList) or len(pieces.items) != 2 \
            or dim is None or int(dim) % len(et.dims) != len(et.dims) - 1:
        return None
    f, again = pieces.items
    if f != again or set(c.readers[f]) != {i} or f in c.outputs or not _fp32(c, f, emb):
        return None
    found = _frequencies(c, f, et.dims[-1] // 2)
    if found is None:
        return None
    ops, pos, inv = found
    ops.append(i)
    cast, reader = c.op_of(pos, *CAST), c.readers[pos][0]
    if cast is not None and reader in ops and c.only_reader(pos, reader) and _fp32(c, pos):
        ops.append(cast)
        pos = chain[cast].args[0]
    if not _fp32(c, pos) and c.tensor(pos).datatype != dtypes.INT32.datatype:
        return None
    readers = sorted(c.readers.get(emb, []))
    if len(readers) != 2 or emb in c.outputs or {chain[j].name for j in readers} != set(_TRIG):
        return None
    made = {}
    for j in readers:
        made[_TRIG[chain[j].name]] = _table_tail(c, j, ops)
    (cos, cos_scale), (sin, sin_scale) = made["cos"], made["sin"]
    ct, st = c.tensor(cos), c.tensor(sin)
    last = max(ops)
    if (tuple(ct.dims), ct.datatype) != (tuple(st.dims), st.datatype) or tuple(ct.dims) != tuple(et.dims) \
            or not dtypes.of(ct.datatype).is_float or max(t.nbytes for t in (ct, et)) > max_binding_bytes:
        return None
    for y in (cos, sin):  # written at the last op's place: read only after it
        if min(c.readers.get(y, [last + 1])) <= last or touched_between(c, c.writer[y], last, y, ops):
            return None

    def run(builder: OpBuilder, arg: Callable[[int], TensorArg]) -> None:
        rotary_tables(builder, arg(pos), arg(inv), arg(cos), arg(sin), cos_scale, sin_scale)

    ops.sort()
    return ops, [pos, inv], Fused("rotary tables", tuple(chain[j].node_id for j in ops), run)


def _frequencies(c: OpChain, f: int, half: int) -> tuple[list[int], int, int] | None:
    """f [..., n, half] = positions * inverse frequencies, as transformers writes it (5.24: a
    product, `pos [..., n, 1] * inv [half]`; 5.17: a matrix product, `(inv [1, half, 1] expanded
    @ pos [b, 1, n]).transpose(1, 2)`), fp32: (its ops, the positions, the frequencies), the
    positions' n and the tables' rows in one order."""
    chain, ft = c.graph.chain, c.tensor(f)
    rows = math.prod(ft.dims[:-1])
    m = c.op_of(f, *MUL)
    if m is not None:
        for pos, inv in (chain[m].args[:2], chain[m].args[1::-1]):
            ops = [m]
            inv, pt = _unviewed(c, inv, ops), c.tensor(pos)
            if _fixed(c, inv, half) and pt is not None and pt.dims and pt.dims[-1] == 1 \
                    and tuple(pt.dims[:-1]) == tuple(ft.dims[:-1]):
                return ops, pos, inv
        return None
    turn = c.op_of(f, "aten.permute_copy.default")
    order = c.value(chain[turn].args[1]) if turn is not None else None
    if not isinstance(order, g.IntList) or len(ft.dims) != 3 or list(order.items) != [0, 2, 1]:
        return None
    product = chain[turn].args[0]
    mm = c.op_of(product, "aten.matmul.default", "aten.bmm.default")
    if mm is None or not c.only_reader(product, turn):
        return None
    inv, pos = chain[mm].args[:2]
    it = c.tensor(inv)
    if it is None or list(it.dims[-2:]) != [half, 1]:
        return None
    ops = [turn, mm]
    grow = c.op_of(inv, "aten.expand_copy.default")
    if grow is not None and c.only_reader(inv, mm):
        ops.append(grow)
        inv = chain[grow].args[0]
    inv = _unviewed(c, inv, ops)
    pt = c.tensor(pos)
    if not _fixed(c, inv, half) or pt is None or len(pt.dims) != 3 \
            or pt.dims[1] != 1 or pt.dims[0] * pt.dims[2] != rows or pt.dims[2] != ft.dims[1]:
        return None
    return ops, pos, inv


def _unviewed(c: OpChain, vid: int, ops: list[int]) -> int:
    """What `vid` views (`aten.view_copy` read by nothing else, each appended to ops), else `vid`."""
    view = c.op_of(vid, "aten.view_copy.default")
    while view is not None and len(c.readers.get(vid, [])) == 1 and vid not in c.outputs:
        ops.append(view)
        vid = c.graph.chain[view].args[0]
        view = c.op_of(vid, "aten.view_copy.default")
    return vid


def _fixed(c: OpChain, vid: int, n: int) -> bool:
    """Whether `vid` is a weight (`OpChain.is_weight`) of n fp32 elements."""
    return c.is_weight(vid) and math.prod(c.tensor(vid).dims) == n and _fp32(c, vid)


_TRIG = {"aten.cos.default": "cos", "aten.sin.default": "sin"}


def _fp32(c: OpChain, *vids: int) -> bool:
    return all(c.tensor(v) is not None and c.tensor(v).datatype == dtypes.FLOAT32.datatype for v in vids)


def _table_tail(c: OpChain, j: int, ops: list[int]) -> tuple[int, float]:
    """After the cos or sin op `j` (fp32): a multiply by a number and a cast, each optional, each
    the one reader of what it reads; (the table, the number), ops appended."""
    chain = c.graph.chain
    y, scale = chain[j].args[-1], 1.0
    ops.append(j)
    m = c.readers.get(y, [])
    if len(m) == 1 and y not in c.outputs and chain[m[0]].name in MUL and _fp32(c, y):
        number = c.scalar(chain[m[0]].args[1])
        if number is not None and chain[m[0]].args[0] == y:
            scale, y = number, chain[m[0]].args[-1]
            ops.append(m[0])
    cast = c.readers.get(y, [])
    if len(cast) == 1 and y not in c.outputs and chain[cast[0]].name in CAST and _fp32(c, y):
        y = chain[cast[0]].args[-1]
        ops.append(cast[0])
    return y, scale
