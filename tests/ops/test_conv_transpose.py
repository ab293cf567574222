"""Transposed convolution (aten.convolution with transposed=True) through vkx's exporter
(shaders/conv_transpose2d.comp) against torch: strides, padding, dilation, output_padding, groups,
bias or none, 1-D and 2-D, fp32 / fp16 / bf16."""
from __future__ import annotations

import pytest
from torch import nn

from tests.ops.conftest import assert_norm_close, rand, run_vkx

pytestmark = pytest.mark.vulkan

MODULES = {
    "2x2_stride2": lambda: nn.ConvTranspose2d(4, 2, 2, stride=2),
    "3x3_pad_outpad": lambda: nn.ConvTranspose2d(3, 5, 3, stride=2, padding=1, output_padding=1),
    "dilated_groups": lambda: nn.ConvTranspose2d(4, 6, (3, 2), stride=(1, 3), padding=(2, 0), dilation=(2, 1), groups=2),
    "no_bias": lambda: nn.ConvTranspose2d(2, 3, 3, bias=False),
    "1d": lambda: nn.ConvTranspose1d(3, 4, 4, stride=3, padding=1),
}


@pytest.mark.parametrize("dtype, rtol", [("fp32", 1e-5), ("fp16", 4e-3), ("bf16", 3e-2)])
@pytest.mark.parametrize("name", MODULES)
def test_conv_transpose_matches_torch(name, dtype, rtol):
    module = MODULES[name]().eval()
    x = rand(2, module.in_channels, *((7,) if name == "1d" else (5, 6)), scale=2.0)
    want = module(x)
    got = run_vkx(module, [x], dtype=dtype)
    assert_norm_close(got.float(), want, rtol=rtol, atol=rtol)
