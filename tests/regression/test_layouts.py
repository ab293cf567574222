"""Old format vs new: every layout × schedule gives bit-identical outputs that match torch.

For each example model, and a synthetic model whose constant is larger than the
128 MiB a storage binding may cover on lavapipe, the model is exported four ways
(legacy layout, named data in the .pte, named data in a .ptd, named data in a
.safetensors) and each file is loaded with both schedules (eager: the old order,
lazy: the new one). All eight outputs must be bit-identical, and match torch.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import vkx
from vkx.export.model_file import load_model_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LAYOUTS = {  # name -> (layout, external data suffix)
    "legacy": ("legacy", None),
    "named": ("named", None),
    "ptd": ("named", ".ptd"),
    "safetensors": ("named", ".safetensors"),
}
SCHEDULES = ("eager", "lazy")


def big_constant_model() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Linear(1024, 34000): a 132.8 MiB weight, over lavapipe's 128 MiB binding limit."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1024, 34000), nn.ReLU()).eval(), (torch.randn(2, 1024),)


MODELS = {
    "mlp": lambda: load_model_file(EXAMPLES / "mlp.py"),
    "cnn": lambda: load_model_file(EXAMPLES / "cnn.py"),
    "transformer": lambda: load_model_file(EXAMPLES / "transformer.py"),
    "big_constant": big_constant_model,
}


def outputs_of(path: Path, external: Path | None, schedule: str, inputs) -> tuple[torch.Tensor, ...]:
    with vkx.load(path, external_data=[external] if external else [], schedule=schedule) as program:
        out = program(*inputs)
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("name", MODELS)
def test_every_layout_and_schedule_agree(name, tmp_path):
    module, inputs = MODELS[name]()
    with torch.no_grad():
        expected = module(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)

    results: dict[tuple[str, str], tuple[torch.Tensor, ...]] = {}
    for layout_name, (layout, suffix) in LAYOUTS.items():
        path = tmp_path / f"{name}-{layout_name}.pte"
        external = tmp_path / f"{name}-{layout_name}{suffix}" if suffix else None
        vkx.export_model(module, inputs, path, layout=layout, external_data=external)
        for schedule in SCHEDULES:
            results[layout_name, schedule] = outputs_of(path, external, schedule, inputs)
        path.unlink()  # keep at most one copy of the big model's weights on disk

    reference_key = ("legacy", "eager")
    reference = results[reference_key]
    for key, outs in results.items():
        assert len(outs) == len(reference)
        for got, ref in zip(outs, reference):
            assert torch.equal(got, ref), f"{key} differs from {reference_key}: max |diff| {(got - ref).abs().max()}"

    for got, want in zip(reference, expected):
        scale = want.abs().max().item() or 1.0
        err = (got - want).abs().max().item()
        assert got.shape == want.shape and err <= 1e-4 * scale + 1e-5, f"max |err| {err:.3g} vs torch (scale {scale:.3g})"
