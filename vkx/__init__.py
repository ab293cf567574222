"""vkx: move a PyTorch model onto a Vulkan GPU with the least memory at load time.

Public API: `vkx.export_model(...)`, `vkx.load(...)`, `vkx.VkxError` (the root of every
error vkx raises for a user mistake) and `vkx.FormatError`.
Importing `vkx` imports neither torch nor the Vulkan binding; the exporter and
the loader are imported on first use.
"""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["export_model", "load", "VkxError", "FormatError"]


def __getattr__(name: str) -> Any:
    if name == "export_model":
        from vkx.export import export_model
        return export_model
    if name == "load":
        from vkx.loader import load
        return load
    if name in ("VkxError", "FormatError"):
        from vkx.format import errors
        return getattr(errors, name)
    raise AttributeError(f"module 'vkx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])
