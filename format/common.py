"""Small shared value types: scalar types, file ranges, alignment."""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum


class ScalarType(IntEnum):
    """ExecuTorch tensor element type (`scalar_type.fbs` wire values; kept equal to the generated class by a test)."""
    BYTE = 0
    CHAR = 1
    SHORT = 2
    INT = 3
    LONG = 4
    HALF = 5
    FLOAT = 6
    DOUBLE = 7
    BOOL = 11
    QINT8 = 12
    QUINT8 = 13
    QINT32 = 14
    BFLOAT16 = 15
    QUINT4X2 = 16
    QUINT2X4 = 17
    BITS16 = 22
    FLOAT8E5M2 = 23
    FLOAT8E4M3FN = 24
    FLOAT8E5M2FNUZ = 25
    FLOAT8E4M3FNUZ = 26
    UINT16 = 27
    UINT32 = 28
    UINT64 = 29



SCALAR_TYPE_VALUES = frozenset(int(s) for s in ScalarType)


@dataclass(frozen=True)
class FileRange:
    """An absolute byte range `[offset, offset + size)` inside the file at `path`."""
    path: str
    offset: int
    size: int

    @property
    def end(self) -> int:
        return self.offset + self.size


def align(x: int, a: int) -> int:
    """x rounded up to a multiple of a."""
    return -(-x // a) * a


def lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


NAMED_SEGMENT_MIN_ALIGN = 128
"""Segments start on lcm(128, alignment) (ExecuTorch's segment_alignment)."""
LARGE_SEGMENT = 2 * 1024 * 1024
"""Default policy: named-data segments at least this big start on LARGE_ALIGN."""
LARGE_ALIGN = 16 * 1024
PAGE_SEGMENT = 512 * 1024
"""Default policy: smaller segments at least this big start on PAGE_ALIGN (a page of their own:
a device can import them in place); the padding costs < 0.78 %, as for LARGE_SEGMENT."""
PAGE_ALIGN = 4096


def segment_alignment(size: int, alignment: int | None) -> int:
    """Start alignment of a named-data segment of `size` bytes (see docs/format.md)."""
    if alignment is not None:
        if alignment <= 0:
            raise ValueError(f"alignment must be positive, got {alignment}")
        return lcm(NAMED_SEGMENT_MIN_ALIGN, alignment)
    if size >= LARGE_SEGMENT:
        return LARGE_ALIGN
    return PAGE_ALIGN if size >= PAGE_SEGMENT else lcm(NAMED_SEGMENT_MIN_ALIGN, 16)
