"""vkx.format: read, write, validate and describe ExecuTorch-compatible .pte/.ptd files.

Knows nothing of torch or Vulkan. See docs/format.md.
"""
from .common import FileRange, ScalarType
from .errors import (BadMagicError, DuplicateKeyError, FormatError, InvalidValueError, MissingKeyError,
                     OutOfBoundsError, OverlapError, TruncatedError)
from .external import ExternalData, resolve_constants
from .pte import ProgramFile, VulkanDelegate
from .describe import describe
from .validate import ValidationReport, validate
from .writer import ConstantPayload, IOSpec, WriteReport, write_program

__all__ = [
    "FormatError", "TruncatedError", "BadMagicError", "OutOfBoundsError", "OverlapError", "InvalidValueError",
    "MissingKeyError", "DuplicateKeyError", "ScalarType", "FileRange", "ProgramFile", "VulkanDelegate",
    "ExternalData", "resolve_constants", "ConstantPayload", "IOSpec", "write_program", "WriteReport",
    "validate", "ValidationReport", "describe",
]
