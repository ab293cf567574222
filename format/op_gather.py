"""The op contract's gathers: rows of a table (embedding), elements along a dim (gather,
index_select) and by index tensors on the leading dims (index), each with its rule beside it (the
scatter into state, `vkx.index_copy`, is `op_state`'s; the quantized embeddings `op_quant`'s).

Arguments come in ATen schema order, the output last (vkx.format.contract). docs/architecture.md
lists the same ops in prose.
"""
from __future__ import annotations

import math

from . import dtypes
from .contract import Arg, Call, OpDecl
from .op_rules import ALL_TYPES, B, I, T, TS, broadcast, dim_index

DECLS: list[OpDecl] = []
"""This module's declarations, in order (`vkx.format.opset` assembles the table)."""
declare = DECLS.append


MAX_INDICES = 3
"""aten.index.Tensor: index tensors on at most this many leading dims."""


def _embedding(call: Call) -> None:
    w, idx = call.tensor("weight"), call.tensor("indices")
    call.require(len(w.shape) == 2, f"weight {list(w.shape)} must be 2-D")
    call.require(not idx.dtype.is_float, f"indices of {idx.dtype}")
    call.expect_shape("the output", call.out.shape, (*idx.shape, w.shape[1]))


def _gather(call: Call) -> None:
    src, index = call.tensor("self"), call.tensor("index")
    call.require(not index.dtype.is_float, f"index of {index.dtype}")
    call.require(len(index.shape) == len(src.shape), f"index {list(index.shape)} and self {list(src.shape)} "
                 "differ in rank")
    dim = dim_index(call, call["dim"], len(src.shape))
    call.require(all(i <= s for d, (i, s) in enumerate(zip(index.shape, src.shape)) if d != dim),
                 f"index {list(index.shape)} is larger than self {list(src.shape)} off dim {dim}")
    call.expect_shape("the output", call.out.shape, index.shape)


def _index(call: Call) -> None:
    src, indices = call.tensor("self"), call["indices"]
    call.require(1 <= len(indices) <= min(MAX_INDICES, len(src.shape)),
                 f"{len(indices)} index tensors for self {list(src.shape)} (1 to {MAX_INDICES}, one per leading dim)")
    call.require(all(not i.dtype.is_float and i.dtype is not dtypes.BOOL for i in indices),
                 "index tensors must be integer (a bool mask is not supported)")
    batch = broadcast(*(i.shape for i in indices))
    call.require(batch is not None, f"index tensors {[list(i.shape) for i in indices]} do not broadcast")
    call.expect_shape("the output", call.out.shape, (*batch, *src.shape[len(indices):]))


def _index_select(call: Call) -> None:
    src, index = call.tensor("self"), call.tensor("index")
    call.require(len(index.shape) <= 1 and not index.dtype.is_float and index.dtype is not dtypes.BOOL,
                 f"index {index.dtype} {list(index.shape)} must be a 1-D integer tensor")
    want = list(src.shape) or [1]
    want[dim_index(call, call["dim"], len(src.shape))] = math.prod(index.shape)
    call.expect_shape("the output", call.out.shape, want if src.shape else [])


declare(OpDecl("aten.embedding.default",
               (Arg("weight", T), Arg("indices", T), Arg("padding_idx", I, default=-1),
                Arg("scale_grad_by_freq", B, default=False), Arg("sparse", B, default=False)),
               dtypes=ALL_TYPES, rule=_embedding))
declare(OpDecl("aten.gather.default", (Arg("self", T), Arg("dim", I), Arg("index", T),
                                       Arg("sparse_grad", B, default=False)), dtypes=ALL_TYPES, rule=_gather))
declare(OpDecl("aten.index.Tensor", (Arg("self", T), Arg("indices", TS)), dtypes=ALL_TYPES, rule=_index))
declare(OpDecl("aten.index_select.default", (Arg("self", T), Arg("dim", I), Arg("index", T)), dtypes=ALL_TYPES,
               rule=_index_select))  # out[.., j, ..] = self[.., index[j], ..] along dim
