"""A constant larger than maxStorageBufferRange, uploaded directly and through the ring, bound in
SubRanges, under validation. The child runs under the adreno-7xx profile, whose 128 MiB range (a
phone's, and lavapipe's own) every device can hold one constant over: a desktop GPU's own 4 GiB
would take a constant of over 4 GiB."""
from __future__ import annotations

import json

import pytest

from .conftest import run_py

pytestmark = pytest.mark.vulkan  # the device is opened in child processes too

LARGE = r"""
import json, sys
import numpy as np
import tests.loader.conftest  # registers test.relu_split and the test shaders
from vkx.format import vkgraph as g
from vkx.loader import load
from vkx.loader.gpu.device import default_device
from tests.loader.helpers import write_pte
from pathlib import Path

dev = default_device()
n = dev.limits.max_storage_buffer_range // 4 + 2 * 1024 * 1024 + 3   # just over one binding
assert dev.limits.max_storage_buffer_range == 1 << 27 and n * 4 < dev.max_memory_allocation_size
graph = g.VkGraph(values=[g.Tensor(g.DataType.FLOAT32, (n,), constant_id=0), g.Tensor(g.DataType.FLOAT32, (n,))],
                  output_ids=[1], chain=[g.OperatorCall(0, "test.relu_split.default", (0, 1))])
w = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
path, _ = write_pte(Path(sys.argv[1]), graph, [w])
expect = np.maximum(w, 0)
del w
res = {}
for upload in ("auto", "staging"):
    with load(path, upload=upload) as p:
        out = p()
        res[upload] = [bool(np.array_equal(out, expect)), p.dispatch_count, p.upload,
                       p.memory["ledger"]["peak"]["staging"]]
    assert p.ledger.is_zero
dev.check()
print(json.dumps(res))
"""


def test_constant_over_max_binding(tmp_path, monkeypatch):
    monkeypatch.setenv("VKX_VALIDATION", "1")
    monkeypatch.setenv("VKX_DEVICE_PROFILE", "adreno-7xx")
    res = json.loads(run_py(LARGE, str(tmp_path), timeout=600))
    for upload, (equal, dispatches, mode, staging_peak) in res.items():
        assert equal, upload
        assert dispatches == 2
        assert staging_peak <= 64 << 20
