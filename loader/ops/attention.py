"""aten.scaled_dot_product_attention.default.

Three dispatches through an fp32 scratch tensor of scores [batch, L, S]:
  1. scores = scale * q @ k^T      (gemm.gemm; k is read transposed in place, and
     one query row, the decode case, takes the matvec shader)
  2. masked, stable softmax of each scores row, in place (attention_softmax shader, a
     workgroup per row of S >= reduce.ROW_MIN scores;
     bool mask, one byte per element: 0 = masked out; float mask of any float
     dtype: added; is_causal: top-left aligned)
  3. out = scores @ v              (gemm.gemm)
q, k, v and the output may have any float dtypes; every sum is fp32.
Batch dims broadcast. With enable_gqa, q's Hq heads share Hkv = Hq / rep key/value
heads: q [..., Hq, L, E] is read as [..., Hkv, rep*L, E] (same memory), so the
matmuls need no repeated copies of k and v.
"""
from __future__ import annotations

import math
import struct

from vkx.format.contract import Call
from vkx.loader.ops import OpBuilder, TensorArg, UnsupportedOpError, builds, read_defines
from vkx.loader.ops.gemm import Operand, gemm
from vkx.loader.ops.matmul import batch_plan, batch_strides
from vkx.loader.ops.reduce import row_dispatch
from vkx.loader.ops.shape import bind_elems, broadcast_strides, contiguous_strides

_SOFTMAX_PUSH = struct.Struct("<11i")


@builds("aten.scaled_dot_product_attention.default")
def scaled_dot_product_attention(builder: OpBuilder, call: Call) -> None:
    """The rule has checked the shapes (mask broadcast, GQA head counts) and dtypes."""
    if call["dropout_p"]:
        raise UnsupportedOpError(f"{call.node}: dropout_p={call['dropout_p']} is not supported (only 0.0)")
    attention(builder, call.node, call.tensor("query"), call.tensor("key"), call.tensor("value"), call.out,
              call["attn_mask"], call["scale"], call["is_causal"], call["enable_gqa"])


def attention(builder: OpBuilder, node: str, q: TensorArg, k: TensorArg, v: TensorArg, out: TensorArg,
              mask: TensorArg | None, scale: float | None, is_causal: bool, enable_gqa: bool) -> None:
    """out = softmax(scale * q @ k^T [+ mask]) @ v (scale None: 1 / sqrt(E)), as described above."""
    L, E = q.shape[-2:]
    S, Ev = v.shape[-2:]
    out_batch = tuple(out.shape[:-2])
    if out.numel == 0:
        return
    if S == 0 or E == 0:
        raise UnsupportedOpError(f"{node}: empty key sequence or embedding is not supported")
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)

    # Matmul view: batch dims `mb`, rows M = rep * L.
    rep = 1
    kb, vb = tuple(k.shape[:-2]), tuple(v.shape[:-2])
    if enable_gqa and len(q.shape) >= 3 and q.shape[-3] != k.shape[-3]:
        hq, hkv = q.shape[-3], k.shape[-3]
        rep = hq // hkv
        mb = out_batch[:-1] + (hkv,)
        qb = tuple(q.shape[:-3]) + (hkv,)
    else:
        mb = out_batch
        qb = tuple(q.shape[:-2])
    M = rep * L
    sq = batch_strides(qb, mb, M * E)
    sk = batch_strides(kb, mb, S * E)
    sv = batch_strides(vb, mb, S * Ev)
    scores = builder.temp(tuple(mb) + (M, S))
    ss = contiguous_strides(tuple(mb) + (M * S,))[:-1]
    so = contiguous_strides(tuple(mb) + (M * Ev,))[:-1]

    # 1. scores = scale * q @ k^T   (B(e, s) = k[s, e])
    outer, (nb1, nb2), inner = batch_plan(mb, [sq, sk, ss])
    for offs in outer:
        gemm(builder, Operand(q, offs[0], E, 1, *inner[0]), Operand(k, offs[1], 1, E, *inner[1]),
             Operand(scores, offs[2], S, 1, *inner[2]), M, S, E, nb1, nb2, alpha=scale)

    # 2. softmax rows, in place; rows are [out_batch..., L].
    defines: dict[str, int | str] = {}
    if is_causal:
        defines["CAUSAL"] = 1
    rows_per_batch = L
    sr = contiguous_strides(tuple(out_batch) + (L * S,))[:-1]
    if mask is not None:
        defines["MASK_FLOAT" if mask.dtype.is_float else "MASK_BOOL"] = 1
        defines.update(read_defines(builder, "M", "mask", mask))
        *mbatch, sml, sms = broadcast_strides(mask.shape, out_batch + (L, S))
        mbind, _ = bind_elems(builder, mask, 0, mask.numel)
    else:
        mbatch, sml, sms = (0,) * len(out_batch), 0, 0
    outer, (nb1, nb2), inner = batch_plan(out_batch, [sr, mbatch])
    limit = builder.max_binding_bytes - builder.offset_alignment
    chunk = max(1, limit // (4 * S)) if scores.nbytes > builder.max_binding_bytes else None
    for offs in outer:
        nrows = nb1 * nb2 * rows_per_batch
        step = chunk or nrows
        for r0 in range(0, nrows, step):
            n = min(step, nrows - r0)
            lo = offs[0] + r0 * S
            sbind, sshift = bind_elems(builder, scores, lo, n * S)
            bindings = [sbind] + ([mbind] if mask is not None else [])
            push = _SOFTMAX_PUSH.pack(n, r0, L, S, nb2, offs[0] - sshift,
                                      offs[1], inner[1][0], inner[1][1], sml, sms)
            groups, wg = row_dispatch(builder, n, S)
            builder.dispatch("attention_softmax", bindings, push, groups, {**defines, **wg})

    # 3. out = p @ v
    outer, (nb1, nb2), inner = batch_plan(mb, [ss, sv, so])
    for offs in outer:
        gemm(builder, Operand(scores, offs[0], S, 1, *inner[0]), Operand(v, offs[1], Ev, 1, *inner[1]),
             Operand(out, offs[2], Ev, 1, *inner[2]), M, Ev, S, nb1, nb2)
