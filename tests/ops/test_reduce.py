"""Reductions and normalisations against torch."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from .conftest import Const, Fn, assert_close, rand, run_graph, run_vkx

pytestmark = pytest.mark.vulkan


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,dim", [
    ((17,), 0), ((3, 33), -1), ((3, 33), 0), ((2, 7, 5), 1), ((2, 3, 4, 5), -3), ((1,), 0), ((4, 1), 1),
])
def test_softmax(log, shape, dim):
    x = rand(*shape, seed=1, scale=3.0)
    name = "aten._log_softmax.default" if log else "aten._softmax.default"
    fn = torch.log_softmax if log else torch.softmax
    assert_close(run_graph(name, [x, dim, False], shape), fn(x, dim))


def test_softmax_large_values():
    """max-subtraction: no overflow for large logits."""
    x = torch.tensor([[1000.0, 999.0, -1000.0, 998.5], [-500.0, -501.0, -499.0, -800.0]])
    assert_close(run_graph("aten._softmax.default", [x, -1, False], (2, 4)), torch.softmax(x, -1))
    assert_close(run_graph("aten._log_softmax.default", [x, -1, False], (2, 4)), torch.log_softmax(x, -1))


def _layer_norm_outs(x, n_norm):
    rows_shape = tuple(x.shape[:x.dim() - n_norm]) + (1,) * n_norm
    return [tuple(x.shape), rows_shape, rows_shape]


@pytest.mark.parametrize("shape,norm", [((3, 17), (17,)), ((2, 5, 8), (8,)), ((2, 3, 7), (3, 7)), ((1, 1), (1,)),
                                        ((33,), (33,))])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(shape, norm, affine):
    x = rand(*shape, seed=2, scale=2.0) + 0.5
    w = rand(*norm, seed=3) if affine else None
    b = rand(*norm, seed=4) if affine else None
    eps = 1e-5
    want = torch.native_layer_norm(x, list(norm), w, b, eps)
    args = [x, list(norm), Const(w) if affine else None, Const(b) if affine else None, eps]
    got = run_graph("aten.native_layer_norm.default", args, _layer_norm_outs(x, len(norm)))
    assert_close(got, want)


def test_layer_norm_weight_only():
    x = rand(4, 9, seed=5)
    w = rand(9, seed=6)
    want = F.layer_norm(x, (9,), w, None, 1e-6)
    got = run_graph("aten.native_layer_norm.default", [x, [9], Const(w), None, 1e-6], _layer_norm_outs(x, 1))
    assert_close(got[0], want)


@pytest.mark.parametrize("shape,norm", [((3, 17), (17,)), ((2, 4, 6), (4, 6)), ((7,), (7,))])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("eps", [None, 1e-6])
def test_rms_norm(shape, norm, affine, eps):
    x = rand(*shape, seed=7)
    w = rand(*norm, seed=8) if affine else None
    want = F.rms_norm(x, norm, w, eps)
    got = run_graph("aten.rms_norm.default", [x, list(norm), Const(w) if affine else None, eps], shape)
    assert_close(got, want)


def test_rms_norm_default_eps_matters():
    """eps Null means finfo(float32).eps: visible on a row of tiny values."""
    x = torch.full((2, 4), 1e-4)
    want = F.rms_norm(x, (4,), None, None)
    got = run_graph("aten.rms_norm.default", [x, [4], None, None], (2, 4))
    assert_close(got, want)


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (1, 4, 3, 3), (2, 5, 1, 7)])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_eval(shape, affine):
    c = shape[1]
    x = rand(*shape, seed=9)
    mean, var = rand(c, seed=10), rand(c, seed=11).abs() + 0.2
    w = rand(c, seed=12) if affine else None
    b = rand(c, seed=13) if affine else None
    eps = 1e-5
    want = torch.ops.aten._native_batch_norm_legit_no_training.default(x, w, b, mean, var, 0.1, eps)
    args = [x, Const(w) if affine else None, Const(b) if affine else None, Const(mean), Const(var), 0.1, eps]
    got = run_graph("aten._native_batch_norm_legit_no_training.default", args,
                    [tuple(shape), (0,), (0,)])
    assert_close(got[0], want[0])


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
]


@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
@pytest.mark.parametrize("shape,dims,keepdim", REDUCE_CASES, ids=lambda v: str(v))
def test_sum_mean(mean, shape, dims, keepdim):
    x = rand(*shape, seed=14)
    if mean:
        want = x.mean(dim=dims, keepdim=keepdim) if dims else x.mean()
        name = "aten.mean.dim"
    else:
        want = x.sum(dim=dims, keepdim=keepdim) if dims else x.sum()
        name = "aten.sum.dim_IntList"
    if not dims and keepdim:
        want = want.reshape((1,) * x.dim())
    got = run_graph(name, [x, list(dims), keepdim, None], tuple(want.shape))
    assert_close(got, want)


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


def test_row_ops_split_small_limit():
    x = rand(37, 9, seed=17)  # 1332 bytes, rows of 36 bytes
    assert_close(run_graph("aten._softmax.default", [x, -1, False], (37, 9), max_binding_bytes=SMALL_BINDING),
                 torch.softmax(x, -1))
    x3 = rand(13, 3, 9, seed=18)  # softmax over a middle dim: blocks of whole outer slices
    assert_close(run_graph("aten._log_softmax.default", [x3, 1, False], (13, 3, 9),
                           max_binding_bytes=SMALL_BINDING), torch.log_softmax(x3, 1))
    w, b = rand(9, seed=19), rand(9, seed=20)
    got = run_graph("aten.native_layer_norm.default", [x, [9], Const(w), Const(b), 1e-5],
                    [(37, 9), (37, 1), (37, 1)], max_binding_bytes=SMALL_BINDING)
    assert_close(got, torch.native_layer_norm(x, [9], w, b, 1e-5))
    got = run_graph("aten.rms_norm.default", [x, [9], Const(w), 1e-6], (37, 9), max_binding_bytes=SMALL_BINDING)
    assert_close(got, F.rms_norm(x, (9,), w, 1e-6))
    xb = rand(3, 5, 23, seed=21)  # 1380 bytes
    mean, var = rand(5, seed=22), rand(5, seed=23).abs() + 0.5
    want = torch.ops.aten._native_batch_norm_legit_no_training.default(xb, w[:5], b[:5], mean, var, 0.1, 1e-5)
    got = run_graph("aten._native_batch_norm_legit_no_training.default",
                    [xb, Const(w[:5].clone()), Const(b[:5].clone()), Const(mean), Const(var), 0.1, 1e-5],
                    [(3, 5, 23), (0,), (0,)], max_binding_bytes=SMALL_BINDING)
    assert_close(got[0], want[0])


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


@pytest.mark.parametrize("case", list(MODULES))
def test_module(case):
    make, shapes = MODULES[case]
    module = make().eval()
    inputs = [rand(*s, seed=80 + i, scale=2.0) for i, s in enumerate(shapes)]
    assert_close(run_vkx(module, inputs), module(*inputs))


@pytest.mark.parametrize("case", ["layer_norm", "rms_norm", "batch_norm"])
def test_module_fp16_constants(case):
    make, shapes = MODULES[case]
    module = make().eval()
    inputs = [rand(*s, seed=90 + i) for i, s in enumerate(shapes)]
    assert_close(run_vkx(module, inputs, dtype="fp16"), module(*inputs), rtol=1e-2, atol=1e-2)
