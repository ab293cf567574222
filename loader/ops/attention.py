"""aten.scaled_dot_product_attention.default.

A few query rows (decode: L <= DECODE_ROWS) take shaders/attention_decode.comp, the key/value cache
read in place (grouped heads too), split along the sequence (flash-decoding): a workgroup per query
row and chunk of positions, enough chunks to give every compute unit DECODE_GROUPS_PER_UNIT
workgroups (`decode_split`), the last workgroup of a row to finish merging the row's partials
(`_arrivals`: counters the shader keeps at zero between dispatches); a device of fewer storage
buffers a stage than it binds takes it unmasked and unsplit only (QKVO_ONLY). Otherwise three
dispatches through an fp32 tensor of scores [batch, L, S] (the graph's "scores" scratch, one for
all its attentions: `OpBuilder.scratch`):
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

import itertools
import math
import struct
from typing import Iterable

from vkx.format import dtypes
from vkx.format.contract import Call
from vkx.loader.ops import (Defines, OpBuilder, TensorArg, UnsupportedOpError, any_dtype_defines, any_dtype_variants,
                            builds, dtype_spec, elem_defines, held_dtype, read_defines, reads_by_words, variants,
                            word_read_defines)
from vkx.loader.ops.gemm import Operand, gemm, load8
from vkx.loader.ops.matmul import batch_plan, batch_strides
from vkx.loader.ops.elementwise import fill
from vkx.loader.ops.reduce import ROW_MODES, row_dispatch
from vkx.loader.ops.shape import bind_elems, broadcast_strides, contiguous_strides, dispatch_groups

_SOFTMAX_PUSH = struct.Struct("<11i")
_DECODE_PUSH = struct.Struct("<12if2i")
DECODE_ROWS = 8
"""Query rows per head up to which attention takes shaders/attention_decode.comp."""
DECODE_MAX_CHUNK, DECODE_MAX_E = 1024, 256
"""That shader's MAX_CHUNK and MAX_E: the positions of one workgroup (their scores in shared
memory), the longest head."""
DECODE_MIN_CHUNK = 64
"""The fewest positions a workgroup takes (a multiple of its 64 invocations)."""
DECODE_SPLIT_CHUNK = 128
"""The most positions a workgroup takes: a longer cache takes more chunks, not longer ones. On the
H200, 16 layers' decode attention and combine at position 4,096 of a 4,160-position cache took
0.65 ms with chunks of 128, 0.80 with 64 and 0.72 with 256 (docs/benchmarks.md)."""
DECODE_GROUPS_PER_UNIT = 4
"""Workgroups per compute unit the split aims at (H200: 32 query heads x 16 chunks for 132 SMs)."""


def decode_split(rows: int, S: int, units: int) -> tuple[int, int]:
    """(chunk, P): positions per workgroup and chunks per query row of a decode attention over S
    positions, so that rows * P reaches DECODE_GROUPS_PER_UNIT workgroups per compute unit, each
    chunk a multiple of DECODE_MIN_CHUNK, at most DECODE_SPLIT_CHUNK."""
    wanted = max(1, -(-DECODE_GROUPS_PER_UNIT * units // rows))
    chunk = -(-S // wanted)
    chunk = min(DECODE_SPLIT_CHUNK, max(DECODE_MIN_CHUNK, -(-chunk // DECODE_MIN_CHUNK) * DECODE_MIN_CHUNK))
    return chunk, -(-S // chunk)


def _mask_kind(dtype: dtypes.DType) -> Defines:
    return {"MASK_FLOAT" if dtype.is_float else "MASK_BOOL": 1}


def _masks() -> list[Defines]:
    """The defines of each mask a device may hold (held_dtype), float or bool, as itself or, a
    constant of 16 or 8 bits without narrow storage, read through 32-bit words."""
    out: list[Defines] = []
    for dtype in (dtypes.FLOAT32, dtypes.FLOAT16, dtypes.BFLOAT16, dtypes.BOOL):
        for held in {dtype, held_dtype(dtype, frozenset())}:
            out.append({**_mask_kind(held), **elem_defines("M", "mask", held)})
        if dtype.itemsize < 4:
            out.append({**_mask_kind(dtype), **word_read_defines("M", "mask", dtype)})
    return out


@variants("attention_softmax")
def softmax_variants() -> Iterable[Defines]:
    """Causal or not; no mask or any (_masks); a row per invocation or per workgroup
    (reduce.ROW_MODES; the workgroup size is a specialization constant, reduce.row_dispatch)."""
    for causal, mask, mode in itertools.product(({}, {"CAUSAL": 1}), [{}, *_masks()], ROW_MODES):
        yield {**causal, **mask, **mode}


_FLOATS = (dtypes.FLOAT32, dtypes.FLOAT16, dtypes.BFLOAT16)


DECODE_BINDINGS = 7
"""attention_decode.comp's bindings: q, k, v, out, the mask and the split's partials and counts
(placeholders where unused); QKVO_ONLY binds the first 4."""


@variants("attention_decode")
def decode_variants() -> Iterable[Defines]:
    """q, k, v and out of one float dtype; causal or not; any mask (_masks), or none (the M
    defines then those of q, bound in the mask's place), or QKVO_ONLY (no mask, one split)."""
    for dtype, causal in itertools.product(_FLOATS, ({}, {"CAUSAL": 1})):
        base = {**_decode_defines(dtype), **causal}
        yield {**base, "QKVO_ONLY": 1}
        yield {**base, **elem_defines("M", "mask", dtype)}
        if dtype.itemsize < 4:
            yield {**base, **word_read_defines("M", "mask", dtype)}
        for mask in _masks():
            yield {**base, **mask}


def _decode_defines(dtype: dtypes.DType) -> Defines:
    """attention_decode's defines of q, k, v and out of `dtype` (16-byte loads of k and v)."""
    return {**elem_defines("Q", "q", dtype), **elem_defines("K", "k", dtype), **elem_defines("V", "v", dtype),
            **elem_defines("O", "o", dtype), **load8("K", "k", dtype, True), **load8("V", "v", dtype, True)}


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
    if _decode(builder, q, k, v, out, mask, scale, is_causal, enable_gqa):
        return

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
    # the scores live within this op: one tensor for every attention of the graph, not one each
    scores = builder.scratch(tuple(mb) + (M, S), "scores")
    ss = contiguous_strides(tuple(mb) + (M * S,))[:-1]
    so = contiguous_strides(tuple(mb) + (M * Ev,))[:-1]

    # 1. scores = scale * q @ k^T   (B(e, s) = k[s, e])
    outer, (nb1, nb2), inner = batch_plan(mb, [sq, sk, ss])
    for offs in outer:
        gemm(builder, Operand(q, offs[0], E, 1, *inner[0]), Operand(k, offs[1], 1, E, *inner[1]),
             Operand(scores, offs[2], S, 1, *inner[2]), M, S, E, nb1, nb2, alpha=scale)

    # 2. softmax rows, in place; rows are [out_batch..., L].
    defines: dict[str, int | str] = {"CAUSAL": 1} if is_causal else {}
    rows_per_batch = L
    sr = contiguous_strides(tuple(out_batch) + (L * S,))[:-1]
    if mask is not None:
        defines.update(_mask_kind(mask.dtype), **read_defines(builder, "M", "mask", mask))
        *mbatch, sml, sms = broadcast_strides(mask.shape, out_batch + (L, S))
        mbind, _ = bind_elems(builder, mask, 0, mask.numel)
    else:
        mbatch, sml, sms = (0,) * len(out_batch), 0, 0
    outer, (nb1, nb2), inner = batch_plan(out_batch, [sr, mbatch])
    limit = builder.limits.max_storage_buffer_range - builder.limits.min_storage_buffer_offset_alignment
    chunk = max(1, limit // (4 * S)) if scores.nbytes > builder.limits.max_storage_buffer_range else None
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
            groups, mode, wg = row_dispatch(builder, n, S)
            builder.dispatch("attention_softmax", bindings, push, groups, {**defines, **mode}, (wg,))

    # 3. out = p @ v
    outer, (nb1, nb2), inner = batch_plan(mb, [ss, sv, so])
    for offs in outer:
        gemm(builder, Operand(scores, offs[0], S, 1, *inner[0]), Operand(v, offs[1], Ev, 1, *inner[1]),
             Operand(out, offs[2], Ev, 1, *inner[2]), M, Ev, S, nb1, nb2)


def _decode(builder: OpBuilder, q: TensorArg, k: TensorArg, v: TensorArg, out: TensorArg, mask: TensorArg | None,
            scale: float, is_causal: bool, enable_gqa: bool) -> bool:
    """Record shaders/attention_decode.comp where it applies (one dispatch); False: it does not."""
    if len(q.shape) not in (3, 4) or not len(k.shape) == len(v.shape) == len(out.shape) == len(q.shape):
        return False
    *lead, hq, L, E = q.shape
    *klead, hkv, S, _ = k.shape
    Ev = v.shape[-1]
    if lead != klead or list(v.shape[:-1]) != list(k.shape[:-1]) or k.shape[-1] != E:
        return False
    if hq != hkv and not (enable_gqa and hq % hkv == 0):
        return False
    if L > DECODE_ROWS or max(E, Ev) > DECODE_MAX_E or E % 8 or Ev % 8 or S == 0:
        return False
    limits = builder.limits
    if 4 * (DECODE_MAX_CHUNK + DECODE_MAX_E + 64 + 512) > limits.max_compute_shared_memory_size:
        return False
    if any(t.nbytes > limits.max_storage_buffer_range for t in (q, k, v, out, *([mask] if mask is not None else []))):
        return False
    rows = math.prod(lead) * hq * L
    # A device of fewer storage buffers a stage than DECODE_BINDINGS binds q, k, v and out alone
    # (QKVO_ONLY): no mask (a masked attention takes the general path), one split of the whole cache.
    qkvo_only = not limits.binds(DECODE_BINDINGS)
    if qkvo_only and (mask is not None or S > DECODE_MAX_CHUNK):
        return False
    chunk, P = (S, 1) if qkvo_only else decode_split(rows, S, builder.compute_units)
    groups = limits.max_compute_work_group_count
    if P > groups[0] or rows > groups[1] or 4 * rows * P * (Ev + 2) > limits.max_storage_buffer_range:
        return False
    if not q.dtype == k.dtype == v.dtype == out.dtype:
        return False
    defines: dict[str, int | str] = dict(_decode_defines(q.dtype))
    if is_causal:
        defines["CAUSAL"] = 1
    smb = smh = sml = sms = 0
    if mask is not None:
        defines.update(_mask_kind(mask.dtype))
        strides = broadcast_strides(mask.shape, tuple(out.shape[:-1]) + (S,))
        *mlead, smh, sml, sms = strides
        smb = mlead[0] if mlead else 0
    push = _DECODE_PUSH.pack(L, S, E, Ev, hq, hq // hkv, hkv, 0, smb, smh, sml, sms, scale, chunk, P)
    if qkvo_only:
        builder.dispatch("attention_decode", [q, k, v, out], push, (1, rows, 1), {**defines, "QKVO_ONLY": 1})
        return True
    defines.update(read_defines(builder, "M", "mask", mask or q))
    if P > 1:
        part, arrivals = builder.scratch(rows * P * (Ev + 2)), _arrivals(builder, rows)
    else:  # one chunk: placeholders, never touched
        part = arrivals = out
    builder.dispatch("attention_decode", [q, k, v, out, mask or q, part, arrivals], push, (P, rows, 1), defines)
    return True


def _arrivals(builder: OpBuilder, rows: int) -> TensorArg:
    """A count per query row of the workgroups done with it (attention_decode.comp): zeroed once
    at load, then each row's last workgroup sets it back to zero. Written by a load-time dispatch,
    it has memory of its own, which no other tensor or method shares."""
    arrivals = builder.scratch(rows, "arrivals", dtypes.INT32)
    with builder.at_load():
        fill(builder, arrivals, 0, 0)
    return arrivals


# --------------------------------------------------------------------------- the Vulkan backend's attention ops

@builds("et_vk.sdpa.default")
def et_sdpa(builder: OpBuilder, call: Call) -> None:
    """softmax(scale * q @ k^T + attn_mask) @ v: no causal mask, no grouped heads (the reference's matmuls)."""
    attention(builder, call.node, call.tensor("q"), call.tensor("k"), call.tensor("v"), call.out,
              call["attn_mask"], call["scale"], False, False)


@builds("et_vk.apply_rotary_emb_hf.default")
def apply_rotary_emb_hf(builder: OpBuilder, call: Call) -> None:
    _rotary(builder, call, call["start_pos"], interleaved=False)


@builds("et_vk.apply_rotary_emb.default")
def apply_rotary_emb(builder: OpBuilder, call: Call) -> None:
    _rotary(builder, call, 0, interleaved=True)


def _rotary(builder: OpBuilder, call: Call, start: int, interleaved: bool) -> None:
    """xq and xk, each turned by the same tables at rows start.. in one dispatch (rotary.comp)."""
    cos, sin = call.tensor("freqs_cos"), call.tensor("freqs_sin")
    for x, out in zip((call.tensor("xq"), call.tensor("xk")), call.outputs):
        if len(cos.shape) == 3:  # heads-first [B, H, S, D], freqs [1, S, R]: the row is the index in dim 2
            s, h, d = x.shape[2], 1, x.shape[3]
        else:
            _, s, h, d = x.shape
        push = struct.pack("<6I", x.numel, s, h, d, cos.shape[-1], start)
        builder.dispatch("rotary", [x, cos, sin, out], push, dispatch_groups(x.numel),
                         any_dtype_defines(INTERLEAVED=interleaved, WORDS=reads_by_words(builder)),
                         dtype_spec(x, cos, sin, out))


@variants("rotary")
def rotary_variants() -> Iterable[Defines]:
    """Every dtype a specialization constant: a rotary moves a token's q and k heads (elementwise,
    as binary.comp), not a bandwidth-critical stream."""
    return any_dtype_variants("INTERLEAVED")
