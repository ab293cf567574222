"""The contract's math definition of every elementwise op (OpDecl.math, numpy notation) against torch,
and the loader's GLSL tables against the contract (one entry on each side per op)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vkx.format import contract, dtypes, opset, op_decls
from vkx.loader.ops import DTYPE_CODES, GLSL_TYPES, HELD_IN_WORDS, elementwise

TORCH = {
    "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "silu": F.silu, "neg": torch.neg,
    "abs": torch.abs, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "sin": torch.sin, "cos": torch.cos, "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid,
    "round": torch.round, "log10": torch.log10, "tan": torch.tan, "logical_not": torch.logical_not,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2), "hardshrink": lambda x: F.hardshrink(x, 1.25),
    "add": lambda x, y: torch.add(x, y, alpha=3), "sub": lambda x, y: torch.sub(x, y, alpha=3),
    "mul": torch.mul, "div": torch.div,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor,
    "minimum": torch.minimum, "maximum": torch.maximum,
}
ARGUMENTS = {"alpha": 3, "negative_slope": 0.2, "lambd": 1.25}
"""The numbers the definitions read, as the torch functions above take them."""
NUMPY = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
         "abs": np.abs, "log10": np.log10, "tan": np.tan, "maximum": np.maximum, "minimum": np.minimum, "where": np.where, "round": np.round,
         "erf": np.vectorize(math.erf), "pi": math.pi}


def _elementwise() -> dict[str, contract.OpDecl]:
    return {name.split(".")[1]: d for name, d in opset.OPS.items() if d.math}


def _evaluate(definition: str, **values):
    with np.errstate(divide="ignore"):  # x / 0 is inf in both
        return eval(definition, {"__builtins__": {}}, {**NUMPY, **ARGUMENTS, **values})


def test_every_definition_is_checked():
    assert set(_elementwise()) == set(TORCH)


@pytest.mark.parametrize("op", sorted(TORCH))
def test_definition_matches_torch(op):
    decl = _elementwise()[op]
    integer = op.startswith("bitwise")
    if integer:
        x, y = np.arange(-7, 8, dtype=np.int64), np.arange(8, -7, -1, dtype=np.int64)
    else:
        x = np.linspace(-6.0, 6.0, 97)
        if op in ("log", "sqrt", "rsqrt"):
            x = np.abs(x) + 0.05
        y = np.roll(x, 5)
        y[::7] = x[::7]  # some equal pairs for the comparisons
        if op.startswith("logical"):
            x[10] = 0.0  # a false operand
    names = {a.name for a in decl.args}
    got = _evaluate(decl.math, x=x, y=y) if "other" in names else _evaluate(decl.math, x=x)
    want = TORCH[op](*([torch.from_numpy(x), torch.from_numpy(y)] if "other" in names else [torch.from_numpy(x)]))
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want.double().numpy(), rtol=1e-12, atol=1e-12)


def test_gelu_definitions():
    x = np.linspace(-6.0, 6.0, 97)
    for approximate, definition in op_decls.GELU.items():
        want = F.gelu(torch.from_numpy(x), approximate=approximate).numpy()
        np.testing.assert_allclose(_evaluate(definition, x=x), want, rtol=1e-12, atol=1e-12)
    assert set(elementwise.GELU_GLSL) == set(op_decls.GELU)


def test_glsl_tables_cover_the_declarations():
    """One GLSL expression per declared elementwise op and none for an undeclared one."""
    built_by_unary = {n for n, d in _elementwise().items() if d.family != "binary"}
    assert set(elementwise.UNARY_GLSL) == built_by_unary
    assert set(elementwise.BINARY_GLSL) == {n for n, d in _elementwise().items() if d.family == "binary"}


def test_glsl_types_cover_the_device_dtypes():
    """A GLSL type and a specialization-constant code for each dtype a device tensor may hold (the file's
    dtypes and the 8-bit ones' forms held in 32-bit words), no other."""
    assert set(GLSL_TYPES) == set(DTYPE_CODES) == dtypes.ON_DEVICE | set(HELD_IN_WORDS)
