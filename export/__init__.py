"""vkx.export: a PyTorch module → torch.export → one VkGraph → a `.pte` (through vkx.format)."""
from vkx.export.api import ExportReport, Progress, export_model
from vkx.export.errors import ExportError, UnsupportedOpsError
from vkx.export.model_file import load_model_file, load_weights

__all__ = ["export_model", "ExportReport", "Progress", "ExportError", "UnsupportedOpsError",
           "load_model_file", "load_weights"]
