"""Shared helpers for the model tests: export with vkx, run on the device, compare with torch.

`check_model(module, inputs)` exports `module` (its output a tensor), runs the loaded program and
asserts the largest error is within `rtol` of the output's scale (its largest magnitude), after
checking that the output has real magnitude (random weights that give ~0 test nothing).
"""
from __future__ import annotations

import torch
from torch import nn

from tests.ops.conftest import run_vkx


HALF = {"fp16": (torch.float16, 2e-3), "bf16": (torch.bfloat16, 2e-2)}
"""`--dtype` → the torch dtype and the error allowed against the fp32 model (a few of its eps)."""


def check_model(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], rtol: float = 1e-4,
                dtype: str | None = None) -> float:
    """Export (in `dtype`, else as it is) and run `module` on the device; returns the error relative
    to the output's scale, against the module run in fp32 by torch."""
    module = module.eval()
    with torch.no_grad():
        want = module(*inputs)
    got = run_vkx(module, inputs, dtype=dtype)
    if dtype is not None:
        half, rtol = HALF[dtype]
        assert got.dtype == half
        got = got.float()
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = float(want.abs().max())
    assert scale > 0.1 and float(want.std()) > 0.01, f"the output has no real magnitude (max {scale})"
    error = float((got.float() - want.float()).abs().max()) / scale
    assert error < rtol, f"max error {error:.3g} of the output's scale {scale:.3g}"
    return error


def calibrated(model: nn.Module, shape: tuple[int, ...]) -> nn.Module:
    """Batch-norm statistics from a few random batches of `shape`'s images (fresh ones are 0 and 1: no
    real magnitudes); the norms' scales and shifts drawn around 1 and 0."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = None  # a cumulative average
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.uniform_(m.bias, -0.2, 0.2)
    model.train()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn(4, *shape[1:], generator=generator))
    return model.eval()
