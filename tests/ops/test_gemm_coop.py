"""fp16 products on the tensor cores (shaders/matmul_coop.comp, vkx.loader.ops.gemm_coop) against
torch, beside the tiled kernel on the same cases.

The device cases are parametrized over the device's GEMM kernels for fp16: `tiled` everywhere, and
`coop` with each of its workgroup shapes and split-K only where the device has fp16 cooperative
matrices (`Device.fp16_cooperative_matrix`: the H200, not lavapipe, never under a profile). So on
lavapipe these cases run on the tiled kernel and no coop case exists to skip (the suite header
says which kernels the device has: tests/conftest.py); on the H200 both kernels run them. Which
products take the coop kernel is checked without a device (a builder told it has them)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vkx.format import vkgraph as g
from vkx.loader.gpu.device import Device, default_device
from vkx.loader.build.graph import GraphBuilder
from vkx.loader.ops import gemm, gemm_coop
from vkx.loader.ops.gemm_coop import TILINGS, CoopTiling, choose_coop_tiling
from tests.loader.helpers import no_device_limits

from .conftest import Const, assert_close_in, assert_linear_propagates_nan_and_inf, rand, run_graph

pytestmark = pytest.mark.vulkan

F16 = torch.float16
KERNELS = [("tiled", None)]
if default_device().fp16_cooperative_matrix:
    KERNELS += [("coop", CoopTiling(t.sg_m, t.sg_n, t.fm, t.fn, split)) for t in TILINGS for split in (1, 3)]


@pytest.fixture(params=KERNELS, ids=lambda k: k[0] if k[1] is None else
                f"coop-{k[1].bm}x{k[1].bn}-{k[1].sg_m * k[1].sg_n}sg-split{k[1].split}")
def kernel(request, monkeypatch):
    """Each fp16 product of the test takes this kernel (and tiling); returns the shaders one product dispatches."""
    name, tiling = request.param
    if name == "tiled":
        monkeypatch.setattr(gemm, "use_coop", lambda *args: None)
        return ["matmul_tiled"]
    monkeypatch.setattr(gemm_coop, "choose_coop_tiling", lambda *args: tiling)
    return ["matmul_coop", "matmul_reduce"] if tiling.split > 1 else ["matmul_coop"]


def _tiled_passes(shaders: list[str]) -> list[str]:
    return [s for s in shaders if s != "matmul_reduce"]


def test_linear(kernel, shaders):
    """k-contiguous W at sizes that are multiples of no tile (K a multiple of 8, not of a step),
    with and without a bias."""
    x, w, b = rand(70, 136, seed=1, dtype=F16), rand(100, 136, seed=2, dtype=F16), rand(100, seed=3, dtype=F16)
    assert_close_in(run_graph("aten.linear.default", [x, Const(w), Const(b)], ((70, 100), F16)),
                    F.linear(x, w, b), F16, terms=136)
    x, w = rand(150, 264, seed=4, dtype=F16), rand(136, 264, seed=5, dtype=F16)
    assert_close_in(run_graph("aten.linear.default", [x, Const(w), None], ((150, 136), F16)),
                    F.linear(x, w), F16, terms=264)
    assert _tiled_passes(shaders) == _tiled_passes(kernel) * 2 and len(shaders) == 2 * len(kernel)


def test_mm_bmm_addmm(kernel, shaders):
    """n-contiguous B, batches, alpha and beta with a bias row."""
    a, b = rand(70, 136, seed=6, dtype=F16), rand(136, 104, seed=7, dtype=F16)
    assert_close_in(run_graph("aten.mm.default", [a, b], ((70, 104), F16)), a @ b, F16, terms=136)
    a3, b3 = rand(3, 50, 72, seed=8, dtype=F16), rand(3, 72, 96, seed=9, dtype=F16)
    assert_close_in(run_graph("aten.bmm.default", [a3, b3], ((3, 50, 96), F16)), torch.bmm(a3, b3), F16, terms=72)
    m1, m2, s = rand(45, 304, seed=10, dtype=F16), rand(304, 64, seed=11, dtype=F16), rand(64, seed=12, dtype=F16)
    got = run_graph("aten.addmm.default", [s, m1, Const(m2), 0.5, 2.0], ((45, 64), F16))
    assert_close_in(got, torch.addmm(s, m1, m2, beta=0.5, alpha=2.0), F16, terms=304)
    assert shaders == kernel * 3


def test_attention_scores(kernel, shaders):
    """q @ k^T into fp32 scores (k read transposed in place, batched over heads), causal; p @ v
    (fp32 scores, fp16 v) stays on the other kernels."""
    q, k, v = rand(2, 3, 70, 16, seed=13, dtype=F16), rand(2, 3, 90, 16, seed=14, dtype=F16), \
        rand(2, 3, 90, 40, seed=15, dtype=F16)
    got = run_graph("aten.scaled_dot_product_attention.default", [q, k, v, None, 0.0, True, None, False],
                    ((2, 3, 70, 40), F16))
    assert_close_in(got, F.scaled_dot_product_attention(q, k, v, is_causal=True), F16, terms=90)
    assert shaders[0] == kernel[0] and shaders[-1] == "matmul_tiled"  # K = 16: never split


def test_nan_and_inf_propagate(kernel):
    assert_linear_propagates_nan_and_inf(F16)


def _linear_shaders(dtype: g.DataType, m: int, k: int, n: int, coop: bool, units: int = 1,
                    shared: int = 49152) -> list[str]:
    """The shaders of one linear's dispatches, built without a device for a device with (`coop`) or
    without fp16 cooperative matrices."""
    values = [g.Tensor(dtype, (m, k)), g.Tensor(dtype, (n, k), constant_id=0), g.Null(), g.Tensor(dtype, (m, n))]
    graph = g.VkGraph(chain=[g.OperatorCall(0, "aten.linear.default", (0, 1, 2, 3))], values=values,
                      input_ids=[0], output_ids=[3], constants=[g.ConstantRef(g.NAMED_OFFSET, 2 * n * k, "w")])
    limits = no_device_limits(max_storage_buffer_range=1 << 30, max_compute_shared_memory_size=shared)
    built = GraphBuilder(graph, limits, compute_units=units, fp16_cooperative_matrix=coop).build()
    return [d.shader for d in built.dispatches]


def test_which_products_take_the_coop_kernel():
    """fp16 with K a multiple of 8 where the device has them; bf16 (no such type), fp32, a K that
    16-byte chunks do not cover, and devices without them keep the tiled kernel."""
    f16, bf16, f32 = g.DataType.FLOAT16, g.DataType.BFLOAT16, g.DataType.FLOAT32
    assert _linear_shaders(f16, 512, 2048, 2048, coop=True) == ["matmul_coop"]
    assert _linear_shaders(f16, 512, 2048, 2048, coop=False) == ["matmul_tiled"]
    assert _linear_shaders(bf16, 512, 2048, 2048, coop=True) == ["matmul_tiled"]
    assert _linear_shaders(f32, 512, 2048, 2048, coop=True) == ["matmul_tiled"]
    assert _linear_shaders(f16, 512, 2044, 2048, coop=True) == ["matmul_tiled"]
    assert _linear_shaders(f16, 16, 2048, 2048, coop=True) == ["matmul"]  # too few rows for a tiled kernel
    assert _linear_shaders(f16, 32, 2048, 512, coop=True, units=132) == ["matmul_coop", "matmul_reduce"]
    assert _linear_shaders(f16, 512, 2048, 2048, coop=True, shared=16384) == ["matmul_tiled"]  # no tiling fits


def test_default_coop_tiling():
    """128 x 128 tiles where they fill the device, else 64 x 64; split-K while tiles are fewer than
    units and K is long enough (the tiled kernel's rule)."""
    big, small = TILINGS
    assert choose_coop_tiling(512, 8192, 2048, 1, 132, 49152) == big  # 256 tiles
    assert choose_coop_tiling(512, 2048, 2048, 1, 132, 49152) == small  # 64 big tiles: 256 small ones
    assert choose_coop_tiling(512, 512, 2048, 1, 132, 49152) == CoopTiling(2, 2, 2, 2, 2)  # 64 small tiles, K / 1024
    assert choose_coop_tiling(512, 512, 8192, 1, 132, 49152) == CoopTiling(2, 2, 2, 2, 4)
    assert choose_coop_tiling(512, 512, 640, 32, 132, 49152) == big  # batches fill it
    assert choose_coop_tiling(512, 8192, 2048, 1, 132, 32768) == small  # big's 40 KiB do not fit
    assert (big.shared_bytes, small.shared_bytes) == (40960, 20480)


def test_profiles_keep_the_tiled_kernel():
    """A device profile's features have no cooperative matrices, whatever the device has."""
    for name in ("android-baseline-2022", "adreno-7xx"):
        device = Device(profile=name)
        try:
            assert not device.fp16_cooperative_matrix and not device.limits.features & {"cooperativeMatrix",
                                                                                      "vulkanMemoryModel"}
        finally:
            device.close()
