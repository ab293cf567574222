"""Small shared value types: scalar types (ExecuTorch's `ScalarType`, the schema's enum), file ranges, alignment."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .generated.enums import ScalarType

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
