"""Elementwise ops against torch: binary with broadcasting, activations, clone, prepack."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from .conftest import Const, Fn, assert_close, rand, run_graph, run_vkx

pytestmark = pytest.mark.vulkan

BINARY = {
    "add": ("aten.add.Tensor", lambda a, b, alpha: torch.add(a, b, alpha=alpha)),
    "sub": ("aten.sub.Tensor", lambda a, b, alpha: torch.sub(a, b, alpha=alpha)),
    "mul": ("aten.mul.Tensor", lambda a, b, alpha: a * b),
    "div": ("aten.div.Tensor", lambda a, b, alpha: a / b),
}


def _binary(op, a, b, alpha=1, out_dtype=torch.float32):
    name, fn = BINARY[op]
    want = fn(a.tensor if isinstance(a, Const) else a, b.tensor if isinstance(b, Const) else b, alpha)
    args = [a, b, alpha] if op in ("add", "sub") else [a, b]
    got = run_graph(name, args, (tuple(want.shape), want.dtype))
    return got, want


def _operand(shape, seed, positive=False):
    x = rand(*shape, seed=seed)
    return x.abs() + 0.5 if positive else x


SHAPES = [
    ((7,), (7,)),                 # same shape, odd (scalar path)
    ((3, 8), (3, 8)),             # same shape, vec4 path
    ((1,), (17,)),                # numel-1 tensor operand
    ((33,), ()),                  # 0-dim operand
    ((3, 17), (17,)),             # row broadcast
    ((3, 1), (1, 7)),             # outer product broadcast
    ((2, 3, 1, 5), (3, 4, 1)),    # both broadcast, rank differs
    ((2, 1, 3, 1, 2, 3), (1, 4, 1, 5, 1, 3)),  # 6 dims, nothing merges
]


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_binary_broadcast(op, shapes):
    a = _operand(shapes[0], 1)
    b = _operand(shapes[1], 2, positive=op == "div")
    got, want = _binary(op, a, b)
    assert_close(got, want)


@pytest.mark.parametrize("op", list(BINARY))
def test_binary_scalar_first(op):
    # the broadcast operand first
    a = _operand((1, 5), 3, positive=True)
    b = _operand((4, 5), 4, positive=True)
    got, want = _binary(op, a, b)
    assert_close(got, want)


@pytest.mark.parametrize("op,alpha", [("add", 2.5), ("sub", -0.75), ("add", 3), ("sub", 1)])
def test_alpha(op, alpha):
    a, b = rand(3, 7, seed=5), rand(7, seed=6)
    got, want = _binary(op, a, b, alpha)
    assert_close(got, want)
    got, want = _binary(op, rand(8, seed=5), rand(8, seed=6), alpha)  # vec4 path
    assert_close(got, want)


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("scalar", [2.5, -3], ids=["double", "int"])
@pytest.mark.parametrize("first", [False, True], ids=["other", "self"])
def test_python_scalar_operand(op, scalar, first):
    """An Int/Double value as an operand (e.g. `x * 0.5`, `2 - x`)."""
    x = rand(4, 9, seed=7)
    if op == "div" and first:
        x = x.abs() + 0.5
    name, fn = BINARY[op]
    a, b = (scalar, x) if first else (x, scalar)
    ta = torch.tensor(a) if not isinstance(a, torch.Tensor) else a
    tb = torch.tensor(b) if not isinstance(b, torch.Tensor) else b
    want = fn(ta, tb, 1).float()
    args = [a, b, 1] if op in ("add", "sub") else [a, b]
    got = run_graph(name, args, tuple(want.shape))
    assert_close(got, want)


def test_constant_operands():
    x = rand(5, 6, seed=8)
    w = rand(6, seed=9)
    got = run_graph("aten.mul.Tensor", [x, Const(w)], (5, 6))
    assert_close(got, x * w)
    c = torch.tensor(0.125)  # a lifted 0-dim constant
    got = run_graph("aten.add.Tensor", [Const(c), x, 1], (5, 6))
    assert_close(got, c + x)


def test_fp16_constant():
    x = rand(3, 10, seed=10)
    w = rand(10, seed=11).half()
    got = run_graph("aten.mul.Tensor", [x, Const(w)], (3, 10))
    assert_close(got, x * w.float(), rtol=1e-2, atol=1e-2)


def test_int_tensors():
    a = torch.arange(-6, 6, dtype=torch.int32).reshape(3, 4)
    b = torch.tensor([3, -2, 1, 5], dtype=torch.int32)
    for op in ("add", "sub", "mul"):
        got, want = _binary(op, a, b, alpha=2 if op != "mul" else 1, out_dtype=torch.int32)
        assert_close(got, want)
    got, want = _binary("div", a, b)  # true division: float out
    assert_close(got, want)


UNARY = {
    "relu": ("aten.relu.default", torch.relu),
    "sigmoid": ("aten.sigmoid.default", torch.sigmoid),
    "tanh": ("aten.tanh.default", torch.tanh),
    "silu": ("aten.silu.default", F.silu),
}


@pytest.mark.parametrize("op", list(UNARY))
@pytest.mark.parametrize("shape", [(1,), (3,), (17,), (2, 33), (4, 8)])
def test_unary(op, shape):
    name, fn = UNARY[op]
    x = rand(*shape, seed=12, scale=4.0)
    assert_close(run_graph(name, [x], shape), fn(x))


@pytest.mark.parametrize("op", list(UNARY))
def test_unary_extremes(op):
    name, fn = UNARY[op]
    x = torch.tensor([-100.0, -30.0, -9.0, -1e-3, -1e-6, 0.0, 1e-6, 1e-3, 9.0, 30.0, 100.0, 0.03125])
    assert_close(run_graph(name, [x], tuple(x.shape)), fn(x))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", [(7,), (3, 16)])
def test_gelu(approximate, shape):
    x = rand(*shape, seed=13, scale=3.0)
    got = run_graph("aten.gelu.default", [x, approximate], shape)
    assert_close(got, F.gelu(x, approximate=approximate))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_erf_accuracy(approximate):
    """A dense sweep: the erf form must match torch to ~1e-6 absolute."""
    x = torch.linspace(-10, 10, 4001)
    got = run_graph("aten.gelu.default", [x, approximate], tuple(x.shape))
    want = F.gelu(x.double(), approximate=approximate)
    err = (got.double() - want).abs()
    assert float(err.max()) < 2e-6
    assert float((err / want.abs().clamp_min(1e-3)).max()) < 1e-5


@pytest.mark.parametrize("shape", [(5,), (2, 8), ()])
def test_clone(shape):
    x = rand(*shape, seed=14)
    assert_close(run_graph("aten.clone.default", [x, None], shape), x.clone())


def test_clone_int():
    x = torch.arange(-7, 10, dtype=torch.int32)
    assert_close(run_graph("aten.clone.default", [x, None], ((17,), torch.int32)), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_prepack(dtype):
    w = rand(3, 11, seed=15).to(dtype)
    got = run_graph("et_vk.prepack.default", [Const(w)], (3, 11))
    assert_close(got, w.float(), rtol=0, atol=0)


def test_relu_larger_than_one_binding():
    """136 MiB: one storage binding (128 MiB on lavapipe) cannot cover it; split dispatches."""
    n = 136 * 1024 * 1024 // 4
    x = torch.empty(n).uniform_(-1, 1, generator=torch.Generator().manual_seed(16))
    got = run_graph("aten.relu.default", [x], (n,))
    assert torch.equal(got, torch.relu(x))


SMALL_BINDING = 1024  # bytes: forces the split paths on tiny tensors


@pytest.mark.parametrize("n", [1000, 1003])
def test_split_dispatches_small_limit(n):
    x, y = rand(n, seed=17, scale=3.0), rand(n, seed=18)
    got = run_graph("aten.silu.default", [x], (n,), max_binding_bytes=SMALL_BINDING)
    assert_close(got, F.silu(x))
    got = run_graph("aten.sub.Tensor", [x, y, 0.5], (n,), max_binding_bytes=SMALL_BINDING)
    assert_close(got, torch.sub(x, y, alpha=0.5))
    got = run_graph("aten.mul.Tensor", [x, torch.tensor([2.0])], (n,), max_binding_bytes=SMALL_BINDING)
    assert_close(got, x * 2)
    got = run_graph("aten.div.Tensor", [x, 4.0], (n,), max_binding_bytes=SMALL_BINDING)
    assert_close(got, x / 4)


# --------------------------------------------------------------------------- through the exporter

MODULES = {
    "add_broadcast": (lambda m, x, y: x + y, [(3, 17), (17,)], {}),
    "add_alpha": (lambda m, x, y: torch.add(x, y, alpha=2.5), [(2, 8), (2, 8)], {}),
    "sub_alpha_bcast": (lambda m, x, y: torch.sub(x, y, alpha=3), [(4, 1, 5), (3, 1)], {}),
    "mul_param": (lambda m, x: x * m.w, [(2, 7)], {"w": (7,)}),
    "mul_0dim_buffer": (lambda m, x: x * m.s, [(5, 3)], {"s": ()}),
    "div": (lambda m, x, y: x / (y * y + 0.5), [(3, 1, 4), (1, 5, 4)], {}),
    "scalar_ops": (lambda m, x: (x + 2.5) * 3 - 0.5, [(33,)], {}),
    "div_scalar": (lambda m, x: x / 4.0, [(6, 6)], {}),
    "relu": (lambda m, x: torch.relu(x), [(3, 17)], {}),
    "sigmoid": (lambda m, x: torch.sigmoid(x), [(7,)], {}),
    "tanh": (lambda m, x: torch.tanh(x), [(2, 8)], {}),
    "silu": (lambda m, x: F.silu(x), [(1, 33)], {}),
    "gelu": (lambda m, x: F.gelu(x), [(4, 9)], {}),
    "gelu_tanh": (lambda m, x: F.gelu(x, approximate="tanh"), [(4, 9)], {}),
    "clone": (lambda m, x: x.clone(), [(3, 5)], {}),
    "constant_out": (lambda m, x: (x.sum() * 0 + m.w), [(3,)], {"w": (4, 3)}),
}


@pytest.mark.parametrize("case", list(MODULES))
def test_module(case):
    fn, shapes, params = MODULES[case]
    module = Fn(fn, **{k: rand(*s, seed=40 + i) for i, (k, s) in enumerate(params.items())})
    inputs = [rand(*s, seed=50 + i, scale=2.0) for i, s in enumerate(shapes)]
    assert_close(run_vkx(module, inputs), module(*inputs))


def test_module_fp16_constants():
    module = Fn(lambda m, x: F.silu(x * m.w + m.b) / m.w, w=rand(9, seed=60).abs() + 0.5, b=rand(9, seed=61))
    x = rand(4, 9, seed=62)
    assert_close(run_vkx(module, [x], dtype="fp16"), module(x), rtol=1e-2, atol=1e-2)
