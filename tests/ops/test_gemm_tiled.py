"""shaders/matmul_tiled.comp's tilings (vkx.loader.ops.gemm_tiled): every tile shape, BK and
split-K against torch at odd sizes (M, N, K multiples of none of tile, BK, split), in each
float dtype, with a bias, alpha/beta, batches and binding splits; the default heuristic;
the split-K scratch (one per graph, counted with the activations)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vkx.format import vkgraph as g
from vkx.loader import load_graph
from vkx.loader.gpu.device import default_device
from vkx.loader.build.graph import GraphBuilder
from vkx.loader.ops import gemm, gemm_tiled
from vkx.loader.ops.gemm_tiled import Tiling, choose_tiling
from tests.loader.helpers import no_device_limits

from .conftest import FLOAT_DTYPES, Const, assert_close_in, rand, run_graph

pytestmark = pytest.mark.vulkan


@pytest.fixture
def force(monkeypatch):
    """force(tiling): every tiled product takes shaders/matmul_tiled.comp (fp16 ones too, on a
    device with cooperative matrices) with `tiling` instead of the default."""
    def forced(t: Tiling) -> None:
        monkeypatch.setattr(gemm, "use_coop", lambda *args: None)
        monkeypatch.setattr(gemm_tiled, "choose_tiling", lambda *args: t)
    return forced


def _passes(t: Tiling) -> list[str]:
    return ["matmul_tiled", "matmul_reduce"] if t.split > 1 else ["matmul_tiled"]


# (tiling, K): vector loads (K % 4 == 0) and scalar loads, a K tail shorter than BK, splits
# whose last chunk is short.
CASES = [(Tiling(4, 4, 8), 333), (Tiling(8, 8, 32), 332), (Tiling(8, 4, 16, 3), 333),
         (Tiling(4, 8, 32, 2), 332), (Tiling(4, 4, 16, 5), 332), (Tiling(8, 8, 8, 4), 101)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("tiling,k", CASES, ids=str)
def test_linear_every_tiling(dtype, tiling, k, force, shaders):
    force(tiling)
    m, n = 70, 100
    x, w, b = rand(m, k, seed=1, dtype=dtype), rand(n, k, seed=2, dtype=dtype), rand(n, seed=3, dtype=dtype)
    got = run_graph("aten.linear.default", [x, Const(w), Const(b)], ((m, n), dtype))
    assert shaders == _passes(tiling)
    assert_close_in(got, F.linear(x, w, b), dtype, terms=k)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("tiling", [Tiling(4, 4, 32, 3), Tiling(8, 8, 16)], ids=str)
def test_mm_bmm_addmm_tiling(dtype, tiling, force, shaders):
    """n-contiguous B (vector and scalar), broadcast batches, alpha/beta with a bias row."""
    force(tiling)
    a, b = rand(3, 50, 77, seed=4, dtype=dtype), rand(3, 77, 92, seed=5, dtype=dtype)
    assert_close_in(run_graph("aten.bmm.default", [a, b], ((3, 50, 92), dtype)), torch.bmm(a, b), dtype, terms=77)
    a4, b2 = rand(2, 3, 40, 65, seed=6, dtype=dtype), rand(65, 33, seed=7, dtype=dtype)  # N % 4 != 0
    assert_close_in(run_graph("aten.matmul.default", [a4, b2], ((2, 3, 40, 33), dtype)), a4 @ b2, dtype, terms=65)
    m1, m2, s = rand(45, 300, seed=8, dtype=dtype), rand(300, 60, seed=9, dtype=dtype), rand(60, seed=10, dtype=dtype)
    got = run_graph("aten.addmm.default", [s, m1, Const(m2), 0.5, 2.0], ((45, 60), dtype))
    assert_close_in(got, torch.addmm(s, m1, m2, beta=0.5, alpha=2.0), dtype, terms=300)
    assert shaders == _passes(tiling) * 3


def test_split_k_with_binding_splits(force, shaders):
    """W over the binding limit: each column chunk of 48 is its own split-K product (every
    chunk's reduce writing its column slice of C); the 6-column rest takes shaders/matmul.comp."""
    force(Tiling(4, 4, 16, 3))
    m, k, n = 40, 130, 150
    x, w, b = rand(m, k, seed=1), rand(n, k, seed=2), rand(n, seed=3)
    got = run_graph("aten.linear.default", [x, Const(w), Const(b)], (m, n), max_binding_bytes=50 * k * 4)
    assert shaders == ["matmul_tiled", "matmul_reduce"] * 3 + ["matmul"]
    assert_close_in(got, F.linear(x, w, b), torch.float32, terms=k)


def test_split_k_clipped_to_the_binding_limit(force, shaders):
    """A scratch of `split` partials larger than one binding: fewer splits (here none)."""
    force(Tiling(4, 4, 16, 4))
    m, k, n = 64, 48, 64  # every operand fits 20 KiB, two 16 KiB partials do not
    x, w = rand(m, k, seed=1), rand(n, k, seed=2)
    got = run_graph("aten.linear.default", [x, Const(w), None], (m, n), max_binding_bytes=20480)
    assert shaders == ["matmul_tiled"]
    assert_close_in(got, F.linear(x, w), torch.float32, terms=k)


def test_default_tiling():
    """bench/gemm_sweep.py's best on an H200 for each of its shapes; 64-row tiles where they
    pad M by a fifth fewer rows; split-K only with fewer tiles than compute units and a long
    enough K; BK 8 where 16 does not fit the shared memory."""
    h200 = dict(units=132, shared_bytes=49152)
    best = {(64, 4096, 4096): Tiling(4, 4, 16, 4), (256, 4096, 4096): Tiling(8, 4, 16, 2),
            (512, 4096, 4096): Tiling(8, 4, 16), (2048, 4096, 4096): Tiling(8, 4, 16),
            (1024, 1024, 1024): Tiling(8, 4, 16), (2048, 2048, 2048): Tiling(8, 4, 16),
            (4096, 4096, 4096): Tiling(8, 4, 16)}
    for (m, n, k), tiling in best.items():
        assert choose_tiling(m, n, k, 1, **h200) == tiling, (m, n, k)
    assert choose_tiling(130, 4096, 4096, 1, **h200) == Tiling(4, 4, 16)  # 192 rows, not 256
    assert choose_tiling(200, 4096, 4096, 1, **h200).rt == 8  # 256 rows either way
    assert choose_tiling(64, 4096, 1000, 1, **h200).split == 1  # K < MIN_SPLIT_K
    assert choose_tiling(64, 4096, 4096, 2, **h200).split == 2  # batches fill the device too
    assert choose_tiling(64, 4096, 4096, 3, **h200).split == 1
    assert choose_tiling(64, 4096, 4096, 1, units=2, shared_bytes=32768).split == 1
    assert choose_tiling(2048, 4096, 4096, 1, units=2, shared_bytes=8192).bk == 8
    # lavapipe: 8 x 8 per invocation, BK 32 where it fits
    assert choose_tiling(256, 1024, 1024, 1, 2, 32768, cpu=True) == Tiling(8, 8, 32)
    assert choose_tiling(256, 1024, 1024, 1, 2, 16384, cpu=True) == Tiling(8, 8, 16)
    assert choose_tiling(64, 512, 4096, 1, 16, 32768, cpu=True) == Tiling(8, 8, 32, 4)  # 4 tiles, 16 units


def _two_linears(m: int, k: int, n: int) -> g.VkGraph:
    f32 = g.DataType.FLOAT32
    values = [g.Tensor(f32, (m, k)), g.Tensor(f32, (n, k), constant_id=0), g.Null(), g.Tensor(f32, (m, n)),
              g.Tensor(f32, (k, n), constant_id=1), g.Tensor(f32, (m, k))]
    chain = [g.OperatorCall(0, "aten.linear.default", (0, 1, 2, 3)),
             g.OperatorCall(1, "aten.linear.default", (3, 4, 2, 5))]
    return g.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=[5],
                     constants=[g.ConstantRef(g.NAMED_OFFSET, 4 * n * k, "w0"),
                                g.ConstantRef(g.NAMED_OFFSET, 4 * n * k, "w1")])


def test_split_k_scratch_is_shared_and_counted(monkeypatch):
    """Two split-K products of different sizes share one scratch, sized for the larger, and
    the load's activation bytes include it."""
    m, k, n = 48, 2048, 160
    graph = _two_linears(m, k, n)
    built = GraphBuilder(graph, no_device_limits(), compute_units=64).build()
    splits = [choose_tiling(m, n, k, 1, 64, 16384).split, choose_tiling(m, k, n, 1, 64, 16384).split]
    assert splits[0] > 1 and [d.shader for d in built.dispatches] == ["matmul_tiled", "matmul_reduce", "matmul_tiled"]
    assert len(built.temps) == 1 and built.temps[0].nbytes == 4 * splits[0] * m * n
    w0, w1 = rand(n, k, seed=1), rand(k, n, seed=2)
    x = rand(m, k, seed=3)
    want = F.linear(F.linear(x, w0), w1)
    blobs = [w0.numpy().tobytes(), w1.numpy().tobytes()]
    monkeypatch.setattr(default_device(), "compute_units", 1)
    with load_graph(graph, blobs) as plain:  # one compute unit: enough tiles, no split
        assert plain.dispatch_count == 2
        plain_bytes = plain.ledger.snapshot()["used"]["activations"]
    monkeypatch.setattr(default_device(), "compute_units", 64)
    with load_graph(graph, blobs) as split:
        assert split.dispatch_count == 3
        assert split.ledger.snapshot()["used"]["activations"] == plain_bytes + built.temps[0].nbytes
        assert_close_in(split(x), want, torch.float32, terms=k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_split_k_of_empty_k(dtype, force, shaders):
    """K == 0 under a split tiling: one pass writing beta * bias."""
    force(Tiling(4, 4, 16, 4))
    m, n = 40, 50
    s, m1, m2 = rand(n, seed=1, dtype=dtype), torch.empty(m, 0, dtype=dtype), torch.empty(0, n, dtype=dtype)
    got = run_graph("aten.addmm.default", [s, m1, Const(m2), 0.5, 2.0], ((m, n), dtype))
    assert shaders == ["matmul_tiled"]
    assert_close_in(got, torch.addmm(s, m1, m2, beta=0.5, alpha=2.0), dtype)
