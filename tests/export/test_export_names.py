"""Tensor names in files: state-dict names as named-data keys (tied tensors' other names as more keys, in a
.safetensors in its metadata), forward argument and dict-output names, read back by inspect and the loader,
and a .pte whose keys resolve in a checkpoint vkx did not write."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

import vkx
from vkx.format import ExternalData, ProgramFile, validate
from vkx.format.describe import describe
from vkx.format.errors import FormatError, InvalidValueError, MissingKeyError
from vkx.format.names import IO_NAMES, io_names

from .export_helpers import check_file, et_deserialize

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")


class TiedLM(nn.Module):
    """Embedding tied to the output head; a dict output; two inputs by name."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(64, 32)
        self.norm = nn.LayerNorm(32)
        self.proj = nn.Linear(32, 32)
        self.head = nn.Linear(32, 64, bias=False)
        self.head.weight = self.embed.weight
        with torch.no_grad():  # LayerNorm's ones and zeros would make its two tensors one by their bytes
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_()

    def forward(self, token_ids, gate):
        hidden = self.proj(self.norm(self.embed(token_ids))) * gate
        return {"logits": self.head(hidden), "hidden": hidden}


def example():
    return TiedLM().eval(), (torch.randint(0, 64, (2, 7)), torch.rand(2, 7, 32) + 0.5)


STORED = {"embed.weight", "norm.weight", "norm.bias", "proj.weight", "proj.bias"}


def test_safetensors_reads_back_as_the_checkpoint(tmp_path):
    model, inputs = example()
    vkx.export_model(model, inputs, tmp_path / "m.pte", external_data=tmp_path / "m.safetensors")
    stored = load_file(tmp_path / "m.safetensors")
    assert set(stored) == STORED
    state = model.state_dict()
    for name, tensor in stored.items():
        assert torch.equal(tensor, state[name]), name
    with safe_open(tmp_path / "m.safetensors", "pt") as f:
        assert json.loads(f.metadata()["vkx.aliases"]) == {"head.weight": "embed.weight"}
    with ExternalData.open(tmp_path / "m.safetensors") as ext:
        assert ext.named_data["head.weight"] == ext.named_data["embed.weight"]
    check_file(tmp_path / "m.pte", tmp_path / "m.safetensors")


@pytest.mark.parametrize("external", [None, "m.ptd"])
def test_pte_and_ptd_keys_are_names_and_executorch_reads_them(tmp_path, external):
    model, inputs = example()
    ext = tmp_path / external if external else None
    report = vkx.export_model(model, inputs, tmp_path / "m.pte", external_data=ext)
    assert report.distinct_constants == 5
    check_file(tmp_path / "m.pte", ext)
    assert validate(tmp_path / "m.pte", [ext] if ext else []).warnings == []
    d = describe(tmp_path / "m.pte", [ext] if ext else [])
    names = {tuple(t["names"]) for t in d["tensors"]}
    assert names == {("embed.weight", "head.weight"), *((n,) for n in STORED - {"embed.weight"})}
    assert all(t["users"] and t["dtype"] == "FLOAT32" for t in d["tensors"])
    g = d["delegates"][0]["vulkan"]["graph"]
    assert [t["name"] for t in g["inputs"]] == ["token_ids", "gate"]
    assert [t["name"] for t in g["outputs"]] == ["logits", "hidden"]
    pte = et_deserialize(tmp_path / "m.pte")
    specs = {s.key: s.value for s in pte.program.execution_plan[0].delegates[0].compile_specs}
    assert json.loads(specs[IO_NAMES]) == {"inputs": ["token_ids", "gate"], "outputs": ["logits", "hidden"]}
    if ext is None:
        keys = pte.named_data.pte_data
        assert set(keys) == STORED | {"head.weight"}
        assert keys["head.weight"].buffer_index == keys["embed.weight"].buffer_index
    from executorch.runtime import Runtime, Verification
    program = Runtime.get().load_program((tmp_path / "m.pte").read_bytes(),
                                         verification=Verification.InternalConsistency,
                                         **({"data_path": str(ext)} if ext else {}))
    assert "forward" in program.method_names


def test_a_ptd_without_weights_is_whole(tmp_path):
    """A model with no constants still gets a .ptd as long as its header says (its segment data
    starts at byte 128): vkx validate and ExecuTorch's data map both check the size."""
    model = nn.Sequential(nn.ReLU())
    report = vkx.export_model(model, (torch.randn(2, 3),), tmp_path / "m.pte", external_data=tmp_path / "m.ptd")
    assert report.constant_bytes == 0
    with ExternalData.open(tmp_path / "m.ptd") as ext:
        assert ext.named_data == {} and ext.size == ext.header.segment_base_offset + ext.header.segment_data_size
    assert validate(tmp_path / "m.pte", [tmp_path / "m.ptd"]).warnings == []
    from executorch.runtime import Runtime, Verification
    program = Runtime.get().load_program((tmp_path / "m.pte").read_bytes(),
                                         verification=Verification.InternalConsistency,
                                         data_path=str(tmp_path / "m.ptd"))
    assert "forward" in program.method_names


@pytest.mark.vulkan
def test_loader_names_inputs_and_outputs_and_takes_keywords(tmp_path):
    model, (ids, gate) = example()
    vkx.export_model(model, (ids, gate), tmp_path / "m.pte", external_data=tmp_path / "m.safetensors")
    with torch.no_grad():
        want = model(ids, gate)
    with vkx.load(tmp_path / "m.pte", [tmp_path / "m.safetensors"]) as program:
        assert [s.name for s in program.input_specs] == ["token_ids", "gate"]
        assert [s.name for s in program.output_specs] == ["logits", "hidden"]
        assert program.input_specs[1] == ((2, 7, 32), "float32")
        logits, hidden = program(gate=gate, token_ids=ids)
        assert isinstance(logits, torch.Tensor)
        scale = want["logits"].abs().max()
        assert scale > 1 and (logits - want["logits"]).abs().max() <= 1e-4 * scale
        as_numpy = program(ids.numpy(), gate=gate.numpy())
        assert isinstance(as_numpy[0], np.ndarray) and np.array_equal(as_numpy[0], logits.numpy())
        with pytest.raises(vkx.VkxError, match=r"no input named 'mask' \(inputs: token_ids, gate\)"):
            program(ids, mask=gate)
        with pytest.raises(vkx.VkxError, match=r"input 1 \(gate\): shape \(7, 32\)"):
            program(ids, gate[0])


@pytest.mark.vulkan
def test_keys_resolve_in_a_checkpoint_vkx_did_not_write(tmp_path):
    """Weights by reference: the .pte's keys are the names of a user's own safetensors checkpoint."""
    model = nn.Sequential(nn.Linear(24, 48), nn.GELU(), nn.Linear(48, 8)).eval()
    x = torch.randn(3, 24)
    vkx.export_model(model, (x,), tmp_path / "m.pte", external_data=tmp_path / "vkx.safetensors")
    # the user's checkpoint: another order, another data layout, their metadata
    state = dict(reversed(list(model.state_dict().items())))
    save_file(state, tmp_path / "user.safetensors", metadata={"format": "pt"})
    check_file(tmp_path / "m.pte", tmp_path / "user.safetensors")
    with ProgramFile.open(tmp_path / "m.pte") as pf:
        assert {c.named_key for c in pf.vulkan.graph.constants} == set(state)
    with vkx.load(tmp_path / "m.pte", [tmp_path / "user.safetensors"]) as program:
        got = program(x)
    with torch.no_grad():
        want = model(x)
    assert (got - want).abs().max() <= 1e-4 * want.abs().max()
    del state["2.weight"]
    save_file(state, tmp_path / "short.safetensors")
    with pytest.raises(MissingKeyError, match=r"key '2.weight' not found"):
        validate(tmp_path / "m.pte", [tmp_path / "short.safetensors"])
    with pytest.raises(vkx.VkxError, match=r"'2.weight'"):
        vkx.load(tmp_path / "m.pte", [tmp_path / "short.safetensors"])


def test_bad_aliases_and_io_names_are_format_errors(tmp_path):
    tensors = {"a": torch.ones(4)}
    for meta, match in [({"vkx.aliases": "[1]"}, "not a JSON object of names"),
                        ({"vkx.aliases": '{"b": "c"}'}, "alias 'b' names 'c', which is no tensor"),
                        ({"vkx.aliases": '{"a": "a"}'}, "appears twice")]:
        save_file(tensors, tmp_path / "w.safetensors", metadata=meta)
        with pytest.raises(FormatError, match=match):
            ExternalData.open(tmp_path / "w.safetensors")
    assert io_names([], 1, 2, "d", "m.pte") == ([None], [None, None])
    for value, n_in, match in [(b"\xff", 1, "not a JSON object"),
                               (b'{"inputs": ["x"], "outputs": []}', 1, "outputs must be a list of 1"),
                               (b'{"inputs": ["x", 2], "outputs": [null]}', 2, "inputs must be a list of 2"),
                               (b'{"inputs": ["x", "x"], "outputs": [null]}', 2, "inputs repeat a name")]:
        with pytest.raises(InvalidValueError, match=match):
            io_names([(IO_NAMES, value)], n_in, 1, "d", "m.pte")


def test_constants_made_at_export_get_derived_names(tmp_path, monkeypatch):
    import threading
    crashed = []
    monkeypatch.setattr(threading, "excepthook", crashed.append)  # the hashing thread must not fail on torchao's
    import torchao.quantization as torchao
    from torchao.quantization.granularity import PerGroup

    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 32)
            self.mask = torch.tril(torch.rand(32, 32) + 0.5)  # a plain attribute: a constant of torch.export

        def forward(self, x):
            return self.fc(x) @ self.mask + torch.tensor([1.0, 2.0]).sum()  # folded at export

    x = torch.randn(2, 64)
    torch.manual_seed(0)
    vkx.export_model(Masked().eval(), (x,), tmp_path / "q.pte", quantize="int4")
    names = [t["names"] for t in describe(tmp_path / "q.pte")["tensors"]]
    assert sorted(names) == [["fc.bias"], ["fc.scales"], ["fc.weight_q"], ["folded.sum_1"], ["mask"]]
    model = Masked().eval()
    torchao.quantize_(model, torchao.IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)))
    vkx.export_model(model, (x,), tmp_path / "ao.pte")
    tensors = {t["names"][0]: (t["dtype"], t["dims"]) for t in describe(tmp_path / "ao.pte")["tensors"]}
    assert tensors["fc.weight.qdata_int4_packed"] == ("UINT8", [32, 32]) and tensors["fc.weight.scale"][1] == [32, 2]
    assert crashed == []


def test_a_bf16_safetensors_reads_back_as_the_bf16_checkpoint(tmp_path):
    model, inputs = example()
    vkx.export_model(model, inputs, tmp_path / "m.pte", external_data=tmp_path / "m.safetensors", dtype="bf16")
    stored = load_file(tmp_path / "m.safetensors")
    state = model.to(torch.bfloat16).state_dict()
    assert set(stored) == STORED and all(t.dtype == torch.bfloat16 for t in stored.values())
    assert all(torch.equal(t, state[name]) for name, t in stored.items())
    check_file(tmp_path / "m.pte", tmp_path / "m.safetensors")
