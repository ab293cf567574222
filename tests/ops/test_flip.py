"""aten.flip through vkx's exporter (shaders/flip.comp), in every dtype a device tensor has, against
torch: the same elements, moved (exact)."""
from __future__ import annotations

import pytest
import torch

from tests.ops.conftest import Fn, rand_of, run_vkx

pytestmark = pytest.mark.vulkan

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8, torch.uint8, torch.bool]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, dims", [((2, 3, 5), (1,)), ((2, 3, 5), (0, 2)), ((4, 1, 3, 2), (-1, 1, 0)),
                                         ((7,), (0,)), ((2, 3, 4), (1, 2))])
def test_flip_matches_torch(dtype, shape, dims):
    x = rand_of(shape, seed=len(shape) + len(dims), dtype=dtype)
    got = run_vkx(Fn(lambda m, t: t.flip(dims)), [x])
    want = x.flip(dims)
    assert got.dtype == want.dtype and torch.equal(got, want)
