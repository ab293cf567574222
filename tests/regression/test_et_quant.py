"""ExecuTorch 1.5.1's own quantized Vulkan files (tests/data) run on vkx and match torch.

The files were made by tests/data/make_et_quant_files.py from models quantized with torchao
or with ExecuTorch's PT2E VulkanQuantizer (tests/data/et_quant_models.py); torch running the
same quantized model is the oracle.
Both compute with the same dequantized weights in fp32, so they agree to fp32 rounding:
max|err| <= 1e-5 * max|torch| + 1e-5. The cases ExecuTorch writes but these files do not
hold (scales and bias padded to a multiple of 4, the high-nibble-first embedding packing,
block zero points) run on hand-built graphs against torch's dequantization.
The models (and torchao with them) are imported by the test that builds them, not at collection.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

import vkx
from vkx.format import ProgramFile
from tests.ops.conftest import Const, assert_norm_close, rand, run_graph

DATA = Path(__file__).resolve().parents[1] / "data"

pytestmark = pytest.mark.vulkan

OPS = {
    "et_q4_lm": {"et_vk.embedding_q4gsw.default": 1, "et_vk.linear_q4gsw.default": 2,
                 "aten.view_copy.default": 2, "aten.relu.default": 1},
    "et_q8_lm": {"et_vk.prepack.default": 9, "torchao.dequantize_affine.default": 3,
                 "aten.embedding.default": 1, "aten.squeeze_copy.dims": 1, "aten.linear.default": 2,
                 "aten.view_copy.default": 2, "aten.relu.default": 1},
    "et_pt2e_q4_mlp": {"et_vk.prepack.default": 1, "et_vk.linear_qcs4w.default": 2, "aten.add.Tensor": 1,
                       "aten.relu.default": 1},
    "et_pt2e_q8_mlp": {"et_vk.prepack.default": 1, "aten._weight_int8pack_mm.default": 2, "aten.add.Tensor": 1,
                       "aten.relu.default": 1},
}
"""What ExecuTorch 1.5.1 wrote into each file (so a regenerated file that differs is noticed)."""


@pytest.mark.parametrize("name", OPS)
def test_executorch_quantized_file_matches_torch(name):
    path = DATA / f"{name}.pte"
    assert Counter(op.name for op in ProgramFile.open(path).vulkan.graph.chain) == OPS[name]
    from tests.data.et_quant_models import build, example  # needs torchao
    model, x = build(name), example(name)
    with torch.no_grad():
        want = model(x)
    with vkx.load(path) as program:
        got = program(x)
    assert float(want.abs().max()) > 0.1
    assert_norm_close(got, want, rtol=1e-5, atol=1e-5)


def _int4(n: int, k: int, seed: int) -> torch.Tensor:
    return torch.randint(-8, 8, (n, k), generator=torch.Generator().manual_seed(seed), dtype=torch.int8)


def _pack_low_first(q: torch.Tensor) -> torch.Tensor:
    u = (q.to(torch.int16) + 8).to(torch.uint8)
    return u[:, 0::2] | (u[:, 1::2] << 4)


def test_linear_q4gsw_with_padded_scales_and_bias():
    """N = 30: ExecuTorch's pass pads the transposed scales [K / group, N] and the bias to 32 columns."""
    n, k, group = 30, 128, 32
    q = _int4(n, k, seed=1)
    scales = rand(k // group, n, seed=2, scale=0.1).abs()
    bias = rand(n, seed=3)
    padded = torch.nn.functional.pad
    x = rand(3, k, seed=4)
    got = run_graph("et_vk.linear_q4gsw.default",
                    [x, Const(_pack_low_first(q)), Const(padded(scales, (0, 2), value=7.0)), group,
                     Const(padded(bias, (0, 2), value=7.0))], (3, n))
    w = q.double() * scales.double().T.repeat_interleave(group, dim=1)
    assert_norm_close(got, x.double() @ w.T + bias.double(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("is_linear_weight", [True, False])
def test_embedding_q4gsw_nibble_orders(is_linear_weight):
    vocab, dim, group = 40, 64, 32
    q = _int4(vocab, dim, seed=5)
    u = (q.to(torch.int16) + 8).to(torch.uint8)
    even, odd = u[:, 0::2], u[:, 1::2]
    packed = even | (odd << 4) if is_linear_weight else (even << 4) | odd
    scales = rand(vocab, dim // group, seed=6, scale=0.1).abs()
    idx = torch.tensor([[0, 39, 7], [12, 12, 1]], dtype=torch.int32)
    got = run_graph("et_vk.embedding_q4gsw.default", [Const(packed), Const(scales), group, idx, is_linear_weight],
                    (2, 3, dim))
    table = q.float() * scales.repeat_interleave(group, dim=1)
    assert torch.equal(got, table[idx.long()])


@pytest.mark.parametrize("block", [(1, 32), (2, 16), (4, 64)])
def test_dequantize_affine_with_zero_points(block):
    import torchao  # noqa: F401  (registers torch.ops.torchao, the oracle; a test run alone has no other importer)
    rows, cols = 8, 64
    q = torch.randint(-128, 128, (rows, cols), generator=torch.Generator().manual_seed(7), dtype=torch.int8)
    grid = (rows // block[0], cols // block[1])
    scale = rand(*grid, seed=8, scale=0.05).abs()
    zero = torch.randint(-4, 5, grid, generator=torch.Generator().manual_seed(9), dtype=torch.int8)
    got = run_graph("torchao.dequantize_affine.default",
                    [Const(q), list(block), Const(scale), Const(zero), None, -128, 127, 6], (rows, cols))
    want = torch.ops.torchao.dequantize_affine(q, list(block), scale, zero, torch.int8, -128, 127)
    assert torch.equal(got, want)
