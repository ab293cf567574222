"""Typed errors of the loader. Every failure while loading or running a
program is a `LoadError` (a `VkxError`: the CLI prints one line, exit 2)."""
from __future__ import annotations

from vkx.format.errors import VkxError
from vkx.format.errors import FileChangedError, FormatError, MissingKeyError, NotRegularFileError


class LoadError(VkxError):
    """Loading or running a program failed; every Vulkan object it made is released."""


class DeviceError(LoadError):
    """No usable Vulkan device, or a Vulkan call failed."""


class ImportRefusedError(DeviceError):
    """A weight's file bytes cannot be used in place as device memory (upload="import"):
    no VK_EXT_external_memory_host, a misaligned range, or the driver refused the pointer."""


class OutOfDeviceMemoryError(LoadError):
    """A device allocation failed (the driver said so, or the configured budget is spent)."""


class OutOfHostMemoryError(LoadError):
    """A host allocation of the load failed (the process's memory limit, or the machine's)."""


class ValidationError(LoadError):
    """The Khronos validation layer reported warnings or errors (VKX_VALIDATION=1)."""

    def __init__(self, messages: list[str]):
        self.messages = list(messages)
        first = messages[0] if messages else ""
        more = f" (+{len(messages) - 1} more)" if len(messages) > 1 else ""
        super().__init__(f"Vulkan validation: {first}{more}")


class UnsupportedOpError(LoadError):
    """The graph uses an op (or an argument combination) vkx cannot run."""


class LimitError(UnsupportedOpError):
    """A kernel or a binding is over a device limit in force (the device's or its profile's),
    or needs a feature that is not in force; the message names the kernel, the limit and the value."""


class TorchMissingError(LoadError):
    """The program's execution plan needs torch (CPU ops, tensors between delegates) and torch is not installed."""


class ShaderError(LoadError):
    """A compute shader is missing or failed to compile."""


class VariantNotBuiltError(ShaderError):
    """A builder asked for a shader variant that the prebuilt SPIR-V does not hold (vkx.loader.gpu.spirv)."""


class BadProgramError(LoadError):
    """The program file or graph is malformed for the loader."""


class FileError(LoadError, OSError):
    """A file could not be opened or read (also an `OSError`, as file problems are in Python)."""


class ProgramFormatError(BadProgramError, FormatError):
    """A file is malformed (a `FormatError` raised while loading; catchable as either)."""


class MissingDataError(ProgramFormatError, MissingKeyError):
    """A constant's named key is not in any of the files given."""


class BadFileError(FileError, FormatError):
    """A file is not a regular file, or was truncated or rewritten while it was loaded."""


def as_load_error(error: FormatError) -> FormatError:
    """The loader's typed twin of a format error (same where/detail/path): a LoadError too."""
    if isinstance(error, (NotRegularFileError, FileChangedError)):
        return BadFileError(error.where, error.detail, error.path)
    cls = MissingDataError if isinstance(error, MissingKeyError) else ProgramFormatError
    return cls(error.where, error.detail, error.path)


class InputError(LoadError):
    """Inputs given to a Program call do not match the graph's inputs."""
