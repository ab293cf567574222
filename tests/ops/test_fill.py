"""The fills against torch, in every dtype a device tensor has: full, scalar_tensor and arange (the
tensor factories ExecuTorch's files may call; vkx's exporter folds them), full_like, zeros_like and
ones_like (hand-built one-op graphs)."""
from __future__ import annotations

import pytest
import torch

from vkx.loader.errors import BadProgramError

from .conftest import ALL_DTYPES, FLOAT_DTYPES, assert_close, assert_close_in, assert_equal, rand_of, run_graph

pytestmark = pytest.mark.vulkan

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
    with pytest.raises(BadProgramError, match="start = 0.5"):
        run_graph("aten.arange.start_step", [0.5, 4, 1, *FACTORY], ((4,), torch.int32))


@pytest.mark.parametrize("dtype,value", [(torch.float32, 0.1), (torch.float16, -3.5), (torch.bfloat16, 1e3),
                                         (torch.float32, float("-inf")), (torch.int32, -7), (torch.uint8, 200),
                                         (torch.bool, 1), (torch.int8, 0)], ids=str)
def test_full_like(dtype, value):
    x = rand_of((3, 5), 8, dtype)
    want = torch.full_like(x, value)
    got = run_graph("aten.full_like.default", [x, value, None, None, None, False, None], ((3, 5), dtype))
    assert_equal(got, want)


def test_full_like_refuses_a_fraction_for_an_integer_output():
    x = rand_of((3,), 8, torch.int32)
    with pytest.raises(BadProgramError, match="fill_value 0.5 for a int32 output"):
        run_graph("aten.full_like.default", [x, 0.5], ((3,), torch.int32))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_zeros_and_ones_like(dtype):
    x = rand_of((4, 3), 18, dtype)
    for name, want in (("zeros_like", torch.zeros_like(x)), ("ones_like", torch.ones_like(x))):
        assert_equal(run_graph(f"aten.{name}.default", [x], ((4, 3), dtype)), want)
