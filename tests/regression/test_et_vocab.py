"""ExecuTorch 1.5.1's Vulkan files of its op vocabulary (tests/data/et_vocab_*.pte, made by
tests/data/make_et_vocab_files.py) contain the ops beyond vkx's own exporter, run on vkx and match torch.

The same models, rebuilt after torch.manual_seed(0), are the oracle (the rope block's fused
et_vk.sdpa as the same math in matmuls).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import vkx
from .oracle import oracle
from vkx.format.pte import ProgramFile

from tests.data import et_vocab_models as m

DATA = Path(__file__).resolve().parents[1] / "data"

pytestmark = pytest.mark.vulkan

CASES = {  # file -> (model, input shape, ops the file must contain)
    "et_vocab_res.pte": (m.ResBlock, (1, 3, 16, 16), {"aten.max_pool2d_with_indices.default"}),
    "et_vocab_shape.pte": (m.ShapeBlock, (2, 3, 12), {
        "aten.unsqueeze_copy.default", "aten.squeeze_copy.dims", "aten.select_copy.int",
        "aten.split_with_sizes_copy.default", "aten.full_like.default", "dim_order_ops._to_dim_order_copy.default"}),
    "et_vocab_rope.pte": (m.RopeBlock, (1, 8, 32), {
        "et_vk.rms_norm.default", "et_vk.apply_rotary_emb_hf.default", "et_vk.sdpa.default"}),
    "et_vocab_mobile.pte": (m.MobileBlock, (1, 8, 8, 8), {"et_vk.conv_with_clamp.default", "aten.hardswish.default"}),
    "et_vocab_vit.pte": (m.ViTBlock, (1, 3, 16, 16), {"aten.select_copy.int", "aten.native_layer_norm.default"}),
}


def _ops(path: Path) -> set[str]:
    pf = ProgramFile.open(path)
    try:
        return {op.name for d in pf.vulkan_delegates for op in d.graph.chain}
    finally:
        pf.close()


@pytest.mark.parametrize("name", CASES)
def test_file_has_the_ops(name):
    _, _, ops = CASES[name]
    assert ops <= _ops(DATA / name), f"missing {sorted(ops - _ops(DATA / name))}"


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("schedule", ["lazy", "eager"])
def test_file_matches_torch(name, schedule):
    model_class, shape, _ = CASES[name]
    x, want = oracle(model_class, shape)
    with vkx.load(DATA / name, schedule=schedule) as program:
        got = program(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    assert float(want.abs().max()) > 0.1  # outputs of real magnitude
