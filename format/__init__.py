"""vkx.format: read, write, validate and describe ExecuTorch-compatible .pte/.ptd files.

Knows nothing of torch or Vulkan. See docs/format.md.
"""
from typing import Any

from .common import FileRange, ScalarType
from .errors import (BadMagicError, DuplicateKeyError, FormatError, InvalidValueError, MissingKeyError,
                     FileChangedError, NotRegularFileError, OutOfBoundsError, OverlapError, TruncatedError,
                     WriteError)
from .external import ExternalData, resolve_constants
from .pte import ProgramFile, VulkanDelegate
from .describe import describe
from .validate import ValidationReport, validate

__all__ = [
    "FormatError", "TruncatedError", "BadMagicError", "OutOfBoundsError", "OverlapError", "InvalidValueError",
    "MissingKeyError", "DuplicateKeyError", "NotRegularFileError", "FileChangedError", "WriteError",
    "ScalarType", "FileRange", "ProgramFile", "VulkanDelegate",
    "ExternalData", "resolve_constants", "ConstantPayload", "IOSpec", "write_program", "WriteReport",
    "MethodSpec", "write_methods",
    "validate", "ValidationReport", "describe",
]

_WRITER = frozenset({"ConstantPayload", "IOSpec", "WriteReport", "write_program", "MethodSpec", "write_methods"})


def __getattr__(name: str) -> Any:
    # The writer needs flatbuffers (and so numpy, ~0.1 s to import); readers such as `vkx inspect` do not.
    if name in _WRITER:
        from . import writer
        return getattr(writer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
