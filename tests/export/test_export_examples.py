"""The example models export in both layouts and with .ptd/.safetensors external data;
their activation plans are within 10% of the peak of live activation bytes; with --dtype
every graph tensor and constant is in that dtype; loaded, they compute what torch computes
running the same module in that dtype on the CPU."""
from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch
from .export_helpers import EXAMPLES, check_file, et_deserialize, et_vkgraph
from ..ops.conftest import FLOAT_DTYPES, assert_close_in

import vkx
from vkx.export import load_model_file
from vkx.format import ProgramFile, describe, dtypes, resolve_constants
from vkx.format.vkgraph import Tensor

NAMES = ["mlp", "cnn", "transformer", "llama_block"]
DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
VARIANTS = {
    "named": {},
    "legacy": {"layout": "legacy"},
    "ptd": {"external_data": "weights.ptd"},
    "safetensors": {"external_data": "weights.safetensors"},
}


@pytest.fixture(scope="module")
def models():
    return {name: load_model_file(EXAMPLES / f"{name}.py") for name in NAMES}


@pytest.fixture(scope="module")
def in_dtype(models, tmp_path_factory):
    """(name, dtype) -> (path, report) of the example exported with --dtype, once for the module's tests."""
    folder = tmp_path_factory.mktemp("dtypes")
    made = {}

    def export(name: str, dtype: torch.dtype):
        if (name, dtype) not in made:
            path = folder / f"{name}-{DTYPES[dtype]}.pte"
            made[name, dtype] = path, vkx.export_model(*models[name], path, dtype=DTYPES[dtype])
        return made[name, dtype]
    return export


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


def torch_bytes(tensor: torch.Tensor) -> bytes:
    tensor = tensor.detach().contiguous()
    return (tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor).numpy().tobytes()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPES.get)
@pytest.mark.parametrize("name", NAMES)
def test_every_tensor_and_constant_has_the_requested_dtype(name, dtype, models, in_dtype):
    """Graph tensors (constants, activations, inputs, outputs) carry `dtype`; each constant's bytes
    are a parameter's or buffer's bytes as `module.to(dtype)` holds them; inspect's W is their sum."""
    module, inputs = models[name]
    path, report = in_dtype(name, dtype)
    graph = check_file(path)
    want = dtypes.named(str(dtype).removeprefix("torch."))
    tensors = [v for v in graph.values if isinstance(v, Tensor)]
    assert {dtypes.of(v.datatype) for v in tensors} == {want}
    assert {dtypes.of(graph.values[i].staging_datatype) for i in graph.input_ids + graph.output_ids} == {want}
    converted = copy.deepcopy(module).to(dtype)
    expected = Counter(torch_bytes(t) for t in [*converted.parameters(), *converted.buffers()] if t.is_floating_point())
    with ProgramFile.open(path) as program:
        stored = [bytes(program.read_range(where)) for where in resolve_constants(program)]
    assert Counter(stored) == expected
    assert describe(path)["totals"]["W"] == sum(map(len, set(stored)))  # W: each stored tensor once
    assert report.constant_bytes == sum(map(len, set(stored)))  # identical constants (the norms' ones) once
    assert et_deserialize(path).program.execution_plan[0].delegates[0].id == "VulkanBackend"


def test_executorch_parses_the_vkgraph(models, tmp_path):
    """ExecuTorch's own VkGraph reader (through flatc) decodes the delegate blob."""
    path = tmp_path / "cnn.pte"
    vkx.export_model(*models["cnn"], path)
    graph = et_vkgraph(path)
    ours = check_file(path)
    assert [(c.name, list(c.args)) for c in graph.chain] == [(c.name, list(c.args)) for c in ours.chain]
    assert len(graph.values) == len(ours.values) and list(graph.input_ids) == ours.input_ids


def run_like_torch(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], in_dtype: torch.dtype, path) -> None:
    """The program at `path` (`module` exported), loaded, computes what torch computes running
    `module.to(in_dtype)` on the CPU, within tolerance().

    tolerance(dtype) (terms=1) is 4 eps of the output's magnitude: torch's own 16-bit run of
    these examples and a simulation of vkx's arithmetic (every op computed in fp32 from its
    16-bit operands, its result rounded once) differ by at most 0.61 eps of it.
    """
    inputs = tuple(t.to(in_dtype) if t.is_floating_point() else t for t in inputs)
    with vkx.load(path) as program:
        result = program(*inputs)
    with torch.no_grad():
        expected = copy.deepcopy(module).to(in_dtype)(*inputs)
    assert_close_in(result, expected, in_dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPES.get)
@pytest.mark.parametrize("name", NAMES)
def test_examples_run_like_torch(name, dtype, models, in_dtype):
    """End to end through the loader, in each --dtype."""
    module, inputs = models[name]
    run_like_torch(module, inputs, dtype, in_dtype(name, dtype)[0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=DTYPES.get)
def test_a_16_bit_model_keeps_its_dtype(dtype, models, tmp_path):
    """`model.to(bfloat16)` exports as it is with --dtype keep, the default (the trace is bf16
    already), and runs; --dtype fp32 widens it without touching the caller's module."""
    module = copy.deepcopy(models["llama_block"][0]).to(dtype)
    inputs = (models["llama_block"][1][0].to(dtype),)
    vkx.export_model(module, inputs, tmp_path / "keep.pte")
    kinds = {dtypes.of(v.datatype) for v in check_file(tmp_path / "keep.pte").values if isinstance(v, Tensor)}
    assert kinds == {dtypes.named(str(dtype).removeprefix("torch."))}
    vkx.export_model(module, inputs, tmp_path / "fp32.pte", dtype="fp32")
    kinds = {dtypes.of(v.datatype) for v in check_file(tmp_path / "fp32.pte").values if isinstance(v, Tensor)}
    assert kinds == {dtypes.FLOAT32}
    assert {p.dtype for p in module.parameters()} == {dtype}
    run_like_torch(module, inputs, dtype, tmp_path / "keep.pte")


class TokenModel(torch.nn.Module):
    """Token ids and positions (int64 in torch) into an embedding table and a head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.position = torch.nn.Embedding(50, 24), torch.nn.Embedding(16, 24)
        self.head = torch.nn.Linear(24, 50)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids) + self.position(positions))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPES.get)
def test_int64_inputs_run_as_int32(dtype, tmp_path):
    """int64 ids become int32 device tensors; the program takes the caller's int64 tensors."""
    inputs = (torch.tensor([[3, 49, 0, 17, 8, 8, 21]]), torch.arange(7).unsqueeze(0))
    vkx.export_model(TokenModel(), inputs, tmp_path / "ids.pte", dtype=DTYPES[dtype])
    graph = check_file(tmp_path / "ids.pte")
    assert [dtypes.of(graph.values[i].staging_datatype) for i in graph.input_ids] == [dtypes.INT32] * 2
    run_like_torch(TokenModel(), inputs, dtype, tmp_path / "ids.pte")


def test_the_callers_module_is_not_converted(models, tmp_path):
    module, inputs = models["transformer"]
    before = {name: (t, t.dtype, t.clone()) for name, t in module.state_dict(keep_vars=True).items()}
    vkx.export_model(module, inputs, tmp_path / "m.pte", dtype="bf16")
    after = module.state_dict(keep_vars=True)
    assert after.keys() == before.keys()
    for name, (tensor, dtype, values) in before.items():
        assert after[name] is tensor and tensor.dtype == dtype and torch.equal(tensor, values), name


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPES.get)
def test_the_decoder_example_prefills_and_decodes_like_torch(dtype, tmp_path):
    """examples/kv_decoder.py (two methods, the KV cache as state) in each --dtype: a prompt, then
    three tokens one by one, each call's logits against the module run by torch in that dtype."""
    module, methods = load_model_file(EXAMPLES / "kv_decoder.py")
    path = tmp_path / "decoder.pte"
    vkx.export_model(copy.deepcopy(module), methods, str(path), dtype=DTYPES[dtype])
    reference = copy.deepcopy(module).to(dtype)
    calls = [("prefill", methods["prefill"])] + [("decode", (torch.tensor([[t]]), torch.tensor([8 + i])))
                                                  for i, t in enumerate((3, 17, 40))]
    with vkx.load(path) as program, torch.no_grad():
        for method, inputs in calls:
            assert_close_in(program[method](*inputs), reference(*inputs), dtype, terms=4)
