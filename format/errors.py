"""vkx's root error, and the typed errors for malformed or inconsistent vkx/ExecuTorch files.

`VkxError` lives here, in the lowest package, so that format, export and loader
all derive from it without importing upward (docs/architecture.md).
"""
from __future__ import annotations

import os


class VkxError(Exception):
    """A problem with the user's input (file, model, option, device).

    The CLI prints the message as one line and exits with code 2; no traceback.
    """

    details: tuple[str, ...] = ()
    """Lines that follow the message, one a problem (the ops a model uses that vkx cannot lower): part
    of `str()`, indented, and printed by the CLI a line each, under its one error line."""

    def __str__(self) -> str:
        return "\n".join([super().__str__(), *(f"  {line}" for line in self.details)])


class FormatError(VkxError):
    """A file is not what the format says it must be.

    `where` names the place (`execution_plan[0].delegates[0].processed`),
    `path` the file when known.
    """

    def __init__(self, where: str, detail: str, path: str | None = None):
        self.where = where
        self.detail = detail
        self.path = path
        super().__init__(where, detail, path)

    def __str__(self) -> str:
        place = f"{self.path}: " if self.path else ""
        return f"{place}{self.where}: {self.detail}"


class TruncatedError(FormatError):
    """The file ends before a structure it announces."""


class BadMagicError(FormatError):
    """A magic number or file identifier is wrong."""


class OutOfBoundsError(FormatError):
    """An offset, length or index points outside what it may address."""


class OverlapError(OutOfBoundsError):
    """Two segments share bytes."""


class InvalidValueError(FormatError):
    """A field holds a value the format does not allow."""


class MismatchError(InvalidValueError):
    """Named data of another dtype or shape than the tensor that uses it, or external data written for
    another program (docs/format.md, "Pair identity")."""


class MissingKeyError(FormatError):
    """A named-data key is not found in any of the files searched."""


class MissingFileError(MissingKeyError):
    """A file the program records as its external data is not there (moved or deleted)."""


class DuplicateKeyError(FormatError):
    """A named-data key appears twice."""


class NotRegularFileError(FormatError):
    """The path names a FIFO, directory, device or socket: vkx reads regular files only."""


class FileChangedError(FormatError):
    """The file was truncated or rewritten while vkx read it."""


class WriteError(VkxError, OSError):
    """Writing an output file failed (disk full, no permission, ...); names the target file,
    never the hidden temp file it was written to. Also an `OSError` (same errno)."""

    def __init__(self, path: str | os.PathLike, error: OSError):
        OSError.__init__(self, error.errno, error.strerror or str(error), os.fspath(path))

    def __str__(self) -> str:
        return f"{self.filename}: cannot write: {self.strerror}"
