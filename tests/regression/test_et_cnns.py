"""ExecuTorch 1.5.1's own Vulkan files of the classic image classifiers (tests/data/et_cnn_<name>.pte and,
as float16 models, et_cnn_<name>_half.pte, made by tests/data/make_et_cnn_files.py from
tests/data/et_cnn_models.py): ShuffleNetV2, SqueezeNet 1.0 and 1.1, DenseNet, MobileNetV2,
MobileNetV3-small, ResNet-18 and an EfficientNet-B0-like net. Each holds the ops ExecuTorch's partitioner
lowered it to, runs on vkx (the CPU ops ExecuTorch left between its delegates run with torch) and matches
the same seed-made model run by torch: the fp32 files within 1e-4 of the output's scale, the fp16 files
against the fp32 model within HALF's tolerance, or three times torch's own fp16 error where that is larger.
"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

import vkx
from vkx.format import ProgramFile, validate

from tests.data.et_cnn_models import MODELS, build
from tests.models.conftest import HALF

DATA = Path(__file__).resolve().parents[1] / "data"

pytestmark = pytest.mark.vulkan

OPS = {  # model -> ops its files' delegates must contain (what makes the model what it is)
    "shufflenet_v2": {"aten.split_with_sizes_copy.default", "aten.permute_copy.default", "aten.cat.default",
                      "aten.max_pool2d_with_indices.default"},
    "squeezenet1_0": {"aten.cat.default", "aten.max_pool2d_with_indices.default", "aten.mean.dim"},
    "squeezenet1_1": {"aten.cat.default", "aten.max_pool2d_with_indices.default", "aten.mean.dim"},
    "densenet": {"aten.cat.default", "aten._native_batch_norm_legit_no_training.default", "aten.avg_pool2d.default"},
    "mobilenet_v2": {"et_vk.conv_with_clamp.default", "aten.add.Tensor", "aten.mean.dim"},
    "mobilenet_v3_small": {"aten.hardswish.default", "aten.clamp.default", "aten.mul.Tensor", "aten.mean.dim"},
    "resnet18": {"aten.max_pool2d_with_indices.default", "aten.add.Tensor", "aten.relu.default"},
    "efficientnet": {"aten.sigmoid.default", "aten.mul.Tensor", "aten.mean.dim"},
}
CPU_OPS = {"shufflenet_v2": ["aten::mean.out"]}
"""The ops ExecuTorch's partitioner leaves on the CPU (ShuffleNetV2's x.mean([2, 3]) without keepdim), which
vkx runs with torch between two delegates; the other files are one delegate each."""

FILES = [(name, half) for name in MODELS for half in (False, True)]


def _file(name: str, half: bool) -> Path:
    return DATA / f"et_cnn_{name}{'_half' if half else ''}.pte"


def _id(case) -> str:
    return f"{case[0]}-{'fp16' if case[1] else 'fp32'}"


@pytest.mark.parametrize("case", FILES, ids=_id)
def test_file_has_the_ops(case):
    name, half = case
    path = _file(name, half)
    with ProgramFile.open(path) as program:
        ops = {op.name for d in program.vulkan_delegates for op in d.graph.chain}
    assert OPS[name] <= ops, f"missing {sorted(OPS[name] - ops)}"
    report = validate(path)
    assert report.cpu_ops == CPU_OPS.get(name, [])
    assert report.delegates == (2 if name in CPU_OPS else 1)


@pytest.mark.parametrize("schedule", ["lazy", "eager"])
@pytest.mark.parametrize("name", MODELS)
def test_fp32_file_matches_torch(name, schedule):
    model, x = build(name)
    with torch.no_grad():
        want = model(x)
    with vkx.load(_file(name, False), schedule=schedule) as program:
        got = program(x)
    assert got.dtype == torch.float32 and got.shape == want.shape
    scale = float(want.abs().max())
    assert scale > 0.1 and float(want.std()) > 0.01  # outputs of real magnitude
    error = float((got - want).abs().max()) / scale
    assert error < 1e-4, f"max error {error:.3g} of the output's scale {scale:.3g}"


@pytest.mark.parametrize("name", MODELS)
def test_fp16_file_matches_torch(name):
    """The float16 model's file: fp16 input, weights and output."""
    model, x = build(name)
    half, rtol = HALF["fp16"]
    with torch.no_grad():
        want = model(x)
        torch_half = copy.deepcopy(model).to(half)(x.to(half)).float()
    with vkx.load(_file(name, True)) as program:
        got = program(x.to(half))
    assert got.dtype == half and got.shape == want.shape
    scale = float(want.abs().max())
    assert scale > 0.1 and float(want.std()) > 0.01
    torch_error = float((torch_half - want).abs().max()) / scale
    error = float((got.float() - want).abs().max()) / scale
    bound = max(rtol, 3 * torch_error)
    assert error < bound, f"max error {error:.3g} of the output's scale {scale:.3g} (torch in fp16: {torch_error:.3g})"
