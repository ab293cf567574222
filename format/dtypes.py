"""Tensor element types: one `DType` per type, used by format, export and loader alike.

A `DType` is everything vkx needs to know about an element type: its VkGraph wire
value, its size, the numpy dtype that holds its bytes, the GLSL type one element
has in a device buffer, and whether a device tensor may hold it at all. The
64-bit types exist in files (ExecuTorch writes them) but never on a device: the
exporter narrows them, checking that no value changes (docs/format.md, "Data types").

bfloat16 is a vkx extension of the VkGraph `VkDataType` enum (wire value 8); its
bytes are the upper half of a float32, so a device stores it as 16-bit words and
shaders widen it with a shift. numpy has no bfloat16: its bytes are held as uint16.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from .common import ScalarType
from .errors import InvalidValueError


class DataType(IntEnum):
    """`VkDataType` on the wire (docs/format.md)."""
    BOOL = 0
    UINT8 = 1
    INT8 = 2
    INT32 = 3
    FLOAT16 = 4
    FLOAT32 = 5
    FLOAT64 = 6
    INT64 = 7
    BFLOAT16 = 8
    UNSET = 127

    @property
    def dtype(self) -> "DType":
        """The `DType` of this wire value (InvalidValueError for UNSET)."""
        return of(self)

    @property
    def itemsize(self) -> int:
        return of(self).itemsize


@dataclass(frozen=True)
class DType:
    name: str
    """torch's spelling (`torch.<name>`), and numpy's where numpy has the type."""
    datatype: DataType
    itemsize: int
    numpy: str
    """numpy dtype holding the bytes (uint16 for bfloat16, whose bits numpy cannot name)."""
    glsl: str
    """GLSL type of one element in a storage buffer."""
    is_float: bool
    on_device: bool
    """Whether a device tensor may hold this type (64-bit types are narrowed at export)."""
    scalar_type: ScalarType
    """ExecuTorch's ScalarType of program inputs/outputs of this type."""

    def __repr__(self) -> str:
        return f"dtypes.{self.name.upper()}"

    def __str__(self) -> str:
        return self.name


BOOL = DType("bool", DataType.BOOL, 1, "bool", "uint8_t", False, True, ScalarType.BOOL)
UINT8 = DType("uint8", DataType.UINT8, 1, "uint8", "uint8_t", False, True, ScalarType.BYTE)
INT8 = DType("int8", DataType.INT8, 1, "int8", "int8_t", False, True, ScalarType.CHAR)
INT32 = DType("int32", DataType.INT32, 4, "int32", "int", False, True, ScalarType.INT)
INT64 = DType("int64", DataType.INT64, 8, "int64", "int64_t", False, False, ScalarType.LONG)
FLOAT16 = DType("float16", DataType.FLOAT16, 2, "float16", "float16_t", True, True, ScalarType.HALF)
BFLOAT16 = DType("bfloat16", DataType.BFLOAT16, 2, "uint16", "uint16_t", True, True, ScalarType.BFLOAT16)
FLOAT32 = DType("float32", DataType.FLOAT32, 4, "float32", "float", True, True, ScalarType.FLOAT)
FLOAT64 = DType("float64", DataType.FLOAT64, 8, "float64", "double", True, False, ScalarType.DOUBLE)

ALL: tuple[DType, ...] = (BOOL, UINT8, INT8, INT32, INT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64)
FLOATS: frozenset[DType] = frozenset(d for d in ALL if d.is_float and d.on_device)
"""The floating types a device tensor may hold."""
INTS: frozenset[DType] = frozenset(d for d in ALL if not d.is_float and d.on_device)
"""The integer types (bool included) a device tensor may hold."""
ON_DEVICE: frozenset[DType] = FLOATS | INTS

_BY_DATATYPE = {d.datatype: d for d in ALL}
_BY_NAME = {d.name: d for d in ALL}


def of(datatype: DataType | int, where: str = "datatype") -> DType:
    """The DType of a VkGraph wire value; InvalidValueError (naming `where`) for UNSET or unknown."""
    try:
        return _BY_DATATYPE[DataType(datatype)]
    except (ValueError, KeyError):
        raise InvalidValueError(where, f"data type {int(datatype)} is not an element type") from None


def named(name: str) -> DType:
    """The DType called `name` ("float16", "bfloat16", ...); ValueError if there is none."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(_BY_NAME)})") from None
