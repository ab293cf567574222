"""shaders/matmul_coop.comp's recording: fp16 products on the tensor cores (VK_NV_cooperative_matrix).

Where the device has fp16 16 x 16 x 16 subgroup products into fp32 (`OpBuilder.fp16_cooperative_matrix`,
vkx.loader.gpu.device; never under a device profile, whose features lack `cooperativeMatrix`), a
product of fp16 A and B that the tiled path would take goes here instead when its operands can be
read in 16-byte chunks: A k-contiguous, B k-contiguous (linear's W[N, K], attention's k^T) or
n-contiguous, K (and N for an n-contiguous B) a multiple of 8, every row start 8-aligned. bf16 has
no cooperative-matrix type in VK_NV_cooperative_matrix (VkComponentTypeNV has none), and bf16 is
not exactly fp16 (range), so bf16 products keep shaders/matmul_tiled.comp.

A `CoopTiling` is the shader's workgroup shape: SG_M x SG_N subgroups of 32, each FM x FN 16 x 16
fragments of C; split-K as the tiled kernel's (vkx.loader.ops.gemm_tiled.record_passes).
`choose_coop_tiling`: 128 x 128 tiles (4 subgroups of 4 x 4 fragments) where they fill the
device's compute units, else 64 x 64 (4 subgroups of 2 x 2), then split-K by the tiled kernel's
rule (vkx.loader.ops.gemm_tiled.split_k). Measured on the H200 at M = 512 (bench/gemm_fp16.py, GPU
time) for Llama-3.2-1B's products: 98 TFLOP/s (q_proj, 64 x 64), 44 (k_proj, 64 x 64 split 2), 138
(gate_proj, 128 x 128), 88 (down_proj, 64 x 64), 152 (lm_head, 128 x 128): 3.4-5.2x the tiled
kernel's fp16 (10.5-35.3), 0.2-1.5x torch's cuBLAS fp16 (28-665).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from vkx.format import dtypes
from vkx.loader.ops import Binding, Defines, OpBuilder, elem_defines, variants
from vkx.loader.ops.gemm_tiled import record_passes, split_k, tiles

BK = 32
"""K per step of shaders/matmul_coop.comp (its define)."""
C_DTYPES = (dtypes.FLOAT16, dtypes.FLOAT32)
"""C's dtypes (and a bias's, the same as C's): fp16 outputs, fp32 ones (attention scores, split-K partials)."""


@dataclass(frozen=True)
class CoopTiling:
    """A workgroup shape of shaders/matmul_coop.comp and a split-K factor."""
    sg_m: int
    sg_n: int
    fm: int
    fn: int
    split: int = 1

    @property
    def bm(self) -> int:
        return 16 * self.sg_m * self.fm

    @property
    def bn(self) -> int:
        return 16 * self.sg_n * self.fn

    @property
    def shared_bytes(self) -> int:
        """Shared memory of one workgroup: two stages of A's BM x BK and B's BK x BN fp16 slices, rows
        padded by one 16-byte chunk (a k-contiguous B's layout, the larger)."""
        return 2 * 16 * (BK // 8 + 1) * (self.bm + self.bn)

    @property
    def defines(self) -> dict[str, int]:
        return {"SG_M": self.sg_m, "SG_N": self.sg_n, "FM": self.fm, "FN": self.fn}


TILINGS = (CoopTiling(2, 2, 4, 4), CoopTiling(2, 2, 2, 2))
"""The workgroup shapes `choose_coop_tiling` picks from: 128 x 128 and 64 x 64 tiles of 4 subgroups.
On the H200 (bench/gemm_fp16.py, M = 512) they were the best of these and of 128 x 128 of 8
subgroups (2 x 4 fragments each) and 128 x 64 of 4."""


def choose_coop_tiling(M: int, N: int, K: int, batches: int, units: int, shared_bytes: int) -> CoopTiling:
    """The tiling of an M x N (x K) product over `batches` on a device of `units` compute units and
    `shared_bytes` of shared memory per workgroup (at least the small tiling's: `fits`)."""
    units = max(1, units)
    big, small = TILINGS
    fill = tiles(big.bm, big.bn, M, N, batches) >= units
    t = big if fill and big.shared_bytes <= shared_bytes else small
    return CoopTiling(t.sg_m, t.sg_n, t.fm, t.fn, split_k(tiles(t.bm, t.bn, M, N, batches), K, units))


def fits(shared_bytes: int) -> bool:
    """Whether a workgroup of `shared_bytes` of shared memory can run the smallest tiling."""
    return min(t.shared_bytes for t in TILINGS) <= shared_bytes


def coop_layout(a_dtype: dtypes.DType, b_dtype: dtypes.DType, c_dtype: dtypes.DType,
                bias_dtype: Optional[dtypes.DType], a_vec: bool, b_vec_k: bool, b_vec_n: bool) -> Optional[str]:
    """The B define ("B_VEC_K" or "B_VEC_N") of a product shaders/matmul_coop.comp can do, or None:
    fp16 A and B, C fp16 or fp32 (a bias of C's dtype), A and B readable in 8-element chunks
    (`a_vec`: A k-contiguous, `b_vec_k` / `b_vec_n`: B k- / n-contiguous, each with K, N and every
    offset as the chunks need)."""
    if a_dtype is not dtypes.FLOAT16 or b_dtype is not dtypes.FLOAT16 or c_dtype not in C_DTYPES:
        return None
    if bias_dtype is not None and bias_dtype is not c_dtype:
        return None
    if not a_vec:
        return None
    return "B_VEC_K" if b_vec_k else "B_VEC_N" if b_vec_n else None


def _defines(t: CoopTiling, layout: str, c_dtype: dtypes.DType, bias: bool) -> dict:
    defines = {**t.defines, layout: 1, **elem_defines("C", "c", c_dtype)}
    if bias:
        defines.update(elem_defines("BIAS", "bias", c_dtype), HAS_BIAS="1")
    return defines


def record_coop(builder: OpBuilder, bindings: Sequence[Binding], layout: str, M: int, N: int, K: int,
                nb1: int, nb2: int, ab: tuple[int, ...], out: tuple[int, int, int, int], c_dtype: dtypes.DType,
                bias: Optional[tuple[int, int, int, dtypes.DType]], alpha: float, beta: float) -> None:
    """Record C = alpha * A @ B (+ beta * bias) through shaders/matmul_coop.comp (`layout`: from
    `coop_layout`); the other arguments as vkx.loader.ops.gemm_tiled.record_tiled's."""
    t = choose_coop_tiling(M, N, K, nb1 * nb2, builder.compute_units, builder.limits.max_compute_shared_memory_size)
    record_passes(builder, "matmul_coop", bindings, _defines(t, layout, c_dtype, bias is not None),
                  (t.bm, t.bn, BK, t.split), M, N, K, nb1, nb2, ab, out, c_dtype, bias, alpha, beta)


@variants("matmul_coop")
def coop_variants() -> Iterable[Defines]:
    for t in TILINGS:
        for layout in ("B_VEC_K", "B_VEC_N"):
            for c_dtype in C_DTYPES:
                for bias in (False, True):
                    yield _defines(t, layout, c_dtype, bias)
