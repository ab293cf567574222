"""The three binary headers of vkx's files, each declared once and used both ways (docs/format.md):
the `.pte` extended header, the `.ptd` flat-tensor header and the Vulkan delegate blob's header; and
the .ptd's file identifier and the .safetensors length prefix, the other bytes a reader checks first.

A header is data (`Header`): where it starts, its fields in wire order with their struct codes
(the magic, then the length field, then the rest), the length it declares and the padded length it
takes. `pack(**fields)` gives its padded bytes; `unpack` its fields (a named tuple), checked, or the
typed error that names the field. The `read_*` functions add each header's own checks of what its
fields point at.
"""
from __future__ import annotations

import struct
from collections import namedtuple
from typing import Any

from .common import align
from .errors import BadMagicError, InvalidValueError, OutOfBoundsError, TruncatedError


class Header:
    """One binary header, declared by its fields: `layout` is `name:code` (a struct code) for each field
    in wire order, or a bare pad code; the first named field is the magic, the second the length."""

    def __init__(self, name: str, magic: bytes, start: int, layout: str, length: int, padded: int,
                 minimum: int | None = None):
        tokens = [t.split(":") for t in layout.split()]
        codes = [t[-1] for t in tokens]
        names = [t[0] for t in tokens if len(t) == 2]
        self.magic = magic
        self.start = start
        """Where the header begins in its file or blob (after a FlatBuffer's root offset and identifier)."""
        self.struct = struct.Struct("<" + "".join(codes))
        self._magic_at = start + struct.calcsize("<" + "".join(codes[:[len(t) for t in tokens].index(2)]))
        self.fields = namedtuple(name, names[1:])
        """The header's fields after the magic (the length first): what `unpack` returns."""
        self.length = length
        """What the length field holds in a header vkx writes."""
        self.minimum = length if minimum is None else minimum
        """The least length field a reader takes."""
        self.padded = padded
        """Bytes the header takes in a file vkx writes."""
        self.end = start + self.struct.size
        """Where the header ends: the bytes a reader needs."""

    def pack(self, **fields: int) -> Any:
        """The header's padded bytes (its length field, unless given, is `length`)."""
        values = self.fields(**{self.fields._fields[0]: self.length, **fields})
        return self.struct.pack(self.magic, *values).ljust(self.padded, b"\0")

    def has_magic(self, buf) -> bool:
        return bytes(buf[self._magic_at:self._magic_at + len(self.magic)]) == self.magic

    def unpack(self, buf, size: int, where: str, path: str) -> Any:
        """The fields from `buf`, the first bytes (at least `end` where it has them) of a file or blob of
        `size` bytes: BadMagicError for another magic, TruncatedError when it is shorter than the header,
        InvalidValueError for a length field under `minimum`."""
        if size >= self._magic_at + len(self.magic) and not self.has_magic(buf):
            found = bytes(buf[self._magic_at:self._magic_at + len(self.magic)])
            raise BadMagicError(where, f"header magic {found!r}, expected {self.magic!r}", path)
        if size < self.end:
            raise TruncatedError(where, f"{size} bytes is shorter than the {self.magic.decode()} header", path)
        _, *values = self.struct.unpack_from(buf, self.start)
        h = self.fields(*values)
        if h[0] < self.minimum:
            raise InvalidValueError(f"{where}.{h._fields[0]}", f"{h[0]} < {self.minimum}", path)
        return h


EXTENDED = Header("ExtendedHeader", b"eh00", 8, "magic:4s length:I program_size:Q segment_base_offset:Q "
                  "segment_data_size:Q", length=32, padded=32, minimum=24)
"""The `eh00` header of a .pte, after the FlatBuffer's root offset and identifier. ExecuTorch 1.5.1 writes
length 32; 24 (no segment_data_size) is read too. Padded to the Program's largest force_align (16)."""
FLAT_TENSOR = Header("FlatTensorHeader", b"FH01", 8, "magic:4s length:I flatbuffer_offset:Q flatbuffer_size:Q "
                     "segment_base_offset:Q segment_data_size:Q", length=40, padded=48)
"""The `FH01` header of a .ptd, after the FlatBuffer's root offset and identifier; padded to 16."""
DELEGATE = Header("DelegateHeader", b"VH00", 0, "4x magic:4s header_length:H flatbuffer_offset:I "
                  "flatbuffer_size:I bytes_offset:I bytes_size:Q", length=30, padded=32)
"""The `VH00` header at the start of a Vulkan delegate blob: where its VkGraph FlatBuffer and its constant
bytes are, as offsets from the blob's start. ExecuTorch's reader needs exactly length 30; vkx pads it to 32
so that the FlatBuffer starts 16-aligned."""
ExtendedHeader, FlatTensorHeader, DelegateHeader = EXTENDED.fields, FLAT_TENSOR.fields, DELEGATE.fields
"""The fields each header unpacks to (named tuples)."""
FLAT_TENSOR_IDENTIFIER = b"FT01"
"""A .ptd FlatBuffer's file identifier (its bytes 4-8, before the FH01 header)."""
SAFETENSORS_LENGTH = struct.Struct("<Q")
"""A .safetensors file's first bytes: the length of the JSON header after them (a writer pads it with spaces)."""


def safetensors_header(text: bytes, alignment: int = 8) -> bytes:
    """A .safetensors file's bytes before its data: the length, then the JSON `text` padded with spaces
    so that the data starts on a multiple of `alignment` (at least 8, as the format asks)."""
    prefix = SAFETENSORS_LENGTH.size
    start = align(prefix + len(text), max(alignment, 8))
    return SAFETENSORS_LENGTH.pack(start - prefix) + text.ljust(start - prefix, b" ")


def read_extended(buf, size: int, path: str) -> ExtendedHeader | None:
    """The eh00 header from a .pte's first bytes (`buf`, EXTENDED.end where the file has them), or None
    when the file has none (a plain FlatBuffer)."""
    if size < EXTENDED.start:
        raise TruncatedError("header", f"{size} bytes is too short for a program", path)
    if not EXTENDED.has_magic(buf):
        return None
    h = EXTENDED.unpack(buf, size, "header", path)
    return h if h.length >= 32 else h._replace(segment_data_size=0)


def read_flat_tensor(buf, size: int, path: str) -> FlatTensorHeader:
    """The FH01 header from a .ptd's first bytes (`buf`, FLAT_TENSOR.end where the file has them), its
    flatbuffer and segment data checked to lie inside the file's `size` bytes."""
    h = FLAT_TENSOR.unpack(buf, size, "header", path)
    if h.flatbuffer_offset + h.flatbuffer_size > size:
        raise TruncatedError("header.flatbuffer_size", f"flatbuffer [0, {h.flatbuffer_offset + h.flatbuffer_size}) "
                                                       f"runs past the end of the file ({size} bytes)", path)
    if h.segment_base_offset + h.segment_data_size > size:
        raise TruncatedError("header.segment_data_size", f"segment data [{h.segment_base_offset}, "
                                                         f"+{h.segment_data_size}) runs past the end of the file "
                                                         f"({size} bytes)", path)
    return h


def read_delegate(buf, size: int, where: str, path: str) -> DelegateHeader:
    """The VH00 header from a blob's first bytes (`buf`, DELEGATE.end where the blob has them), its
    FlatBuffer and bytes checked to lie inside the blob's `size` bytes, after the header."""
    h = DELEGATE.unpack(buf, size, where, path)
    fbo, fbs, bo, bs = h.flatbuffer_offset, h.flatbuffer_size, h.bytes_offset, h.bytes_size
    if fbo < h.header_length or fbs == 0 or fbo + fbs > size:
        raise OutOfBoundsError(f"{where}.flatbuffer", f"[{fbo}, +{fbs}) not inside the blob ({size} bytes) "
                                                      "after the header", path)
    if bo < fbo + fbs or bo + bs > size:
        raise OutOfBoundsError(f"{where}.bytes", f"[{bo}, +{bs}) not inside the blob ({size} bytes) after "
                                                 "the flatbuffer", path)
    return h
