"""format/headers.py: each header's bytes, written out by hand from docs/format.md, both ways."""
import pytest

from vkx.format import ExternalData, ProgramFile
from vkx.format.errors import BadMagicError, InvalidValueError, OutOfBoundsError, TruncatedError
from vkx.format.headers import DelegateHeader, ExtendedHeader, FlatTensorHeader

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
    h = ExtendedHeader(program_size=0x1234, segment_base_offset=0x1300, segment_data_size=0x56)
    assert h.pack() == EH and len(EH) == ExtendedHeader.PADDED
    assert ExtendedHeader.unpack(bytes(8) + EH, "x.pte") == h


def test_flat_tensor_header_bytes():
    h = FlatTensorHeader(flatbuffer_offset=48, flatbuffer_size=0x200, segment_base_offset=0x280, segment_data_size=0x40)
    assert h.pack() == FH and len(FH) == FlatTensorHeader.PADDED
    assert FlatTensorHeader.unpack(bytes(8) + FH, 0x2c0, "x.ptd") == h


def test_delegate_header_bytes():
    h = DelegateHeader(flatbuffer_offset=32, flatbuffer_size=0x140, bytes_offset=0x160, bytes_size=0x30)
    assert h.pack() == VH and len(VH) == DelegateHeader.PADDED
    assert DelegateHeader.unpack(VH, 0x190, "blob", "x.pte") == h


def test_files_written_carry_the_headers_as_read():
    """The golden files' header bytes are what the declarations pack from the fields read back."""
    with ProgramFile.open(GOLDEN / "tiny_ext.pte") as pf:
        data = pf.read(0, pf.size)
        assert data[8:8 + ExtendedHeader.PADDED] == pf.header.pack()
        v = pf.vulkan
        assert data[v.blob.offset:v.blob.offset + DelegateHeader.PADDED] == v.header.pack()
    with ExternalData.open(GOLDEN / "tiny_ext.ptd") as ext:
        assert ext.read(8, FlatTensorHeader.PADDED) == ext.header.pack()


def test_no_extended_header_is_none_and_short_files_are_refused():
    assert ExtendedHeader.unpack(bytes(8) + b"ET12" + bytes(28), "x.pte") is None
    with pytest.raises(TruncatedError, match="too short"):
        ExtendedHeader.unpack(bytes(7), "x.pte")
    with pytest.raises(TruncatedError, match="cut short"):
        ExtendedHeader.unpack(bytes(8) + EH[:20], "x.pte")
    with pytest.raises(InvalidValueError, match="header.length"):
        ExtendedHeader.unpack(bytes(8) + EH[:4] + bytes.fromhex("10000000") + EH[8:], "x.pte")


def test_flat_tensor_header_errors():
    with pytest.raises(BadMagicError, match="FH01"):
        FlatTensorHeader.unpack(bytes(8) + b"FH02" + FH[4:], 0x2c0, "x.ptd")
    with pytest.raises(TruncatedError, match="cut short"):
        FlatTensorHeader.unpack(bytes(8) + FH[:20], 28, "x.ptd")
    with pytest.raises(TruncatedError, match="segment data"):
        FlatTensorHeader.unpack(bytes(8) + FH, 0x2bf, "x.ptd")


def test_delegate_header_errors():
    with pytest.raises(TruncatedError, match="shorter than the VH00 header"):
        DelegateHeader.unpack(VH[:29], 29, "blob", "x.pte")
    with pytest.raises(BadMagicError, match="VH00"):
        DelegateHeader.unpack(VH[:4] + b"VH01" + VH[8:], 0x190, "blob", "x.pte")
    with pytest.raises(InvalidValueError, match="header_length"):
        DelegateHeader.unpack(VH[:8] + bytes.fromhex("1d00") + VH[10:], 0x190, "blob", "x.pte")
    with pytest.raises(OutOfBoundsError, match="blob.bytes"):
        DelegateHeader.unpack(VH, 0x18f, "blob", "x.pte")
