"""The ops of vkx.format.op_models against torch, in every dtype each takes: comparisons, bitwise
ops, minimum/maximum, logical_not, pow with a scalar exponent, clamp, casts, expand, where, gather,
index and cumsum (hand-built one-op graphs), and their export rules."""
from __future__ import annotations

from typing import Callable

import pytest
import torch

from vkx.format import op_models

from .conftest import (FLOAT_DTYPES, Fn, Values, assert_close, assert_close_in, rand, rand_of, run_graph,
                       run_vkx)
from .test_elementwise import SPECIALS

pytestmark = pytest.mark.vulkan

INT_DTYPES = (torch.int32, torch.int8, torch.uint8, torch.bool)
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES


def _ints(shape, seed, dtype):
    """Small ints with many ties (comparisons see equal pairs)."""
    x = (rand(*shape, seed=seed) * 2).round()
    return (x.abs() if dtype in (torch.uint8, torch.bool) else x).to(dtype)


def _check_specials(name: str, fn: Callable[..., torch.Tensor], dtype: torch.dtype = torch.float32) -> None:
    """`name` (a bool result) on the special values against themselves reversed: NaN, infinities and
    signed zeros meet each other and ordinary numbers."""
    x = torch.tensor(SPECIALS, dtype=dtype)
    assert_close(run_graph(name, [x, x.flip(0)], ((len(SPECIALS),), torch.bool)), fn(x, x.flip(0)))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("op", list(op_models.COMPARE))
def test_compare(op, dtype):
    fn = getattr(torch, op)
    a, b = _ints((3, 5), 1, dtype), _ints((1, 5), 2, dtype)
    if dtype.is_floating_point:
        a, b = a + 0.5 * rand(3, 5, seed=3).sign().to(dtype), b  # ties and fractions
    assert_close(run_graph(f"aten.{op}.Tensor", [a, b], ((3, 5), torch.bool)), fn(a, b))
    scalar = 1 if not dtype.is_floating_point else 0.5
    for overload in ("Tensor", "Scalar"):  # ExecuTorch's files write the .Scalar overload
        assert_close(run_graph(f"aten.{op}.{overload}", [a, scalar], ((3, 5), torch.bool)), fn(a, scalar))


@pytest.mark.parametrize("op", list(op_models.COMPARE))
def test_compare_ints_with_a_fraction_and_nan(op):
    """An int tensor against 0.5 compares in float; NaN compares as torch has it."""
    fn = getattr(torch, op)
    a = torch.arange(-3, 4, dtype=torch.int32)
    assert_close(run_graph(f"aten.{op}.Tensor", [a, 0.5], ((7,), torch.bool)), fn(a, 0.5))
    _check_specials(f"aten.{op}.Tensor", fn)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("op", list(op_models.LOGICAL_ANY))
def test_logical_any_dtype(op, dtype):
    """logical_and/or/xor: nonzero is true (NaN too), broadcast, a bool result."""
    fn = getattr(torch, op)
    a, b = _ints((4, 6), 1, dtype), _ints((1, 6), 2, dtype)
    assert a.any() and not a.all()  # both truth values occur
    assert_close(run_graph(f"aten.{op}.default", [a, b], ((4, 6), torch.bool)), fn(a, b))
    if dtype.is_floating_point:
        _check_specials(f"aten.{op}.default", fn, dtype)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
@pytest.mark.parametrize("op", list(op_models.LOGICAL))
def test_bitwise(op, dtype):
    fn = getattr(torch, op)
    a, b = rand_of((4, 6), 1, dtype), rand_of((4, 1), 2, dtype)
    assert_close(run_graph(f"aten.{op}.Tensor", [a, b], ((4, 6), dtype)), fn(a, b))
    scalar = True if dtype == torch.bool else 5
    assert_close(run_graph(f"aten.{op}.Tensor", [a, scalar], ((4, 6), dtype)), fn(a, scalar))


def test_bitwise_refuses_floats():
    from vkx.loader.errors import BadProgramError
    with pytest.raises(BadProgramError, match="integer and bool"):
        run_graph("aten.bitwise_and.Tensor", [rand(4), rand(4)], ((4,), torch.float32))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + (torch.int32, torch.int8, torch.uint8), ids=str)
@pytest.mark.parametrize("op", list(op_models.MIN_MAX))
def test_minimum_maximum(op, dtype):
    fn = getattr(torch, op)
    for shape_b in ((4, 8), (1, 8)):  # same shape (vec4 for floats) and broadcast
        a, b = rand_of((4, 8), 1, dtype), rand_of(shape_b, 2, dtype)
        assert_close_in(run_graph(f"aten.{op}.default", [a, b], ((4, 8), dtype)), fn(a, b), dtype, each=True) \
            if dtype.is_floating_point else assert_close(run_graph(f"aten.{op}.default", [a, b], ((4, 8), dtype)),
                                                         fn(a, b))


@pytest.mark.parametrize("op", list(op_models.MIN_MAX))
@pytest.mark.parametrize("n", [20, 21], ids=["vec4", "scalar"])
def test_minimum_maximum_nan(op, n):
    x = torch.tensor(SPECIALS + [1.0])[:n]
    y = x.flip(0)
    assert_close(run_graph(f"aten.{op}.default", [x, y], ((n,), torch.float32)), getattr(torch, op)(x, y))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_logical_not(dtype):
    for n in (8, 7):
        x = _ints((n,), 4, dtype)
        assert_close(run_graph("aten.logical_not.default", [x], ((n,), torch.bool)), torch.logical_not(x))
    x = torch.tensor(SPECIALS)
    assert_close(run_graph("aten.logical_not.default", [x], ((20,), torch.bool)), torch.logical_not(x))


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


@pytest.mark.parametrize("dst", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("src", ALL_DTYPES, ids=str)
def test_to_copy(src, dst):
    x = rand_of((5, 3), 7, src)
    assert_close(run_graph("aten._to_copy.default", [x], ((5, 3), dst)), x.to(dst))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("shape, size", [((1, 3, 1), (2, 3, 4)), ((3,), (2, 4, 3)), ((2, 1, 3, 1), (2, 5, 3, 2))])
def test_expand(shape, size, dtype):
    x = rand_of(shape, 8, dtype)
    assert_close(run_graph("aten.expand_copy.default", [x, list(size)], (size, dtype)), x.expand(size))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_where(dtype):
    cond = rand(3, 1, 5, seed=9) > 0
    a, b = rand_of((3, 4, 5), 10, dtype), rand_of((4, 1), 11, dtype)
    assert_close(run_graph("aten.where.self", [cond, a, b], ((3, 4, 5), dtype)), torch.where(cond, a, b))


def test_where_keeps_large_ints():
    """An int32 output passes through int, not float (2^24 + 1 survives)."""
    a = torch.tensor([2**24 + 1, -(2**30) - 3], dtype=torch.int32)
    cond = torch.tensor([True, False])
    got = run_graph("aten.where.self", [cond, a, a.flip(0)], ((2,), torch.int32))
    assert_close(got, torch.where(cond, a, a.flip(0)))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dim, dtype):
    x = rand_of((4, 5, 6), 12, dtype)
    shape = [3, 4, 5]
    size = x.shape[dim]
    index = torch.randint(-size, size, shape, generator=torch.Generator().manual_seed(dim + 2))
    want = torch.gather(x, dim, index % size)
    got = run_graph("aten.gather.default", [x, dim, index.to(torch.int32)], (tuple(shape), dtype))
    assert_close(got, want)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("case", ["one", "two", "mask"])
def test_index(case, dtype):
    x = rand_of((4, 6, 3), 13, dtype)
    g = torch.Generator().manual_seed(3)
    if case == "one":
        indices = [torch.randint(-4, 4, (2, 5), generator=g)]
    elif case == "two":
        indices = [torch.randint(0, 4, (5, 1), generator=g), torch.randint(-6, 6, (1, 2), generator=g)]
    else:  # transformers' padding mask: mask[batch_idx, kv_idx] with broadcast aranges
        x = x[:, :, 0].contiguous()
        indices = [torch.arange(4).view(4, 1, 1, 1), torch.arange(6).view(1, 1, 1, 6)]
    want = x[tuple(indices)]
    got = run_graph("aten.index.Tensor", [x, Values([i.to(torch.int32) for i in indices])],
                    (tuple(want.shape), dtype))
    assert_close(got, want)


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


# --------------------------------------------------------------------------- through the exporter

EXPORTED = {
    "compare_and_where": (lambda m, x, y: torch.where((x > y) & (x != 0.5) | ~(y <= 0.1), x, y * 2)
                          + torch.where(torch.logical_and(x > 0, torch.logical_or(y > 0, x > 1)), x.sqrt(), -x)
                          + torch.logical_xor(x, y - 0.25).float() + torch.logical_and(x - 0.25, y).float(),
                          (rand(3, 4, seed=1), rand(1, 4, seed=2))),
    "minimum_maximum_clamp": (lambda m, x, y: torch.maximum(torch.minimum(x, y), x.clamp(-0.5, 0.3)) + torch.nn.functional.relu6(x),
                              (rand(3, 4, seed=3), rand(3, 4, seed=4))),
    "pow_rsqrt_log": (lambda m, x: x.pow(2).mean(-1, keepdim=True).rsqrt() * (x.abs() + 1).log() + x ** 3,
                      (rand(2, 8, seed=5),)),
    "unary_table": (lambda m, x: x.exp() + x.sin() + x.cos() + x.abs() + torch.nn.functional.hardswish(x)
                    + torch.nn.functional.hardsigmoid(x) - x, (rand(2, 8, seed=6),)),
    "casts_and_masks": (lambda m, ids: ((ids != 3).long().cumsum(-1) * (ids != 3) + 1).float() * 0.5,
                        (torch.tensor([[3, 1, 4, 1, 5, 3, 2]]),)),
    "expand_gather_index": (lambda m, x, i: torch.gather(x.expand(3, 4, 5), 2, i) + x[0].t()[i[:, :, 0]][..., :2],
                            (rand(1, 4, 5, seed=7), torch.randint(0, 5, (3, 4, 2), generator=torch.Generator().manual_seed(1)))),
    "conv1d": (lambda m, x: torch.nn.functional.conv1d(x, m.w, m.b, stride=2, padding=1),
               (rand(1, 4, 16, seed=8),)),
}


@pytest.mark.parametrize("name", EXPORTED)
def test_exported(name):
    fn, inputs = EXPORTED[name]
    module = Fn(fn, w=rand(6, 4, 3, seed=9), b=rand(6, seed=10)) if name == "conv1d" else Fn(fn)
    want = module(*inputs)
    assert_close(run_vkx(module, inputs), want)


# --------------------------------------------------------------------------- tensor factories

FACTORY = [None, None, None, None]
"""dtype, layout, device, pin_memory: Null, as ExecuTorch writes them."""


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_full_and_scalar_tensor(dtype):
    value = True if dtype == torch.bool else (-7 if dtype in (torch.int32, torch.int8) else 5)
    value = -1.75 if dtype.is_floating_point else value
    got = run_graph("aten.full.default", [[3, 5], value, *FACTORY], ((3, 5), dtype))
    assert_close(got, torch.full((3, 5), value, dtype=dtype))
    got = run_graph("aten.scalar_tensor.default", [value, *FACTORY], ((), dtype))
    assert_close(got, torch.scalar_tensor(value, dtype=dtype))


def test_full_of_minus_infinity():
    """transformers' masks fill with -inf and with float32's lowest value."""
    for value in (float("-inf"), torch.finfo(torch.float32).min):
        got = run_graph("aten.full.default", [[2, 4], value, *FACTORY], ((2, 4), torch.float32))
        assert_close(got, torch.full((2, 4), value))


ARANGES = {"range": (0, 7, 1), "step": (3, 40, 3), "down": (10, -5, -2), "fraction": (0.5, 4.0, 0.25)}


@pytest.mark.parametrize("case, dtype", [(case, dtype) for case in ARANGES
                                         for dtype in FLOAT_DTYPES + (torch.int32, torch.int8, torch.uint8)
                                         if dtype.is_floating_point or (case != "fraction"
                                                                        and (case != "down" or dtype != torch.uint8))],
                         ids=str)
def test_arange(case, dtype):
    start, end, step = ARANGES[case]
    want = torch.arange(start, end, step, dtype=dtype)
    got = run_graph("aten.arange.start_step", [start, end, step, *FACTORY], (tuple(want.shape), dtype))
    assert_close_in(got, want, dtype, each=True) if dtype.is_floating_point else assert_close(got, want)


def test_arange_refuses_a_fraction_for_ints():
    from vkx.loader.errors import BadProgramError
    with pytest.raises(BadProgramError, match="start = 0.5"):
        run_graph("aten.arange.start_step", [0.5, 4, 1, *FACTORY], ((4,), torch.int32))
