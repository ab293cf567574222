"""What a .pte records about itself beyond its graphs (docs/format.md, "Program metadata").

One compile spec of each VulkanBackend delegate: key `vkx.metadata`, value the UTF-8 JSON
object `{"external_files": [path, ...], "eos_token_ids": [int, ...], "external_data": path}`
(any key may be left out). `external_files` are the files holding named data the .pte references
but does not contain (a Hugging Face checkpoint's safetensors), relative to the .pte's folder,
`/`-separated; `external_data` the .ptd / .safetensors the same write put the weights in (a later
export to this .pte may replace that file, and no other: `describe.owns_external`).
ExecuTorch's Vulkan runtime reads its compile specs by key and ignores unknown keys.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Sequence

from .errors import InvalidValueError, MissingFileError
from .names import json_spec

METADATA = "vkx.metadata"


@dataclass(frozen=True)
class ProgramMetadata:
    external_files: tuple[str, ...] = ()
    """Relative to the .pte's folder, as recorded."""
    eos_token_ids: tuple[int, ...] = ()
    """The token ids that end a generated sequence (a causal LM's)."""
    external_data: str | None = None
    """The external data file written with the .pte, relative to its folder."""

    def encode(self) -> tuple[str, bytes]:
        """The compile spec (key, value)."""
        value: dict = {"external_files": list(self.external_files), "eos_token_ids": list(self.eos_token_ids)}
        if self.external_data is not None:
            value["external_data"] = self.external_data
        return METADATA, json.dumps(value, separators=(",", ":")).encode()

    def __bool__(self) -> bool:
        return bool(self.external_files or self.eos_token_ids or self.external_data)


def relative_to(program: str | os.PathLike, files: Sequence[str | os.PathLike]) -> tuple[str, ...]:
    """`files` as a program written at `program` records them."""
    folder = Path(program).resolve().parent
    return tuple(PurePosixPath(Path(os.path.relpath(Path(f).resolve(), folder))).as_posix() for f in files)


def read_metadata(compile_specs: Sequence[tuple[str, bytes]], where: str, path: str) -> ProgramMetadata:
    """The metadata in a delegate's compile specs (empty where none is recorded)."""
    data = json_spec(compile_specs, METADATA, where, path)
    if data is None:
        return ProgramMetadata()
    where = f"{where}.compile_specs[{METADATA!r}]"
    files, eos = data.get("external_files", []), data.get("eos_token_ids", [])
    written = data.get("external_data")
    if not isinstance(files, list) or not all(_relative(f) for f in files):
        raise InvalidValueError(where, "external_files must be a list of relative paths", path)
    if not isinstance(eos, list) or not all(type(t) is int and t >= 0 for t in eos):
        raise InvalidValueError(where, "eos_token_ids must be a list of token ids (ints >= 0)", path)
    if written is not None and not _relative(written):
        raise InvalidValueError(where, "external_data must be a relative path", path)
    return ProgramMetadata(tuple(files), tuple(eos), written)


def _relative(name: object) -> bool:
    return isinstance(name, str) and bool(name) and not name.startswith("/")


def recorded_external(program: str | os.PathLike, metadata: ProgramMetadata) -> list[str]:
    """The recorded external files as paths from here; MissingFileError for one that is not a file."""
    folder = Path(program).parent
    out = []
    for name in metadata.external_files:
        found = folder / name
        if not found.is_file():
            raise MissingFileError(f"compile_specs[{METADATA!r}].external_files",
                                   f"{found} (recorded as {name}) is not there: the external data was moved "
                                   "or deleted", os.fspath(program))
        out.append(os.fspath(found))
    return out

