"""What a .pte records about itself beyond its graphs (docs/format.md, "Program metadata").

One compile spec of each VulkanBackend delegate: key `vkx.metadata`, value the UTF-8 JSON
object `{"external_files": [path, ...], "eos_token_ids": [int, ...], "external_data": path,
"external_digest": hex, "source": path}` (any key may be left out). `external_files` are the files
holding named data the .pte references but does not contain (a Hugging Face checkpoint's
safetensors), relative to the .pte's folder, `/`-separated; `external_data` the .ptd / .safetensors
the same write put the weights in (a later export to this .pte may replace that file, and no other:
`describe.owns_external`), `external_digest` the data digest that file records (the pair's identity,
vkx.format.external.DIGEST_KEY); `source` the model file or folder exported (a later export from it
may replace the .pte without being told: vkx/cmd_export.py).
Paths are relative to the folder the .pte itself is in (a symlink's target's, for a symlinked .pte).
ExecuTorch's Vulkan runtime reads its compile specs by key and ignores unknown keys.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Sequence

from .errors import InvalidValueError, MissingFileError
from .names import json_spec

METADATA = "vkx.metadata"
DIGEST_PATTERN = re.compile(r"[0-9a-f]{64}")
"""A data digest as recorded: a sha256, in lowercase hex."""


@dataclass(frozen=True)
class ProgramMetadata:
    external_files: tuple[str, ...] = ()
    """Relative to the .pte's folder, as recorded."""
    eos_token_ids: tuple[int, ...] = ()
    """The token ids that end a generated sequence (a causal LM's)."""
    external_data: str | None = None
    """The external data file written with the .pte, relative to its folder."""
    external_digest: str | None = None
    """The data digest that external data file records (hex): which file is the .pte's own."""
    source: str | None = None
    """The model file or folder the program was exported from, relative to the .pte's folder."""

    def encode(self) -> tuple[str, bytes]:
        """The compile spec (key, value)."""
        value: dict = {"external_files": list(self.external_files), "eos_token_ids": list(self.eos_token_ids)}
        for key in ("external_data", "external_digest", "source"):
            if getattr(self, key) is not None:
                value[key] = getattr(self, key)
        return METADATA, json.dumps(value, separators=(",", ":")).encode()

    def __bool__(self) -> bool:
        return bool(self.external_files or self.eos_token_ids or self.external_data or self.source)


def relative_to(program: str | os.PathLike, files: Sequence[str | os.PathLike]) -> tuple[str, ...]:
    """`files` as a program written at `program` records them (from the folder the program is
    written into: a symlink at `program` is replaced, not followed)."""
    folder = Path(program).absolute().parent.resolve()
    return tuple(PurePosixPath(Path(os.path.relpath(Path(f).resolve(), folder))).as_posix() for f in files)


def written_at(program: str | os.PathLike) -> Path:
    """Where a program was written: the path itself, or a symlink's target. Its recorded paths are
    relative to that file's folder, and its same-stem external data is beside that file."""
    return Path(os.path.realpath(program)) if os.path.islink(program) else Path(program)


def read_metadata(compile_specs: Sequence[tuple[str, bytes]], where: str, path: str) -> ProgramMetadata:
    """The metadata in a delegate's compile specs (empty where none is recorded)."""
    data = json_spec(compile_specs, METADATA, where, path)
    if data is None:
        return ProgramMetadata()
    where = f"{where}.compile_specs[{METADATA!r}]"
    files, eos = data.get("external_files", []), data.get("eos_token_ids", [])
    written, digest, source = data.get("external_data"), data.get("external_digest"), data.get("source")
    if not isinstance(files, list) or not all(_relative(f) for f in files):
        raise InvalidValueError(where, "external_files must be a list of relative paths", path)
    if not isinstance(eos, list) or not all(type(t) is int and t >= 0 for t in eos):
        raise InvalidValueError(where, "eos_token_ids must be a list of token ids (ints >= 0)", path)
    for key, value in (("external_data", written), ("source", source)):
        if value is not None and not _relative(value):
            raise InvalidValueError(where, f"{key} must be a relative path", path)
    if digest is not None and not (isinstance(digest, str) and DIGEST_PATTERN.fullmatch(digest)):
        raise InvalidValueError(where, "external_digest must be a sha256 in lowercase hex", path)
    return ProgramMetadata(tuple(files), tuple(eos), written, digest, source)


def _relative(name: object) -> bool:
    return isinstance(name, str) and bool(name) and not name.startswith("/")


def recorded_external(program: str | os.PathLike, metadata: ProgramMetadata) -> list[str]:
    """The recorded external files as paths from here; MissingFileError for one that is not a file."""
    folder = written_at(program).parent
    out = []
    for name in metadata.external_files:
        found = folder / name
        if not found.is_file():
            raise MissingFileError(f"compile_specs[{METADATA!r}].external_files",
                                   f"{found} (recorded as {name}) is not there: the external data was moved "
                                   "or deleted", os.fspath(program))
        out.append(os.fspath(found))
    return out

