import pytest
import vulkan as vk

from vkx.loader.gpu.device import Device, default_device
from vkx.loader.errors import DeviceError, ValidationError


def test_default_device_limits():
    d = default_device()
    assert d.validation
    assert d.limits.max_storage_buffer_range >= 1 << 27
    assert d.limits.min_storage_buffer_offset_alignment in (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert d.memory_types and d.heap_sizes
    info = d.describe()
    assert info["name"] == d.name


def test_bad_call_is_a_validation_error():
    d = default_device()
    handle = vk.vkCreateBuffer(d.device, vk.VkBufferCreateInfo(
        size=0, usage=vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
    vk.vkDestroyBuffer(d.device, handle, None)
    with pytest.raises(ValidationError) as info:
        d.check()
    assert any("size" in m for m in info.value.messages)
    d.check()  # drained


def test_selector_by_name_and_index():
    name = default_device().name
    d = Device(selector=name.split()[0])
    try:
        assert d.name == name
    finally:
        d.close()
    with pytest.raises(DeviceError, match="matches none"):
        Device(selector="no-such-gpu-xyz")
    with pytest.raises(DeviceError, match="device"):
        Device(selector="99")
