"""Reductions and normalisations against torch in every float dtype (NaN and inf as torch has them);
cumsum in integers too."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from .conftest import (EXPORT_DTYPES, FLOAT_DTYPES, Const, Fn, assert_close, assert_close_in, rand, rand_of,
                       run_graph, run_vkx)

pytestmark = pytest.mark.vulkan

by_dtype = pytest.mark.parametrize("dtype", FLOAT_DTYPES)
NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,dim", [
    ((17,), 0), ((3, 33), -1), ((3, 33), 0), ((2, 7, 5), 1), ((2, 3, 4, 5), -3), ((1,), 0), ((4, 1), 1),
    # rows of >= 64 elements: a workgroup each (64 or 256 invocations), also along a strided dim
    ((5, 77), -1), ((3, 1031), -1), ((2, 100, 3), 1),
])
@by_dtype
def test_softmax(log, shape, dim, dtype):
    x = rand(*shape, seed=1, scale=3.0).to(dtype)
    name = "aten._log_softmax.default" if log else "aten._softmax.default"
    fn = torch.log_softmax if log else torch.softmax
    assert_close_in(run_graph(name, [x, dim, False], (shape, dtype)), fn(x, dim), dtype, terms=shape[dim])


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@by_dtype
def test_softmax_specials(log, dtype):
    """max-subtraction: no overflow for large logits; a NaN or +inf makes its row NaN and a
    row of -inf (fully masked) is NaN, as in torch."""
    x = torch.tensor([[1000.0, 999.0, -1000.0, 998.5], [-500.0, -501.0, -499.0, -800.0],
                      [0.5, NAN, 1.0, 2.0], [NAN, 0.5, 1.0, 2.0], [-INF, -INF, -INF, -INF],
                      [-INF, 1.0, -INF, 2.0], [1.0, INF, 0.0, -1.0]]).to(dtype)
    name = "aten._log_softmax.default" if log else "aten._softmax.default"
    fn = torch.log_softmax if log else torch.softmax
    assert_close_in(run_graph(name, [x, -1, False], ((7, 4), dtype)), fn(x, -1), dtype, terms=4, each=True)
    # the same rows, 300 long: each row's specials in a different invocation of its workgroup
    wide = torch.cat([x, rand(7, 296, seed=2).to(dtype)], 1)[:, torch.randperm(300, generator=torch.Generator().manual_seed(3))]
    wide[4] = -INF
    assert_close_in(run_graph(name, [wide, -1, False], ((7, 300), dtype)), fn(wide, -1), dtype, terms=300,
                    each=True)


def test_softmax_rows_past_one_grid():
    """More rows than one grid dimension holds workgroups: the row index folds y into x."""
    x = rand(66000, 64, seed=9, scale=3.0)
    assert_close_in(run_graph("aten._softmax.default", [x, -1, False], ((66000, 64), torch.float32)),
                    torch.softmax(x, -1), torch.float32, terms=64)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softmax_half_to_float(dtype):
    x = rand(3, 9, seed=1, scale=3.0).to(dtype)
    got = run_graph("aten._softmax.default", [x, -1, True], ((3, 9), torch.float32))
    assert_close(got, torch.softmax(x.float(), -1))


def _layer_norm_outs(x, n_norm):
    rows_shape = tuple(x.shape[:x.dim() - n_norm]) + (1,) * n_norm
    return [tuple(x.shape), rows_shape, rows_shape]


@pytest.mark.parametrize("shape,norm", [((3, 17), (17,)), ((2, 5, 8), (8,)), ((2, 3, 7), (3, 7)), ((1, 1), (1,)),
                                        ((33,), (33,)), ((5, 97), (97,)), ((2, 3, 40), (3, 40)),
                                        ((3, 1100), (1100,))])
@pytest.mark.parametrize("affine", [True, False])
@by_dtype
def test_layer_norm(shape, norm, affine, dtype):
    x = (rand(*shape, seed=2, scale=2.0) + 0.5).to(dtype)
    w = rand(*norm, seed=3).to(dtype) if affine else None
    b = rand(*norm, seed=4).to(dtype) if affine else None
    eps = 1e-5
    want = torch.native_layer_norm(x, list(norm), w, b, eps)
    args = [x, list(norm), Const(w) if affine else None, Const(b) if affine else None, eps]
    outs = [(s, dtype) for s in _layer_norm_outs(x, len(norm))]
    got = run_graph("aten.native_layer_norm.default", args, outs)
    n = x[0].numel() if len(norm) == x.dim() else torch.Size(norm).numel()
    for g_, w_ in zip(got, want):
        assert_close_in(g_, w_, dtype, terms=n, each=True)


def test_layer_norm_mixed_dtypes():
    """An fp16 activation with fp32 affine parameters (and fp32 statistics)."""
    x = rand(4, 9, seed=5, scale=2.0).half()
    w, b = rand(9, seed=6), rand(9, seed=7)
    want = torch.native_layer_norm(x.float(), [9], w, b, 1e-5)
    got = run_graph("aten.native_layer_norm.default", [x, [9], Const(w), Const(b), 1e-5],
                    [((4, 9), torch.float16), ((4, 1), torch.float32), ((4, 1), torch.float32)])
    assert_close_in(got[0], want[0].half(), torch.float16, each=True)
    assert_close(got[1:], want[1:])


@pytest.mark.parametrize("n", [8, 200])
def test_layer_norm_nan_row(n):
    x = rand(3, n, seed=5)
    x[1, 3] = NAN
    want = torch.native_layer_norm(x, [n], None, None, 1e-5)
    got = run_graph("aten.native_layer_norm.default", [x, [n], None, None, 1e-5], _layer_norm_outs(x, 1))
    assert got[0][1].isnan().all() and not got[0][0].isnan().any()
    assert_close(got, want)


def test_layer_norm_weight_only():
    x = rand(4, 9, seed=5)
    w = rand(9, seed=6)
    want = F.layer_norm(x, (9,), w, None, 1e-6)
    got = run_graph("aten.native_layer_norm.default", [x, [9], Const(w), None, 1e-6], _layer_norm_outs(x, 1))
    assert_close(got[0], want)


@pytest.mark.parametrize("shape,norm", [((3, 17), (17,)), ((2, 4, 6), (4, 6)), ((7,), (7,)), ((5, 65), (65,)),
                                        ((2, 1025), (1025,))])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("eps", [None, 1e-6])
@by_dtype
def test_rms_norm(shape, norm, affine, eps, dtype):
    x = rand(*shape, seed=7, scale=2.0).to(dtype)
    w = rand(*norm, seed=8).to(dtype) if affine else None
    want = F.rms_norm(x, norm, w, eps)
    got = run_graph("aten.rms_norm.default", [x, list(norm), Const(w) if affine else None, eps], (shape, dtype))
    assert_close_in(got, want, dtype, terms=torch.Size(norm).numel(), each=True)


def test_rms_norm_defaults_left_out():
    """ExecuTorch may write rms_norm(input, normalized_shape) alone: weight None, eps None."""
    x = rand(3, 5, seed=7)
    assert_close(run_graph("aten.rms_norm.default", [x, [5]], (3, 5)), F.rms_norm(x, (5,)))


def test_rms_norm_default_eps_matters():
    """eps Null means finfo(float32).eps: visible on a row of tiny values."""
    x = torch.full((2, 4), 1e-4)
    want = F.rms_norm(x, (4,), None, None)
    got = run_graph("aten.rms_norm.default", [x, [4], None, None], (2, 4))
    assert_close(got, want)


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (1, 4, 3, 3), (2, 5, 1, 7)])
@pytest.mark.parametrize("affine", [True, False])
@by_dtype
def test_batch_norm_eval(shape, affine, dtype):
    c = shape[1]
    x = rand(*shape, seed=9, scale=2.0).to(dtype)
    mean, var = rand(c, seed=10).to(dtype), (rand(c, seed=11).abs() + 0.2).to(dtype)
    w = rand(c, seed=12).to(dtype) if affine else None
    b = rand(c, seed=13).to(dtype) if affine else None
    eps = 1e-5
    want = torch.ops.aten._native_batch_norm_legit_no_training.default(x, w, b, mean, var, 0.1, eps)
    args = [x, Const(w) if affine else None, Const(b) if affine else None, Const(mean), Const(var), 0.1, eps]
    got = run_graph("aten._native_batch_norm_legit_no_training.default", args,
                    [(tuple(shape), dtype), ((0,), dtype), ((0,), dtype)])
    assert_close_in(got[0], want[0], dtype, each=True)


def test_batch_norm_fp32_statistics():
    """An fp16 activation normalised with fp32 running statistics."""
    x = rand(2, 3, 5, seed=9).half()
    mean, var, w = rand(3, seed=10), rand(3, seed=11).abs() + 0.2, rand(3, seed=12)
    want = torch.ops.aten._native_batch_norm_legit_no_training.default(x.float(), w, None, mean, var, 0.1, 1e-5)
    got = run_graph("aten._native_batch_norm_legit_no_training.default",
                    [x, Const(w), None, Const(mean), Const(var), 0.1, 1e-5],
                    [((2, 3, 5), torch.float16), ((0,), torch.float32), ((0,), torch.float32)])
    assert_close_in(got[0], want[0].half(), torch.float16, each=True)


REDUCE_CASES = [
    ((17,), [0], False),
    ((3, 17), [-1], True),
    ((3, 17), [0], False),
    ((2, 3, 4), [0, 2], False),
    ((2, 3, 4), [-1, -3], True),
    ((2, 3, 4, 5), [1, 2], False),
    ((2, 3, 4, 5), [3, 1], True),
    ((2, 3, 4, 5, 3, 2), [0, 2, 4], False),
    ((5, 7), [], False),           # empty list: every dim
    ((4, 1, 3), [1], False),       # a size-1 dim
    ((), [], False),               # 0-dim
    ((3, 200), [-1], False),       # >= 64 reduced elements: a workgroup per output
    ((5, 1500), [1], True),
    ((70, 2, 33), [0, 2], True),   # two strided reduced dims, 2310 elements each
]


@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
@pytest.mark.parametrize("shape,dims,keepdim", REDUCE_CASES, ids=lambda v: str(v))
@by_dtype
def test_sum_mean(mean, shape, dims, keepdim, dtype):
    x = rand(*shape, seed=14, scale=2.0).to(dtype)
    if mean:
        want = x.mean(dim=dims, keepdim=keepdim) if dims else x.mean()
        name = "aten.mean.dim"
    else:
        want = x.sum(dim=dims, keepdim=keepdim) if dims else x.sum()
        name = "aten.sum.dim_IntList"
    if not dims and keepdim:
        want = want.reshape((1,) * x.dim())
    got = run_graph(name, [x, list(dims), keepdim, None], (tuple(want.shape), dtype))
    terms = max(x.numel() // max(want.numel(), 1), 1)
    assert_close_in(got, want, dtype, terms=terms, each=True)


@pytest.mark.parametrize("name", ["aten.sum.dim_IntList", "aten.mean.dim"])
@by_dtype
def test_sum_specials(name, dtype):
    """inf stays inf (compensated summation must not turn it into NaN); inf - inf and NaN give NaN."""
    x = torch.tensor([[INF, 1.0, 2.0, 3.0], [1.0, -INF, 2.0, 0.5], [INF, -INF, 0.0, 1.0],
                      [NAN, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.5]]).to(dtype)
    want = x.sum(1) if name.startswith("aten.sum") else x.mean(1)
    assert_close_in(run_graph(name, [x, [1], False, None], ((5,), dtype)), want, dtype, terms=4, each=True)
    # rows of 300 (a workgroup each): the specials land in different invocations' partials
    wide = torch.cat([x, rand(5, 296, seed=3).to(dtype)], 1)[:, torch.randperm(300, generator=torch.Generator().manual_seed(4))]
    want = wide.sum(1) if name.startswith("aten.sum") else wide.mean(1)
    assert_close_in(run_graph(name, [wide, [1], False, None], ((5,), dtype)), want, dtype, terms=300, each=True)


@pytest.mark.parametrize("shape,dims,out", [((0, 5), [0], (5,)), ((3, 0), [1], (3,)), ((3, 0, 2), [1, 2], (3,))])
def test_empty_reduction(shape, dims, out):
    """Summing no elements gives 0 and their mean NaN, as in torch; nothing is read."""
    x = torch.empty(shape)
    assert_close(run_graph("aten.sum.dim_IntList", [x, dims, False, None], out), x.sum(dims))
    assert_close(run_graph("aten.mean.dim", [x, dims, False, None], out), x.mean(dims))


def test_sum_dtype_argument():
    """sum(x, dtype=float32) of an fp16 tensor: the output's dtype."""
    x = rand(3, 40, seed=14, scale=2.0).half()
    got = run_graph("aten.sum.dim_IntList", [x, [1], False, 6], ((3,), torch.float32))
    assert_close(got, x.sum(1, dtype=torch.float32))


def test_reductions_refuse_integers():
    from vkx.loader.errors import BadProgramError
    x = torch.arange(6, dtype=torch.int32)
    with pytest.raises(BadProgramError, match="computes on floats"):
        run_graph("aten.sum.dim_IntList", [x, [0], False, None], ((), torch.int32))


def test_sum_null_dim():
    x = rand(3, 4, seed=15)
    assert_close(run_graph("aten.sum.dim_IntList", [x, None, False, None], ()), x.sum())


def test_sum_long_row_precision():
    """A long reduction with cancellation stays close (compensated summation)."""
    x = rand(4, 4099, seed=16) + 0.001
    assert_close(run_graph("aten.sum.dim_IntList", [x, [1], False, None], (4,)), x.double().sum(1).float(),
                 rtol=1e-5, atol=1e-4)
    assert_close(run_graph("aten.mean.dim", [x, [0, 1], True, None], (1, 1)), x.double().mean().reshape(1, 1).float())


SMALL_BINDING = 1024  # bytes: forces the row-block split paths on tiny tensors


@by_dtype
def test_row_ops_split_small_limit(dtype):
    k = 4 // dtype.itemsize  # rows as many bytes in every dtype
    small = {"max_binding_bytes": SMALL_BINDING}
    x = rand(37 * k, 9, seed=17).to(dtype)  # 1332 bytes, rows of 36 (fp32) or 18 bytes
    assert_close_in(run_graph("aten._softmax.default", [x, -1, False], (tuple(x.shape), dtype), **small),
                    torch.softmax(x, -1), dtype, terms=9, each=True)
    x3 = rand(13 * k, 3, 9, seed=18).to(dtype)  # softmax over a middle dim: blocks of whole outer slices
    assert_close_in(run_graph("aten._log_softmax.default", [x3, 1, False], (tuple(x3.shape), dtype), **small),
                    torch.log_softmax(x3, 1), dtype, terms=3, each=True)
    w, b = rand(9, seed=19).to(dtype), rand(9, seed=20).to(dtype)
    rows = x.shape[0]
    got = run_graph("aten.native_layer_norm.default", [x, [9], Const(w), Const(b), 1e-5],
                    [((rows, 9), dtype), ((rows, 1), dtype), ((rows, 1), dtype)], **small)
    assert_close_in(got, torch.native_layer_norm(x, [9], w, b, 1e-5), dtype, terms=9, each=True)
    got = run_graph("aten.rms_norm.default", [x, [9], Const(w), 1e-6], ((rows, 9), dtype), **small)
    assert_close_in(got, F.rms_norm(x, (9,), w, 1e-6), dtype, terms=9, each=True)
    xb = rand(3 * k, 5, 23, seed=21).to(dtype)  # 1380 bytes
    mean, var = rand(5, seed=22).to(dtype), (rand(5, seed=23).abs() + 0.5).to(dtype)
    want = torch.ops.aten._native_batch_norm_legit_no_training.default(xb, w[:5], b[:5], mean, var, 0.1, 1e-5)
    got = run_graph("aten._native_batch_norm_legit_no_training.default",
                    [xb, Const(w[:5].clone()), Const(b[:5].clone()), Const(mean), Const(var), 0.1, 1e-5],
                    [(tuple(xb.shape), dtype), ((0,), dtype), ((0,), dtype)], **small)
    assert_close_in(got[0], want[0], dtype, each=True)


# --------------------------------------------------------------------------- through the exporter

def _bn(c):
    bn = torch.nn.BatchNorm2d(c).eval()
    with torch.no_grad():
        bn.running_mean.copy_(rand(c, seed=70))
        bn.running_var.copy_(rand(c, seed=71).abs() + 0.3)
        bn.weight.copy_(rand(c, seed=72))
        bn.bias.copy_(rand(c, seed=73))
    return bn


def _ln(shape, affine=True):
    ln = torch.nn.LayerNorm(shape, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            ln.weight.copy_(rand(*ln.weight.shape, seed=74))
            ln.bias.copy_(rand(*ln.bias.shape, seed=75))
    return ln


def _rms(shape, eps=None):
    m = torch.nn.RMSNorm(shape, eps=eps)
    with torch.no_grad():
        m.weight.copy_(rand(*m.weight.shape, seed=76))
    return m


MODULES = {
    "softmax": (lambda: Fn(lambda m, x: torch.softmax(x, -1)), [(3, 17)]),
    "softmax_dim0": (lambda: Fn(lambda m, x: torch.softmax(x, 0)), [(5, 3, 2)]),
    "log_softmax": (lambda: Fn(lambda m, x: torch.log_softmax(x, -2)), [(2, 7, 3)]),
    "layer_norm": (lambda: _ln(17), [(3, 17)]),
    "layer_norm_2d_noaffine": (lambda: _ln((3, 5), affine=False), [(2, 3, 5)]),
    "rms_norm": (lambda: _rms(9), [(4, 9)]),
    "rms_norm_eps": (lambda: _rms((2, 6), eps=1e-5), [(3, 2, 6)]),
    "batch_norm": (lambda: _bn(3), [(2, 3, 5, 4)]),
    "mean_keepdim": (lambda: Fn(lambda m, x: x.mean(-1, keepdim=True)), [(3, 33)]),
    "mean_dims": (lambda: Fn(lambda m, x: x.mean((0, 2))), [(2, 3, 7)]),
    "mean_all": (lambda: Fn(lambda m, x: x.mean()), [(4, 5)]),
    "sum_dims": (lambda: Fn(lambda m, x: x.sum((-1, 1), keepdim=True)), [(2, 3, 4, 5)]),
    "sum_all": (lambda: Fn(lambda m, x: x.sum()), [(17,)]),
}


@pytest.mark.parametrize("dtype", EXPORT_DTYPES)
@pytest.mark.parametrize("case", list(MODULES))
def test_module(case, dtype):
    make, shapes = MODULES[case]
    module = make().eval().to(dtype)
    inputs = [rand(*s, seed=80 + i, scale=2.0).to(dtype) for i, s in enumerate(shapes)]
    assert_close_in(run_vkx(module, inputs), module(*inputs), dtype, terms=shapes[0][-1])


@pytest.mark.parametrize("case", ["layer_norm", "rms_norm", "batch_norm"])
def test_module_fp16_constants(case):
    make, shapes = MODULES[case]
    module = make().eval()
    inputs = [rand(*s, seed=90 + i) for i, s in enumerate(shapes)]
    assert_close(run_vkx(module, inputs, dtype="fp16"), module(*inputs), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("name", ["aten.argmax.default", "aten.argmin.default", "aten.amax.default",
                                  "aten.var.correction"])
@pytest.mark.parametrize("shape,dim", [((3, 77), -1), ((2, 1031), -1), ((2, 100, 3), 1), ((1, 32000), -1),
                                       ((3, 40000), -1), ((2, 5000, 3), 1)])
@by_dtype
def test_stats_long_rows(name, shape, dim, dtype):
    """A workgroup per output over >= 64 elements (64 or 256 lanes), or (few outputs of rows of two
    segments or more: the last three shapes) two passes: the first extreme's index with ties and NaN as
    torch has them, wherever in the row (and in which segment) they fall."""
    x = rand(*shape, seed=4, scale=3.0).to(dtype)
    n = shape[dim]
    row = [slice(None)] * len(shape)
    row[0] = 0
    lane_tie = row.copy()
    lane_tie[dim] = [n - 1, 5]  # equal extremes in different lanes: the first index wins
    x[tuple(lane_tie)] = 100.0 if name != "aten.argmin.default" else -100.0
    if len(shape) == 2 and shape[0] > 2:
        x[2, n // 2] = NAN  # NaN wins, at its index
        x[2, n - 3] = NAN
    if name == "aten.var.correction":
        got = run_graph(name, [x, [dim], 1, False], (tuple(s for i, s in enumerate(shape) if i != dim % len(shape)), dtype))
        assert_close_in(got, x.var(dim), dtype, terms=n, each=True)
        return
    if name == "aten.amax.default":
        out = (tuple(s for i, s in enumerate(shape) if i != dim % len(shape)), dtype)
        got = run_graph(name, [x, [dim], False], out)
        assert torch.equal(got.isnan(), x.amax(dim).isnan())
        assert torch.equal(got.nan_to_num(), x.amax(dim).nan_to_num())
        return
    fn = torch.argmax if name == "aten.argmax.default" else torch.argmin
    got = run_graph(name, [x, dim, False], (tuple(s for i, s in enumerate(shape) if i != dim % len(shape)), torch.int32))
    assert torch.equal(got.long(), fn(x, dim))


# --------------------------------------------------------------------------- et_vk.rms_norm, cumsum

def _rms_norm_reference(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


@pytest.mark.parametrize("shape", [(2, 5, 64), (3, 17), (7,)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_vk_rms_norm(shape, dtype):
    x = rand(*shape, seed=11, scale=2.0, dtype=dtype)
    w = (torch.rand(shape[-1], generator=torch.Generator().manual_seed(1)) + 0.5).to(dtype)
    want = _rms_norm_reference(x, w, 1e-6)
    got = run_graph("et_vk.rms_norm.default", [x, Const(w), 1e-6], (shape, dtype))
    assert_close_in(got, want, dtype, each=True)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + (torch.int32,), ids=str)
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_cumsum(dim, dtype):
    x = rand_of((3, 5, 4), 14, dtype)
    got = run_graph("aten.cumsum.default", [x, dim, None], ((3, 5, 4), dtype))
    want = torch.cumsum(x.double(), dim).to(dtype) if dtype.is_floating_point else torch.cumsum(x, dim).to(dtype)
    if dtype.is_floating_point:
        assert_close_in(got, want, dtype, terms=5)
    else:
        assert_close(got, want)


def test_cumsum_of_a_mask_counts():
    """transformers' position ids: cumsum of a bool/int mask into int32."""
    mask = rand(2, 9, seed=15) > 0
    got = run_graph("aten.cumsum.default", [mask, 1, None], ((2, 9), torch.int32))
    assert_close(got, torch.cumsum(mask, 1).to(torch.int32))
