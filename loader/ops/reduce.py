"""Reductions (vkx.format.op_reduce) and normalisations (vkx.format.op_norm): softmax, log-softmax,
layer/RMS/batch/group norm (`et_vk.rms_norm` too), sum, mean; amax, amin, argmax, argmin and var
(shaders/reduce_stats.comp, one invocation per output, or a workgroup per output over at least
ROW_MIN elements, as the row-wise ops); cumsum (shaders/cumsum.comp, an invocation per line).

Row-wise ops (softmax, layer norm, RMS norm; attention's softmax too) share
shaders/rows.glslh: a row of at least ROW_MIN elements is one workgroup's (ROW_GROUP), its
invocations reducing together in shared memory (`row_dispatch`); shorter rows are
one invocation's. `sum`/`mean` do the same per output element, whatever dims they
reduce. Tensors larger than one storage binding are split into blocks
of whole rows; `sum`/`mean` walk any set of dims with strides.
Every tensor keeps its dtype; the math is fp32. The stream a kernel reads (and a row op's
output) has typed defines (elem_defines); weights, statistics and the outputs of the other
kernels are of any dtype (ANY_IN / ANY_OUT, their dtypes specialization constants, as is the
workgroup size ROW_WG), so that each shader's variants (`@variants`) stay few.
Layer, group and batch norm bind six buffers; a device of fewer a stage (the Android baseline
profile's four) takes each in dispatches of at most four (NORM_BUFFERS).
"""
from __future__ import annotations

import math
import struct
from typing import Iterable

from vkx.format.contract import Call

from . import (FLOATS, WORDS_MODES, Binding, Defines, OpBuilder, TensorArg, UnsupportedOpError, any_dtype_defines,
               any_dtype_variants, binding_forms, builds, dtype_code, dtype_spec, product, read_defines,
               reads_by_words, variants)
from .elementwise import select_defines, select_variants
from .shape import (MAX_DIMS, WORKGROUP, bind_elems, chunk_elems, contiguous_strides, dispatch_groups,
                    normalize_dim, pad_dims, row_chunks, rows_binding, whole)

FLOAT32_EPS = 1.1920928955078125e-07  # torch.finfo(torch.float32).eps


ROW_MIN = 64
"""Rows at least this long take a workgroup each (shorter ones: an invocation each)."""


ROW_WGS = (256, 128, 64)
"""Workgroup sizes of a row (rows.glslh's ROW_WG, a specialization constant): the first within the
device's invocations, for rows of at least 1024 elements; 64 for shorter rows."""


def row_mode(n: int) -> Defines:
    """rows.glslh's define for rows of `n` elements: ROW_GROUP (a workgroup a row) from ROW_MIN on,
    else none (an invocation a row)."""
    return {"ROW_GROUP": 1} if n >= ROW_MIN else {}


ROW_MODES = (row_mode(0), row_mode(ROW_MIN))
"""Both modes of rows.glslh: a row per invocation, a row per workgroup."""


def row_dispatch(builder: OpBuilder, rows: int, n: int) -> tuple[tuple[int, int, int], Defines, int]:
    """(groups, defines, ROW_WG) of a shaders/rows.glslh op over `rows` rows of `n` elements:
    the row mode (row_mode) and the workgroup size, rows.glslh's specialization constant."""
    if n < ROW_MIN:
        return dispatch_groups(rows), row_mode(n), WORKGROUP
    invocations = builder.limits.max_compute_work_group_invocations
    wg = next(w for w in ROW_WGS if w <= invocations) if n >= 1024 else ROW_WGS[-1]
    return dispatch_groups(rows, 1), row_mode(n), wg


def _types(builder: OpBuilder, *buffers: tuple[str, str, TensorArg]) -> dict[str, str]:
    """elem_defines of each (prefix, buffer name, tensor bound there); a 16- or 8-bit tensor on a
    device without narrow storage is only read (a weight: outputs are held in 32 bits), by words."""
    out: dict[str, str] = {}
    for prefix, buffer, t in buffers:
        out.update(read_defines(builder, prefix, buffer, t))
    return out


def _input_forms(words: bool) -> list[Defines]:
    """Every _types form of a float input X (an activation or a constant) in a storage mode."""
    return binding_forms("X", "x", FLOATS, words)


def _row_forms(words: bool) -> Iterable[Defines]:
    """Every _types form of a row op's float input X and float output Y (an activation), each of any
    float dtype (the contract lets them differ), in a storage mode."""
    return product(_input_forms(words), binding_forms("Y", "y", FLOATS, words, writes=True))


def _any_forms(words: bool, *flags: str) -> list[Defines]:
    """any_dtype_variants of `flags` in one storage mode."""
    return [d for d in any_dtype_variants(*flags) if ("WORDS" in d) == words]


def _softmax_defines(builder: OpBuilder, src: TensorArg, out: TensorArg, log: bool) -> Defines:
    """softmax.comp's defines besides the row mode."""
    return {**_types(builder, ("X", "x", src), ("Y", "y", out)), **({"LOG": 1} if log else {})}


@variants("softmax")
def softmax_variants() -> Iterable[Defines]:
    """Input and output each of any float dtype (half_to_float: they differ); log or not; both row
    modes."""
    for words in WORDS_MODES:
        yield from product(_row_forms(words), ({}, {"LOG": 1}), ROW_MODES)


@builds("aten._softmax.default", "aten._log_softmax.default")
def softmax(builder: OpBuilder, call: Call) -> None:
    """Softmax / log-softmax along `dim`, viewed as [outer, D, inner]; half_to_float is the output's dtype."""
    src, out = call.tensor("self"), call.out
    shape = tuple(src.shape) or (1,)
    dim = normalize_dim(call["dim"], len(shape))
    outer, d, inner = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])
    if src.numel == 0:
        return
    defines = _softmax_defines(builder, src, out, call.decl.name == "aten._log_softmax.default")
    slab = d * inner  # one outer index: whole rows of the softmax
    for o0, oc in row_chunks(builder, outer, slab, [src, out]):
        rows = oc * inner
        push = struct.pack("<III", rows, d, inner)
        groups, mode, wg = row_dispatch(builder, rows, d)
        builder.dispatch("softmax", [rows_binding(src, o0, oc, slab), rows_binding(out, o0, oc, slab)],
                         push, groups, {**defines, **mode}, (wg,))


NORM_BUFFERS = 6
"""Storage buffers of one layer, group or batch norm dispatch (input, output, weight, bias and two
statistics): a device whose limit in force is lower (the Android baseline profile's is 4) takes each
norm in dispatches of at most four (`_norm_passes`, `_batch_norm_table`)."""


def _splits_norms(builder: OpBuilder) -> bool:
    """Whether `builder`'s device binds fewer than NORM_BUFFERS storage buffers a stage."""
    return not builder.limits.binds(NORM_BUFFERS)


def _norm_passes(builder: OpBuilder, call: Call, norm: list[Binding], stats: list[Binding], defines: Defines,
                 stats_defines: Defines) -> list[tuple[list[Binding], Defines]]:
    """The dispatches of a layer or group norm as (bindings, defines): one binding `norm` (x, y,
    weight, bias) and `stats` (mean, rstd) where the device takes NORM_BUFFERS; else NORM_ONLY
    binding `norm`, then, when some op reads mean or rstd or the graph returns them (an exported
    model's norm seldom does), STATS_ONLY binding x and `stats`, with `stats_defines` (no output,
    no weights)."""
    if not _splits_norms(builder):
        return [([*norm, *stats], defines)]
    passes = [(norm, {**defines, "NORM_ONLY": 1})]
    if any(builder.is_read(vid) for vid in call.output_vids[1:]):
        passes.append(([norm[0], *stats], {**stats_defines, "STATS_ONLY": 1}))
    return passes


NORM_SPLITS = ({}, {"NORM_ONLY": 1})
"""A layer or group norm's dispatch of every binding, and its NORM_ONLY one (_norm_passes)."""


@variants("layer_norm")
def layer_norm_variants() -> Iterable[Defines]:
    """The row's input and output each of any float dtype (_row_forms); weight, bias, mean and rstd of
    any dtype (specialization constants); with or without weight and bias; whole or NORM_ONLY; both
    row modes. STATS_ONLY: the input of any float dtype, mean and rstd of any; both row modes."""
    for words in WORDS_MODES:
        yield from product(_row_forms(words), _any_forms(words, "HAS_W", "HAS_B"), NORM_SPLITS, ROW_MODES)
        yield from product(_input_forms(words), _any_forms(words), [{"STATS_ONLY": 1}], ROW_MODES)


@builds("aten.native_layer_norm.default")
def native_layer_norm(builder: OpBuilder, call: Call) -> None:
    """Outputs (out, mean, rstd), mean and rstd one value per row (the rule checks their shapes)."""
    src, weight, bias = call.tensor("input"), call["weight"], call["bias"]
    out, mean, rstd = call.outputs
    n = math.prod(call["normalized_shape"])
    if src.numel == 0 or n == 0:
        return
    rows = src.numel // n
    words = reads_by_words(builder)
    defines = {**_types(builder, ("X", "x", src), ("Y", "y", out)),
               **any_dtype_defines(HAS_W=weight is not None, HAS_B=bias is not None, WORDS=words)}
    stats_defines = {**_types(builder, ("X", "x", src)), **any_dtype_defines(WORDS=words)}
    codes = dtype_spec(weight or src, bias or src, mean, rstd)
    for r0, rc in row_chunks(builder, rows, n, [src, out]):
        xb = rows_binding(src, r0, rc, n)
        mb, shift = bind_elems(builder, mean, r0, rc)
        sb, _ = bind_elems(builder, rstd, r0, rc)  # the same shift: mean and rstd have the same size
        norm = [xb, rows_binding(out, r0, rc, n), weight or xb, bias or xb]
        push = struct.pack("<IIfI", rc, n, call["eps"], r0 - shift)
        groups, mode, wg = row_dispatch(builder, rc, n)
        for binds, chosen in _norm_passes(builder, call, norm, [mb, sb], {**defines, **mode},
                                          {**stats_defines, **mode}):
            builder.dispatch("layer_norm", binds, push, groups, chosen, (wg, *codes))


@variants("group_norm")
def group_norm_variants() -> Iterable[Defines]:
    """Every binding of any dtype (specialization constants); with or without weight and bias, whole
    or NORM_ONLY; STATS_ONLY; both row modes."""
    yield from product(any_dtype_variants("HAS_W", "HAS_B"), NORM_SPLITS, ROW_MODES)
    yield from product(any_dtype_variants(), [{"STATS_ONLY": 1}], ROW_MODES)


@builds("aten.native_group_norm.default")
def native_group_norm(builder: OpBuilder, call: Call) -> None:
    """One row a (sample, group): group_norm.comp, whole tensors in one dispatch (two where the
    device binds fewer buffers: _norm_passes)."""
    src, weight, bias = call.tensor("input"), call["weight"], call["bias"]
    out, mean, rstd = call.outputs
    groups = call["group"]
    rows = call["N"] * groups
    n = src.numel // rows if rows else 0
    if n == 0:
        return
    groups_wg, mode, wg = row_dispatch(builder, rows, n)
    push = struct.pack("<IIfIII", rows, n, call["eps"], call["HxW"], groups, call["C"] // groups)
    norm = [src, out, weight or src, bias or src]
    words = reads_by_words(builder)
    defines = {**any_dtype_defines(HAS_W=weight is not None, HAS_B=bias is not None, WORDS=words), **mode}
    spec = (*dtype_spec(*norm, mean, rstd), wg)
    for binds, chosen in _norm_passes(builder, call, norm, [mean, rstd], defines,
                                      {**any_dtype_defines(WORDS=words), **mode}):
        builder.dispatch("group_norm", binds, push, groups_wg, chosen, spec)


@variants("rms_norm")
def rms_norm_variants() -> Iterable[Defines]:
    """The row's input and output each of any float dtype (_row_forms); the weight of any dtype (a
    specialization constant); with or without weight; both row modes."""
    for words in WORDS_MODES:
        yield from product(_row_forms(words), _any_forms(words, "HAS_W"), ROW_MODES)


@builds("aten.rms_norm.default")
def rms_norm(builder: OpBuilder, call: Call) -> None:
    """eps None is float32's epsilon (as torch)."""
    eps = FLOAT32_EPS if call["eps"] is None else float(call["eps"])
    rms_norm_rows(builder, call.tensor("input"), call["weight"], call.out, math.prod(call["normalized_shape"]), eps)


@builds("et_vk.rms_norm.default")
def vk_rms_norm(builder: OpBuilder, call: Call) -> None:
    """Over the last dim, by weight [D] (ExecuTorch's reference: fp32 math, the input's dtype out)."""
    x = call.tensor("x")
    rms_norm_rows(builder, x, call.tensor("weight"), call.out, x.shape[-1], float(call["eps"]))


def rms_norm_rows(builder: OpBuilder, src: TensorArg, weight: TensorArg | None, out: TensorArg, n: int,
                  eps: float) -> None:
    """out = src * rsqrt(mean(src^2) + eps) [* weight] over rows of the last `n` elements, in fp32."""
    if src.numel == 0 or n == 0:
        return
    rows = src.numel // n
    defines = {**_types(builder, ("X", "x", src), ("Y", "y", out)),
               **any_dtype_defines(HAS_W=weight is not None, WORDS=reads_by_words(builder))}
    for r0, rc in row_chunks(builder, rows, n, [src, out]):
        xb = rows_binding(src, r0, rc, n)
        yb = rows_binding(out, r0, rc, n)
        push = struct.pack("<IIf", rc, n, eps)
        groups, mode, wg = row_dispatch(builder, rc, n)
        builder.dispatch("rms_norm", [xb, yb, weight or xb], push, groups, {**defines, **mode},
                         (wg, dtype_code((weight or src).dtype)))


@variants("batch_norm")
def batch_norm_variants() -> Iterable[Defines]:
    """The input of any float dtype (typed: the stream read); the output, running statistics, weight
    and bias of any dtype (specialization constants); with or without weight and bias; from the
    tensors or FROM_TABLE. The table's passes (_batch_norm_table): TABLE_STATS, and TABLE_AFFINE
    with weight, bias or both."""
    for words in WORDS_MODES:
        yield from product(_input_forms(words), _any_forms(words, "HAS_W", "HAS_B"), ({}, {"FROM_TABLE": 1}))
        yield from product(_any_forms(words), [{"TABLE_STATS": 1}])
        yield from product([d for d in _any_forms(words, "HAS_W", "HAS_B") if "HAS_W" in d or "HAS_B" in d],
                           [{"TABLE_AFFINE": 1}])


def _batch_norm_table(builder: OpBuilder, rmean: TensorArg, rvar: TensorArg, weight: TensorArg | None,
                      bias: TensorArg | None, eps: float, spec: tuple[int, ...]) -> TensorArg:
    """batch_norm.comp's fp32 table of (mean, rsqrt(var + eps), weight, bias) a channel, in a scratch
    written by two dispatches of three bindings (TABLE_STATS, TABLE_AFFINE: none without weight
    and bias), for a device that binds fewer than NORM_BUFFERS buffers."""
    channels = rmean.numel
    table = builder.scratch(4 * channels)
    push = struct.pack("<IIIfI", channels, channels, 1, eps, 0)
    words = reads_by_words(builder)
    builder.dispatch("batch_norm", [rmean, rvar, table], push, dispatch_groups(channels),
                     {**any_dtype_defines(WORDS=words), "TABLE_STATS": 1}, spec)
    if weight or bias:
        affine = any_dtype_defines(HAS_W=weight is not None, HAS_B=bias is not None, WORDS=words)
        # an absent one's binding holds the other, never read
        builder.dispatch("batch_norm", [weight or bias, bias or weight, table], push, dispatch_groups(channels),
                         {**affine, "TABLE_AFFINE": 1}, spec)
    return table


@builds("aten._native_batch_norm_legit_no_training.default")
def batch_norm_no_training(builder: OpBuilder, call: Call) -> None:
    """Inference batch norm with running statistics; the saved mean/invstd outputs are empty. One
    dispatch of six bindings, or, where the device binds fewer, a per-channel table
    (_batch_norm_table) applied by FROM_TABLE."""
    src, weight, bias = call.tensor("input"), call["weight"], call["bias"]
    rmean, rvar = call.tensor("running_mean"), call.tensor("running_var")
    out = call.out
    if src.numel == 0:
        return
    channels, inner = src.shape[1], math.prod(src.shape[2:])
    w, b = weight or rmean, bias or rmean  # placeholders are never read
    defines = {**_types(builder, ("X", "x", src)),
               **any_dtype_defines(HAS_W=weight is not None, HAS_B=bias is not None, WORDS=reads_by_words(builder))}
    codes = dtype_spec(out, rmean, rvar, w, b)
    per_channel = [rmean, rvar, w, b]
    if _splits_norms(builder):
        per_channel = [_batch_norm_table(builder, rmean, rvar, weight, bias, call["eps"], codes)]
        defines["FROM_TABLE"] = 1
    for start, count in chunk_elems(builder, src.numel, [src, out]):
        xb, _ = bind_elems(builder, src, start, count)
        yb, _ = bind_elems(builder, out, start, count)
        push = struct.pack("<IIIfI", count, channels, inner, call["eps"], start)
        builder.dispatch("batch_norm", [xb, yb, *per_channel], push, dispatch_groups(count), defines, codes)


def _reduced_dims(call: Call, shape: tuple[int, ...]) -> set[int]:
    """The dims `dim` names (None or empty: every dim)."""
    dims = call["dim"]
    if isinstance(dims, int):
        dims = [dims]
    return set(range(len(shape))) if not dims else {normalize_dim(d, len(shape)) for d in dims}


def _walk(builder: OpBuilder, src: TensorArg, out: TensorArg, reduced: set[int]) -> tuple[int, bytes, bytes]:
    """(count, head, tables): the reduced elements per output, the leading words n_out, nk, nr of
    reduce_dims.comp's and reduce_stats.comp's push constants, and their ksize/kstride/rsize/rstride
    tables (runs of adjacent kept or reduced dims merged, size-1 dims dropped)."""
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


@variants("reduce_dims")
def reduce_dims_variants() -> Iterable[Defines]:
    """The input of any float dtype (typed: the stream read); the output of any dtype (a
    specialization constant); sum or mean; both row modes."""
    for words in WORDS_MODES:
        yield from product(_input_forms(words), _any_forms(words, "MEAN"), ROW_MODES)


@builds("aten.mean.dim", "aten.sum.dim_IntList")
def reduce_dims(builder: OpBuilder, call: Call) -> None:
    """Sum or mean over `dim` (None or empty: every dim); the output's dtype is `dtype`'s."""
    src, out = call.tensor("self"), call.out
    if out.numel == 0:
        return
    count, head, tables = _walk(builder, src, out, _reduced_dims(call, tuple(src.shape)))
    defines = {**_types(builder, ("X", "x", src)),
               **any_dtype_defines(MEAN=call.decl.name == "aten.mean.dim", WORDS=reads_by_words(builder))}
    groups, mode, wg = row_dispatch(builder, out.numel, count)
    builder.dispatch("reduce_dims", [src, out], head + struct.pack("<I", count) + tables, groups,
                     {**defines, **mode}, (wg, dtype_code(out.dtype)))


STATS = {"aten.amax.default": "MAX", "aten.amin.default": "MIN", "aten.argmax.default": "ARGMAX",
         "aten.argmin.default": "ARGMIN", "aten.var.correction": "VAR"}
"""The op kind reduce_stats.comp computes for each op."""
SPLIT_KINDS = tuple(k for k in STATS.values() if k != "VAR")
"""The kinds a long row of few outputs takes in two passes (var's two walks over a row do not split)."""


SPLIT_SEGMENT = 2048
"""Elements of a segment in the first pass of a split reduction (reduce_stats.comp's SPLIT): 8 a
lane of a 256-lane workgroup."""
SPLIT_OUTPUTS = 64
"""Reductions of fewer outputs than this, over rows of at least two segments, are split (a
workgroup an output would leave a GPU idle: the argmax of a greedy decode step's logits)."""


def _stats_defines(kind: str, stage: str | None, words: bool) -> Defines:
    """reduce_stats.comp's defines besides X's and the row mode: the op kind, the pass of a split
    reduction (SPLIT, COMBINE; None: one pass) and, but for SPLIT (which writes pairs, no output),
    the output's any_dtype_defines."""
    return {kind: 1, **({stage: 1} if stage else {}), **({} if stage == "SPLIT" else any_dtype_defines(WORDS=words))}


@variants("reduce_stats")
def reduce_stats_variants() -> Iterable[Defines]:
    """Every op kind (STATS); the input of any float dtype (typed: the greedy argmax reads the
    logits), the output of any dtype (a specialization constant). One pass in both row modes; a split
    reduction's passes (SPLIT_KINDS) take a workgroup a segment, then one an output (row_mode)."""
    for words in WORDS_MODES:
        for kind in STATS.values():
            yield from product(_input_forms(words), [_stats_defines(kind, None, words)], ROW_MODES)
        for kind in SPLIT_KINDS:
            yield from product(_input_forms(words), [_stats_defines(kind, "SPLIT", words)],
                               [row_mode(SPLIT_SEGMENT)])
            yield {**_stats_defines(kind, "COMBINE", words), **row_mode(ROW_MIN)}


@builds(*STATS)
def reduce_stats(builder: OpBuilder, call: Call) -> None:
    """amax/amin (NaN wins), argmax/argmin (the first extreme's index over the reduced dims; every
    dim when `dim` is None), var (correction None is 1) over `dim`: one invocation per output, a
    workgroup per output reducing at least ROW_MIN elements (row_dispatch); few outputs over long
    rows (SPLIT_KINDS) in two passes, SPLIT_SEGMENT elements a workgroup then a workgroup an output."""
    src, out = call.tensor("self"), call.out
    if out.numel == 0:
        return
    count, head, tables = _walk(builder, src, out, _reduced_dims(call, tuple(src.shape)))
    correction = call["correction"] if call.decl.has("correction") else None
    kind, words = STATS[call.decl.name], reads_by_words(builder)

    def push(walked: int, seg_len: int = 0) -> bytes:
        """reduce_stats.comp's push constants over `walked` elements (or pairs) an output."""
        divisor = 1.0 if correction is None else float(correction)  # read by VAR only
        return head + struct.pack("<If", walked, divisor) + tables + struct.pack("<I", seg_len)

    segments = -(-count // SPLIT_SEGMENT)
    if kind in SPLIT_KINDS and out.numel < SPLIT_OUTPUTS and segments >= 2:
        pairs = builder.scratch(2 * out.numel * segments)
        groups, mode, wg = row_dispatch(builder, out.numel * segments, SPLIT_SEGMENT)
        builder.dispatch("reduce_stats", [src, pairs], push(count, SPLIT_SEGMENT), groups,
                         {**_types(builder, ("X", "x", src)), **_stats_defines(kind, "SPLIT", words), **mode}, (wg,))
        groups, mode, wg = row_dispatch(builder, out.numel, max(segments, ROW_MIN))
        builder.dispatch("reduce_stats", [pairs, out], push(segments), groups,
                         {**_stats_defines(kind, "COMBINE", words), **mode}, (wg, dtype_code(out.dtype)))
        return
    groups, mode, wg = row_dispatch(builder, out.numel, count)
    builder.dispatch("reduce_stats", [src, out], push(count), groups,
                     {**_types(builder, ("X", "x", src)), **_stats_defines(kind, None, words), **mode},
                     (wg, dtype_code(out.dtype)))


@variants("next_token")
def next_token_variants() -> Iterable[Defines]:
    """shaders/next_token.comp, the hand-over of an argmax's token to the next greedy step chained on
    the device (loader/lm/greedy.py, GreedyChain): no defines."""
    yield {}


variants("cumsum")(select_variants)


@builds("aten.cumsum.default")
def cumsum(builder: OpBuilder, call: Call) -> None:
    src, out = call.tensor("self"), call.out
    if out.numel == 0:
        return
    whole(builder, src, out)
    shape = tuple(src.shape) or (1,)
    dim = call["dim"] % len(shape)
    inner = math.prod(shape[dim + 1:])
    lines = math.prod(shape[:dim]) * inner
    builder.dispatch("cumsum", [src, out], struct.pack("<III", lines, shape[dim], inner), dispatch_groups(lines),
                     select_defines(builder, out), dtype_spec(src, out))
