"""Comparisons, bitwise and logical ops, minimum/maximum, logical_not and where against torch, in
every dtype each takes (hand-built one-op graphs), and their export rules."""
from __future__ import annotations

from typing import Callable

import pytest
import torch

from vkx.format import op_decls

from .conftest import (ALL_DTYPES, FLOAT_DTYPES, Fn, assert_close, assert_close_in, rand, rand_of, run_graph,
                       run_vkx)
from .test_elementwise import SPECIALS

pytestmark = pytest.mark.vulkan

INT_DTYPES = (torch.int32, torch.int8, torch.uint8, torch.bool)


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
@pytest.mark.parametrize("op", list(op_decls.COMPARE))
def test_compare(op, dtype):
    fn = getattr(torch, op)
    a, b = _ints((3, 5), 1, dtype), _ints((1, 5), 2, dtype)
    if dtype.is_floating_point:
        a, b = a + 0.5 * rand(3, 5, seed=3).sign().to(dtype), b  # ties and fractions
    assert_close(run_graph(f"aten.{op}.Tensor", [a, b], ((3, 5), torch.bool)), fn(a, b))
    scalar = 1 if not dtype.is_floating_point else 0.5
    for overload in ("Tensor", "Scalar"):  # ExecuTorch's files write the .Scalar overload
        assert_close(run_graph(f"aten.{op}.{overload}", [a, scalar], ((3, 5), torch.bool)), fn(a, scalar))


@pytest.mark.parametrize("op", list(op_decls.COMPARE))
def test_compare_ints_with_a_fraction_and_nan(op):
    """An int tensor against 0.5 compares in float; NaN compares as torch has it."""
    fn = getattr(torch, op)
    a = torch.arange(-3, 4, dtype=torch.int32)
    assert_close(run_graph(f"aten.{op}.Tensor", [a, 0.5], ((7,), torch.bool)), fn(a, 0.5))
    _check_specials(f"aten.{op}.Tensor", fn)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("op", list(op_decls.LOGICAL_ANY))
def test_logical_any_dtype(op, dtype):
    """logical_and/or/xor: nonzero is true (NaN too), broadcast, a bool result."""
    fn = getattr(torch, op)
    a, b = _ints((4, 6), 1, dtype), _ints((1, 6), 2, dtype)
    assert a.any() and not a.all()  # both truth values occur
    assert_close(run_graph(f"aten.{op}.default", [a, b], ((4, 6), torch.bool)), fn(a, b))
    if dtype.is_floating_point:
        _check_specials(f"aten.{op}.default", fn, dtype)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
@pytest.mark.parametrize("op", list(op_decls.LOGICAL))
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
@pytest.mark.parametrize("op", list(op_decls.MIN_MAX))
def test_minimum_maximum(op, dtype):
    fn = getattr(torch, op)
    for shape_b in ((4, 8), (1, 8)):  # same shape (vec4 for floats) and broadcast
        a, b = rand_of((4, 8), 1, dtype), rand_of(shape_b, 2, dtype)
        assert_close_in(run_graph(f"aten.{op}.default", [a, b], ((4, 8), dtype)), fn(a, b), dtype, each=True) \
            if dtype.is_floating_point else assert_close(run_graph(f"aten.{op}.default", [a, b], ((4, 8), dtype)),
                                                         fn(a, b))


@pytest.mark.parametrize("op", list(op_decls.MIN_MAX))
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


# --------------------------------------------------------------------------- through the exporter

EXPORTED = {
    "compare_and_where": (lambda m, x, y: torch.where((x > y) & (x != 0.5) | ~(y <= 0.1), x, y * 2)
                          + torch.where(torch.logical_and(x > 0, torch.logical_or(y > 0, x > 1)), x.sqrt(), -x)
                          + torch.logical_xor(x, y - 0.25).float() + torch.logical_and(x - 0.25, y).float(),
                          (rand(3, 4, seed=1), rand(1, 4, seed=2))),
    "minimum_maximum_clamp": (lambda m, x, y: torch.maximum(torch.minimum(x, y), x.clamp(-0.5, 0.3)) + torch.nn.functional.relu6(x),
                              (rand(3, 4, seed=3), rand(3, 4, seed=4))),
    "casts_and_masks": (lambda m, ids: ((ids != 3).long().cumsum(-1) * (ids != 3) + 1).float() * 0.5,
                        (torch.tensor([[3, 1, 4, 1, 5, 3, 2]]),)),
    "pow_rsqrt_log": (lambda m, x: x.pow(2).mean(-1, keepdim=True).rsqrt() * (x.abs() + 1).log() + x ** 3,
                      (rand(2, 8, seed=5),)),
    "unary_table": (lambda m, x: x.exp() + x.sin() + x.cos() + x.abs() + torch.nn.functional.hardswish(x)
                    + torch.nn.functional.hardsigmoid(x) - x, (rand(2, 8, seed=6),)),
}
"""Models of the elementwise ops of this file and test_elementwise.py's (casts and the running sum
of a mask, as transformers' position ids)."""


@pytest.mark.parametrize("name", EXPORTED)
def test_exported(name):
    fn, inputs = EXPORTED[name]
    module = Fn(fn)
    assert_close(run_vkx(module, inputs), module(*inputs))
