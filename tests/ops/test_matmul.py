"""linear / addmm / mm / bmm / matmul against torch.

Most cases export a tiny nn.Module through vkx.export_model + vkx.load; a few
argument combinations the exporter does not produce (scalar beta/alpha, bias
broadcast shapes, 6-D broadcast batches) run as hand-built single-op graphs.
fp32 results must satisfy max|err| <= 1e-4 * max|ref| + 1e-5.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from vkx.loader.gpu.device import default_device
from vkx.loader.ops import gemm
from vkx.loader.ops.gemm_tiled import choose_tiling

from .conftest import (FLOAT_DTYPES, Const, Fn, assert_close_in, assert_linear_propagates_nan_and_inf,
                       assert_norm_close, rand, record_dispatches, run_graph, run_vkx)

pytestmark = pytest.mark.vulkan


def _linear(k: int, n: int, bias: bool, seed: int) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(k, n, bias=bias).eval()


@pytest.mark.parametrize("shape,k,n,bias", [
    ((37, 100), 100, 70, True),       # the odd-size reference case
    ((37, 100), 100, 70, False),
    ((1, 3), 3, 1, True),
    ((7,), 7, 17, True),              # 1-D input
    ((2, 3, 33), 33, 7, False),       # batched input
    ((5, 64), 64, 32, True),          # vec4 path (K, N multiples of 4)
    ((1, 128), 128, 96, True),        # one token: single tile row
])
def test_linear(shape, k, n, bias):
    m = _linear(k, n, bias, seed=k + n)
    x = rand(*shape, seed=1)
    with torch.no_grad():
        assert_norm_close(run_vkx(m, (x,)), m(x))


def test_linear_fp16_weights():
    m = _linear(100, 70, True, seed=3)
    x = rand(37, 100, seed=4)
    with torch.no_grad():
        want = m(x)
    got = run_vkx(m, (x,), dtype="fp16")
    assert_norm_close(got, want, rtol=1e-2, atol=1e-2)


def test_linear_weight_over_binding_limit():
    # 17000 x 2048 fp32 = 139 MB > maxStorageBufferRange (128 MiB on lavapipe): the
    # weight is split by output rows into SubRange dispatches.
    m = _linear(2048, 17000, True, seed=5)
    assert m.weight.numel() * 4 > 128 * 1024 * 1024
    x = rand(3, 2048, seed=6)
    with torch.no_grad():
        want = m(x)
    assert_norm_close(run_vkx(m, (x,)), want)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((33, 17), (17, 7)),
    ((32, 64), (64, 16)),             # vec4 on both operands
    ((1, 5), (5, 1)),
])
def test_mm(a_shape, b_shape):
    a, b = rand(*a_shape, seed=1), rand(*b_shape, seed=2)
    assert_norm_close(run_vkx(Fn(lambda m, a, b: torch.mm(a, b)), (a, b)), a @ b)


def test_mm_transposed_operand():
    # x @ W^T and x^T @ y: the transposes are exported as permute copies.
    x, w, y = rand(9, 12, seed=1), rand(7, 12, seed=2), rand(9, 5, seed=3)
    fn = Fn(lambda m, x, w, y: (x @ w.t(), x.t() @ y))
    got = run_vkx(fn, (x, w, y))
    assert_norm_close(got[0], x @ w.t())
    assert_norm_close(got[1], x.t() @ y)


@pytest.mark.parametrize("shape", [(3, 7, 9, 5), (1, 1, 3, 1), (4, 8, 16, 12)], ids=str)
def test_bmm(shape):
    bsz, m, k, n = shape
    a, b = rand(bsz, m, k, seed=1), rand(bsz, k, n, seed=2)
    assert_norm_close(run_vkx(Fn(lambda m, a, b: torch.bmm(a, b)), (a, b)), torch.bmm(a, b))


@pytest.mark.parametrize("a_shape,b_shape", [
    ((5,), (5,)),                     # dot -> 0-dim
    ((3, 5), (5,)),                   # matrix-vector
    ((5,), (5, 4)),                   # vector-matrix
    ((2, 3, 5), (5,)),
    ((5,), (2, 5, 3)),
    ((2, 3, 17, 33), (33, 7)),        # batch folded into rows
    ((2, 1, 7, 8), (3, 8, 4)),        # broadcast batch dims
    ((1, 7, 8), (2, 3, 8, 4)),
], ids=lambda s: "x".join(map(str, s)) or "scalar")
def test_matmul(a_shape, b_shape):
    a, b = rand(*a_shape, seed=1), rand(*b_shape, seed=2)
    assert_norm_close(run_vkx(Fn(lambda m, a, b: torch.matmul(a, b)), (a, b)), torch.matmul(a, b))


def test_matmul_graph_unmergeable_broadcast():
    # 4 batch dims that cannot be merged: one dispatch per outer batch index.
    a, b = rand(4, 1, 3, 1, 2, 3, seed=1), rand(5, 1, 3, 3, 2, seed=2)
    want = torch.matmul(a, b)
    assert_norm_close(run_graph("aten.matmul.default", [a, b], tuple(want.shape)), want)


@pytest.mark.parametrize("self_shape", [(7,), (1, 7), (5, 1), (5, 7), ()], ids=str)
@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1.5)])
def test_addmm_graph(self_shape, beta, alpha):
    s, m1, m2 = rand(*self_shape, seed=1), rand(5, 3, seed=2), rand(3, 7, seed=3)
    want = torch.addmm(s, m1, m2, beta=beta, alpha=alpha)
    got = run_graph("aten.addmm.default", [s, m1, Const(m2), beta, alpha], (5, 7))
    assert_norm_close(got, want)


def test_addmm_exported():
    bias, w = rand(16, seed=1), rand(24, 16, seed=2)
    x = rand(6, 24, seed=3)
    fn = Fn(lambda m, x: torch.addmm(bias, x, w, beta=0.5, alpha=2.0))
    assert_norm_close(run_vkx(fn, (x,)), fn(x))


# A small binding limit (load option max_binding_bytes) forces every split path
# on tiny tensors: W by output rows, A/C by rows, batches one by one.
SMALL_BINDING = 4096


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_linear_split_small_binding_limit(dtype):
    x, w, b = rand(3, 40, seed=1, dtype=dtype), rand(130, 40, seed=2, dtype=dtype), rand(130, seed=3, dtype=dtype)
    assert w.numel() * w.element_size() > SMALL_BINDING                       # W by output columns
    got = run_graph("aten.linear.default", [x, Const(w), Const(b)], ((3, 130), dtype),
                    max_binding_bytes=SMALL_BINDING)
    assert_close_in(got, F.linear(x, w, b), dtype, terms=1)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_linear_row_split_small_binding_limit(dtype):
    x, w, b = rand(401, 16, seed=4, dtype=dtype), rand(9, 16, seed=5, dtype=dtype), rand(9, seed=6, dtype=dtype)
    assert x.numel() * x.element_size() > SMALL_BINDING                       # x and out by rows
    got = run_graph("aten.linear.default", [x, Const(w), Const(b)], ((401, 9), dtype),
                    max_binding_bytes=SMALL_BINDING)
    assert_close_in(got, F.linear(x, w, b), dtype, terms=1)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_bmm_batch_split_small_binding_limit(dtype):
    a, b = rand(6, 20, 33, seed=7, dtype=dtype), rand(6, 33, 12, seed=8, dtype=dtype)
    assert a.numel() * a.element_size() > SMALL_BINDING                       # batches one by one
    got = run_graph("aten.bmm.default", [a, b], ((6, 20, 12), dtype), max_binding_bytes=SMALL_BINDING)
    assert_close_in(got, torch.bmm(a, b), dtype, terms=1)


# --------------------------------------------------------------------------- every float dtype
# torch on the CPU rounds a 16-bit matmul once from an fp32 (or wider) sum, as vkx
# does, so the results agree to a few output ulps whatever K is: terms=1.

def _close(got, want, dtype):
    return assert_close_in(got, want, dtype, terms=1)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("m,k,n", [
    (37, 100, 70),                    # tiled path, odd M and N
    (5, 64, 32),                      # tiled, vec4 for fp32
    (1, 100, 70),                     # matvec, K % 4 == 0, N % 4 != 0
    (1, 257, 67),                     # matvec, scalar path with a K tail
    (1, 260, 129),                    # matvec, K % 8 == 4
    (1, 3, 1),
])
def test_linear_dtypes(dtype, m, k, n):
    x, w, b = rand(m, k, seed=1, dtype=dtype), rand(n, k, seed=2, dtype=dtype), rand(n, seed=3, dtype=dtype)
    got = run_graph("aten.linear.default", [x, Const(w), Const(b)], ((m, n), dtype))
    _close(got, F.linear(x, w, b), dtype)


@pytest.mark.parametrize("wdtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("m", [1, 9])
def test_linear_mixed_fp32_activations_16bit_weights(wdtype, m):
    # Older vkx files keep fp32 activations with 16-bit weights: exact in fp32, so fp32 tolerance.
    x, w, b = rand(m, 72, seed=4), rand(45, 72, seed=5, dtype=wdtype), rand(45, seed=6, dtype=wdtype)
    got = run_graph("aten.linear.default", [x, Const(w), Const(b)], (m, 45))
    assert got.dtype == torch.float32
    assert_norm_close(got, F.linear(x, w.float(), b.float()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_linear_16bit_activations_fp32_weights(dtype):
    x, w = rand(1, 48, seed=7, dtype=dtype), rand(13, 48, seed=8)
    got = run_graph("aten.linear.default", [x, Const(w), None], ((1, 13), dtype))
    _close(got, F.linear(x.float(), w).to(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_mm_bmm_matmul_addmm_dtypes(dtype):
    a, b = rand(33, 17, seed=1, dtype=dtype), rand(17, 7, seed=2, dtype=dtype)
    _close(run_graph("aten.mm.default", [a, b], ((33, 7), dtype)), a @ b, dtype)
    a3, b3 = rand(3, 9, 20, seed=3, dtype=dtype), rand(3, 20, 5, seed=4, dtype=dtype)
    _close(run_graph("aten.bmm.default", [a3, b3], ((3, 9, 5), dtype)), torch.bmm(a3, b3), dtype)
    a4, b4 = rand(2, 1, 7, 8, seed=5, dtype=dtype), rand(3, 8, 4, seed=6, dtype=dtype)
    _close(run_graph("aten.matmul.default", [a4, b4], ((2, 3, 7, 4), dtype)), a4 @ b4, dtype)
    v = rand(8, seed=7, dtype=dtype)
    _close(run_graph("aten.matmul.default", [v, b4], ((3, 4), dtype)), v @ b4, dtype)
    s, m1, m2 = rand(7, seed=8, dtype=dtype), rand(5, 3, seed=9, dtype=dtype), rand(3, 7, seed=10, dtype=dtype)
    got = run_graph("aten.addmm.default", [s, m1, Const(m2), 0.5, 2.0], ((5, 7), dtype))
    _close(got, torch.addmm(s, m1, m2, beta=0.5, alpha=2.0), dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("m", [1, 6])
def test_linear_nan_and_inf_propagate(dtype, m):
    x, w = rand(m, 24, seed=1, dtype=dtype), rand(10, 24, seed=2, dtype=dtype)
    x[0, 3] = float("nan")
    w[4, 5] = float("inf")
    got = run_graph("aten.linear.default", [x, Const(w), None], ((m, 10), dtype))
    want = F.linear(x, w)
    assert torch.equal(got.isnan(), want.isnan()) and got.isnan().any()
    finite = want.isfinite()
    assert torch.equal(got.isinf(), want.isinf()) and torch.equal(got[want.isinf()], want[want.isinf()])
    _close(got[finite], want[finite], dtype)


# The matvec path (M == 1 against W[N, K]) at odd sizes, including its split over
# a small binding limit (W by output columns); test_attention runs its batch grid.

@pytest.fixture
def matvec_dispatches(monkeypatch):
    """Counts the matvec dispatches recorded while the test runs."""
    calls = []
    record = gemm._record_matvec

    def counting(*args, **kwargs):
        calls.append(args)
        record(*args, **kwargs)

    monkeypatch.setattr(gemm, "_record_matvec", counting)
    return calls


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("k,n", [(1, 1), (7, 5), (64, 1), (100, 63), (333, 65), (512, 130), (4100, 3)])
def test_matvec_odd_sizes(dtype, k, n, matvec_dispatches):
    x, w, b = rand(1, k, seed=k, dtype=dtype), rand(n, k, seed=n, dtype=dtype), rand(n, seed=9, dtype=dtype)
    got = run_graph("aten.linear.default", [x, Const(w), Const(b)], ((1, n), dtype))
    assert len(matvec_dispatches) == 1
    _close(got, F.linear(x, w, b), dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("k", [40, 41])
def test_matvec_split_small_binding_limit(dtype, k, matvec_dispatches):
    x, w, b = rand(1, k, seed=1, dtype=dtype), rand(150, k, seed=2, dtype=dtype), rand(150, seed=3, dtype=dtype)
    assert w.numel() * w.element_size() > SMALL_BINDING
    got = run_graph("aten.linear.default", [x, Const(w), Const(b)], ((1, 150), dtype),
                    max_binding_bytes=SMALL_BINDING)
    assert len(matvec_dispatches) > 1
    _close(got, F.linear(x, w, b), dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_one_row_against_n_contiguous_b(dtype, matvec_dispatches):
    # [B, 1, K] @ [B, K, N]: B is not k-contiguous, so the plain path (one tile row) runs.
    a, b = rand(3, 2, 1, 36, seed=1, dtype=dtype), rand(3, 2, 36, 11, seed=2, dtype=dtype)
    _close(run_graph("aten.matmul.default", [a, b], ((3, 2, 1, 11), dtype)), a @ b, dtype)
    assert not matvec_dispatches


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_empty_k(dtype):
    # K == 0: the product is zeros (plus the bias); neither operand is read.
    x, w, b = rand(3, 0, dtype=dtype), rand(5, 0, dtype=dtype), rand(5, seed=1, dtype=dtype)
    got = run_graph("aten.linear.default", [x, Const(w), Const(b)], ((3, 5), dtype))
    assert torch.equal(got, F.linear(x, w, b))
    a, m = rand(1, 4, 0, dtype=dtype), rand(2, 0, 6, dtype=dtype)
    assert torch.equal(run_graph("aten.matmul.default", [a, m], ((2, 4, 6), dtype)), a @ m)


# The tiled path (shaders/matmul_tiled.comp: M and N >= TILED_MIN) at odd sizes: every B
# layout (linear's k-contiguous W, mm's n-contiguous B, attention's transposed k), vector
# and scalar loads, edge tiles, a K tail shorter than one step, batches and a bias.

@pytest.fixture
def tiled_dispatches(monkeypatch):
    """The defines of every matmul_tiled dispatch recorded while the test runs (fp16 products take
    it too, on a device with cooperative matrices: tests/ops/test_gemm_coop.py tests those)."""
    monkeypatch.setattr(gemm, "use_coop", lambda *args: None)
    return record_dispatches(monkeypatch, lambda shader, defines, spec: defines, only="matmul_tiled")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("m,k,n", [(33, 100, 70), (130, 257, 129), (64, 4, 300), (200, 1, 40), (257, 96, 260)],
                         ids=str)
def test_linear_tiled(dtype, m, k, n, tiled_dispatches):
    x, w, b = rand(m, k, seed=1, dtype=dtype), rand(n, k, seed=2, dtype=dtype), rand(n, seed=3, dtype=dtype)
    got = run_graph("aten.linear.default", [x, Const(w), Const(b)], ((m, n), dtype))
    assert len(tiled_dispatches) == 1 and ("B_VEC_K" in tiled_dispatches[0]) == (k % 4 == 0)
    assert_close_in(got, F.linear(x, w, b), dtype, terms=k)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("m,k,n", [(33, 17, 36), (131, 64, 200), (40, 9, 33)], ids=str)
def test_mm_bmm_tiled(dtype, m, k, n, tiled_dispatches):
    a, b = rand(m, k, seed=4, dtype=dtype), rand(k, n, seed=5, dtype=dtype)
    got = run_graph("aten.mm.default", [a, b], ((m, n), dtype))
    assert ("B_VEC_N" in tiled_dispatches[0]) == (n % 4 == 0)
    assert_close_in(got, a @ b, dtype, terms=k)
    a3, b3 = rand(3, m, k, seed=6, dtype=dtype), rand(3, k, n, seed=7, dtype=dtype)
    assert_close_in(run_graph("aten.bmm.default", [a3, b3], ((3, m, n), dtype)), torch.bmm(a3, b3), dtype, terms=k)
    s = rand(n, seed=8, dtype=dtype)
    got = run_graph("aten.addmm.default", [s, a, Const(b), 0.5, 2.0], ((m, n), dtype))
    assert_close_in(got, torch.addmm(s, a, b, beta=0.5, alpha=2.0), dtype, terms=k)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_attention_scores_tiled(dtype, tiled_dispatches):
    """q @ k^T with k read transposed in place (B k-contiguous, batched over heads)."""
    q, k, v = rand(2, 3, 70, 16, seed=9, dtype=dtype), rand(2, 3, 90, 16, seed=10, dtype=dtype), \
        rand(2, 3, 90, 8, seed=11, dtype=dtype)
    got = run_graph("aten.scaled_dot_product_attention.default", [q, k, v, None, 0.0, True, None, False],
                    ((2, 3, 70, 8), dtype))
    assert len(tiled_dispatches) == 1  # the scores; p @ v has only 8 columns
    assert_close_in(got, F.scaled_dot_product_attention(q, k, v, is_causal=True), dtype, terms=90)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_linear_tiled_nan_and_inf_propagate(dtype):
    assert_linear_propagates_nan_and_inf(dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_tiled_tile_sizes(dtype, tiled_dispatches, monkeypatch):
    """Products take the default tiling for the device (gemm_tiled.choose_tiling; a GPU's rule:
    tests/ops/test_gemm_tiled.py, with every tiling)."""
    device = default_device()
    monkeypatch.setattr(device, "compute_units", 16)
    tilings = record_dispatches(monkeypatch, lambda shader, defines, spec: spec, only="matmul_tiled")
    x, w = rand(1030, 36, seed=1, dtype=dtype), rand(1800, 36, seed=2, dtype=dtype)
    assert_close_in(run_graph("aten.linear.default", [x, Const(w), None], ((1030, 1800), dtype)),
                    F.linear(x, w), dtype, terms=36)
    a, b = rand(3, 700, 20, seed=3, dtype=dtype), rand(3, 20, 900, seed=4, dtype=dtype)
    assert_close_in(run_graph("aten.bmm.default", [a, b], ((3, 700, 900), dtype)), torch.bmm(a, b), dtype, terms=20)
    x64, w64 = rand(64, 40, seed=5, dtype=dtype), rand(300, 40, seed=6, dtype=dtype)
    assert_close_in(run_graph("aten.linear.default", [x64, Const(w64), None], ((64, 300), dtype)),
                    F.linear(x64, w64), dtype, terms=40)
    want = [choose_tiling(m, n, k, nb, 16, device.limits.max_compute_shared_memory_size, device.is_cpu)
            for m, n, k, nb in [(1030, 1800, 36, 1), (700, 900, 20, 3), (64, 300, 40, 1)]]
    assert [spec[:3] for spec in tilings] == [(t.rt, t.ct, t.bk) for t in want]
