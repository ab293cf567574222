"""The three binary headers of vkx's files, each declared once and used both ways (docs/format.md):
the `.pte` extended header, the `.ptd` flat-tensor header and the Vulkan delegate blob's header.

Each is a frozen dataclass of its fields with its magic, its struct layout, the length its
length field holds, the padded length it takes in the file, `pack()` (the padded bytes) and
`unpack()` (the fields, checked, or the typed error that names the field).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from .errors import BadMagicError, InvalidValueError, OutOfBoundsError, TruncatedError


class _Header:
    """What the three headers share: their bytes are their fields in LAYOUT order, padded to PADDED."""
    LAYOUT: ClassVar[str]
    PADDED: ClassVar[int]

    def wire(self) -> tuple:
        """The values LAYOUT packs, in its order."""
        raise NotImplementedError

    def pack(self) -> bytes:
        return struct.pack(self.LAYOUT, *self.wire()).ljust(self.PADDED, b"\0")


@dataclass(frozen=True)
class ExtendedHeader(_Header):
    """The `eh00` header of a .pte, after the FlatBuffer's root offset and identifier (file offset 8)."""
    program_size: int
    segment_base_offset: int
    segment_data_size: int
    length: int = 32
    """The header's length field: ExecuTorch 1.5.1 writes 32; 24 (no segment_data_size) is read too."""

    MAGIC: ClassVar[bytes] = b"eh00"
    OFFSET: ClassVar[int] = 8
    LAYOUT: ClassVar[str] = "<4sIQQQ"
    LENGTH: ClassVar[int] = 32
    PADDED: ClassVar[int] = 32
    """Bytes the header takes in the file: LENGTH aligned to the Program's largest force_align (16)."""

    def wire(self) -> tuple:
        return self.MAGIC, self.length, self.program_size, self.segment_base_offset, self.segment_data_size

    @classmethod
    def unpack(cls, buf, path: str) -> ExtendedHeader | None:
        """The header from a file's first bytes (`buf`, at least 40 where the file has them), or
        None when the file has none (a plain FlatBuffer)."""
        size = len(buf)
        if size < cls.OFFSET:
            raise TruncatedError("header", f"{size} bytes is too short for a program", path)
        if size < cls.OFFSET + 4 or bytes(buf[cls.OFFSET:cls.OFFSET + 4]) != cls.MAGIC:
            return None
        if size < cls.OFFSET + cls.LENGTH:
            raise TruncatedError("header", "extended header cut short", path)
        _, length, program_size, sbo, sds = struct.unpack_from(cls.LAYOUT, buf, cls.OFFSET)
        if length < 24:
            raise InvalidValueError("header.length", f"{length} < 24", path)
        return cls(program_size, sbo, sds if length >= 32 else 0, length)


@dataclass(frozen=True)
class FlatTensorHeader(_Header):
    """The `FH01` header of a .ptd, after the FlatBuffer's root offset and identifier (file offset 8)."""
    flatbuffer_offset: int
    flatbuffer_size: int
    segment_base_offset: int
    segment_data_size: int
    length: int = 40

    MAGIC: ClassVar[bytes] = b"FH01"
    OFFSET: ClassVar[int] = 8
    LAYOUT: ClassVar[str] = "<4sIQQQQ"
    LENGTH: ClassVar[int] = 40
    PADDED: ClassVar[int] = 48
    """Bytes the header takes in the file: LENGTH aligned to 16."""

    def wire(self) -> tuple:
        return (self.MAGIC, self.length, self.flatbuffer_offset, self.flatbuffer_size, self.segment_base_offset,
                self.segment_data_size)

    @classmethod
    def unpack(cls, buf, file_size: int, path: str) -> FlatTensorHeader:
        """The header from a .ptd's first bytes (`buf`, at least 48 where the file has them), its
        flatbuffer and segment data checked to lie inside the file's `file_size` bytes."""
        if file_size >= cls.OFFSET + 4 and bytes(buf[cls.OFFSET:cls.OFFSET + 4]) != cls.MAGIC:
            raise BadMagicError("header", f"header magic {bytes(buf[cls.OFFSET:cls.OFFSET + 4])!r}, "
                                          f"expected {cls.MAGIC!r}", path)
        if file_size < cls.OFFSET + cls.LENGTH:
            raise TruncatedError("header", "flat tensor header cut short", path)
        _, length, fbo, fbs, sbo, sds = struct.unpack_from(cls.LAYOUT, buf, cls.OFFSET)
        h = cls(fbo, fbs, sbo, sds, length)
        if length < cls.LENGTH:
            raise InvalidValueError("header.length", f"{length} < {cls.LENGTH}", path)
        if fbo + fbs > file_size:
            raise TruncatedError("header.flatbuffer_size", f"flatbuffer [0, {fbo + fbs}) runs past the end of the "
                                                           f"file ({file_size} bytes)", path)
        if sbo + sds > file_size:
            raise TruncatedError("header.segment_data_size", f"segment data [{sbo}, +{sds}) runs past the end of the "
                                                             f"file ({file_size} bytes)", path)
        return h


@dataclass(frozen=True)
class DelegateHeader(_Header):
    """The `VH00` header at the start of a Vulkan delegate blob: where its VkGraph FlatBuffer and its
    constant bytes are, as offsets from the blob's start."""
    flatbuffer_offset: int
    flatbuffer_size: int
    bytes_offset: int
    bytes_size: int
    length: int = 30

    MAGIC: ClassVar[bytes] = b"VH00"
    LAYOUT: ClassVar[str] = "<4s4sHIIIQ"
    """4 bytes before the magic, then the magic and the fields."""
    LENGTH: ClassVar[int] = 30
    """ExecuTorch's reader needs exactly this length."""
    PADDED: ClassVar[int] = 32
    """Bytes the header takes in a blob vkx writes: the VkGraph FlatBuffer starts 16-aligned."""

    def wire(self) -> tuple:
        return bytes(4), self.MAGIC, self.length, self.flatbuffer_offset, self.flatbuffer_size, self.bytes_offset, \
            self.bytes_size

    @classmethod
    def unpack(cls, buf, blob_size: int, where: str, path: str) -> DelegateHeader:
        """The header from a blob's first bytes (`buf`, at least 30 where the blob has them), its
        FlatBuffer and bytes checked to lie inside the blob's `blob_size` bytes."""
        if blob_size < cls.LENGTH:
            raise TruncatedError(where, f"delegate blob of {blob_size} bytes is shorter than the VH00 header", path)
        _, magic, length, fbo, fbs, bo, bs = struct.unpack_from(cls.LAYOUT, buf, 0)
        if magic != cls.MAGIC:
            raise BadMagicError(where, f"blob magic {magic!r}, expected {cls.MAGIC!r}", path)
        if length < cls.LENGTH:
            raise InvalidValueError(f"{where}.header_length", f"{length} < {cls.LENGTH}", path)
        if fbo < length or fbs == 0 or fbo + fbs > blob_size:
            raise OutOfBoundsError(f"{where}.flatbuffer", f"[{fbo}, +{fbs}) not inside the blob ({blob_size} bytes) "
                                                          "after the header", path)
        if bo < fbo + fbs or bo + bs > blob_size:
            raise OutOfBoundsError(f"{where}.bytes", f"[{bo}, +{bs}) not inside the blob ({blob_size} bytes) after "
                                                     "the flatbuffer", path)
        return cls(fbo, fbs, bo, bs, length)
