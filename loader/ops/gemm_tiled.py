"""shaders/matmul_tiled.comp's recording: which tiling a product gets, and split-K.

A `Tiling` is the shader's shape (RT x CT outputs per invocation, a 16 RT x
16 CT tile of C per workgroup, K in steps of BK) plus `split`, the number of workgroups that
share one tile's K (split-K). With split > 1 each workgroup writes its partial tile into the
graph's fp32 scratch (`OpBuilder.scratch`: one tensor that every op shares, allocated with
the activations, so the plan's activation bytes include it; the default's at most SPLIT_TO x
compute units partial tiles bound it) and shaders/matmul_reduce.comp
sums the partials, scales by alpha and adds beta * bias into C.

`choose_tiling` is the default, set from bench/gemm_sweep.py on an H200 (fp32, 132 SMs):
128 x 64 tiles (8 x 4 per invocation; 64 x 64 when that pads M by a fifth fewer rows, e.g.
M = 64), BK 16, and split-K while there are fewer tiles than compute units
(`OpBuilder.compute_units`), into as many splits as keep to SPLIT_TO workgroups per unit,
each walking at least MIN_SPLIT_K of K. Measured on the H200 with this rule's tilings:
Linear(4096, 4096) at M = 64, 256, 512, 2048 at 0.98, 0.80, 0.81, 0.80 of torch's cuBLAS
(24.7-37.8 TFLOP/s), square 1024, 2048, 4096 at 1.16, 0.82, 0.78 (30.3-39.9 TFLOP/s).
On a CPU device (lavapipe) 128 x 128 tiles (8 x 8) and BK 32 instead, 1.4-1.5x faster than
8 x 4 there (Linear(1024, 1024) at M = 256, mm 512^3): a CPU has registers to spare and no
shared-memory banks.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

from vkx.format import dtypes
from vkx.loader.ops import (Binding, Defines, OpBuilder, UnsupportedOpError, any_dtype_defines, any_dtype_variants,
                            dtype_code, elem_defines, reads_by_words, variants)
from vkx.loader.ops.shape import MAX_GROUPS

_PUSH = struct.Struct("<24i2f")
_REDUCE_PUSH = struct.Struct("<12i2f")
REDUCE_WG = 64
"""Invocations per shaders/matmul_reduce.comp workgroup (its local_size_x)."""

SPLIT_TO = 2
"""Split K into at most this many workgroups per compute unit (M = 64 x N = 4096 on 132 SMs:
64 tiles, 4 splits; 2 and 8 were slower)."""
MIN_SPLIT_K = 1024
"""Each split walks at least this much of K: at K = 1024, two splits were slower than one
(the reduce pass and the partials' traffic cost more than the fuller device saves)."""
MAX_SPLIT = 16
"""At most this many splits (the reduce reads every partial)."""


@dataclass(frozen=True)
class Tiling:
    """A shape of shaders/matmul_tiled.comp (its specialization constants RT, CT, BK) and a split-K factor."""
    rt: int
    ct: int
    bk: int
    split: int = 1

    @property
    def bm(self) -> int:
        return 16 * self.rt

    @property
    def bn(self) -> int:
        return 16 * self.ct

    @property
    def shared_bytes(self) -> int:
        """Shared memory of one workgroup: A's BM x BK and B's BK x BN fp32 slices."""
        return 4 * self.bk * (self.bm + self.bn)


def tiles(bm: int, bn: int, M: int, N: int, batches: int) -> int:
    """Output tiles of BM x BN (workgroups before split-K) of an M x N product over `batches`."""
    return -(-M // bm) * -(-N // bn) * batches


def split_k(tile_count: int, K: int, units: int) -> int:
    """The default split-K factor of a product of `tile_count` tiles and depth K on `units` compute
    units (the module docstring's rule; the coop kernel's tilings follow it too)."""
    if tile_count >= units:
        return 1
    return max(1, min(SPLIT_TO * units // tile_count, K // MIN_SPLIT_K, MAX_SPLIT))


def choose_tiling(M: int, N: int, K: int, batches: int, units: int, shared_bytes: int,
                  cpu: bool = False) -> Tiling:
    """The default tiling of an M x N (x K) product over `batches` on a device of `units`
    compute units and `shared_bytes` of shared memory per workgroup, a CPU when `cpu` (see
    the module docstring)."""
    units = max(1, units)
    if cpu:
        t = Tiling(8, 8, 32)
    else:
        t = Tiling(4 if 4 * -(-M // 128) * 128 >= 5 * -(-M // 64) * 64 else 8, 4, 16)
    while t.shared_bytes > shared_bytes and t.bk > 8:
        t = Tiling(t.rt, t.ct, t.bk // 2)
    return Tiling(t.rt, t.ct, t.bk, split_k(tiles(t.bm, t.bn, M, N, batches), K, units))


def record_tiled(builder: OpBuilder, bindings: Sequence[Binding], defines: dict,
                 M: int, N: int, K: int, nb1: int, nb2: int, ab: tuple[int, ...],
                 out: tuple[int, int, int, int], c_dtype: dtypes.DType,
                 bias: Optional[tuple[int, int, int, dtypes.DType]], alpha: float, beta: float) -> None:
    """Record C = alpha * A @ B (+ beta * bias) through shaders/matmul_tiled.comp.

    `bindings` are A, B, C (and the bias), `defines` A's and B's element and vector-load defines and
    the bias flag (vkx.loader.ops.gemm.product_defines), `ab` A's and B's (offset, row stride, column
    stride, batch strides), `out` C's (offset, row stride, batch strides), `bias` its (offset, row
    stride, column stride, dtype). The tiling and C's and the bias's dtypes are specialization constants.
    """
    nb = nb1 * nb2
    shared = builder.limits.max_compute_shared_memory_size
    t = choose_tiling(M, N, K, nb, builder.compute_units, shared, builder.is_cpu)
    if t.shared_bytes > shared:
        raise UnsupportedOpError(f"matmul tiling {t} needs {t.shared_bytes} bytes of shared memory, "
                                 f"over the device's {shared}")

    def spec(c: dtypes.DType, bias_dtype: Optional[dtypes.DType]) -> tuple[int, ...]:
        return (t.rt, t.ct, t.bk, *dtype_codes(c, bias_dtype))

    record_passes(builder, "matmul_tiled", bindings, defines, (t.bm, t.bn, t.bk, t.split), M, N, K, nb1, nb2, ab,
                  out, c_dtype, bias, alpha, beta, spec)


def dtype_codes(c: dtypes.DType, bias: Optional[dtypes.DType]) -> tuple[int, ...]:
    """The specialization constants of an ANY_OUT C and, where there is one, an ANY_IN bias."""
    return (dtype_code(c),) if bias is None else (dtype_code(c), dtype_code(bias))


def _no_spec(c: dtypes.DType, bias: Optional[dtypes.DType]) -> tuple[int, ...]:
    """The specialization constants of a shader whose C and bias are typed by defines: none."""
    return ()


def record_passes(builder: OpBuilder, shader: str, bindings: Sequence[Binding], defines: dict,
                  tile: tuple[int, int, int, int], M: int, N: int, K: int, nb1: int, nb2: int,
                  ab: tuple[int, ...], out: tuple[int, int, int, int], c_dtype: dtypes.DType,
                  bias: Optional[tuple[int, int, int, dtypes.DType]], alpha: float, beta: float,
                  spec: Callable[[dtypes.DType, Optional[dtypes.DType]], tuple[int, ...]] = _no_spec) -> None:
    """Record a tiled product `shader` (matmul_tiled.comp's bindings and push constants) of tiles
    `tile` = (BM, BN, BK, splits wanted): one pass, or split-K's partial tiles into the scratch
    and shaders/matmul_reduce.comp's sum; `spec(C's dtype, the bias's or None)`: the shader's
    specialization constants; the other arguments as `record_tiled`'s."""
    bm, bn, bk, want = tile
    nb = nb1 * nb2
    part = nb * M * N  # elements of one split's partial product
    split = 1  # K == 0 has nothing to split; the reduce's grid has a row of groups per row of C
    if K > 0 and M <= MAX_GROUPS:
        split = max(1, min(want, builder.limits.max_storage_buffer_range // (4 * part), MAX_GROUPS // nb))
    kchunk = K
    if split > 1:
        kchunk = -(-(-(-K // split)) // bk) * bk  # a multiple of BK, so vector loads stay whole
        split = -(-K // kchunk)  # no empty split
    groups = (-(-N // bn), -(-M // bm), nb * split)
    if groups[0] > MAX_GROUPS or groups[1] > MAX_GROUPS:
        raise UnsupportedOpError(f"matmul output {M}x{N} is too large for one dispatch grid")
    if split == 1:
        biasoff, sbm, sbn = bias[:3] if bias is not None else (0, 0, 0)
        push = _PUSH.pack(M, N, K, nb2, *ab, *out, biasoff, sbm, sbn, 1, K, 0, float(alpha), float(beta))
        builder.dispatch(shader, bindings, push, groups, defines, spec(c_dtype, None if bias is None else bias[3]))
        return
    # Pass 1: partial products into the scratch, contiguous [split, nb1, nb2, M, N], alpha 1, no bias.
    scratch = builder.scratch(split * part)
    defines = {k: v for k, v in defines.items() if "BIAS" not in k}
    if "C_T" in defines:  # C typed by defines (matmul_coop.comp), else by `spec`
        defines.update(elem_defines("C", "c", dtypes.FLOAT32))
    push = _PUSH.pack(M, N, K, nb2, *ab, 0, N, nb2 * M * N, M * N, 0, 0, 0, split, kchunk, part, 1.0, 0.0)
    builder.dispatch(shader, [bindings[0], bindings[1], scratch], push, groups, defines, spec(dtypes.FLOAT32, None))
    # Pass 2: C = alpha * (sum of the partials) + beta * bias.
    biasoff, sbm, sbn, bias_dtype = (0, 0, 0, None) if bias is None else bias
    push = _REDUCE_PUSH.pack(M, N, nb2, split, part, *out, biasoff, sbm, sbn, float(alpha), float(beta))
    builder.dispatch("matmul_reduce", [scratch, *bindings[2:]], push, (-(-N // REDUCE_WG), M, nb),
                     any_dtype_defines(HAS_BIAS=bias is not None, WORDS=reads_by_words(builder)),
                     dtype_codes(c_dtype, bias_dtype))


@variants("matmul_reduce")
def reduce_variants() -> Iterable[Defines]:
    """With a bias or without, in each storage mode: C and the bias take any dtype (ANY_OUT / ANY_IN)."""
    return any_dtype_variants("HAS_BIAS")
