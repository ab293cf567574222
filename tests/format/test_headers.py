"""format/headers.py: each header's bytes, written out by hand from docs/format.md, both ways."""
import pytest

from vkx.format import ExternalData, ProgramFile
from vkx.format.errors import BadMagicError, InvalidValueError, OutOfBoundsError, TruncatedError
from vkx.format.headers import (DELEGATE, EXTENDED, FLAT_TENSOR, DelegateHeader, ExtendedHeader, FlatTensorHeader,
                                read_delegate, read_extended, read_flat_tensor)

from .conftest import GOLDEN

# eh00, length 32, program_size, segment_base_offset, segment_data_size (u32, then u64 little-endian)
EH = (b"eh00" + bytes.fromhex("20000000") + bytes.fromhex("3412000000000000")
      + bytes.fromhex("0013000000000000") + bytes.fromhex("5600000000000000"))
# FH01, length 40, flatbuffer offset, size, segment base offset, data size; padded to 48
FH = (b"FH01" + bytes.fromhex("28000000") + bytes.fromhex("3000000000000000") + bytes.fromhex("0002000000000000")
      + bytes.fromhex("8002000000000000") + bytes.fromhex("4000000000000000") + bytes(8))
# 4 zero bytes, VH00, length 30 (u16), flatbuffer offset, size, bytes offset (u32), bytes size (u64); padded to 32
VH = (bytes(4) + b"VH00" + bytes.fromhex("1e00") + bytes.fromhex("20000000") + bytes.fromhex("40010000")
      + bytes.fromhex("60010000") + bytes.fromhex("3000000000000000") + bytes(2))


def test_extended_header_bytes():
    fields = dict(program_size=0x1234, segment_base_offset=0x1300, segment_data_size=0x56)
    assert EXTENDED.pack(**fields) == EH and len(EH) == EXTENDED.padded
    assert read_extended(bytes(8) + EH, 8 + len(EH), "x.pte") == ExtendedHeader(length=32, **fields)


def test_flat_tensor_header_bytes():
    fields = dict(flatbuffer_offset=48, flatbuffer_size=0x200, segment_base_offset=0x280, segment_data_size=0x40)
    assert FLAT_TENSOR.pack(**fields) == FH and len(FH) == FLAT_TENSOR.padded
    assert read_flat_tensor(bytes(8) + FH, 0x2c0, "x.ptd") == FlatTensorHeader(length=40, **fields)


def test_delegate_header_bytes():
    fields = dict(flatbuffer_offset=32, flatbuffer_size=0x140, bytes_offset=0x160, bytes_size=0x30)
    assert DELEGATE.pack(**fields) == VH and len(VH) == DELEGATE.padded
    assert read_delegate(VH, 0x190, "blob", "x.pte") == DelegateHeader(header_length=30, **fields)


def test_files_written_carry_the_headers_as_read():
    """The golden files' header bytes are what the declarations pack from the fields read back."""
    with ProgramFile.open(GOLDEN / "tiny_ext.pte") as pf:
        data = pf.read(0, pf.size)
        assert data[8:8 + EXTENDED.padded] == EXTENDED.pack(**pf.header._asdict())
        v = pf.vulkan
        assert data[v.blob.offset:v.blob.offset + DELEGATE.padded] == DELEGATE.pack(**v.header._asdict())
    with ExternalData.open(GOLDEN / "tiny_ext.ptd") as ext:
        assert ext.read(8, FLAT_TENSOR.padded) == FLAT_TENSOR.pack(**ext.header._asdict())


def test_no_extended_header_is_none_and_short_files_are_refused():
    assert read_extended(bytes(8) + b"ET12" + bytes(28), 48, "x.pte") is None
    with pytest.raises(TruncatedError, match="too short for a program"):
        read_extended(bytes(7), 7, "x.pte")
    with pytest.raises(TruncatedError, match="shorter than the eh00 header"):
        read_extended(bytes(8) + EH[:20], 28, "x.pte")
    with pytest.raises(InvalidValueError, match="header.length"):
        read_extended(bytes(8) + EH[:4] + bytes.fromhex("10000000") + EH[8:], 40, "x.pte")
    short = read_extended(bytes(8) + EH[:4] + bytes.fromhex("18000000") + EH[8:], 40, "x.pte")
    assert (short.length, short.segment_data_size) == (24, 0)  # a 24-byte header has no segment_data_size


def test_flat_tensor_header_errors():
    with pytest.raises(BadMagicError, match="FH01"):
        read_flat_tensor(bytes(8) + b"FH02" + FH[4:], 0x2c0, "x.ptd")
    with pytest.raises(TruncatedError, match="shorter than the FH01 header"):
        read_flat_tensor(bytes(8) + FH[:20], 28, "x.ptd")
    with pytest.raises(InvalidValueError, match="header.length"):
        read_flat_tensor(bytes(8) + FH[:4] + bytes.fromhex("20000000") + FH[8:], 0x2c0, "x.ptd")
    with pytest.raises(TruncatedError, match="segment data"):
        read_flat_tensor(bytes(8) + FH, 0x2bf, "x.ptd")


def test_delegate_header_errors():
    with pytest.raises(TruncatedError, match="shorter than the VH00 header"):
        read_delegate(VH[:29], 29, "blob", "x.pte")
    with pytest.raises(BadMagicError, match="VH00"):
        read_delegate(VH[:4] + b"VH01" + VH[8:], 0x190, "blob", "x.pte")
    with pytest.raises(InvalidValueError, match="blob.header_length"):
        read_delegate(VH[:8] + bytes.fromhex("1d00") + VH[10:], 0x190, "blob", "x.pte")
    with pytest.raises(OutOfBoundsError, match="blob.flatbuffer"):
        read_delegate(VH[:10] + bytes.fromhex("1c000000") + VH[14:], 0x190, "blob", "x.pte")
    with pytest.raises(OutOfBoundsError, match="blob.bytes"):
        read_delegate(VH, 0x18f, "blob", "x.pte")
