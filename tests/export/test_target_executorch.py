"""`target="executorch"`: every op, dtype, storage type and memory layout in the written file is one
that the installed ExecuTorch's Vulkan op registry says its C++ runtime implements (checked through
the registry itself, on an FX node made from each call); vkx's loader runs the file and matches torch;
what the runtime cannot run is refused with one line naming the ops."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import vkx
from vkx.export import ExportError, load_model_file
from vkx.format import ProgramFile, opset
from vkx.format.validate import validate
from vkx.format.vkgraph import StorageType, Tensor, VkGraph

from ..ops.conftest import assert_close_in
from .et_registry import CLONE, check_against_registry
from .export_helpers import EXAMPLES, Fn, et_vkgraph, randn


def export_checked(module, inputs, path, **options) -> VkGraph:
    """Export for ExecuTorch; the file validates, keeps vkx's contract and the runtime's registry."""
    vkx.export_model(module, inputs, path, target="executorch", **options)
    validate(path)
    with ProgramFile.open(path) as program:
        graph = program.vulkan.graph
    opset.check_graph(graph)
    check_against_registry(graph)
    return graph


def run(path, inputs):
    with vkx.load(path) as program:
        return program(*inputs)


STATEFUL = {"kv_decoder"}
"""Examples with state (a KV cache): the runtime has no in-place state ops."""


def test_a_model_with_state_is_refused(tmp_path):
    module, inputs = load_model_file(EXAMPLES / "kv_decoder.py")
    with pytest.raises(ExportError, match="vkx.state.default"):
        vkx.export_model(module, inputs, tmp_path / "m.pte", target="executorch")
    assert not (tmp_path / "m.pte").exists()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", sorted(path.stem for path in EXAMPLES.glob("*.py") if path.stem not in STATEFUL))
def test_examples(name, dtype, tmp_path):
    module, inputs = load_model_file(EXAMPLES / f"{name}.py")
    path = tmp_path / "m.pte"
    graph = export_checked(module, inputs, path, dtype="fp16" if dtype == torch.float16 else "fp32")
    names = {call.name for call in graph.chain}
    assert not names & {"aten.scaled_dot_product_attention.default", "aten.silu.default", "aten.rms_norm.default"}
    if name == "cnn":  # the convolutions' chain in channels-packed textures, the classifier in buffers
        reprs = {(call.name, graph.values[call.args[0]].storage_type) for call in graph.chain}
        assert ("aten.convolution.default", StorageType.TEXTURE_3D) in reprs
        assert ("aten.linear.default", StorageType.BUFFER) in reprs
        assert CLONE in names
    inputs = tuple(x.to(dtype) for x in inputs)
    with torch.no_grad():
        want = module.to(dtype)(*inputs)
    assert_close_in(run(path, inputs), want, dtype, terms=256)


def _attention(m, q, k, v):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m.mask)


MODELS = {
    "matmul_batched": (Fn(lambda m, a, b: torch.matmul(a, b)), (randn(2, 3, 5, 8), randn(2, 3, 8, 4))),
    "matmul_by_matrix": (Fn(lambda m, a: a @ m.w, w=nn.Parameter(randn(8, 6))), (randn(2, 5, 8),)),
    "matmul_2d": (Fn(lambda m, a, b: a @ b), (randn(5, 8), randn(8, 3))),
    "sdpa_full_mask": (Fn(_attention, mask=nn.Buffer(randn(1, 2, 6, 7))), (randn(1, 2, 6, 8), randn(1, 2, 7, 8),
                                                                          randn(1, 2, 7, 4))),
    "sdpa_row_mask": (Fn(_attention, mask=nn.Buffer(randn(6, 7))), (randn(1, 2, 6, 8), randn(1, 2, 7, 8),
                                                                    randn(1, 2, 7, 4))),
    "sdpa_gqa_scaled": (Fn(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3,
                                                                            enable_gqa=True)),
                        (randn(2, 6, 5, 8), randn(2, 2, 5, 8), randn(2, 2, 5, 8))),
    "silu_rms_norm": (nn.Sequential(nn.RMSNorm(16, elementwise_affine=False), nn.SiLU()), (randn(3, 16),)),
    "scalars": (Fn(lambda m, x: (1 - x) * 2.5 + x / 4), (randn(4, 8),)),
    "conv_from_buffer": (Fn(lambda m, x: m.conv(x.view(1, 3, 6, 6)).sigmoid(), conv=nn.Conv2d(3, 2, 3, bias=True)),
                         (randn(108),)),
    "mean_over_channels": (Fn(lambda m, x: x.mean(dim=1, keepdim=True) + x), (randn(1, 5, 6, 7),)),
    "embedding_layer_norm": (Fn(lambda m, i: m.norm(m.table(i)), table=nn.Embedding(10, 8), norm=nn.LayerNorm(8)),
                             (torch.tensor([[1, 4, 9]]),)),
    "norms_without_affine": (nn.Sequential(nn.BatchNorm2d(3, affine=False), nn.Flatten(2),
                                           nn.LayerNorm(16, elementwise_affine=False)), (randn(1, 3, 4, 4),)),
    "constant_in_two_layouts": (Fn(lambda m, x: (m.conv(x) * 3.0).flatten(1) * 3.0, conv=nn.Conv2d(2, 2, 1)),
                                (randn(1, 2, 3, 3),)),
    "cat_and_input_out": (Fn(lambda m, x, y: (torch.cat([x, y], dim=0).relu(), x)), (randn(2, 3), randn(1, 3))),
}


@pytest.mark.parametrize("name", MODELS)
def test_models(name, tmp_path):
    module, inputs = MODELS[name]
    path = tmp_path / "m.pte"
    export_checked(module, inputs, path)
    with torch.no_grad():
        want = module.eval()(*inputs)
    assert_close_in(run(path, inputs), want, torch.float32, terms=16)


REFUSED = {
    "quantized": (nn.Sequential(nn.Embedding(10, 64), nn.Linear(64, 8)), (torch.tensor([1, 2]),),
                  {"quantize": "int8"}, "2 op(s): vkx.embedding_q.default (not in the runtime); vkx.linear_q.default"),
    "conv_batch": (nn.Conv2d(3, 4, 3), (randn(2, 3, 8, 8),), {}, "aten.convolution.default (a batch of 2"),
    "bf16": (nn.Linear(4, 4), (randn(2, 4),), {"dtype": "bf16"}, "aten.linear.default (on bfloat16)"),
    "bool_mask": (Fn(lambda m, q: F.scaled_dot_product_attention(q, q, q, attn_mask=m.mask),
                     mask=nn.Buffer(torch.ones(4, 4, dtype=torch.bool).tril())), (randn(1, 1, 4, 8),), {},
                  "a bool attn_mask"),
    "layer_norm_2d": (nn.LayerNorm((3, 4)), (randn(2, 3, 4),), {}, "aten.native_layer_norm.default (over 2 dims"),
    "batch_norm_1d": (nn.BatchNorm1d(3), (randn(2, 3, 5),), {}, "(of a 3-D input; the runtime takes 4-D)"),
    "mean_no_keepdim": (Fn(lambda m, x: x.mean(dim=(1, 2))), (randn(1, 5, 6, 7),), {}, "aten.mean.dim (over dims"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_refused_with_one_line(name, tmp_path):
    module, inputs, options, names = REFUSED[name]
    path = tmp_path / "m.pte"
    with pytest.raises(ExportError) as error:
        vkx.export_model(module, inputs, path, target="executorch", **options)
    message = str(error.value)
    assert message.startswith("ExecuTorch's Vulkan runtime cannot run") and "\n" not in message
    assert names in message
    assert not path.exists()


def test_unknown_target(tmp_path):
    with pytest.raises(ExportError, match="target must be vkx or executorch"):
        vkx.export_model(nn.ReLU(), (randn(2),), tmp_path / "m.pte", target="phone")


@pytest.mark.parametrize("name, why", [("cnn", r"convolution.default arg 0: TensorRepr\(BUFFER"),
                                       ("transformer", "is not in ExecuTorch's Vulkan")])
def test_the_check_refuses_files_for_vkx(name, why, tmp_path):
    """The registry check bites: vkx's own target writes conv inputs as buffers and keeps SDPA."""
    module, inputs = load_model_file(EXAMPLES / f"{name}.py")
    vkx.export_model(module, inputs, tmp_path / "m.pte")
    with ProgramFile.open(tmp_path / "m.pte") as program:
        graph = program.vulkan.graph
    with pytest.raises(AssertionError, match=why):
        check_against_registry(graph)


@pytest.mark.parametrize("name", ["cnn", "llama_block"])
def test_executorch_reads_the_tags(name, tmp_path):
    """ExecuTorch's own VkGraph reader (through flatc) sees the ops, storage types and layouts vkx wrote."""
    path = tmp_path / "m.pte"
    ours = export_checked(*load_model_file(EXAMPLES / f"{name}.py"), path)
    theirs = et_vkgraph(path)
    assert [(c.name, list(c.args)) for c in theirs.chain] == [(c.name, list(c.args)) for c in ours.chain]
    tags = [(int(v.value.storage_type), int(v.value.memory_layout)) for v in theirs.values if hasattr(v.value, "dims")]
    assert tags == [(int(v.storage_type), int(v.memory_layout)) for v in ours.values if isinstance(v, Tensor)]
    assert ((1, 2) in tags) == (name == "cnn")  # TEXTURE_3D + CHANNELS_PACKED: the convolutions' chain


def test_a_product_of_two_dtypes_is_refused(tmp_path):
    """vkx reads a 16-bit weight widened for an fp32 product as stored (an LM's fp32 logits); ExecuTorch's
    runtime computes a product in one dtype, so that file is refused for it, not written wrong."""
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(32, 16).to(torch.float16))

        def forward(self, x):
            return F.linear(x, self.weight.float())

    x, model = torch.randn(1, 16), Head()
    with pytest.raises(ExportError, match="float16 and float32 tensors: one dtype"):
        vkx.export_model(model, (x,), tmp_path / "h.pte", target="executorch")
    assert not (tmp_path / "h.pte").exists()
    vkx.export_model(model, (x,), tmp_path / "v.pte")  # vkx's own target: the weight read as stored
    with vkx.load(tmp_path / "v.pte") as program:
        got = torch.as_tensor(program(x))
    torch.testing.assert_close(got, F.linear(x, model.weight.float()), rtol=1e-5, atol=1e-5)
