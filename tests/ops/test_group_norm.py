"""aten.native_group_norm through vkx's exporter (shaders/group_norm.comp) against torch: with and without
the affine, rows shorter than a workgroup and rows of every workgroup size, fp32 / fp16 / bf16."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.ops.conftest import assert_norm_close, rand, run_vkx

pytestmark = pytest.mark.vulkan


@pytest.mark.parametrize("dtype, rtol", [("fp32", 1e-5), ("fp16", 4e-3), ("bf16", 3e-2)])
@pytest.mark.parametrize("shape, groups, affine", [((2, 6, 3), 3, True), ((1, 8, 4, 4), 2, False),
                                                   ((2, 4, 32, 40), 2, True), ((1, 12, 5, 7), 4, True)])
def test_group_norm_matches_torch(dtype, rtol, shape, groups, affine):
    torch.manual_seed(0)
    module = nn.GroupNorm(groups, shape[1], eps=1e-4, affine=affine)
    if affine:
        with torch.no_grad():
            module.weight.uniform_(0.5, 2.0)
            module.bias.uniform_(-1.0, 1.0)
    x = rand(*shape, scale=3.0) + 1.5
    want = module(x)
    got = run_vkx(module, [x], dtype=dtype)
    assert_norm_close(got.float(), want, rtol=rtol, atol=rtol)
