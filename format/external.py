"""External named data (.ptd FlatTensor, .safetensors), which external files a .pte uses, and constant resolution."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from . import dtypes, vkgraph as vk
from .common import FileRange
from .errors import (BadMagicError, DuplicateKeyError, FormatError, InvalidValueError, MismatchError,
                     MissingKeyError, OutOfBoundsError, TruncatedError)
from .flatbuf import Reader
from .headers import FLAT_TENSOR, FLAT_TENSOR_IDENTIFIER, SAFETENSORS_LENGTH, FlatTensorHeader, read_flat_tensor
from .infile import InputFile
from .metadata import DIGEST_PATTERN, METADATA, recorded_external, written_at
from .pte import VULKAN_BACKEND, ProgramFile, VulkanDelegate

SAFETENSORS_MAX_HEADER = 100 * 1024 * 1024  # the safetensors library's own limit
ALIASES_METADATA = "vkx.aliases"
"""The safetensors `__metadata__` entry with a stored tensor's other names: JSON {alias: stored key}."""
EXTERNAL_SUFFIXES = (".ptd", ".safetensors")
"""The suffixes of external data files (FlatTensor, safetensors)."""
DIGEST_KEY = "vkx.data_digest"
"""Where an external data file vkx wrote records its data digest, the identity it shares with the .pte
written with it (docs/format.md, "Pair identity"): a .ptd's named-data key of a 32-byte segment, a
.safetensors `__metadata__` entry (hex)."""
DIGEST_BYTES = 32
"""A data digest: a sha256."""


class ExternalData(InputFile):
    """Named data kept outside the .pte: a .ptd (FlatTensor) or a .safetensors file."""

    kind: str
    """"ptd" or "safetensors"."""
    header: FlatTensorHeader | None
    named_data: dict[str, FileRange]
    dtypes: dict[str, tuple[str, tuple[int, ...]]]
    """safetensors only: key -> (dtype string, shape) as the file declares."""
    digest: str | None
    """The data digest the file records (hex; `DIGEST_KEY`), None where it records none."""

    def _load(self) -> None:
        """A .ptd or a .safetensors file, chosen by content."""
        buf = self.read(0, min(self.size, FLAT_TENSOR.end))
        self.named_data, self.dtypes, self.header, self.digest = {}, {}, None, None
        if self.size >= 8 and bytes(buf[4:8]) == FLAT_TENSOR_IDENTIFIER:
            self.kind = "ptd"
            self._load_ptd(buf)
        elif self.path.endswith(".ptd"):
            raise BadMagicError("header", f"file identifier {bytes(buf[4:8])!r}, expected {FLAT_TENSOR_IDENTIFIER!r}", self.path)
        else:
            self.kind = "safetensors"
            self._load_safetensors()

    def _unique_pairs(self, pairs: list[tuple[str, object]]) -> dict:
        """A JSON object whose keys are unique (json.loads would keep the last of a repeated key)."""
        out: dict = {}
        for key, value in pairs:
            if key in out:
                raise DuplicateKeyError("header", f"key {key!r} appears twice in the JSON header", self.path)
            out[key] = value
        return out

    def _add(self, key: str, r: FileRange, where: str) -> None:
        if key in self.named_data:
            raise DuplicateKeyError(where, f"key {key!r} appears twice", self.path)
        self.named_data[key] = r

    def _load_ptd(self, buf: bytearray) -> None:
        """`buf`: the file's first bytes, up to the end of the header."""
        path = self.path
        self.header = h = read_flat_tensor(buf, self.size, path)
        fb_end = h.flatbuffer_offset + h.flatbuffer_size
        root = Reader(self.read(0, fb_end), 0, fb_end, path).root(FLAT_TENSOR_IDENTIFIER, "flat_tensor")
        version = root.scalar(0, "I", "version")
        if version > 0:
            raise InvalidValueError("version", f"{version} is newer than supported (0)", path)
        segs = root.tables(1, "segments")
        named = root.tables(2, "named_data")
        if segs is None or named is None:
            raise InvalidValueError("segments" if segs is None else "named_data", "missing", path)
        ranges = []
        for i, s in enumerate(segs):
            off, size = s.scalar(0, "Q", "offset"), s.scalar(1, "Q", "size")
            if off + size > h.segment_data_size:
                raise OutOfBoundsError(f"segments[{i}]", f"[{off}, +{size}) outside the segment data ({h.segment_data_size} bytes)", path)
            ranges.append(FileRange(path, h.segment_base_offset + off, size))
        for i, n in enumerate(named):
            key, idx = n.string(0, "key") or "", n.scalar(1, "I", "segment_index")
            if idx >= len(ranges):
                raise OutOfBoundsError(f"named_data[{i}].segment_index", f"segment index {idx} out of range ({len(ranges)} segments)", path)
            self._add(key, ranges[idx], f"named_data[{i}].key")
        digest = self.named_data.pop(DIGEST_KEY, None)  # the file's identity, not a tensor
        if digest is not None:
            if digest.size != DIGEST_BYTES:
                raise InvalidValueError(f"named_data[{DIGEST_KEY!r}]", f"{digest.size} bytes, a data digest is "
                                        f"{DIGEST_BYTES}", path)
            self.digest = bytes(self.read(digest.offset, DIGEST_BYTES)).hex()

    def _load_safetensors(self) -> None:
        path = self.path
        prefix = SAFETENSORS_LENGTH.size
        if self.size < prefix:
            raise TruncatedError("header", "safetensors length prefix cut short", path)
        (n,) = SAFETENSORS_LENGTH.unpack(self.read(0, prefix))
        if n > SAFETENSORS_MAX_HEADER or prefix + n > self.size:
            raise TruncatedError("header", f"JSON header of {n} bytes does not fit in the file ({self.size} bytes)", path)
        try:
            meta = json.loads(self.read(prefix, n).decode("utf-8"), object_pairs_hook=self._unique_pairs)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise InvalidValueError("header", f"JSON header is unreadable ({type(e).__name__})", path) from None
        if not isinstance(meta, dict):
            raise InvalidValueError("header", "JSON header is not an object", path)
        base, data = prefix + n, self.size - prefix - n
        for key, info in meta.items():
            if key == "__metadata__":
                continue
            where = f"tensors[{key!r}]"
            if not isinstance(info, dict):
                raise InvalidValueError(where, "entry is not an object", path)
            offs, dtype, shape = info.get("data_offsets"), info.get("dtype"), info.get("shape")
            if (not isinstance(offs, list) or len(offs) != 2 or not all(type(o) is int for o in offs)
                    or not isinstance(dtype, str) or not isinstance(shape, list)
                    or not all(type(d) is int and d >= 0 for d in shape)):
                raise InvalidValueError(where, "needs dtype (string), shape (list of ints >= 0), data_offsets ([begin, end])", path)
            begin, end = offs
            if not 0 <= begin <= end <= data:
                raise OutOfBoundsError(f"{where}.data_offsets", f"[{begin}, {end}) outside the data ({data} bytes)", path)
            self._add(key, FileRange(path, base + begin, end - begin), where)
            self.dtypes[key] = (dtype, tuple(shape))
        metadata = meta.get("__metadata__")
        self._load_aliases(metadata)
        if isinstance(metadata, dict) and DIGEST_KEY in metadata:
            digest = metadata[DIGEST_KEY]
            if not (isinstance(digest, str) and DIGEST_PATTERN.fullmatch(digest)):
                raise InvalidValueError(f"__metadata__[{DIGEST_KEY!r}]", "is not a sha256 in lowercase hex", path)
            self.digest = digest

    def _load_aliases(self, metadata: object) -> None:
        """The other names of stored tensors (docs/format.md, "Tensor names"): more keys for their bytes."""
        if not isinstance(metadata, dict) or ALIASES_METADATA not in metadata:
            return
        where = f"__metadata__[{ALIASES_METADATA!r}]"
        try:
            aliases = json.loads(metadata[ALIASES_METADATA], object_pairs_hook=self._unique_pairs)
        except (TypeError, ValueError, RecursionError):
            aliases = None
        if not isinstance(aliases, dict) or not all(isinstance(key, str) for key in aliases.values()):
            raise InvalidValueError(where, "is not a JSON object of names", self.path)
        stored = set(self.dtypes)
        for alias, key in aliases.items():
            if key not in stored:
                raise MissingKeyError(where, f"alias {alias!r} names {key!r}, which is no tensor of the file", self.path)
            self._add(alias, self.named_data[key], where)
            self.dtypes[alias] = self.dtypes[key]


def check_entry(holder: ExternalData, key: str, t: vk.Tensor, where: str, path: str | None) -> None:
    """MismatchError unless safetensors entry `key` of `holder` has the dtype and shape of `t`."""
    stored, shape = holder.dtypes[key]
    dtype = dtypes.of(t.datatype).safetensors
    if (stored, list(shape)) != (dtype, list(t.dims)):
        raise MismatchError(f"{where}.named_key", f"{key!r} is {stored} {list(shape)} in {holder.path}, the program "
                            f"needs {dtype} {list(t.dims)} (was the file changed after export?)", path)


def constant_tensors(graph: vk.VkGraph) -> dict[int, vk.Tensor]:
    """constant_id -> the first Tensor value that uses it."""
    out: dict[int, vk.Tensor] = {}
    for v in graph.values:
        if isinstance(v, vk.Tensor) and v.constant_id >= 0:
            out.setdefault(v.constant_id, v)
    return out


def check_pair(pf: ProgramFile, external: Sequence[ExternalData]) -> None:
    """MismatchError for an external data file that another write made than the .pte `pf`'s own: a .pte
    recording the data digest of its external data takes no file recording another (docs/format.md,
    "Pair identity"). Files recording none (ExecuTorch's, older vkx's, a user's own) and the
    checkpoints the .pte references are not compared; nothing is hashed."""
    recorded = pf.metadata.external_digest
    if recorded is None:
        return
    folder = written_at(pf.path).parent
    referenced = {os.path.realpath(folder / name) for name in pf.metadata.external_files}
    for e in external:
        if e.digest not in (None, recorded) and os.path.realpath(e.path) not in referenced:
            raise MismatchError(f"compile_specs[{METADATA!r}].external_digest",
                                f"{e.path} is not the external data written with this program (its data digest "
                                f"is {e.digest[:12]}..., the program's {recorded[:12]}...): export them again "
                                "together", pf.path)


def resolve_constants(pf: ProgramFile, external: Sequence[ExternalData] = (),
                      delegate: VulkanDelegate | None = None) -> list[FileRange]:
    """Where each constant of `delegate` (default: the first) is, indexed by constant_id.

    Named constants are looked up in the external files in order, then in the
    .pte's named data; legacy ones inside the delegate blob's constant section.
    A safetensors entry must have the dtype and shape of the tensor that uses it,
    and an external file vkx wrote must be the .pte's own (`check_pair`).
    """
    v = delegate or pf.vulkan
    if v is None:
        raise FormatError("execution_plan", f"no {VULKAN_BACKEND} delegate", pf.path)
    check_pair(pf, external)
    tensors = constant_tensors(v.graph)
    out = []
    for k, ref in enumerate(v.graph.constants):
        where = f"vkgraph.constants[{k}]"
        t = tensors.get(k)
        nbytes = t.nbytes if t is not None else ref.length
        if ref.is_named:
            holder = next((e for e in external if ref.named_key in e.named_data), None)
            r = None if holder is None else holder.named_data[ref.named_key]
            if holder is not None and t is not None and holder.kind == "safetensors":
                check_entry(holder, ref.named_key, t, where, pf.path)
            if r is None:
                r = pf.named_data.get(ref.named_key)
            if r is None:
                files = ", ".join([e.path for e in external] + [pf.path])
                raise MissingKeyError(f"{where}.named_key", f"key {ref.named_key!r} not found in {files}", pf.path)
            if t is not None and r.size != nbytes:
                raise InvalidValueError(where, f"named data {ref.named_key!r} has {r.size} bytes, the tensor needs {nbytes} ({t.datatype.name} {list(t.dims)})", pf.path)
        else:
            sec = v.legacy_section
            if ref.offset + nbytes > sec.size:
                raise OutOfBoundsError(f"{where}.offset", f"[{ref.offset}, +{nbytes}) outside the blob's constant section ({sec.size} bytes)", pf.path)
            r = FileRange(pf.path, sec.offset + ref.offset, nbytes)
        out.append(r)
    return out


def missing_keys(pf: ProgramFile, exts: Sequence[ExternalData] = ()) -> list[str]:
    """Named keys the VkGraph's constants use that neither the .pte nor `exts` hold (each once, in order)."""
    if pf.vulkan is None:
        return []
    held = [pf.named_data, *(e.named_data for e in exts)]
    keys = dict.fromkeys(c.named_key for c in pf.vulkan.graph.constants if c.is_named)
    return [k for k in keys if not any(k in h for h in held)]


def external_beside(path: str | os.PathLike) -> Path | None:
    """The same-stem .ptd (else .safetensors) file beside a .pte, where one exists: beside the file
    itself, for a symlink its target (where the pair was written), not beside the link."""
    for suffix in EXTERNAL_SUFFIXES:
        candidate = written_at(path).with_suffix(suffix)
        if candidate.is_file():
            return candidate
    return None


def named_external(pf: ProgramFile, external: Sequence[str | os.PathLike] = ()) -> list[Path]:
    """The external data files named for the .pte `pf`: those given, else those it records
    (vkx.format.metadata). What `validate()` and `describe()` read."""
    return [Path(e) for e in external or recorded_external(pf.path, pf.metadata)]


def find_external(pf: ProgramFile, external: Sequence[str | os.PathLike] = ()) -> tuple[list[Path], Path | None]:
    """The external data files the .pte `pf` uses: those named (`named_external`), else its same-stem
    .ptd/.safetensors when it lacks named keys its constants use. The second item is that same-stem
    file when it was chosen (the caller says so). What the loader and the command line use."""
    named = named_external(pf, external)
    if named:
        return named, None
    beside = external_beside(pf.path)
    return ([beside], beside) if beside is not None and missing_keys(pf) else ([], None)
