"""Python scalars through the exporter keep their value and type: every op that takes a number
gets a non-integer float (2.5, -0.75, 0.5, 1e-3) on a float tensor, and the program's output is
torch's, in every dtype the export takes. A float written as an Int (`x < 2.5` as `x < 2`,
Hardshrink's 0.5 as 0) gives a wrong answer, so each case also asserts that the file holds
the float as a Double of the exact value."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import vkx
from vkx.format import ProgramFile
from vkx.format.vkgraph import Double

from .conftest import EXPORT_DTYPES, Fn, assert_close_in, rand

pytestmark = pytest.mark.vulkan

# name: (fn of x, the float immediates the file must hold)
CASES = {
    "lt": (lambda m, x: x < 0.25, {0.25}),
    "le": (lambda m, x: x <= -0.75, {-0.75}),
    "gt": (lambda m, x: x > 0.5, {0.5}),
    "ge": (lambda m, x: x >= 2.5, {2.5}),
    "eq": (lambda m, x: x == 0.5, {0.5}),
    "ne": (lambda m, x: x != 0.5, {0.5}),
    "hardshrink": (lambda m, x: F.hardshrink(x, 0.5), {0.5}),
    "add": (lambda m, x: x + 0.375, {0.375}),
    "sub": (lambda m, x: 1.625 - x, {1.625}),
    "mul": (lambda m, x: x * 0.5, {0.5}),
    "div": (lambda m, x: x / 2.5, {2.5}),
    "pow": (lambda m, x: x.abs() ** 1.5, {1.5}),
    "clamp": (lambda m, x: x.clamp(-0.25, 0.75), {-0.25, 0.75}),
    "where": (lambda m, x: torch.where(x > 0.125, x, x * 0.5), {0.125, 0.5}),
    "int_lt": (lambda m, x: (x * 4).to(torch.int32) < 2.5, {2.5}),
    "int_mul": (lambda m, x: (x * 4).to(torch.int32) * 0.5, {0.5}),
    "leaky_relu": (lambda m, x: F.leaky_relu(x, 0.125), {0.125}),
    "constant_pad_nd": (lambda m, x: F.pad(x, (1, 2), value=-0.375), {-0.375}),
    "var": (lambda m, x: x.var(-1, correction=0.5), {0.5}),
    "hardtanh": (lambda m, x: F.hardtanh(x, -0.625, 0.875), {-0.625, 0.875}),
}


def _doubles(path: Path) -> set[float]:
    """The values of the file's Double immediates."""
    with ProgramFile.open(path) as program:
        return {v.value for v in program.vulkan.graph.values if isinstance(v, Double)}


@pytest.mark.parametrize("dtype", EXPORT_DTYPES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_float_scalar_keeps_value_and_type(name, dtype):
    fn, floats = CASES[name]
    x = rand(4, 33, seed=3, scale=2.0)
    x[0, :8] = torch.tensor([0.25, -0.75, 0.5, 2.5, 0.125, 0.375, -0.5, 0.75])  # values at the thresholds
    module = Fn(fn).eval()
    xin = x.to(dtype)
    want = module(xin)
    with tempfile.TemporaryDirectory(prefix="vkx-scalar-") as tmp:
        pte = Path(tmp) / "m.pte"
        vkx.export_model(module, (xin,), str(pte))
        doubles = _doubles(pte)
        assert floats <= doubles, f"the file holds Doubles {sorted(doubles)}, not {sorted(floats)}"
        program = vkx.load(str(pte))
        try:
            got = program(xin)
        finally:
            program.close()
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == torch.bool:
        assert torch.equal(got, want), f"{int((got != want).sum())} of {want.numel()} wrong"
    else:
        assert_close_in(got, want, want.dtype)
