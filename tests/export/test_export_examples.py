"""The example models export in both layouts and with .ptd/.safetensors external data;
their activation plans are within 10% of the peak of live activation bytes."""
from __future__ import annotations

import pytest
import torch
from .export_helpers import EXAMPLES, check_file, et_deserialize

import vkx
from vkx.export import load_model_file
from vkx.format.vkgraph import DataType, Tensor

NAMES = ["mlp", "cnn", "transformer"]
VARIANTS = {
    "named": {},
    "legacy": {"layout": "legacy"},
    "ptd": {"external_data": "weights.ptd"},
    "safetensors": {"external_data": "weights.safetensors"},
}


@pytest.fixture(scope="module")
def models():
    return {name: load_model_file(EXAMPLES / f"{name}.py") for name in NAMES}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", NAMES)
def test_example_exports(name, variant, models, tmp_path):
    options = dict(VARIANTS[variant])
    if "external_data" in options:
        options["external_data"] = tmp_path / options["external_data"]
    path = tmp_path / f"{name}.pte"
    report = vkx.export_model(*models[name], path, **options)
    graph = check_file(path, options.get("external_data"))
    assert report.file_bytes == path.stat().st_size
    if variant in ("ptd", "safetensors"):
        assert report.external_bytes >= report.constant_bytes > 0
        assert path.stat().st_size < report.constant_bytes  # the weights are not in the .pte
    memory = report.memory
    assert memory.total_nbytes * 10 <= memory.peak_live_nbytes * 11, (memory.total_nbytes, memory.peak_live_nbytes)
    planned = {v.mem_obj_id for v in graph.values if isinstance(v, Tensor) and v.mem_obj_id >= 0}
    assert planned == set(range(len(memory.object_nbytes)))
    ptes = et_deserialize(path)
    assert ptes.program.execution_plan[0].delegates[0].id == "VulkanBackend"


def test_fp16_halves_the_floating_constants(models, tmp_path):
    full = vkx.export_model(*models["transformer"], tmp_path / "fp32.pte")
    half = vkx.export_model(*models["transformer"], tmp_path / "fp16.pte", dtype="fp16")
    graph = check_file(tmp_path / "fp16.pte")
    constants = [v for v in graph.values if isinstance(v, Tensor) and v.constant_id >= 0]
    assert {v.datatype for v in constants} == {DataType.FLOAT16}
    assert half.constant_bytes * 2 == pytest.approx(full.constant_bytes, rel=0.01)


def test_executorch_parses_the_vkgraph(models, tmp_path):
    """ExecuTorch's own VkGraph reader (through flatc) decodes the delegate blob."""
    serialize = pytest.importorskip("executorch.backends.vulkan.serialization.vulkan_graph_serialize")
    path = tmp_path / "cnn.pte"
    vkx.export_model(*models["cnn"], path)
    program = et_deserialize(path).program
    blob = program.backend_delegate_data[program.execution_plan[0].delegates[0].processed.index].data
    try:
        graph = serialize.flatbuffer_to_vk_graph(serialize.extract_vk_flatbuffer(blob))
    except FileNotFoundError:
        pytest.skip("flatc is not installed")
    ours = check_file(path)
    assert [(c.name, list(c.args)) for c in graph.chain] == [(c.name, list(c.args)) for c in ours.chain]
    assert len(graph.values) == len(ours.values) and list(graph.input_ids) == ours.input_ids


def vulkan_device_or_skip() -> None:
    try:
        from vkx.loader.device import default_device
        default_device()
    except Exception as error:  # no driver, no device
        pytest.skip(f"no Vulkan device ({type(error).__name__})")


@pytest.mark.parametrize("name", NAMES)
def test_examples_run_like_torch(name, models, tmp_path):
    """End to end through the loader: the exported program computes what the module does."""
    vulkan_device_or_skip()
    module, inputs = models[name]
    vkx.export_model(module, inputs, tmp_path / "m.pte", dtype="fp16")
    with vkx.load(tmp_path / "m.pte") as program:
        result = program(*inputs)
    with torch.no_grad():
        expected = module(*inputs)
    assert torch.as_tensor(result).shape == expected.shape
    assert torch.allclose(torch.as_tensor(result), expected, atol=2e-3, rtol=1e-2)
