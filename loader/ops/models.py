"""Builders of the ops real models add (vkx.format.op_models): scalar powers, clamps, casts,
broadcasting copies, selection, gather, running sums and tensor factories.

The comparisons, bitwise ops, minimum/maximum and logical_not are elementwise declarations
built by `elementwise` (their GLSL expressions); the ops here need their own shaders or
numbers that the unary shader takes as push constants.
"""
from __future__ import annotations

import math
import struct

from typing import Iterable

from vkx.format.contract import Call
from vkx.format.dtypes import DType
from vkx.format.op_models import MAX_INDICES

from . import (DTYPE_CODES, Defines, OpBuilder, TensorArg, UnsupportedOpError, any_dtype_defines, any_dtype_variants,
               builds, dtype_spec, elem_defines, reads_by_words, variants)
from .elementwise import CLAMP, POW_ANY, POW_GLSL, unary
from .shape import (MAX_DIMS, broadcast_strides, collapse_dims, contiguous_strides, convert_copy, dispatch_groups,
                    pad_dims, strided_copy)

@builds("aten.pow.Tensor_Scalar")
def pow_scalar(builder: OpBuilder, call: Call) -> None:
    e = float(call["exponent"])
    unary(builder, call, POW_GLSL.get(e, POW_ANY), e)


@builds("aten.clamp.default")
def clamp(builder: OpBuilder, call: Call) -> None:
    lo, hi = call["min"], call["max"]
    unary(builder, call, CLAMP, -math.inf if lo is None else float(lo), math.inf if hi is None else float(hi))


@builds("aten._to_copy.default")
def to_copy(builder: OpBuilder, call: Call) -> None:
    convert_copy(builder, call.tensor("self"), call.out)


@builds("aten.expand_copy.default")
def expand_copy(builder: OpBuilder, call: Call) -> None:
    """A strided copy reading broadcast dims with stride 0."""
    src, out = call.tensor("self"), call.out
    if src.dtype != out.dtype:
        converted = builder.temp(src.shape, out.dtype)
        convert_copy(builder, src, converted)
        src = converted
    strided_copy(builder, src, out, out.shape, broadcast_strides(src.shape, out.shape))


def _whole(builder: OpBuilder, *tensors: TensorArg) -> None:
    for t in tensors:
        if t.nbytes > builder.limits.max_storage_buffer_range:
            raise UnsupportedOpError(f"a tensor {t.shape} larger than one storage binding")


def _select_defines(builder: OpBuilder, out: TensorArg) -> Defines:
    """The defines of where.comp, gather.comp, index.comp and cumsum.comp: INT_PATH for an integer
    output; the dtypes of their bindings are specialization constants (`dtype_code`)."""
    return any_dtype_defines(INT_PATH=not out.dtype.is_float, WORDS=reads_by_words(builder))


@variants("where")
@variants("gather")
@variants("cumsum")
def select_variants() -> Iterable[Defines]:
    return any_dtype_variants("INT_PATH")


@variants("index")
def index_variants() -> Iterable[Defines]:
    """select_variants', each with MAX_INDICES index bindings or fewer (INDICES: `index`)."""
    for defines in select_variants():
        yield defines
        for k in range(1, MAX_INDICES):
            yield {**defines, "INDICES": k}


@builds("aten.where.self")
def where(builder: OpBuilder, call: Call) -> None:
    cond, a, b, out = call.tensor("condition"), call.tensor("self"), call.tensor("other"), call.out
    if out.numel == 0:
        return
    _whole(builder, cond, a, b, out)
    shape = tuple(out.shape) or (1,)
    strides = [broadcast_strides(t.shape, shape) for t in (cond, a, b)]
    sizes, (sc, sa, sb, _) = collapse_dims(shape, *strides, contiguous_strides(shape))
    if len(sizes) > MAX_DIMS:
        raise UnsupportedOpError(f"where over {len(sizes)} non-mergeable dims (max {MAX_DIMS})")
    push = struct.pack("<26I", out.numel, len(sizes), *pad_dims(sizes), *pad_dims(sc), *pad_dims(sa), *pad_dims(sb))
    builder.dispatch("where", [cond, a, b, out], push, dispatch_groups(out.numel), _select_defines(builder, out),
                     dtype_spec(cond, a, b, out))


@builds("aten.gather.default")
def gather(builder: OpBuilder, call: Call) -> None:
    gather_along(builder, call.tensor("self"), call["dim"], call.tensor("index"), call.out)


def gather_along(builder: OpBuilder, src: TensorArg, dim: int, index: TensorArg, out: TensorArg) -> None:
    """torch.gather: out[.., i, ..] = src[.., index[.., i, ..], ..] along `dim`, index shaped like out."""
    if out.numel == 0:
        return
    _whole(builder, src, index, out)
    rank = max(len(src.shape), 1)
    if rank > MAX_DIMS:
        raise UnsupportedOpError(f"gather over {rank} dims (max {MAX_DIMS})")
    dim = dim % rank
    shape, index_shape = tuple(src.shape) or (1,), tuple(index.shape) or (1,)
    push = struct.pack("<IIIi12I", out.numel, rank, dim, shape[dim], *pad_dims(index_shape),
                       *pad_dims(contiguous_strides(shape)))
    builder.dispatch("gather", [src, index, out], push, dispatch_groups(out.numel), _select_defines(builder, out),
                     dtype_spec(src, index, out))


@builds("aten.index.Tensor")
def index(builder: OpBuilder, call: Call) -> None:
    src, indices, out = call.tensor("self"), call["indices"], call.out
    if out.numel == 0:
        return
    _whole(builder, src, *indices, out)
    k = len(indices)
    batch = tuple(out.shape[:len(out.shape) - (len(src.shape) - k)]) or (1,)
    strides = [broadcast_strides(i.shape, batch) for i in indices]
    sizes, collapsed = collapse_dims(batch, *strides)
    if len(sizes) > 4:
        raise UnsupportedOpError(f"index tensors broadcast over {len(sizes)} non-mergeable dims (max 4)")
    defines = _select_defines(builder, out)
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


@builds("aten.cumsum.default")
def cumsum(builder: OpBuilder, call: Call) -> None:
    src, out = call.tensor("self"), call.out
    if out.numel == 0:
        return
    _whole(builder, src, out)
    shape = tuple(src.shape) or (1,)
    dim = call["dim"] % len(shape)
    inner = math.prod(shape[dim + 1:])
    lines = math.prod(shape[:dim]) * inner
    builder.dispatch("cumsum", [src, out], struct.pack("<III", lines, shape[dim], inner), dispatch_groups(lines),
                     _select_defines(builder, out), dtype_spec(src, out))


def fill(builder: OpBuilder, out: TensorArg, start: float | int, step: float | int) -> None:
    """out[i] = start + i * step."""
    if out.numel == 0:
        return
    _whole(builder, out)
    defines = _fill_defines(out.dtype)
    int_math = not out.dtype.is_float
    push = struct.pack("<Iffii", out.numel, float(start), float(step), int(start) if int_math else 0,
                       int(step) if int_math else 0)
    builder.dispatch("fill", [out], push, dispatch_groups(out.numel), defines)


def _fill_defines(dtype: DType) -> Defines:
    return {**elem_defines("O", "o", dtype), **({} if dtype.is_float else {"INT_PATH": 1})}


@variants("fill")
def fill_variants() -> Iterable[Defines]:
    for dtype in DTYPE_CODES:
        yield _fill_defines(dtype)


@builds("aten.full.default")
def full(builder: OpBuilder, call: Call) -> None:
    fill(builder, call.out, call["fill_value"], 0)


@builds("aten.scalar_tensor.default")
def scalar_tensor(builder: OpBuilder, call: Call) -> None:
    fill(builder, call.out, call["s"], 0)


@builds("aten.arange.start_step")
def arange(builder: OpBuilder, call: Call) -> None:
    fill(builder, call.out, call["start"], call["step"])
