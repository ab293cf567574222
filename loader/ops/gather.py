"""Builders of the gathers (vkx.format.op_gather): embedding (shaders/embedding.comp, a row of the
table per index, the table bound in row blocks past one binding), torch.gather (gather.comp, along
one dim), index (index.comp, index tensors on the leading dims) and index_select (its index spread
to the output's shape, then gather.comp). Elements move converted to the output's dtype.
"""
from __future__ import annotations

import itertools
import math
import struct
from typing import Iterable

from vkx.format.contract import Call
from vkx.format.op_gather import MAX_INDICES

from . import (WORDS_MODES, Defines, OpBuilder, TensorArg, UnsupportedOpError, any_dtype_defines, builds, dtype_spec,
               reads_by_words, variants)
from .elementwise import select_defines, select_variants
from .shape import (MAX_DIMS, broadcast_strides, collapse_dims, contiguous_strides, dispatch_groups, normalize_dim,
                    pad_dims, row_chunks, rows_binding, strided_copy, whole)

variants("gather")(select_variants)


def _embedding_defines(same: bool, int_path: bool, words: bool) -> Defines:
    """embedding.comp's defines (a bit copy, else a conversion through int or through float); the
    dtypes are specialization constants."""
    return any_dtype_defines(SAME_TYPE=same, INT_PATH=int_path and not same, WORDS=words)


@variants("embedding")
def embedding_variants() -> Iterable[Defines]:
    for (same, int_path), words in itertools.product(((True, False), (False, True), (False, False)), WORDS_MODES):
        yield _embedding_defines(same, int_path, words)


@builds("aten.embedding.default")
def embedding(builder: OpBuilder, call: Call) -> None:
    """out[i, :] = weight[indices[i], :]; an index outside the table gives a zero row."""
    weight, idx, out = call.tensor("weight"), call.tensor("indices"), call.out
    vocab, dim = weight.shape
    n = idx.numel * dim
    if n == 0:
        return
    if max(out.nbytes, idx.nbytes) > builder.limits.max_storage_buffer_range:
        raise UnsupportedOpError("embedding output larger than one storage binding")
    defines = _embedding_defines(weight.dtype == out.dtype, not weight.dtype.is_float and not out.dtype.is_float,
                                 reads_by_words(builder))
    spec = dtype_spec(weight, idx, out)
    groups = dispatch_groups(n)
    for r0, rc in row_chunks(builder, vocab, dim, [weight]):
        push = struct.pack("<IIiii", n, dim, r0, rc, vocab)
        builder.dispatch("embedding", [rows_binding(weight, r0, rc, dim), idx, out], push, groups, defines, spec)


@variants("index")
def index_variants() -> Iterable[Defines]:
    """select_variants', each with MAX_INDICES index bindings or fewer (INDICES: `index`)."""
    for defines in select_variants():
        yield defines
        for k in range(1, MAX_INDICES):
            yield {**defines, "INDICES": k}


@builds("aten.gather.default")
def gather(builder: OpBuilder, call: Call) -> None:
    gather_along(builder, call.tensor("self"), call["dim"], call.tensor("index"), call.out)


def gather_along(builder: OpBuilder, src: TensorArg, dim: int, index: TensorArg, out: TensorArg) -> None:
    """torch.gather: out[.., i, ..] = src[.., index[.., i, ..], ..] along `dim`, index shaped like out."""
    if out.numel == 0:
        return
    whole(builder, src, index, out)
    rank = max(len(src.shape), 1)
    if rank > MAX_DIMS:
        raise UnsupportedOpError(f"gather over {rank} dims (max {MAX_DIMS})")
    dim = dim % rank
    shape, index_shape = tuple(src.shape) or (1,), tuple(index.shape) or (1,)
    push = struct.pack("<IIIi12I", out.numel, rank, dim, shape[dim], *pad_dims(index_shape),
                       *pad_dims(contiguous_strides(shape)))
    builder.dispatch("gather", [src, index, out], push, dispatch_groups(out.numel), select_defines(builder, out),
                     dtype_spec(src, index, out))


@builds("aten.index.Tensor")
def index(builder: OpBuilder, call: Call) -> None:
    src, indices, out = call.tensor("self"), call["indices"], call.out
    if out.numel == 0:
        return
    whole(builder, src, *indices, out)
    k = len(indices)
    batch = tuple(out.shape[:len(out.shape) - (len(src.shape) - k)]) or (1,)
    strides = [broadcast_strides(i.shape, batch) for i in indices]
    sizes, collapsed = collapse_dims(batch, *strides)
    if len(sizes) > 4:
        raise UnsupportedOpError(f"index tensors broadcast over {len(sizes)} non-mergeable dims (max 4)")
    defines = select_defines(builder, out)
    if k == MAX_INDICES or builder.limits.binds(2 + MAX_INDICES):
        binds = [*indices, *[indices[0]] * (MAX_INDICES - k)]  # one pipeline for every k
    else:  # a device of fewer storage buffers a stage: the op's index tensors alone
        binds, defines["INDICES"] = list(indices), k
    istride = [x for j in range(MAX_INDICES)
               for x in ((list(collapsed[j]) if j < k else []) + [0] * 4)[:4]]
    src_strides = contiguous_strides(src.shape)
    push = struct.pack("<8I12I3i3I", out.numel, len(sizes), k, math.prod(src.shape[k:]),
                       *(sizes + [0] * 4)[:4], *istride, *(list(src.shape[:k]) + [0] * 3)[:3],
                       *(list(src_strides[:k]) + [0] * 3)[:3])
    builder.dispatch("index", [src, *binds, out], push, dispatch_groups(out.numel), defines,
                     dtype_spec(src, *binds, out))


@builds("aten.index_select.default")
def index_select(builder: OpBuilder, call: Call) -> None:
    """out[.., j, ..] = self[.., index[j], ..] along `dim`."""
    src, index, out = call.tensor("self"), call.tensor("index"), call.out
    shape = tuple(out.shape) or (1,)
    dim = normalize_dim(call["dim"], len(shape))
    spread = builder.temp(shape, index.dtype)
    strides = [0] * len(shape)
    strides[dim] = 1 if index.shape else 0
    strided_copy(builder, index, spread, shape, strides)
    gather_along(builder, src, dim, spread, out)
