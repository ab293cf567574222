"""aten.grid_sampler_2d (F.grid_sample) through vkx's exporter (shaders/grid_sampler.comp) against torch:
bilinear and nearest, zeros and border padding, with and without align_corners, grid points inside and
outside the input; fp32 / fp16 / bf16. Reflection padding and bicubic are refused in one line."""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import vkx
from tests.ops.conftest import Fn, assert_norm_close, rand, run_vkx

pytestmark = pytest.mark.vulkan


@pytest.mark.parametrize("dtype, rtol", [("fp32", 1e-5), ("fp16", 4e-3), ("bf16", 3e-2)])
@pytest.mark.parametrize("mode, padding, corners", list(itertools.product(("bilinear", "nearest"), ("zeros", "border"),
                                                                          (False, True))))
def test_grid_sample_matches_torch(mode, padding, corners, dtype, rtol):
    x = rand(2, 3, 5, 7, scale=2.0)
    grid = torch.rand(2, 4, 6, 2, generator=torch.Generator().manual_seed(1)) * 2.4 - 1.2
    module = Fn(lambda m, a, g: F.grid_sample(a, g, mode=mode, padding_mode=padding, align_corners=corners))
    stored = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    want = module(x.to(stored).float(), grid.to(stored).float())  # the inputs as the program holds them:
    got = run_vkx(module, [x, grid], dtype=dtype)                    # a nearest pick moves with the grid's rounding
    assert_norm_close(got.float(), want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("mode, padding", [("bilinear", "reflection"), ("bicubic", "zeros")])
def test_other_modes_are_refused(mode, padding, tmp_path):
    module = Fn(lambda m, a, g: F.grid_sample(a, g, mode=mode, padding_mode=padding, align_corners=False))
    with pytest.raises(vkx.VkxError, match="vkx runs bilinear and nearest"):
        vkx.export_model(module, (rand(1, 2, 4, 4), torch.zeros(1, 3, 3, 2)), str(tmp_path / "m.pte"))
    assert not (tmp_path / "m.pte").exists()
