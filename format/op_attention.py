"""The op contract's attention ops: scaled dot-product attention (ATen's and the Vulkan backend's
`et_vk.sdpa`) and the rotary embeddings (`et_vk.apply_rotary_emb`, `et_vk.apply_rotary_emb_hf`),
each with its rule beside it.

Arguments come in the schemas' order, the output last (vkx.format.contract): ATen's, and
executorch/backends/vulkan/custom_ops_lib.py's for `et_vk.*`, whose reference kernels give the
semantics. docs/architecture.md lists the same ops in prose.
"""
from __future__ import annotations

from . import dtypes
from .contract import Arg, Call, OpDecl, Out
from .op_rules import ALL_TYPES, B, I, N, T, broadcast, floats, optional

DECLS: list[OpDecl] = []
"""This module's declarations, in order (`vkx.format.opset` assembles the table)."""
declare = DECLS.append


def _sdpa(call: Call) -> None:
    floats(call, "query", "key", "value")
    if call["attn_mask"] is not None:
        mask = call["attn_mask"].dtype
        call.require(mask.is_float or mask is dtypes.BOOL, f"attn_mask of {mask} (bool or float only)")
    q, k, v = call.tensor("query"), call.tensor("key"), call.tensor("value")
    call.require(len(q.shape) >= 2 and len(k.shape) == len(q.shape) and len(v.shape) == len(q.shape),
                 f"query {list(q.shape)}, key {list(k.shape)}, value {list(v.shape)}")
    call.require(q.shape[-1] == k.shape[-1] and k.shape[-2] == v.shape[-2],
                 f"query {list(q.shape)}, key {list(k.shape)}, value {list(v.shape)} disagree")
    batch_q, batch_k = q.shape[:-2], k.shape[:-2]
    if call["enable_gqa"] and len(q.shape) >= 3:
        hq, hk = q.shape[-3], k.shape[-3]
        call.require(hk > 0 and hq % hk == 0, f"{hq} query heads over {hk} key heads")
        batch_k = (*k.shape[:-3], hq)
    call.require(broadcast(batch_q, batch_k) == tuple(batch_q) and k.shape[:-2] == v.shape[:-2],
                 f"batch dims of query {list(q.shape)} and key {list(k.shape)}")
    if call["attn_mask"] is not None:
        m = call["attn_mask"].shape
        want = (*batch_q, q.shape[-2], k.shape[-2])
        call.require(broadcast(m, want) == want, f"attn_mask {list(m)} does not broadcast to {list(want)}")
    call.expect_shape("the output", call.out.shape, (*q.shape[:-1], v.shape[-1]))


def _vk_sdpa(call: Call) -> None:
    """q [..., L, E], k [..., S, E], v [..., S, Ev] (batch dims broadcast), attn_mask added to the scores."""
    q, k, v = call.tensor("q"), call.tensor("k"), call.tensor("v")
    call.require(all(t.dtype.is_float for t in (q, k, v)), "q, k and v must be floating")
    call.require(len(q.shape) >= 2 and len(k.shape) == len(q.shape) == len(v.shape)
                 and q.shape[-1] == k.shape[-1] and k.shape[-2] == v.shape[-2] and k.shape[:-2] == v.shape[:-2],
                 f"q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)} disagree")
    batch = broadcast(q.shape[:-2], k.shape[:-2])
    call.require(batch is not None, f"batch dims of q {list(q.shape)} and k {list(k.shape)} do not broadcast")
    mask = call["attn_mask"]
    if mask is not None:
        want = (*batch, q.shape[-2], k.shape[-2])
        call.require(mask.dtype.is_float and broadcast(mask.shape, want) == want,
                     f"attn_mask {mask.dtype} {list(mask.shape)} is not a float mask broadcasting to {list(want)}")
    call.expect_shape("the output", call.out.shape, (*batch, q.shape[-2], v.shape[-1]))


def _rotary(call: Call, interleaved: bool) -> None:
    """xq [B, S, Hq, D], xk [B, S, Hk, D]; freqs_cos/sin [T, R], one row per position (rows start_pos
    on): R = D / 2 for pairs (2i, 2i + 1) (`interleaved`), else HF's rotate_half over the first R of D
    (R even). Or, HF's heads-first layout (what the partitioner matches in a transformers model):
    xq [B, Hq, S, D], xk [B, Hk, S, D] and freqs [1, S, R] (start_pos 0), row s for position s.
    The outputs are shaped like xq and xk."""
    xq, xk = call.tensor("xq"), call.tensor("xk")
    for name, x in (("xq", xq), ("xk", xk)):
        call.require(len(x.shape) == 4 and x.dtype.is_float, f"{name} {x.dtype} {list(x.shape)} must be 4-D")
    cos, sin = call.tensor("freqs_cos"), call.tensor("freqs_sin")
    call.require(len(cos.shape) in (2, 3) and cos.shape == sin.shape and cos.dtype.is_float and sin.dtype.is_float,
                 f"freqs_cos {list(cos.shape)} and freqs_sin {list(sin.shape)} must be one 2-D or 3-D shape")
    start = call["start_pos"] if call.decl.has("start_pos") else 0
    heads_first = len(cos.shape) == 3
    seq = 2 if heads_first else 1
    call.require(xq.shape[0] == xk.shape[0] and xq.shape[seq] == xk.shape[seq] and xq.shape[3] == xk.shape[3],
                 f"xq {list(xq.shape)} and xk {list(xk.shape)} disagree")
    cols = cos.shape[-1]
    d = xq.shape[3]
    fits = d % 2 == 0 and cols == d // 2 if interleaved else cols % 2 == 0 and 0 < cols <= d
    call.require(fits, f"freqs of {cols} columns for head_dim {d}")
    if heads_first:
        call.require(not interleaved and start == 0 and cos.shape[:2] == (1, xq.shape[2]),
                     f"freqs {list(cos.shape)} for heads-first xq {list(xq.shape)} must be [1, S, R] at start_pos 0")
    else:
        call.require(0 <= start and start + xq.shape[1] <= cos.shape[0],
                     f"positions {start}..{start + xq.shape[1]} outside the {cos.shape[0]}-row tables")
    call.expect_shape("output xq_out", call.outputs[0].shape, xq.shape)
    call.expect_shape("output xk_out", call.outputs[1].shape, xk.shape)


declare(OpDecl("aten.scaled_dot_product_attention.default",
               (Arg("query", T), Arg("key", T), Arg("value", T), optional("attn_mask", T, None),
                Arg("dropout_p", N, default=0.0), Arg("is_causal", B, default=False), optional("scale", N, None),
                Arg("enable_gqa", B, default=False)),
               dtypes=ALL_TYPES, rule=_sdpa))
declare(OpDecl("et_vk.sdpa.default",
               (Arg("q", T), Arg("k", T), Arg("v", T), optional("attn_mask", T, None), optional("scale", N, None)),
               rule=_vk_sdpa))
declare(OpDecl("et_vk.apply_rotary_emb_hf.default",
               (Arg("xq", T), Arg("xk", T), Arg("freqs_cos", T), Arg("freqs_sin", T), Arg("start_pos", I)),
               out=Out(("xq_out", "xk_out")), rule=lambda call: _rotary(call, False)))
declare(OpDecl("et_vk.apply_rotary_emb.default",
               (Arg("xq", T), Arg("xk", T), Arg("freqs_cos", T), Arg("freqs_sin", T)),
               out=Out(("xq_out", "xk_out")), rule=lambda call: _rotary(call, True)))
