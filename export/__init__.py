"""vkx.export: a PyTorch module → torch.export → one VkGraph → a `.pte` (through vkx.format).

The one part of vkx that needs torch (`pip install 'vkx[export]'`).
"""
from vkx.export.errors import ExportError

try:
    import torch  # noqa: F401
except ImportError:
    raise ExportError("exporting needs torch, which is not installed: pip install 'vkx[export]'") from None

from vkx.export.api import ExportReport, Progress, export_model
from vkx.export.errors import UnsupportedOpsError
from vkx.export.model_file import load_model_file, load_weights

__all__ = ["export_model", "ExportReport", "Progress", "ExportError", "UnsupportedOpsError",
           "load_model_file", "load_weights"]
