"""Suite-wide: any Vulkan validation message emitted during a test fails that test.

`--device-profile NAME` runs the tests under a device profile (VKX_DEVICE_PROFILE, docs/profiles.md):
`make test` runs the kernel-choosing device tests once more so, under android-baseline-2022.
"""
from __future__ import annotations

import os
import sys

import pytest


def _take_validation_messages() -> list[str]:
    device = sys.modules.get("vkx.loader.device")  # only tests that loaded the loader can have any
    if device is None:
        return []
    with device._messages_lock:
        found = list(device._messages)
        device._messages.clear()
    return found


def pytest_addoption(parser):
    parser.addoption("--device-profile", default=None,
                     help="run under this device profile (VKX_DEVICE_PROFILE), e.g. android-baseline-2022")


def pytest_configure(config):
    name = config.getoption("--device-profile")
    if name:
        os.environ["VKX_DEVICE_PROFILE"] = name  # before any test opens the device


_STORAGE_FEATURES = {"torch.float16": "storageBuffer16BitAccess", "torch.bfloat16": "storageBuffer16BitAccess",
                     "torch.int8": "storageBuffer8BitAccess", "torch.uint8": "storageBuffer8BitAccess",
                     "torch.bool": "storageBuffer8BitAccess"}
"""The storage feature a tensor of each dtype needs on the device (shaders/dtype.glslh)."""


def pytest_collection_modifyitems(config, items):
    """Under a profile, deselect the dtype-parametrized cases whose dtype needs a storage feature
    the profile lacks: vkx refuses them (tests/loader/test_limits.py checks the refusal)."""
    name = config.getoption("--device-profile")
    if not name:
        return
    from vkx.loader.limits import profile
    features = profile(name).features
    keep, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        needs = {_STORAGE_FEATURES.get(str(v)) for v in params.values()} - {None}
        (dropped if needs - features else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(autouse=True)
def _no_validation_messages():
    _take_validation_messages()
    yield
    found = _take_validation_messages()
    assert not found, f"validation messages: {found}"
