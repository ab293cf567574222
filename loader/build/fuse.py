"""Fusion at load: chains of ops that one kernel does, found in a VkGraph's op chain and replaced
by one `Fused` step, whatever wrote the file (vkx's exporter, ExecuTorch's vocabulary).

A match replaces its ops only when its intermediates are read by nothing else (and are no graph
outputs), and the fused step runs at the position of the match's last op, reading its inputs
there: so no op between the match's first and last one may write into the memory object of an
input (a plan may reuse an input's memory once the match's first op, its last reader, is done).
For the same reason a plan may put what the match stores (a value read after it, or a graph output)
in the memory object of a value the match reads, which the fused kernel reads while it writes: such
a value gets a tensor of its own (`_own_tensors`), or, a graph output (whose memory is its io port),
the match stays unfused. vkx.format.memplan proves the plan of the chain as written; this keeps it
sound for the chain the loader runs.

Patterns (the rotary embedding's, with its cache writes, and its tables': vkx.loader.build.fuse_rotary):
- RMSNorm as transformers writes it, `w * to(x32 * rsqrt(mean(x32^2, -1) + eps))` with
  `x32 = to(x, fp32)` (the casts and the weight optional): one row kernel (shaders/rms_norm.comp),
  fp32 math, one rounding on the store (the unfused chain rounds before the weight too).
- Grouped-query attention with its key/value heads repeated first, as transformers' `repeat_kv` does
  where sdpa is not given `enable_gqa` (`view(expand(x[:, :, None]), [B, Hkv * rep, S, D])` of the
  key and of the value, each a copy of a layer's whole cache per call): sdpa reads x's grouped heads
  in place (`enable_gqa`), the expands and their views go.
- A residual add after a weight product of one row of activations, `linear(x, W) + r` (no bias;
  `vkx.linear_q` too): the add in the product's epilogue (r read as its bias), one dispatch for two
  (a decoder layer's o_proj and down_proj).
- SwiGLU of one row of activations, `silu(linear(x, Wg)) * linear(x, Wu)` (no biases, the weights of
  one shape and of x's dtype; `vkx.linear_q` too, of one packing, the scales both affine or both
  symmetric): the gate and up products read in one workgroup and `silu(gate) * up` stored
  (shaders/matvec.comp's and matvec_q.comp's GLU), one dispatch for four.
- Three bias-free products of one row of activations x and nothing else reading x, `linear(x, Wq)`,
  `linear(x, Wk)`, `linear(x, Wv)` (weights of x's dtype and one K, or `vkx.linear_q` of one packing,
  the scales all affine or all symmetric): one dispatch writing the three outputs (matvec.comp's and
  matvec_q.comp's SEGMENTS), at the first product's place (the others' outputs written earlier than
  planned: no op between the first and the last product may touch their memory).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

from vkx.format import vkgraph as g
from vkx.loader.build.chain import (CAST, MUL, Fused, OpChain, bindings, other_operand, safe, stored_over_reads,
                              touched_between)
from vkx.loader.build.fuse_rotary import ROTARY, rotary, tables
from vkx.loader.ops import OpBuilder, TensorArg
from vkx.loader.ops.attention import attention
from vkx.loader.ops.fused import linear_add
from vkx.loader.ops.gemm import MAX_MATVEC_ROWS, RowNorm, matvec_glu, matvec_products, matvec_row
from vkx.loader.ops.quant import linear_q_row, products_q_row, swiglu_q_row
from vkx.loader.ops.reduce import rms_norm_rows
from vkx.loader.ops.shape import MAX_GROUPS


@dataclass(frozen=True)
class _Norm:
    """A matched RMSNorm: its op indices, input x, weight (a constant [n], or None), output y, eps."""
    ops: tuple[int, ...]
    x: int
    weight: int | None
    y: int
    eps: float


def _rms_norm(c: OpChain, r: int) -> tuple[list[int], list[int], Fused, _Norm] | None:
    """The RMSNorm whose rsqrt is op `r`: (its op indices, the tensors it reads, the fused step, the match)."""
    chain = c.graph.chain
    mse = chain[r].args[0]
    add = c.op_of(mse, "aten.add.Tensor")
    if add is None or not c.only_reader(mse, r):
        return None
    ms, eps_vid = c.args(add, "self", "other")
    eps = c.scalar(eps_vid)
    if eps is None or c.number(add, "alpha") != 1.0:
        return None
    mean = c.op_of(ms, "aten.mean.dim")
    if mean is None or not c.only_reader(ms, add):
        return None
    sq, dims, keepdim = c.args(mean, "self", "dim", "keepdim")
    pow_ = c.op_of(sq, "aten.pow.Tensor_Scalar")
    if pow_ is None or not c.only_reader(sq, mean) or c.number(pow_, "exponent") != 2.0:
        return None
    h = chain[pow_].args[0]
    ht = c.tensor(h)
    dims_v, keep_v = c.value(dims), c.value(keepdim)
    if ht is None or not ht.dims or not isinstance(dims_v, g.IntList) or len(dims_v.items) != 1 \
            or dims_v.items[0] % len(ht.dims) != len(ht.dims) - 1 or not (isinstance(keep_v, g.Bool) and keep_v.value):
        return None
    rsq = chain[r].args[-1]
    readers = c.readers.get(rsq, [])
    if len(readers) != 1 or rsq in c.outputs or chain[readers[0]].name not in MUL:
        return None
    mul = readers[0]
    if other_operand(chain[mul], rsq) != h:
        return None
    ops = [pow_, mean, add, r, mul]
    x = h  # read by others too where it is not the cast's output (in fp32: the residual stream itself)
    cast_in = c.op_of(h, *CAST)
    if cast_in is not None and c.tensor(chain[cast_in].args[0]) is not None \
            and sorted(c.readers.get(h, [])) == sorted([pow_, mul]) and h not in c.outputs:
        x = chain[cast_in].args[0]
        ops.insert(0, cast_in)
    y = chain[mul].args[-1]
    last = mul
    nxt = c.readers.get(y, [])
    if len(nxt) == 1 and y not in c.outputs and chain[nxt[0]].name in CAST:
        last = nxt[0]
        y = chain[last].args[-1]
        ops.append(last)
    weight = None
    nxt = c.readers.get(y, [])
    if len(nxt) == 1 and y not in c.outputs and chain[nxt[0]].name in MUL:
        w = other_operand(chain[nxt[0]], y)
        if w is not None and c.is_weight(w) and tuple(c.tensor(w).dims) == (ht.dims[-1],):
            weight, last = w, nxt[0]
            y = chain[last].args[-1]
            ops.append(last)
    n = int(ht.dims[-1])

    def run(builder: OpBuilder, arg: Callable[[int], TensorArg]) -> None:
        rms_norm_rows(builder, arg(x), None if weight is None else arg(weight), arg(y), n, eps)

    inputs = [x] if weight is None else [x, weight]
    return sorted(ops), inputs, Fused("rms_norm", tuple(chain[i].node_id for i in sorted(ops)), run), \
        _Norm(tuple(sorted(ops)), x, weight, y, float(eps))


_PRODUCTS = ("aten.linear.default", "vkx.linear_q.default")


def _residual_add(c: OpChain, a: int) -> tuple[list[int], list[int], Fused] | None:
    """`linear(x, W) + r` whose add is op `a`: one row of activations, no bias, r of the sum's shape,
    the product read by the add only."""
    chain = c.graph.chain
    (left, right), z = c.args(a, "self", "other"), chain[a].args[-1]
    if c.number(a, "alpha") != 1.0 or left == right:
        return None
    for y, r in ((left, right), (right, left)):
        p = c.op_of(y, *_PRODUCTS)
        if p is not None and c.only_reader(y, a):
            break
    else:
        return None
    op = chain[p]
    linear_q = op.name == "vkx.linear_q.default"
    x, w, bias = c.args(p, "input", "weight", "bias")
    xt, wt, rt, yt, zt = c.tensor(x), c.tensor(w), c.tensor(r), c.tensor(y), c.tensor(z)
    if any(t is None for t in (xt, wt, rt, yt, zt)) or not c.absent(bias) or not xt.dims:
        return None
    if tuple(rt.dims) != tuple(zt.dims) or tuple(yt.dims) != tuple(zt.dims) or r == x:
        return None
    if math.prod(xt.dims) != xt.dims[-1]:
        return None
    inputs = [x, w, r]
    if linear_q:
        (s,), bits, group = c.args(p, "scales"), c.number(p, "bits"), c.number(p, "group_size")
        inputs.insert(2, s)

        def run(builder: OpBuilder, arg: Callable[[int], TensorArg]) -> None:
            linear_q_row(builder, arg(x), arg(w), arg(s), arg(r), arg(z), int(bits), int(group))
    else:
        def run(builder: OpBuilder, arg: Callable[[int], TensorArg]) -> None:
            linear_add(builder, arg(x), arg(w), arg(r), arg(z))

    ops = sorted([p, a])
    return ops, inputs, Fused("linear_add", tuple(chain[i].node_id for i in ops), run)


@dataclass(frozen=True)
class _Weight:
    """A product's weight: W (a linear's), or vkx.linear_q's packed rows, scales, bits and group."""
    w: int
    scales: int | None = None
    bits: int = 0
    group: int = 0

    def packing(self, c: OpChain) -> tuple:
        """What products over one kernel must share: dtypes, K, and the quantized packing (symmetric scales
        [N, groups] or affine pairs [N, groups, 2]: matvec_q.comp's AFFINE is one define for them all)."""
        wt, st = c.tensor(self.w), c.tensor(self.scales) if self.scales is not None else None
        return wt.datatype, wt.dims[1:], self.bits, self.group, None if st is None else (st.datatype, len(st.dims))

    def args(self, arg: Callable[[int], TensorArg]):
        return arg(self.w) if self.scales is None else (arg(self.w), arg(self.scales))


def _row_product(c: OpChain, p: int) -> tuple[int, _Weight] | None:
    """(x, weight) when op `p` is a bias-free `linear(x, W)` or `vkx.linear_q` of one row of activations."""
    op = c.graph.chain[p]
    if op.name not in _PRODUCTS:
        return None
    linear_q = op.name == "vkx.linear_q.default"
    x, w, bias = c.args(p, "input", "weight", "bias")
    xt, wt = c.tensor(x), c.tensor(w)
    if xt is None or wt is None or len(wt.dims) != 2 or not xt.dims or math.prod(xt.dims) != xt.dims[-1] \
            or not c.absent(bias):
        return None
    if not linear_q:
        return x, _Weight(w)
    (scales,), bits, group = c.args(p, "scales"), c.number(p, "bits"), c.number(p, "group_size")
    if c.tensor(scales) is None or bits is None or group is None or int(group) % (128 // int(bits)) \
            or xt.dims[-1] % (128 // int(bits)):
        return None  # not matvec_q.comp's: rows of whole 16-byte chunks inside the scale groups
    return x, _Weight(w, scales, int(bits), int(group))


def _one_row_linear(c: OpChain, vid: int, reader: int) -> tuple[int, int, _Weight] | None:
    """(op index, x, weight) when `vid` is made by a `_row_product` and read by op `reader` only."""
    p = c.op_of(vid, *_PRODUCTS)
    if p is None or not c.only_reader(vid, reader):
        return None
    found = _row_product(c, p)
    return None if found is None else (p, *found)


def _one_dtype(c: OpChain, x: int, weights: list[int]) -> bool:
    """Whether `weights` have one dtype and `x`, an activation, has it or is fp32: the rule of the fused
    row kernels (vkx.loader.ops.gemm.one_dtype); otherwise they stay unfused."""
    dtypes_ = {c.tensor(w).datatype for w in weights}
    return not c.is_weight(x) and all(c.is_weight(w) for w in weights) and len(dtypes_) <= 1 \
        and (not dtypes_ or c.tensor(x).datatype in (*dtypes_, g.DataType.FLOAT32))


def _float_weights(weights: list[_Weight]) -> list[int]:
    """The float weights among `weights` (a linear's W: typed with x; vkx.linear_q's scales are not)."""
    return [w.w for w in weights if w.scales is None]


def _foldable(c: OpChain, norms: dict[int, _Norm], x: int, products: list[int],
              weights: list[_Weight]) -> _Norm | None:
    """The RMSNorm whose output `x` is, where it folds into these products (matvec.comp's and
    matvec_q.comp's NORM): it has a weight, x is read by them alone and is no graph output (the fold
    writes no x), its input, its weight and the float weights are of one dtype (`_one_dtype`), and x's
    input is intact until the products run."""
    norm = norms.get(x)
    if norm is None or norm.weight is None or x in c.outputs or sorted(c.readers.get(x, [])) != sorted(products) \
            or not _one_dtype(c, norm.x, [norm.weight, *_float_weights(weights)]):
        return None
    return norm if safe(c, [*norm.ops, *products], [norm.x, norm.weight]) else None


def _norm_product(c: OpChain, i: int, norms: dict[int, _Norm],
                  max_binding_bytes: int) -> tuple[list[int], list[int], Fused] | None:
    """A `_row_product` (op `i`) of an RMSNorm's output read by it alone: the norm folded into the
    product (an LM's final norm and head)."""
    found = _row_product(c, i)
    if found is None:
        return None
    x, w = found
    z = c.graph.chain[i].args[-1]
    norm = _foldable(c, norms, x, [i], [w])
    wt, zt = c.tensor(w.w), c.tensor(z)
    if norm is None or zt is None or c.tensor(x).dims[-1] % 8 or math.prod(zt.dims) != wt.dims[0] \
            or -(-wt.dims[0] // MAX_MATVEC_ROWS) > MAX_GROUPS \
            or (w.scales is None and any(t.nbytes > max_binding_bytes for t in (c.tensor(norm.x), wt, zt))):
        return None  # a float product in one binding, or a packed one in row blocks (matvec_q.comp)

    def run(builder: OpBuilder, arg: Callable[[int], TensorArg]) -> None:
        fold = RowNorm(arg(norm.weight), norm.eps)
        if w.scales is None:
            matvec_row(builder, arg(norm.x), arg(w.w), arg(z), fold)
        else:
            linear_q_row(builder, arg(norm.x), arg(w.w), arg(w.scales), None, arg(z), w.bits, w.group, fold)

    ops = sorted([*norm.ops, i])
    inputs = [norm.x, norm.weight] + [t for t in (w.w, w.scales) if t is not None]
    return ops, inputs, Fused("rms_norm_linear", tuple(c.graph.chain[j].node_id for j in ops), run)


def _swiglu(c: OpChain, m: int, norms: dict[int, _Norm],
            max_binding_bytes: int) -> tuple[list[int], list[int], Fused] | None:
    """`silu(linear(x, Wg)) * linear(x, Wu)` whose multiply is op `m`."""
    chain = c.graph.chain
    left, right, z = chain[m].args[:3]
    for s, u in ((left, right), (right, left)):
        act = c.op_of(s, "aten.silu.default")
        if act is not None and c.only_reader(s, m):
            break
    else:
        return None
    gate, up = _one_row_linear(c, chain[act].args[0], act), _one_row_linear(c, u, m)
    if gate is None or up is None or gate[1] != up[1]:
        return None
    x, wg, wu = gate[1], gate[2], up[2]
    xt, wgt, wut, zt = c.tensor(x), c.tensor(wg.w), c.tensor(wu.w), c.tensor(z)
    if zt is None or tuple(wgt.dims) != tuple(wut.dims) or wg.packing(c) != wu.packing(c):
        return None
    if xt.dims[-1] % 8 or math.prod(zt.dims) != wgt.dims[0] \
            or any(t.nbytes > max_binding_bytes for t in (xt, wgt, wut, zt)):
        return None

    norm = _foldable(c, norms, x, [gate[0], up[0]], [wg, wu])
    read = x if norm is None else norm.x
    if wg.scales is None and not _one_dtype(c, read, [wg.w, wu.w]):
        return None

    def run(builder: OpBuilder, arg: Callable[[int], TensorArg]) -> None:
        fold = None if norm is None else RowNorm(arg(norm.weight), norm.eps)
        if wg.scales is None:
            matvec_glu(builder, arg(read), arg(wg.w), arg(wu.w), arg(z), fold)
        else:
            swiglu_q_row(builder, arg(read), wg.args(arg), wu.args(arg), arg(z), wg.bits, wg.group, fold)

    ops = sorted([gate[0], act, up[0], m, *(norm.ops if norm else ())])
    inputs = [x] if norm is None else [norm.x, norm.weight]
    inputs += [t for w in (wg, wu) for t in (w.w, w.scales) if t is not None]
    return ops, inputs, Fused("swiglu" if norm is None else "rms_norm_swiglu", tuple(chain[i].node_id for i in ops), run)


def _products(c: OpChain, i: int, norms: dict[int, _Norm],
              max_binding_bytes: int) -> tuple[list[int], list[int], Fused] | None:
    """Three `_row_product`s of one x that nothing else reads, of one kernel and packing, the first
    of them op `i`: one dispatch at op i's place."""
    chain = c.graph.chain
    found = _row_product(c, i)
    if found is None:
        return None
    x, first = found
    readers = sorted(set(c.readers.get(x, [])))
    if len(readers) != 3 or readers[0] != i or x in c.outputs:
        return None
    weights = [_row_product(c, r) for r in readers]
    if any(w is None or w[0] != x or x in (w[1].w, w[1].scales) or chain[r].name != chain[i].name
           or w[1].packing(c) != first.packing(c) for r, w in zip(readers, weights)):
        return None
    outs = [chain[r].args[-1] for r in readers]
    tensors = [c.tensor(t) for w in weights for t in (w[1].w, w[1].scales) if t is not None]
    if any(c.tensor(z) is None or math.prod(c.tensor(z).dims) != c.tensor(w.w).dims[0]
           for z, (_, w) in zip(outs, weights)) or c.tensor(x).dims[-1] % 8 \
            or any(t.nbytes > max_binding_bytes for t in tensors + [c.tensor(t) for t in [x, *outs]]):
        return None
    # every weight ready at op i's place; no op between i and a later product touches memory that
    # product's output was planned in (written earlier than planned, it would clobber that op's bytes)
    if any(c.writer.get(t, -1) >= i for _, w in weights for t in (w.w, w.scales) if t is not None):
        return None
    if any(touched_between(c, i, r, z, readers) for r, z in zip(readers[1:], outs[1:])):
        return None
    kernel = [w for _, w in weights]
    norm = _foldable(c, norms, x, readers, kernel)
    read = x if norm is None else norm.x
    if first.scales is None and not _one_dtype(c, read, [w.w for w in kernel]):
        return None

    def run(builder: OpBuilder, arg: Callable[[int], TensorArg]) -> None:
        stores = [arg(z) for z in outs]
        fold = None if norm is None else RowNorm(arg(norm.weight), norm.eps)
        if first.scales is None:
            matvec_products(builder, arg(read), [w.args(arg) for w in kernel], stores, fold)
        else:
            products_q_row(builder, arg(read), [w.args(arg) for w in kernel], stores, first.bits, first.group, fold)

    if norm is None:
        return readers, [x], Fused("products", tuple(chain[r].node_id for r in readers), run, first=True)
    ops = sorted([*norm.ops, *readers])
    return ops, [norm.x, norm.weight], Fused("rms_norm_products", tuple(chain[j].node_id for j in ops), run, first=True)


_SDPA = "aten.scaled_dot_product_attention.default"


def _repeated_heads(c: OpChain, vid: int) -> tuple[list[int], int, tuple[int, ...]] | None:
    """(ops, x, [B, Hkv, S, D]) when `vid` is `view(expand(u), [B, Hkv * rep, S, D])` with
    u [B, Hkv, 1, S, D] (x[:, :, None]: x's bytes, x itself where u is a view of x read by the
    expand only: a view of a KV cache, which is state, would be a copy), the expand read by that
    view only."""
    chain = c.graph.chain
    view = c.op_of(vid, "aten.view_copy.default")
    if view is None:
        return None
    e = chain[view].args[0]
    expand = c.op_of(e, "aten.expand_copy.default")
    if expand is None or not c.only_reader(e, view):
        return None
    u = chain[expand].args[0]
    ut, et, kt = c.tensor(u), c.tensor(e), c.tensor(vid)
    if ut is None or et is None or kt is None or len(ut.dims) != 5 or ut.dims[2] != 1 or len(kt.dims) != 4:
        return None
    b, hkv, _, s, d = ut.dims
    rep = et.dims[2]
    if tuple(et.dims) != (b, hkv, rep, s, d) or tuple(kt.dims) != (b, hkv * rep, s, d) or \
            len({ut.datatype, et.datatype, kt.datatype}) != 1:
        return None
    ops = [expand, view]
    unsqueeze = c.op_of(u, "aten.view_copy.default", "aten.unsqueeze_copy.default")
    if unsqueeze is not None and c.only_reader(u, expand):
        x = chain[unsqueeze].args[0]
        xt = c.tensor(x)
        if xt is not None and xt.datatype == ut.datatype and math.prod(xt.dims) == math.prod(ut.dims):
            ops.append(unsqueeze)
            u = x
    return ops, u, (b, hkv, s, d)


def _grouped_attention(c: OpChain, i: int) -> tuple[list[int], list[int], Fused] | None:
    """sdpa (op `i`) whose key and value are `_repeated_heads` of grouped ones, read by it alone."""
    chain = c.graph.chain
    q, k, v, mask, causal, scale = c.args(i, "query", "key", "value", "attn_mask", "is_causal", "scale")
    out = chain[i].args[-1]
    found = [_repeated_heads(c, t) if c.only_reader(t, i) else None for t in (k, v)]
    causal_v, mask_t = c.value(causal) if causal is not None else g.Bool(False), c.tensor(mask)
    if None in found or c.number(i, "dropout_p") != 0.0 or not isinstance(causal_v, g.Bool) or \
            not (c.absent(scale) or c.scalar(scale) is not None) or not (mask_t is not None or c.absent(mask)):
        return None
    (k_ops, uk, k_shape), (v_ops, uv, v_shape) = found
    qt, ot = c.tensor(q), c.tensor(out)
    if qt is None or ot is None or len(qt.dims) != 4 or qt.dims[1] != c.tensor(k).dims[1]:
        return None
    node = chain[i].node_id

    def run(builder: OpBuilder, arg: Callable[[int], TensorArg]) -> None:
        grouped_k, grouped_v = arg(uk), arg(uv)
        attention(builder, f"node {node}", arg(q), TensorArg(grouped_k.vid, k_shape, grouped_k.dtype),
                  TensorArg(grouped_v.vid, v_shape, grouped_v.dtype), arg(out),
                  arg(mask) if mask_t is not None else None, c.scalar(scale), causal_v.value, True)

    ops = sorted(k_ops + v_ops + [i])
    inputs = [q, uk, uv] + ([mask] if mask_t is not None else [])
    return ops, inputs, Fused("grouped attention", tuple(chain[j].node_id for j in ops), run)


_IN_PLACE = frozenset({"rms_norm", ROTARY})
"""Steps whose kernel stores each element from the invocation that reads each input's element at the
same place, after it reads it (shaders/rms_norm.comp: after the row's sum): an input of the output's
element count and size (no broadcast) may be the output's memory."""


def _own_tensors(step: Fused, vids: set[int]) -> Fused:
    """`step`, each of `vids` first given a tensor of its own (allocated with the activations)."""
    if not vids:
        return step

    def run(builder: OpBuilder, arg: Callable[[int], TensorArg]) -> None:
        for vid in sorted(vids):
            t = arg(vid)
            builder.alias(vid, builder.temp(t.shape, t.dtype).vid)
        step.run(builder, arg)

    return dataclasses.replace(step, run=run)


def fuse(graph: g.VkGraph, max_binding_bytes: int, max_bindings: int) -> list:
    """The graph's chain with every match replaced by one `Fused` step (at its last op's place; a
    `first` step at its first op's, past the ops of an RMSNorm folded into it). A match whose kernel
    would bind more than `max_bindings` storage buffers stays unfused, or is fused without the
    RMSNorm it would fold in (a phone's limit: docs/profiles.md)."""
    c = OpChain(graph)
    taken: set[int] = set()
    at: dict[int, Fused] = {}
    norms: dict[int, _Norm] = {}  # output -> an RMSNorm matched on its own, which a product may fold in

    def match(i: int, op, norms: dict[int, _Norm]):
        if op.name == "aten.rsqrt.default":
            return _rms_norm(c, i)
        if op.name == "aten.add.Tensor":
            return rotary(c, i, max_binding_bytes) or _residual_add(c, i)
        if op.name == "aten.mul.Tensor":
            return _swiglu(c, i, norms, max_binding_bytes)
        if op.name == _SDPA:
            return _grouped_attention(c, i)  # binds what the unfused attention binds
        if op.name == "aten.cat.default":
            return tables(c, i, max_binding_bytes)
        if op.name in _PRODUCTS:
            return _products(c, i, norms, max_binding_bytes) or _norm_product(c, i, norms, max_binding_bytes)
        return None

    def fits(i: int, found) -> bool:
        return graph.chain[i].name == _SDPA or bindings(c, found[0]) <= max_bindings

    for i, op in enumerate(graph.chain):
        if i in taken:
            continue
        found = match(i, op, norms)
        if found is not None and not fits(i, found):
            found = match(i, op, {}) if norms else None  # without the norm folded in, it may fit
            if found is not None and not fits(i, found):
                found = None
        if found is None:
            continue
        norm = None
        if op.name == "aten.rsqrt.default":
            *found, norm = found
        ops, inputs, step = found
        folded = [n for n in norms.values() if set(n.ops) <= set(ops)]
        own = set(ops).difference(*(n.ops for n in folded))
        clashes = stored_over_reads(c, ops, step.name in _IN_PLACE)
        if taken.intersection(own) or not (step.first or safe(c, ops, inputs)) or clashes & c.outputs:
            continue
        step = _own_tensors(step, clashes)
        for n in folded:  # the norm's own step goes: the products do its work
            del at[n.ops[-1]], norms[n.y]
        taken.update(ops)
        at[min(own) if step.first else ops[-1]] = step
        if norm is not None:
            norms[norm.y] = norm
    return [at[i] if i in at else op for i, op in enumerate(graph.chain) if i not in taken or i in at]
