"""Elementwise ops against torch in every dtype: binary with broadcasting and immediates,
activations (NaN and inf as torch has them), scalar powers, clamps, clone, prepack (comparisons and
masks: test_elementwise_masks.py; fills: test_fill.py)."""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from vkx.format import op_decls, opset
from vkx.loader import ops

from .conftest import (EXPORT_DTYPES, FLOAT_DTYPES, Const, Fn, assert_close, assert_close_in, rand, rand_of,
                       run_graph, run_vkx)

pytestmark = pytest.mark.vulkan

BINARY = {
    "add": lambda a, b, alpha: torch.add(a, b, alpha=alpha),
    "sub": lambda a, b, alpha: torch.sub(a, b, alpha=alpha),
    "mul": lambda a, b, alpha: torch.mul(a, b),
    "div": lambda a, b, alpha: torch.div(a, b),
}
INT_DTYPES = (torch.int32, torch.int8, torch.uint8)
SPECIALS = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e-6, -1e-6, 1e-3, -1e-3, 0.03125,
            1.0, -1.0, 9.0, -9.0, 30.0, -30.0, 100.0, -100.0, 60000.0, -60000.0]  # fp16 overflows past 65504


def _name(op: str) -> str:
    return f"aten.{op}.Tensor"


def _args(op, a, b, alpha):
    return [a, b, alpha] if op in ("add", "sub") else [a, b]


def _value(x):
    return x.tensor if isinstance(x, Const) else x


def _binary(op, a, b, alpha=1):
    """(vkx, torch) for `op(a, b)`; a Python number operand is torch's 0-dim tensor (same promotion)."""
    ta, tb = (torch.tensor(x) if isinstance(x, (int, float)) else _value(x) for x in (a, b))
    want = BINARY[op](ta, tb, alpha)
    if want.dtype == torch.int64:  # bool with an Int: vkx export narrows the int64 result to int32
        want = want.int()
    got = run_graph(_name(op), _args(op, a, b, alpha), (tuple(want.shape), want.dtype))
    return got, want


def _check(got, want):
    """Elementwise against torch in the output's dtype (exact for integers)."""
    if want.is_floating_point():
        assert_close_in(got, want, want.dtype, each=True)
    else:
        assert got.dtype == want.dtype
        assert torch.equal(got, want), f"{got} != {want}"


def _operand(shape, seed, dtype=torch.float32, positive=False):
    x = rand(*shape, seed=seed, scale=3.0)
    return (x.abs() + 0.5 if positive else x).to(dtype)


SHAPES = [
    ((7,), (7,)),                 # same shape, odd (scalar path)
    ((3, 8), (3, 8)),             # same shape, vec4 path for fp32
    ((1,), (17,)),                # numel-1 tensor operand
    ((1,), (4, 4)),               # numel-1 tensor operand, vec4 path
    ((33,), ()),                  # 0-dim operand
    ((3, 17), (17,)),             # row broadcast
    ((3, 1), (1, 7)),             # outer product broadcast
    ((2, 3, 1, 5), (3, 4, 1)),    # both broadcast, rank differs
    ((2, 1, 3, 1, 2, 3), (1, 4, 1, 5, 1, 3)),  # 6 dims, nothing merges
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_binary_broadcast(op, shapes, dtype):
    a = _operand(shapes[0], 1, dtype)
    b = _operand(shapes[1], 2, dtype, positive=op == "div")
    _check(*_binary(op, a, b))
    _check(*_binary(op, b, a))  # the broadcast operand first


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op,alpha", [("add", 2.5), ("sub", -0.75), ("add", 3), ("sub", 1)])
def test_alpha(op, alpha, dtype):
    _check(*_binary(op, _operand((3, 7), 5, dtype), _operand((7,), 6, dtype), alpha))
    _check(*_binary(op, _operand((8,), 5, dtype), _operand((8,), 6, dtype), alpha))  # vec4 path for fp32


@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, *INT_DTYPES])
@pytest.mark.parametrize("op,scalar", [(op, s) for op in BINARY for s in (2.5, -3, True)
                                       if (op, s) != ("sub", True)])  # torch refuses bool subtraction
@pytest.mark.parametrize("first", [False, True], ids=["other", "self"])
def test_immediate_operand(op, scalar, first, dtype):
    """An Int/Double/Bool value as either operand (`x * 0.5`, `2 - x`), no constant tensor."""
    x = _operand((4, 9), 7, positive=op == "div" and first)
    x = x.to(dtype) if dtype.is_floating_point else (x * 10).to(dtype)
    if op == "div" and first and not dtype.is_floating_point:
        x = x.abs() + 1
    for shape in ((4, 9), (7,)):  # vec4 and scalar paths
        xs = x.flatten()[:7].clone() if shape == (7,) else x
        _check(*_binary(op, scalar, xs) if first else _binary(op, xs, scalar))


@pytest.mark.parametrize("op,scalar", [("mul", 2.5), ("add", True), ("mul", False), ("div", 2), ("add", -3)])
def test_bool_tensor_immediate(op, scalar):
    x = rand(5, 8, seed=7) > 0
    _check(*_binary(op, x, scalar))
    _check(*_binary(op, scalar, x))


def test_integer_output_refuses_fractional_immediate():
    from vkx.loader.errors import BadProgramError
    with pytest.raises(BadProgramError, match="int32 output"):
        run_graph("aten.mul.Tensor", [torch.arange(4, dtype=torch.int32), 0.5], ((4,), torch.int32))


MIXED = [
    (torch.float32, torch.float16),   # an fp32 activation times an fp16 weight
    (torch.float16, torch.bfloat16),  # promotes to fp32
    (torch.bfloat16, torch.float32),
    (torch.int32, torch.float16),
    (torch.int32, torch.int8),
    (torch.uint8, torch.int32),
    (torch.bool, torch.float32),
    (torch.bool, torch.bool),
    (torch.int8, torch.int8),         # wraps around as torch does
    (torch.uint8, torch.uint8),
]


@pytest.mark.parametrize("da,db", MIXED, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("shapes", [((3, 8), (3, 8)), ((3, 5), (5,)), ((3, 5), (1,))], ids=str)
def test_mixed_dtypes(op, da, db, shapes):
    a, b = rand_of(shapes[0], 8, da), rand_of(shapes[1], 9, db)
    _check(*_binary(op, a, Const(b)))
    _check(*_binary(op, b, a))


def test_int_tensors():
    a = torch.arange(-6, 6, dtype=torch.int32).reshape(3, 4) * 1000003
    b = torch.tensor([3, -2, 1, 5], dtype=torch.int32)
    for op in ("add", "sub", "mul"):
        _check(*_binary(op, a, b, alpha=2 if op != "mul" else 1))  # int32 wraps like torch
    _check(*_binary("div", a, b))  # true division: float out


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_specials(op, dtype):
    """NaN, inf and signed zeros on both sides, as torch computes them."""
    x = torch.tensor(SPECIALS, dtype=dtype)
    a, b = x.reshape(-1, 1), x.reshape(1, -1)
    _check(*_binary(op, a, b))
    _check(*_binary(op, x, x.flip(0)))


UNARY = {
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "silu": F.silu,
    "neg": torch.neg,
    "abs": torch.abs,
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "sin": torch.sin,
    "cos": torch.cos,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
}


def test_unary_table_is_tested():
    assert set(UNARY) == set(op_decls.UNARY)


def _unary_input(op, shape, dtype, seed=12):
    x = rand(*shape, seed=seed, scale=4.0)
    if op in ("rsqrt", "log", "sqrt"):
        x = x.abs() + 0.05
    if op == "exp" and dtype == torch.float16:
        x = x.clamp(max=10.0)  # exp(11) overflows fp16
    return x.to(dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op", list(UNARY))
@pytest.mark.parametrize("shape", [(1,), (3,), (17,), (2, 33), (4, 8)])
def test_unary(op, shape, dtype):
    x = _unary_input(op, shape, dtype)
    assert_close_in(run_graph(f"aten.{op}.default", [x], (shape, dtype)), UNARY[op](x), dtype, each=True)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op", list(UNARY))
def test_unary_specials(op, dtype):
    """NaN stays NaN (relu(NaN) = NaN), infinities and zeros as torch has them."""
    x = torch.tensor(SPECIALS, dtype=dtype)
    for xs in (x, torch.cat([x, x[:1]])):  # 20 elements: vec4 for fp32; 21: the scalar path
        got = run_graph(f"aten.{op}.default", [xs], (tuple(xs.shape), dtype))
        assert_close_in(got, UNARY[op](xs), dtype, each=True)
    assert run_graph(f"aten.{op}.default", [x[:1]], ((1,), dtype)).isnan().all()


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_sin_cos_wide_range(op):
    """Rotary embeddings take sin/cos of angles in the thousands."""
    x = torch.linspace(-5000, 5000, 40001)
    got = run_graph(f"aten.{op}.default", [x], (tuple(x.shape), torch.float32))
    assert_close(got, UNARY[op](x), rtol=1e-4, atol=2e-7)


@pytest.mark.parametrize("src,dst", [(torch.float16, torch.float32), (torch.float32, torch.bfloat16),
                                     (torch.bfloat16, torch.float16)], ids=str)
@pytest.mark.parametrize("shape", [(3, 5), (4, 4)], ids=["scalar", "vec4"])
def test_unary_in_other_dtype(src, dst, shape):
    """An input of one float type and an output of another convert on load and store."""
    x = _unary_input("silu", shape, src)
    got = run_graph("aten.silu.default", [x], (shape, dst))
    assert_close_in(got, F.silu(x.float()).to(dst), dst, each=True)


def test_declaring_an_op_is_enough(monkeypatch):
    """A unary op declared at test time (its OpDecl with its math, its GLSL in UNARY_GLSL) is a variant
    the package's SPIR-V lacks until `make shaders` (a typed error naming it), and runs from sources."""
    from vkx.loader.gpu import shaders
    from vkx.loader.errors import VariantNotBuiltError
    from vkx.loader.ops import elementwise
    name = "vkx_test.cube_minus_one.default"
    opset.declare(dataclasses.replace(opset.OPS["aten.relu.default"], name=name, math="x ** 3 - 1"))
    monkeypatch.setitem(elementwise.UNARY_GLSL, "cube_minus_one", "(x * x * x - 1.0)")
    try:
        ops.builds(name)(elementwise.unary_op)
        x = _unary_input("neg", (3, 7), torch.float32)
        with pytest.raises(VariantNotBuiltError, match=r"shader unary: variant not prebuilt \(.*OP\(x\)=\(x \* x"):
            run_graph(name, [x], ((3, 7), torch.float32))
        monkeypatch.setenv("VKX_SHADER_PATH", str(shaders.packaged_dir()))
        for dtype in FLOAT_DTYPES:
            x = _unary_input("neg", (3, 7), dtype)
            assert_close_in(run_graph(name, [x], ((3, 7), dtype)), x * x * x - 1, dtype, each=True)
    finally:
        opset.OPS.pop(name, None)
        ops.BUILDERS.pop(name, None)


def test_unary_refuses_integers():
    from vkx.loader.errors import BadProgramError
    with pytest.raises(BadProgramError, match="computes on floats"):
        run_graph("aten.relu.default", [torch.arange(4, dtype=torch.int32)], ((4,), torch.int32))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", [(7,), (3, 16)])
def test_gelu(approximate, shape, dtype):
    x = rand(*shape, seed=13, scale=3.0).to(dtype)
    got = run_graph("aten.gelu.default", [x, approximate], (shape, dtype))
    assert_close_in(got, F.gelu(x, approximate=approximate), dtype, each=True)
    x = torch.tensor(SPECIALS, dtype=dtype)
    got = run_graph("aten.gelu.default", [x, approximate], (tuple(x.shape), dtype))
    want = F.gelu(x, approximate=approximate)
    want[x == float("inf")] = float("inf")  # gelu's limit; some torch CPU builds (the H200 machine's) give NaN
    assert_close_in(got, want, dtype, each=True)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_erf_accuracy(approximate):
    """A dense sweep: the erf form must match torch to ~1e-6 absolute."""
    x = torch.linspace(-10, 10, 4001)
    got = run_graph("aten.gelu.default", [x, approximate], tuple(x.shape))
    want = F.gelu(x.double(), approximate=approximate)
    err = (got.double() - want).abs()
    assert float(err.max()) < 2e-6
    assert float((err / want.abs().clamp_min(1e-3)).max()) < 1e-5


ALL_DTYPES = (*FLOAT_DTYPES, *INT_DTYPES, torch.bool)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(5,), (2, 8), (), (3, 11)])
def test_clone(shape, dtype):
    x = rand_of(shape, 14, dtype)
    got = run_graph("aten.clone.default", [x, None], (shape, dtype))
    assert got.dtype == dtype and torch.equal(got, x)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_prepack(dtype):
    w = rand_of((3, 11), 15, dtype)
    got = run_graph("et_vk.prepack.default", [Const(w)], ((3, 11), dtype))
    assert got.dtype == dtype and torch.equal(got, w)


def test_relu_larger_than_one_binding():
    """136 MiB: one storage binding (128 MiB on lavapipe) cannot cover it; split dispatches."""
    n = 136 * 1024 * 1024 // 4
    x = torch.empty(n).uniform_(-1, 1, generator=torch.Generator().manual_seed(16))
    got = run_graph("aten.relu.default", [x], (n,))
    assert torch.equal(got, torch.relu(x))


SMALL_BINDING = 1024  # bytes: forces the split paths on tiny tensors


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("n", [1000, 1003])
def test_split_dispatches_small_limit(n, dtype):
    x, y = rand(n, seed=17, scale=3.0).to(dtype), rand(n, seed=18).to(dtype)
    got = run_graph("aten.silu.default", [x], ((n,), dtype), max_binding_bytes=SMALL_BINDING)
    assert_close_in(got, F.silu(x), dtype, each=True)
    got = run_graph("aten.sub.Tensor", [x, y, 0.5], ((n,), dtype), max_binding_bytes=SMALL_BINDING)
    assert_close_in(got, torch.sub(x, y, alpha=0.5), dtype, each=True)
    got = run_graph("aten.mul.Tensor", [x, torch.tensor([2.0], dtype=dtype)], ((n,), dtype),
                    max_binding_bytes=SMALL_BINDING)
    assert_close_in(got, x * 2, dtype, each=True)
    got = run_graph("aten.div.Tensor", [x, 4.0], ((n,), dtype), max_binding_bytes=SMALL_BINDING)
    assert_close_in(got, x / 4, dtype, each=True)
    # mixed item sizes: fp32 + 16-bit into fp32, pieces aligned in both
    got = run_graph("aten.add.Tensor", [x.float(), Const(y), 1], ((n,), torch.float32),
                    max_binding_bytes=SMALL_BINDING)
    assert_close(got, x.float() + y.float())


# --------------------------------------------------------------------------- scalar powers, clamps, the unary ops with an argument

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("exponent", [2, 2.0, 3, 0.5, -0.5, -1, 0, 1.5, -2, 5])
def test_pow_scalar(exponent, dtype):
    x = rand(3, 8, seed=5, scale=2.0)
    if dtype != torch.float32:
        x = x.clamp(-4, 4)  # 4 ** 5 stays in range; fp16 ** -2 near 0 does not
        x = torch.where(x.abs() < 0.1, torch.full_like(x, 0.25), x)
    x = x.to(dtype)
    for xs in (x, x[:, :7]):
        got = run_graph("aten.pow.Tensor_Scalar", [xs, exponent], (tuple(xs.shape), dtype))
        assert_close_in(got, torch.pow(xs, exponent), dtype, each=True)


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -1, 0, 1.5, -2])
def test_pow_specials(exponent):
    x = torch.tensor(SPECIALS)
    got = run_graph("aten.pow.Tensor_Scalar", [x, exponent], ((20,), torch.float32))
    assert_close(got, torch.pow(x, exponent), rtol=2e-6)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("bounds", [(-1.0, 1.0), (0.0, 6.0), (None, 0.5), (-0.5, None), (float("-inf"), 2.0)],
                         ids=["sym", "relu6", "max", "min", "inf"])
def test_clamp(bounds, dtype):
    x = torch.cat([rand(19, seed=6, scale=3.0), torch.tensor([float("nan")])]).to(dtype)
    got = run_graph("aten.clamp.default", [x, *bounds], ((20,), dtype))
    assert_close_in(got, torch.clamp(x, *bounds), dtype, each=True)


ROUNDING_SPECIALS = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.25, -0.4]
"""Special values and ties of rounding (round: half to even) for the unary ops with an argument."""


UNARY_WITH_ARGUMENTS = {  # op, arguments after self -> torch
    ("sqrt", ()): torch.sqrt,
    ("round", ()): torch.round,
    ("leaky_relu", ()): F.leaky_relu,
    ("leaky_relu", (0.2,)): lambda x: F.leaky_relu(x, 0.2),
    ("hardshrink", ()): F.hardshrink,
    ("hardshrink", (1.25,)): lambda x: F.hardshrink(x, 1.25),
}


@pytest.mark.parametrize("op,extra", list(UNARY_WITH_ARGUMENTS), ids=[f"{o}{list(a)}" for o, a in UNARY_WITH_ARGUMENTS])
@pytest.mark.parametrize("n", [20, 37], ids=["vec4", "scalar"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_unary_with_arguments(op, extra, n, dtype):
    x = torch.cat([torch.tensor(ROUNDING_SPECIALS), rand(n - len(ROUNDING_SPECIALS), seed=19, scale=4.0)]).to(dtype)
    want = UNARY_WITH_ARGUMENTS[(op, extra)](x)
    got = run_graph(f"aten.{op}.default", [x, *extra], ((n,), dtype))
    assert_close_in(got, want, dtype, each=True)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_hardtanh(dtype):
    x = rand(4, 9, seed=12, dtype=dtype, scale=2.0)
    x[0, 0] = float("nan")
    got = run_graph("aten.hardtanh.default", [x, -0.5, 0.75], ((4, 9), dtype))
    want = F.hardtanh(x, -0.5, 0.75)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())


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


@pytest.mark.parametrize("dtype", EXPORT_DTYPES)
@pytest.mark.parametrize("case", list(MODULES))
def test_module(case, dtype):
    fn, shapes, params = MODULES[case]
    module = Fn(fn, **{k: rand(*s, seed=40 + i).to(dtype) for i, (k, s) in enumerate(params.items())})
    inputs = [rand(*s, seed=50 + i, scale=2.0).to(dtype) for i, s in enumerate(shapes)]
    terms = shapes[0][0] if case == "constant_out" else 1  # x.sum() * 0: a sum of 3
    assert_close_in(run_vkx(module, inputs), module(*inputs), dtype, terms)


def test_module_fp16_constants():
    module = Fn(lambda m, x: F.silu(x * m.w + m.b) / m.w, w=rand(9, seed=60).abs() + 0.5, b=rand(9, seed=61))
    x = rand(4, 9, seed=62)
    assert_close(run_vkx(module, [x], dtype="fp16"), module(x), rtol=1e-2, atol=1e-2)
