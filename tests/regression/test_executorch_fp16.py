"""ExecuTorch-made fp16 Vulkan files (tests/data/make_et_fp16_files.py) load and run, their tensors
kept in fp16 on the device."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import vkx

from tests.data.et_models import CNN, MLP

DATA = Path(__file__).resolve().parents[1] / "data"

pytestmark = pytest.mark.vulkan


@pytest.mark.parametrize("schedule", ["lazy", "eager"])
def test_force_fp16_file_runs_in_fp16(schedule):
    """The partitioner's force_fp16: fp16 weights and activations, fp32 program inputs/outputs."""
    torch.manual_seed(0)
    model = MLP().eval()
    x = torch.randn(1, 8)
    with vkx.load(DATA / "et_mlp_fp16.pte", schedule=schedule) as program:
        assert program.input_specs == [((1, 8), "float32")]
        assert program.weight_bytes == sum(p.numel() * 2 for p in model.parameters())  # fp16 on the device
        got = program(x)
    with torch.no_grad():
        want = model.half()(x.half()).float()  # torch computing in fp16, as the file does
    assert got.dtype == torch.float32
    assert float((got - want).abs().max()) <= 4 * torch.finfo(torch.float16).eps * float(want.abs().max())


def test_half_model_file_matches_torch_in_fp16():
    torch.manual_seed(0)
    model = CNN().half().eval()
    x = torch.randn(1, 3, 8, 8).half()
    with vkx.load(DATA / "et_cnn_half.pte") as program:
        got = program(x)
    with torch.no_grad():
        want = model(x)
    assert got.dtype == torch.float16 and float(want.abs().max()) > 0.1
    assert float((got.float() - want.float()).abs().max()) <= 4 * torch.finfo(torch.float16).eps * float(want.abs().max())
