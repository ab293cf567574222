"""Reductions and normalisations: softmax, log-softmax, layer/RMS/batch norm, sum, mean; amax, amin,
argmax, argmin and var (shaders/reduce_stats.comp, one invocation per output, or a workgroup
per output over at least ROW_MIN elements, as the row-wise ops).

Row-wise ops (softmax, layer norm, RMS norm; attention's softmax too) share
shaders/rows.glslh: a row of at least ROW_MIN elements is one workgroup's, its
invocations reducing together in shared memory (`row_dispatch`); shorter rows are
one invocation's. `sum`/`mean` do the same per output element, whatever dims they
reduce. Tensors larger than one storage binding are split into blocks
of whole rows; `sum`/`mean` walk any set of dims with strides.
Every tensor keeps its dtype (converted on load and store through elem_defines);
the math is fp32.
"""
from __future__ import annotations

import math
import struct
from typing import Iterable

from vkx.format.contract import Call

from . import (Defines, OpBuilder, TensorArg, UnsupportedOpError, any_dtype_defines, any_dtype_variants, builds,
               dtype_code, read_defines, reads_by_words, variants)
from .shape import (MAX_DIMS, bind_elems, chunk_elems, contiguous_strides, dispatch_groups,
                    normalize_dim, pad_dims, row_chunks, rows_binding)

FLOAT32_EPS = 1.1920928955078125e-07  # torch.finfo(torch.float32).eps


ROW_MIN = 64
"""Rows at least this long take a workgroup each (shorter ones: an invocation each)."""


ROW_WGS = (256, 128, 64)
"""Workgroup sizes of a row (ROW_WG): the first within the device's invocations, for rows of
at least 1024 elements; 64 for shorter rows."""


def row_dispatch(builder: OpBuilder, rows: int, n: int) -> tuple[tuple[int, int, int], dict[str, int]]:
    """(groups, defines) of a shaders/rows.glslh op over `rows` rows of `n` elements."""
    if n < ROW_MIN:
        return dispatch_groups(rows), {}
    invocations = builder.limits.max_compute_work_group_invocations
    wg = next(w for w in ROW_WGS if w <= invocations) if n >= 1024 else ROW_WGS[-1]
    return dispatch_groups(rows, 1), {"ROW_WG": wg}


def _types(builder: OpBuilder, *buffers: tuple[str, str, TensorArg]) -> dict[str, str]:
    """elem_defines of each (prefix, buffer name, tensor bound there); a 16- or 8-bit tensor on a
    device without narrow storage is only read (a weight: outputs are held in 32 bits), by words."""
    out: dict[str, str] = {}
    for prefix, buffer, t in buffers:
        out.update(read_defines(builder, prefix, buffer, t))
    return out


@builds("aten._softmax.default", "aten._log_softmax.default")
def softmax(builder: OpBuilder, call: Call) -> None:
    """Softmax / log-softmax along `dim`, viewed as [outer, D, inner]; half_to_float is the output's dtype."""
    src, out = call.tensor("self"), call.out
    shape = tuple(src.shape) or (1,)
    dim = normalize_dim(call["dim"], len(shape))
    outer, d, inner = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])
    if src.numel == 0:
        return
    defines = _types(builder, ("X", "x", src), ("Y", "y", out))
    if call.decl.name == "aten._log_softmax.default":
        defines["LOG"] = "1"
    slab = d * inner  # one outer index: whole rows of the softmax
    for o0, oc in row_chunks(builder, outer, slab, [src, out]):
        rows = oc * inner
        push = struct.pack("<III", rows, d, inner)
        groups, wg = row_dispatch(builder, rows, d)
        builder.dispatch("softmax", [rows_binding(src, o0, oc, slab), rows_binding(out, o0, oc, slab)],
                         push, groups, {**defines, **wg})


@builds("aten.native_layer_norm.default")
def native_layer_norm(builder: OpBuilder, call: Call) -> None:
    """Outputs (out, mean, rstd), mean and rstd one value per row (the rule checks their shapes)."""
    src, weight, bias = call.tensor("input"), call["weight"], call["bias"]
    out, mean, rstd = call.outputs
    n = math.prod(call["normalized_shape"])
    if src.numel == 0 or n == 0:
        return
    rows = src.numel // n
    defines = _types(builder, ("X", "x", src), ("Y", "y", out), ("W", "w", weight or src), ("B", "b", bias or src),
                     ("M", "mean_out", mean), ("R", "rstd_out", rstd))
    if weight is not None:
        defines["HAS_W"] = "1"
    if bias is not None:
        defines["HAS_B"] = "1"
    for r0, rc in row_chunks(builder, rows, n, [src, out]):
        xb = rows_binding(src, r0, rc, n)
        mb, shift = bind_elems(builder, mean, r0, rc)
        sb, _ = bind_elems(builder, rstd, r0, rc)  # the same shift: mean and rstd have the same size
        binds = [xb, rows_binding(out, r0, rc, n), weight or xb, bias or xb, mb, sb]
        push = struct.pack("<IIfI", rc, n, call["eps"], r0 - shift)
        groups, wg = row_dispatch(builder, rc, n)
        builder.dispatch("layer_norm", binds, push, groups, {**defines, **wg})


@variants("group_norm")
def group_norm_variants() -> Iterable[Defines]:
    for wg in (None, *ROW_WGS):
        for defines in any_dtype_variants("HAS_W", "HAS_B"):
            yield {**defines, **({} if wg is None else {"ROW_WG": wg})}


@builds("aten.native_group_norm.default")
def native_group_norm(builder: OpBuilder, call: Call) -> None:
    """One row a (sample, group): group_norm.comp, whole tensors in one dispatch."""
    src, weight, bias = call.tensor("input"), call["weight"], call["bias"]
    out, mean, rstd = call.outputs
    groups = call["group"]
    rows = call["N"] * groups
    n = src.numel // rows if rows else 0
    if n == 0:
        return
    groups_wg, wg = row_dispatch(builder, rows, n)
    push = struct.pack("<IIfIII", rows, n, call["eps"], call["HxW"], groups, call["C"] // groups)
    bound = [src, out, weight or src, bias or src, mean, rstd]
    builder.dispatch("group_norm", bound, push, groups_wg,
                     {**any_dtype_defines(HAS_W=weight is not None, HAS_B=bias is not None,
                                          WORDS=reads_by_words(builder)), **wg},
                     tuple(dtype_code(t.dtype) for t in bound))


@builds("aten.rms_norm.default")
def rms_norm(builder: OpBuilder, call: Call) -> None:
    """eps None is float32's epsilon (as torch)."""
    eps = FLOAT32_EPS if call["eps"] is None else float(call["eps"])
    rms_norm_rows(builder, call.tensor("input"), call["weight"], call.out, math.prod(call["normalized_shape"]), eps)


def rms_norm_rows(builder: OpBuilder, src: TensorArg, weight: TensorArg | None, out: TensorArg, n: int,
                  eps: float) -> None:
    """out = src * rsqrt(mean(src^2) + eps) [* weight] over rows of the last `n` elements, in fp32."""
    if src.numel == 0 or n == 0:
        return
    rows = src.numel // n
    defines = _types(builder, ("X", "x", src), ("Y", "y", out), ("W", "w", weight or src))
    if weight is not None:
        defines["HAS_W"] = "1"
    for r0, rc in row_chunks(builder, rows, n, [src, out]):
        xb = rows_binding(src, r0, rc, n)
        yb = rows_binding(out, r0, rc, n)
        push = struct.pack("<IIf", rc, n, eps)
        groups, wg = row_dispatch(builder, rc, n)
        builder.dispatch("rms_norm", [xb, yb, weight or xb], push, groups, {**defines, **wg})


@builds("aten._native_batch_norm_legit_no_training.default")
def batch_norm_no_training(builder: OpBuilder, call: Call) -> None:
    """Inference batch norm with running statistics; the saved mean/invstd outputs are empty."""
    src, weight, bias = call.tensor("input"), call["weight"], call["bias"]
    rmean, rvar = call.tensor("running_mean"), call.tensor("running_var")
    out = call.out
    channels, inner = src.shape[1], math.prod(src.shape[2:])
    w, b = weight or rmean, bias or rmean  # placeholders are never read
    defines = _types(builder, ("X", "x", src), ("Y", "y", out), ("M", "rmean", rmean), ("V", "rvar", rvar),
                     ("W", "w", w), ("B", "b", b))
    if weight is not None:
        defines["HAS_W"] = "1"
    if bias is not None:
        defines["HAS_B"] = "1"
    for start, count in chunk_elems(builder, src.numel, [src, out]):
        xb, _ = bind_elems(builder, src, start, count)
        yb, _ = bind_elems(builder, out, start, count)
        push = struct.pack("<IIIfI", count, channels, inner, call["eps"], start)
        builder.dispatch("batch_norm", [xb, yb, rmean, rvar, w, b], push, dispatch_groups(count), defines)


def _reduced_dims(call: Call, shape: tuple[int, ...]) -> set[int]:
    """The dims `dim` names (None or empty: every dim)."""
    dims = call["dim"]
    if isinstance(dims, int):
        dims = [dims]
    return set(range(len(shape))) if not dims else {normalize_dim(d, len(shape)) for d in dims}


def _walk(builder: OpBuilder, src: TensorArg, out: TensorArg, reduced: set[int]) -> tuple[int, bytes]:
    """(count, tables): the reduced elements per output, and the ksize/kstride/rsize/rstride
    tables of reduce_dims.comp and reduce_stats.comp (runs of adjacent kept or reduced dims
    merged, size-1 dims dropped) after their leading words n_out, nk, nr."""
    shape = tuple(src.shape)
    strides = contiguous_strides(shape)
    kept: list[list[int]] = []     # [size, stride]
    red: list[list[int]] = []
    last_kind = None
    for d in range(len(shape)):
        size = shape[d]
        if size == 1:
            continue
        kind = d in reduced
        group = red if kind else kept
        if last_kind is kind and group:
            group[-1][0] *= size
            group[-1][1] = strides[d]
        else:
            group.append([size, strides[d]])
        last_kind = kind
    count = math.prod(s for s, _ in red)
    if not red or count == 0:  # nothing reduced, or nothing to read: the shader reads no element
        red = [[1, 0]]
    if len(kept) > MAX_DIMS or len(red) > MAX_DIMS:
        raise UnsupportedOpError(f"reduction over {shape} by {sorted(reduced)}: too many dims")
    for t in (src, out):
        if t.nbytes > builder.limits.max_storage_buffer_range:
            raise UnsupportedOpError(f"reduction of a tensor {t.shape} larger than one storage binding")
    head = struct.pack("<3I", out.numel, len(kept), len(red))
    tables = struct.pack("<24I", *pad_dims([s for s, _ in kept]), *pad_dims([st for _, st in kept]),
                         *pad_dims([s for s, _ in red]), *pad_dims([st for _, st in red]))
    return count, head, tables


@builds("aten.mean.dim", "aten.sum.dim_IntList")
def reduce_dims(builder: OpBuilder, call: Call) -> None:
    """Sum or mean over `dim` (None or empty: every dim); the output's dtype is `dtype`'s."""
    src, out = call.tensor("self"), call.out
    if out.numel == 0:
        return
    count, head, tables = _walk(builder, src, out, _reduced_dims(call, tuple(src.shape)))
    defines = _types(builder, ("X", "x", src), ("Y", "y", out))
    if call.decl.name == "aten.mean.dim":
        defines["MEAN"] = "1"
    groups, wg = row_dispatch(builder, out.numel, count)
    builder.dispatch("reduce_dims", [src, out], head + struct.pack("<I", count) + tables, groups, {**defines, **wg})


STATS = {"aten.amax.default": "MAX", "aten.amin.default": "MIN", "aten.argmax.default": "ARGMAX",
         "aten.argmin.default": "ARGMIN", "aten.var.correction": "VAR"}
"""The op kind reduce_stats.comp computes for each op."""


SPLIT_SEGMENT = 2048
"""Elements of a segment in the first pass of a split reduction (reduce_stats.comp's SPLIT): 8 a
lane of a 256-lane workgroup."""
SPLIT_OUTPUTS = 64
"""Reductions of fewer outputs than this, over rows of at least two segments, are split (a
workgroup an output would leave a GPU idle: the argmax of a greedy decode step's logits)."""


@builds(*STATS)
def reduce_stats(builder: OpBuilder, call: Call) -> None:
    """amax/amin (NaN wins), argmax/argmin (the first extreme's index over the reduced dims; every
    dim when `dim` is None), var (correction None is 1) over `dim`: one invocation per output, a
    workgroup per output reducing at least ROW_MIN elements (row_dispatch); few outputs over long
    rows (not var) in two passes, SPLIT_SEGMENT elements a workgroup then a workgroup an output."""
    src, out = call.tensor("self"), call.out
    if out.numel == 0:
        return
    count, head, tables = _walk(builder, src, out, _reduced_dims(call, tuple(src.shape)))
    correction = call["correction"] if call.decl.has("correction") else None
    kind = {STATS[call.decl.name]: "1"}

    def push(walked: int, seg_len: int = 0) -> bytes:
        """reduce_stats.comp's push constants over `walked` elements (or pairs) an output."""
        divisor = 1.0 if correction is None else float(correction)  # read by VAR only
        return head + struct.pack("<If", walked, divisor) + tables + struct.pack("<I", seg_len)

    segments = -(-count // SPLIT_SEGMENT)
    if kind.keys() != {"VAR"} and out.numel < SPLIT_OUTPUTS and segments >= 2:
        pairs = builder.scratch(2 * out.numel * segments)
        groups, wg = row_dispatch(builder, out.numel * segments, SPLIT_SEGMENT)
        builder.dispatch("reduce_stats", [src, pairs], push(count, SPLIT_SEGMENT), groups,
                         {**_types(builder, ("X", "x", src)), **kind, "SPLIT": "1", **wg})
        groups, wg = row_dispatch(builder, out.numel, max(segments, ROW_MIN))
        builder.dispatch("reduce_stats", [pairs, out], push(segments), groups,
                         {**_types(builder, ("Y", "y", out)), **kind, "COMBINE": "1", **wg})
        return
    groups, wg = row_dispatch(builder, out.numel, count)
    builder.dispatch("reduce_stats", [src, out], push(count), groups,
                     {**_types(builder, ("X", "x", src), ("Y", "y", out)), **kind, **wg})


@variants("next_token")
def next_token_variants() -> Iterable[Defines]:
    """shaders/next_token.comp, the hand-over of an argmax's token to the next greedy step chained on
    the device (loader/greedy.py, record_greedy): no defines."""
    yield {}
