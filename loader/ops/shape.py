"""The copy machinery every op module shares: a GPU tensor is a contiguous row-major buffer of its
dtype's elements, so a shape op is a strided copy (vkx.loader.ops.layout builds them all):
`strided_copy` walks an index space of up to six (collapsed) dims with arbitrary source and
destination strides and offsets, `convert_copy` changes the dtype.

The helpers (`dispatch_groups`, `bind_elems`, `fits_binding`, `whole`, `chunk_elems`, `row_chunks`,
`collapse_dims`, `broadcast_strides`, `pad_dims`, `strided_copy`, `copy_elems`) are public: other op
modules import them.
"""
from __future__ import annotations

import itertools
import math
import struct
from typing import Iterable, Iterator, Sequence

from vkx.format.dtypes import DType

from . import (DTYPE_CODES, Binding, Defines, OpBuilder, SubRange, TensorArg, UnsupportedOpError, elem_defines,
               read_form, reads_by_words, variants)

WORKGROUP = 64
"""local_size_x of every shader in this family."""
MAX_GROUPS = 65535
MAX_DIMS = 6


# --------------------------------------------------------------------------- helpers

def dispatch_groups(invocations: int, workgroup: int = WORKGROUP) -> tuple[int, int, int]:
    """Workgroup counts for `invocations` 1-D invocations, folded into y past 65535.

    The shaders recover the flat id as (group.y * groups.x + group.x) * wg + local.x
    and return when it is past their element count.
    """
    groups = max(1, -(-invocations // workgroup))
    if groups <= MAX_GROUPS:
        return (groups, 1, 1)
    gy = -(-groups // MAX_GROUPS)
    if gy > MAX_GROUPS:
        raise UnsupportedOpError(f"{invocations} invocations do not fit one dispatch")
    return (-(-groups // gy), gy, 1)


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return tuple(strides)


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a contiguous `shape` read at `out_shape` indices (numpy rules)."""
    lead = len(out_shape) - len(shape)
    if lead < 0:
        raise UnsupportedOpError(f"shape {tuple(shape)} has more dims than {tuple(out_shape)}")
    strides = [0] * len(out_shape)
    for d, (size, stride) in enumerate(zip(shape, contiguous_strides(shape))):
        if size != 1:
            if size != out_shape[lead + d]:
                raise UnsupportedOpError(f"shape {tuple(shape)} does not broadcast to {tuple(out_shape)}")
            strides[lead + d] = stride
    return tuple(strides)


def normalize_dim(dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise UnsupportedOpError(f"dim {dim} out of range for {ndim} dims")
    return dim % n


def _chunk_unit(builder: OpBuilder) -> int:
    """Byte granularity of chunk boundaries: aligned for offsets and for vec4."""
    return math.lcm(int(builder.limits.min_storage_buffer_offset_alignment), 16)


def bind_elems(builder: OpBuilder, t: TensorArg, start: int, count: int) -> tuple[Binding, int]:
    """Bind elements [start, start + count) of `t`; returns (binding, shift).

    The whole tensor is bound when it fits one binding; otherwise a SubRange whose
    offset is `start` aligned down to the offset alignment. Element `start + i`
    is then at index `start - shift + i` of the binding, i.e. `shift` is the
    element index where the binding begins.
    """
    if t.nbytes <= builder.limits.max_storage_buffer_range:
        return t, 0
    item = t.dtype.itemsize
    off, size = _window_bytes(builder, start, count, item)
    if size > builder.limits.max_storage_buffer_range:
        raise UnsupportedOpError(
            f"a {size}-byte range of a tensor {t.shape} exceeds one storage binding "
            f"({builder.limits.max_storage_buffer_range} bytes)")
    return SubRange(t, off, size), off // item


def fits_binding(builder: OpBuilder, t: TensorArg, start: int, count: int) -> bool:
    """Whether `bind_elems` can bind elements [start, start + count) of `t`."""
    return (t.nbytes <= builder.limits.max_storage_buffer_range
            or _window_bytes(builder, start, count, t.dtype.itemsize)[1] <= builder.limits.max_storage_buffer_range)


def whole(builder: OpBuilder, *tensors: TensorArg) -> None:
    """Refuse tensors larger than one storage binding (kernels that bind each tensor whole)."""
    for t in tensors:
        if t.nbytes > builder.limits.max_storage_buffer_range:
            raise UnsupportedOpError(f"a tensor {t.shape} larger than one storage binding")


def _window_bytes(builder: OpBuilder, start: int, count: int, item: int) -> tuple[int, int]:
    """(offset, size) in bytes of the aligned range that holds elements [start, start + count)."""
    align = int(builder.limits.min_storage_buffer_offset_alignment)
    off = (start * item) // align * align
    return off, (start + count) * item - off


def chunk_elems(builder: OpBuilder, n: int, tensors: Sequence[TensorArg]) -> Iterator[tuple[int, int]]:
    """Split the flat range [0, n) so that each piece of each tensor fits one binding.

    Yields (start, count); one piece when every tensor fits. Piece boundaries are
    multiples of the offset alignment (and of 16 bytes, so vec4 paths still apply).
    """
    if n == 0:
        return
    if all(t.nbytes <= builder.limits.max_storage_buffer_range for t in tensors):
        yield 0, n
        return
    # A piece boundary must be aligned in every tensor: in elements of the narrowest one.
    smallest = min(t.dtype.itemsize for t in tensors)
    widest = max(t.dtype.itemsize for t in tensors)
    unit = _chunk_unit(builder) // smallest
    step = (builder.limits.max_storage_buffer_range // widest // unit) * unit
    if step <= 0:
        raise UnsupportedOpError("storage binding range too small")
    for start in range(0, n, step):
        yield start, min(step, n - start)


def row_chunks(builder: OpBuilder, rows: int, row_elems: int,
               tensors: Sequence[TensorArg]) -> Iterator[tuple[int, int]]:
    """Split `rows` rows of `row_elems` elements so each block fits one binding.

    Yields (first_row, row_count). Block starts are aligned to the offset
    alignment in every tensor whose rows are `row_elems` long.
    """
    if rows == 0:
        return
    if all(t.nbytes <= builder.limits.max_storage_buffer_range for t in tensors):
        yield 0, rows
        return
    align = int(builder.limits.min_storage_buffer_offset_alignment)
    step = 1  # rows per unit that starts aligned in every tensor
    for t in tensors:
        row_bytes = row_elems * t.dtype.itemsize
        step = math.lcm(step, math.lcm(row_bytes, align) // row_bytes)
    row_bytes = row_elems * max(t.dtype.itemsize for t in tensors)
    per = (builder.limits.max_storage_buffer_range // row_bytes) // step * step
    if per <= 0:
        raise UnsupportedOpError(
            f"rows of {row_bytes} bytes cannot be split to fit one storage binding")
    for r0 in range(0, rows, per):
        yield r0, min(per, rows - r0)


def rows_binding(t: TensorArg, r0: int, rc: int, row_elems: int) -> Binding:
    """The rows [r0, r0 + rc) of `t` (whole tensor when that is all of it)."""
    if r0 == 0 and rc * row_elems == t.numel:
        return t
    item = t.dtype.itemsize
    return SubRange(t, r0 * row_elems * item, rc * row_elems * item)


def collapse_dims(sizes: Sequence[int], *strides: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge neighbours that are contiguous in every stride list."""
    out_sizes: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for d, s in enumerate(sizes):
        if s == 1:
            continue
        if out_sizes and all(st[-1] == sl[d] * s for st, sl in zip(out_strides, strides)):
            out_sizes[-1] *= s
            for st, sl in zip(out_strides, strides):
                st[-1] = sl[d]
            continue
        out_sizes.append(s)
        for st, sl in zip(out_strides, strides):
            st.append(sl[d])
    if not out_sizes:
        out_sizes = [1]
        out_strides = [[0] for _ in strides]
    return out_sizes, out_strides


def pad_dims(xs: Sequence[int]) -> list[int]:
    """`xs` zero-padded to MAX_DIMS entries (the shaders' fixed-size push arrays)."""
    return list(xs) + [0] * (MAX_DIMS - len(xs))


def _copy_push(n: int, ndim: int, src_off: int, dst_off: int, sizes: Sequence[int],
               src_strides: Sequence[int], dst_strides: Sequence[int]) -> bytes:
    return struct.pack("<22I", n, ndim, src_off, dst_off,
                       *pad_dims(sizes), *pad_dims(src_strides), *pad_dims(dst_strides))


_BITS = {4: "uint", 2: "uint16_t", 1: "uint8_t"}
"""copy_strided's element type per item size: unsigned words copy any dtype bit-exactly."""


def _copy_defines(src: TensorArg, dst: TensorArg) -> dict[str, str]:
    if src.dtype != dst.dtype:
        raise UnsupportedOpError(f"copy of a {src.dtype} tensor into a {dst.dtype} one")
    return {"T": _BITS[src.dtype.itemsize]}


_CONTIG_VEC4 = {"CONTIG_VEC4": 1}
"""copy_strided's plain range copy, 16 bytes an invocation."""


@variants("copy_strided")
def copy_strided_variants() -> Iterable[Defines]:
    yield _CONTIG_VEC4
    for t in _BITS.values():
        yield {"T": t}


def _as_dtype_of(builder: OpBuilder, src: TensorArg, dst: TensorArg) -> TensorArg:
    """`src`, or, of another dtype than `dst` (a file's dtype-changing copy, or a 16/8-bit constant
    read by words into a tensor held in 32 bits), a temp converted to `dst`'s dtype for the copy."""
    if src.dtype == dst.dtype:
        return src
    converted = builder.temp(src.shape, dst.dtype)
    convert_copy(builder, src, converted)
    return converted


def copy_elems(builder: OpBuilder, src: TensorArg, src_off: int, dst: TensorArg, dst_off: int,
               n: int) -> None:
    """dst[dst_off : dst_off + n] = src[src_off : src_off + n], bit-exact (a source of another dtype
    converted first).

    Tensors larger than one binding are copied in aligned pieces.
    """
    if n <= 0:
        return
    src = _as_dtype_of(builder, src, dst)
    defines = _copy_defines(src, dst)
    item = src.dtype.itemsize
    if max(src.nbytes, dst.nbytes) <= builder.limits.max_storage_buffer_range:
        pieces = [(0, n)]
    else:
        unit = _chunk_unit(builder)
        step = ((builder.limits.max_storage_buffer_range - unit) // unit) * unit // item
        pieces = [(k, min(step, n - k)) for k in range(0, n, step)]
    per_vec = 16 // item  # elements per uvec4
    for k, c in pieces:
        sb, s_shift = bind_elems(builder, src, src_off + k, c)
        db, d_shift = bind_elems(builder, dst, dst_off + k, c)
        so = src_off + k - s_shift
        do = dst_off + k - d_shift
        if so % per_vec == 0 and do % per_vec == 0 and c % per_vec == 0:
            push = _copy_push(c // per_vec, 1, so // per_vec, do // per_vec, [c], [1], [1])
            builder.dispatch("copy_strided", [sb, db], push, dispatch_groups(c // per_vec), _CONTIG_VEC4)
        else:
            push = _copy_push(c, 1, so, do, [c], [1], [1])
            builder.dispatch("copy_strided", [sb, db], push, dispatch_groups(c), defines)


def strided_copy(builder: OpBuilder, src: TensorArg, dst: TensorArg, sizes: Sequence[int],
                 src_strides: Sequence[int], src_offset: int = 0,
                 dst_strides: Sequence[int] | None = None, dst_offset: int = 0) -> None:
    """For every index tuple i over `sizes`:
    dst[dst_offset + i·dst_strides] = src[src_offset + i·src_strides].

    Strides are in elements and must be >= 0; `dst_strides` defaults to the
    contiguous strides of `sizes`. Dims are collapsed first (at most 6 may remain);
    a plain range copy takes the vec4 path. Works on float and int tensors alike.
    """
    if len(sizes) != len(src_strides):
        raise ValueError("sizes and src_strides differ in length")
    if dst_strides is None:
        dst_strides = contiguous_strides(sizes)
    n = math.prod(sizes)
    if n == 0:
        return
    src = _as_dtype_of(builder, src, dst)
    csz, (css, cds) = collapse_dims(sizes, src_strides, dst_strides)
    if len(csz) == 1 and (csz[0] == 1 or (css[0] == 1 and cds[0] == 1)):
        copy_elems(builder, src, src_offset, dst, dst_offset, csz[0])
        return
    if len(csz) > MAX_DIMS:
        raise UnsupportedOpError(f"strided copy over {len(csz)} non-mergeable dims (max {MAX_DIMS})")
    if any(s < 0 for s in css) or any(s < 0 for s in cds):
        raise UnsupportedOpError("negative strides")
    s_hi = src_offset + sum((z - 1) * s for z, s in zip(csz, css)) + 1
    d_hi = dst_offset + sum((z - 1) * s for z, s in zip(csz, cds)) + 1
    sb, s_shift = bind_elems(builder, src, src_offset, s_hi - src_offset)
    db, d_shift = bind_elems(builder, dst, dst_offset, d_hi - dst_offset)
    push = _copy_push(n, len(csz), src_offset - s_shift, dst_offset - d_shift, csz, css, cds)
    builder.dispatch("copy_strided", [sb, db], push, dispatch_groups(n), _copy_defines(src, dst))


def convert_copy(builder: OpBuilder, src: TensorArg, dst: TensorArg) -> None:
    """dst = src with the element type of dst (same element count, contiguous)."""
    if src.numel != dst.numel:
        raise UnsupportedOpError(f"copy of {src.shape} into {dst.shape}: element counts differ")
    if src.dtype == dst.dtype:
        copy_elems(builder, src, 0, dst, 0, src.numel)
        return
    defines = _cast_defines(src.dtype, dst.dtype, words=reads_by_words(builder))
    for start, count in chunk_elems(builder, src.numel, [src, dst]):
        sb, _ = bind_elems(builder, src, start, count)
        db, _ = bind_elems(builder, dst, start, count)
        builder.dispatch("cast", [sb, db], struct.pack("<I", count), dispatch_groups(count), defines)


def _cast_defines(src: DType, dst: DType, words: bool) -> Defines:
    """cast.comp's defines; `words` (no narrow storage): a 16- or 8-bit source (a weight: what the
    device writes is held in 32 bits) is read through 32-bit words."""
    defines = {**read_form("S", "src", src, words), **elem_defines("D", "dst", dst)}
    if not src.is_float and not dst.is_float:
        defines["INT_PATH"] = "1"
    return defines


@variants("cast")
def cast_variants() -> Iterable[Defines]:
    for src, dst in itertools.permutations(DTYPE_CODES, 2):
        yield _cast_defines(src, dst, False)
        if src.itemsize < 4 and dst.itemsize == 4:
            yield _cast_defines(src, dst, True)
