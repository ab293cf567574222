"""Suite-wide: any Vulkan validation message emitted during a test fails that test."""
from __future__ import annotations

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


@pytest.fixture(autouse=True)
def _no_validation_messages():
    _take_validation_messages()
    yield
    found = _take_validation_messages()
    assert not found, f"validation messages: {found}"
