"""upload="auto" picks the way weights are copied from the device's memory types (loader/upload/prepack.py)."""
from __future__ import annotations

import pytest
import vulkan as vk

from vkx.loader.gpu.device import MemoryType
from vkx.loader.errors import DeviceError
from vkx.loader.gpu.memory import Allocator
from vkx.loader.upload.prepack import upload_mode
from vkx.loader.upload.staging import MIN_CHUNK, RING_SHARE, ring_shape

MiB = 1 << 20
LOCAL = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
VISIBLE = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
CACHED = vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT
DISCRETE, INTEGRATED, CPU = (vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU,
                             vk.VK_PHYSICAL_DEVICE_TYPE_CPU)


class FakeDevice:
    """What the choice reads of a device: its type and its memory types."""
    name = "fake"

    def __init__(self, device_type: int, *flags: int):
        self.device_type = device_type
        self.memory_types = [MemoryType(i, f, 0) for i, f in enumerate(flags)]

    integrated = property(lambda self: self.device_type in (INTEGRATED, CPU))


def mode(device: FakeDevice, upload: str = "auto") -> str:
    return upload_mode(upload, "lazy", Allocator(device), device)


@pytest.mark.parametrize("device, expect", [
    (FakeDevice(DISCRETE, LOCAL, VISIBLE | CACHED, LOCAL | VISIBLE), "ring"),   # resizable BAR: uncached
    (FakeDevice(DISCRETE, LOCAL, VISIBLE | CACHED), "ring"),                    # no host-visible VRAM
    (FakeDevice(DISCRETE, LOCAL, LOCAL | VISIBLE | CACHED), "direct"),          # host-cached device memory
    (FakeDevice(INTEGRATED, LOCAL, LOCAL | VISIBLE), "direct"),                 # device memory is host memory
    (FakeDevice(CPU, LOCAL | VISIBLE | CACHED), "direct"),                      # lavapipe's one type
])
def test_auto_follows_the_memory_types(device, expect):
    assert mode(device) == expect
    assert mode(device, "staging") == "ring"


def test_direct_without_host_visible_device_memory_is_refused():
    with pytest.raises(DeviceError, match="no DEVICE_LOCAL\\|HOST_VISIBLE memory type"):
        mode(FakeDevice(DISCRETE, LOCAL, VISIBLE | CACHED), "direct")
    assert mode(FakeDevice(DISCRETE, LOCAL | VISIBLE), "direct") == "direct"


@pytest.mark.parametrize("weights", [0, 1 * MiB, 64 * MiB, 1 << 30, 6 << 30, 100 << 30])
def test_the_ring_scales_with_the_weights(weights):
    chunks, chunk = ring_shape(weights, 4, 16 * MiB)
    assert chunks == 4 and chunk % 16 == 0
    assert MIN_CHUNK <= chunk <= 16 * MiB
    assert chunks * chunk <= max(weights // RING_SHARE, 4 * MIN_CHUNK)
    if weights >= 4 * 16 * MiB * RING_SHARE:
        assert chunk == 16 * MiB  # the options' most


@pytest.mark.parametrize("upload, path", [("auto", None), ("staging", "staged"), ("direct", "direct")])
def test_a_file_loads_the_same_on_every_path(tmp_path, upload, path):
    import numpy as np

    from vkx.loader import load

    from .helpers import relu_add_graph, weights, write_pte

    n = 300_000  # 1.2 MB of weights: the ring (4 chunks of 64 KiB at this W) wraps around four times
    w = weights(n)
    pte, _ = write_pte(tmp_path, relu_add_graph(n), [w])
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    with load(pte, upload=upload) as p:
        np.testing.assert_array_equal(p(x), np.maximum(x, 0) + w)
        if path is not None:
            assert p.weight_paths[path] == w.nbytes
        if upload == "staging":
            assert p.ledger.peak["staging"] == 4 * MIN_CHUNK
    assert p.ledger.is_zero
