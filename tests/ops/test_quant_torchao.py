"""torchao weight-only quantized models export to vkx.linear_q / vkx.embedding_q and match torch.

The oracle is torch running the torchao-quantized model itself (fp32 activations,
torchao's dequantized weights). vkx computes with the very integers and scales
torchao holds, so the two differ only by fp32 rounding of K-term dot products:
max|err| <= 1e-5 * max|torch| + 1e-5 for an MLP, 1e-4 for a Llama-style block
(softmax, RMSNorm and a residual stream in between).

torchao is imported by the tests that quantize, not at collection (it takes seconds to import).
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import vkx
import vkx.export.torchao_import  # noqa: F401  (registers the torchao patterns)
from vkx.export.errors import ExportError
from vkx.format import ProgramFile

from .conftest import assert_norm_close

pytestmark = pytest.mark.vulkan


class MLP(nn.Module):
    def __init__(self, dim=256, hidden=512):
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.up(x)))


class Block(nn.Module):
    """A Llama-style decoder: embedding, RMSNorm, causal GQA-free attention, SwiGLU, output head."""

    def __init__(self, vocab=96, dim=128, heads=4, hidden=256):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.norm1, self.norm2, self.norm3 = nn.RMSNorm(dim), nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        b, t, d = x.shape
        h = self.norm1(x)
        q, k, v = (p(h).reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return self.head(self.norm3(x))


CONFIGS = ("int4-g32", "int4-g64", "int4-g128", "int4-g32-asymmetric", "int4-g128-asymmetric", "int8",
           "intx-int8-per-row")
"""The torchao weight-only configs vkx exports, by name (`config`)."""


def config(name: str):
    """torchao's config for a name of CONFIGS (int4 in groups of 32/64/128, int8 per row through
    Int8WeightOnlyConfig or IntxWeightOnlyConfig); "-asymmetric": with zero points (vkx's affine scales)."""
    from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, MappingType
    from torchao.quantization.granularity import PerAxis, PerGroup
    if name == "int8":
        return Int8WeightOnlyConfig()
    if name == "intx-int8-per-row":
        return IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0))
    group, _, mapping = name.removeprefix("int4-g").partition("-")
    return IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(int(group)),
                                mapping_type=MappingType.ASYMMETRIC if mapping else MappingType.SYMMETRIC)


def _quantized(model: nn.Module, name: str, embeddings: bool = False) -> nn.Module:
    from torchao.quantization import quantize_
    torch.manual_seed(0)
    quantize_(model, config(name))
    if embeddings:
        quantize_(model, config("int4-g32"), filter_fn=lambda module, fqn: isinstance(module, nn.Embedding))
    return model.eval()


def _export_run(model: nn.Module, inputs: tuple, path) -> tuple[torch.Tensor, torch.Tensor, dict[str, int]]:
    with torch.no_grad():
        want = model(*inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        vkx.export_model(model, inputs, path)
    with vkx.load(path) as program:
        got = program(*inputs)
    ops: dict[str, int] = {}
    for op in ProgramFile.open(path).vulkan.graph.chain:
        ops[op.name] = ops.get(op.name, 0) + 1
    return got, want, ops


@pytest.mark.parametrize("name", CONFIGS)
def test_torchao_mlp_matches_torch(tmp_path, name):
    torch.manual_seed(1)
    model = _quantized(MLP().eval(), name)
    x = torch.randn(3, 256)
    got, want, ops = _export_run(model, (x,), tmp_path / "mlp.pte")
    assert ops.get("vkx.linear_q.default") == 2 and "aten.linear.default" not in ops, ops
    assert_norm_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["int4-g32", "int4-g128", "int8"])
def test_torchao_llama_block_matches_torch(tmp_path, name):
    torch.manual_seed(2)
    model = _quantized(Block().eval(), name, embeddings=True)
    ids = torch.tensor([[5, 17, 0, 95, 33, 8]])
    got, want, ops = _export_run(model, (ids,), tmp_path / "block.pte")
    assert ops.get("vkx.linear_q.default") == 8 and ops.get("vkx.embedding_q.default") == 1, ops
    assert not {"aten.linear.default", "aten.embedding.default", "aten.mm.default"} & set(ops), ops
    assert float(want.abs().max()) > 0.1  # outputs of real magnitude
    assert_norm_close(got, want, rtol=1e-4, atol=1e-5)


def test_int4_weights_are_stored_packed(tmp_path):
    """The file holds torchao's int4 values two to a byte: a quarter of int8, an eighth of fp32."""
    torch.manual_seed(3)
    model = _quantized(MLP().eval(), "int4-g32")
    report = vkx.export_model(model, (torch.randn(1, 256),), tmp_path / "mlp.pte")
    weights = 2 * 256 * 512
    scales = 2 * (256 * 512 // 32) * 4  # fp32 scales, one per group of 32
    assert report.constant_bytes == weights // 2 + scales + 512 * 4  # + the fp32 bias


def test_asymmetric_torchao_weights_are_affine(tmp_path):
    """Zero points become (scale, -zero_point * scale) pairs: the file's scales are [N, groups, 2]."""
    torch.manual_seed(4)
    model = _quantized(MLP().eval(), "int4-g32-asymmetric")
    vkx.export_model(model, (torch.randn(1, 256),), tmp_path / "mlp.pte")
    graph = ProgramFile.open(tmp_path / "mlp.pte").vulkan.graph
    scales = [graph.values[op.args[2]] for op in graph.chain if op.name == "vkx.linear_q.default"]
    assert sorted(tuple(s.dims) for s in scales) == [(256, 16, 2), (512, 8, 2)]


def test_a_dequantized_weight_used_elsewhere_is_not_rewritten(tmp_path):
    """A chain that also feeds a plain op is lowered as written: the dequantization runs op by op
    (casts, subtractions, products) and the linear takes the dequantized fp32 weight."""
    class Reuse(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 64, bias=False)

        def forward(self, x):
            return self.fc(x) + self.fc.weight.dequantize().sum()

    torch.manual_seed(4)
    model = _quantized(Reuse().eval(), "int4-g32")
    got, want, ops = _export_run(model, (torch.randn(1, 64),), tmp_path / "r.pte")
    assert "vkx.linear_q.default" not in ops and "aten._to_copy.default" in ops, ops
    assert_norm_close(got, want, rtol=1e-4, atol=1e-5)
