"""Tensor element types: one `DType` per type, used by format, export and loader alike.

A `DType` is everything vkx needs to know about an element type: its VkGraph wire
value, its size, the numpy dtype that holds its bytes, whether a device tensor may
hold it at all, ExecuTorch's ScalarType and safetensors' spelling of it (its GLSL
type is the loader's: vkx.loader.ops.GLSL_TYPES). The 64-bit types exist in files
(ExecuTorch writes them) but never on a device: the exporter narrows them, checking
that no value changes (docs/format.md, "Data types"). The types with no VkGraph wire
value (int16, the unsigned ones past uint8, qint32, bits16) occur only in ExecuTorch
plans and checkpoints.

`DataType` is the VkGraph wire value (the schema's `VkDataType`, docs/format.md). bfloat16 is a vkx
extension of that enum (wire value 8); its
bytes are the upper half of a float32, so a device stores it as 16-bit words and
shaders widen it with a shift. numpy has no bfloat16: its bytes are held as uint16.
"""
from __future__ import annotations

from dataclasses import dataclass

from .common import ScalarType
from .errors import InvalidValueError
from .generated.enums import VkDataType as DataType


@dataclass(frozen=True)
class DType:
    name: str
    """torch's spelling (`torch.<name>`), and numpy's where numpy has the type."""
    datatype: DataType | None
    """The VkGraph wire value (None: a type a VkGraph cannot hold)."""
    itemsize: int
    numpy: str
    """numpy dtype holding the bytes (uint16 for bfloat16, whose bits numpy cannot name)."""
    is_float: bool
    on_device: bool
    """Whether a device tensor may hold this type (64-bit types are narrowed at export)."""
    scalar_type: ScalarType
    """ExecuTorch's ScalarType of this type."""
    safetensors: str
    """safetensors' spelling ("F32", "BF16", ...; empty for qint32 and bits16, which are not numbers)."""

    @property
    def is_number(self) -> bool:
        """Each element is a plain number (torch computes on it), not a quantized value or raw bits."""
        return bool(self.safetensors)

    def __repr__(self) -> str:
        return f"dtypes.{self.name.upper()}"

    def __str__(self) -> str:
        return self.name


BOOL = DType("bool", DataType.BOOL, 1, "bool", False, True, ScalarType.BOOL, "BOOL")
UINT8 = DType("uint8", DataType.UINT8, 1, "uint8", False, True, ScalarType.BYTE, "U8")
INT8 = DType("int8", DataType.INT8, 1, "int8", False, True, ScalarType.CHAR, "I8")
INT32 = DType("int32", DataType.INT32, 4, "int32", False, True, ScalarType.INT, "I32")
INT64 = DType("int64", DataType.INT64, 8, "int64", False, False, ScalarType.LONG, "I64")
FLOAT16 = DType("float16", DataType.FLOAT16, 2, "float16", True, True, ScalarType.HALF, "F16")
BFLOAT16 = DType("bfloat16", DataType.BFLOAT16, 2, "uint16", True, True, ScalarType.BFLOAT16, "BF16")
FLOAT32 = DType("float32", DataType.FLOAT32, 4, "float32", True, True, ScalarType.FLOAT, "F32")
FLOAT64 = DType("float64", DataType.FLOAT64, 8, "float64", True, False, ScalarType.DOUBLE, "F64")
INT16 = DType("int16", None, 2, "int16", False, False, ScalarType.SHORT, "I16")
UINT16 = DType("uint16", None, 2, "uint16", False, False, ScalarType.UINT16, "U16")
UINT32 = DType("uint32", None, 4, "uint32", False, False, ScalarType.UINT32, "U32")
UINT64 = DType("uint64", None, 8, "uint64", False, False, ScalarType.UINT64, "U64")
QINT32 = DType("qint32", None, 4, "int32", False, False, ScalarType.QINT32, "")
BITS16 = DType("bits16", None, 2, "uint16", False, False, ScalarType.BITS16, "")

ALL: tuple[DType, ...] = (BOOL, UINT8, INT8, INT32, INT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64,
                          INT16, UINT16, UINT32, UINT64, QINT32, BITS16)
FLOATS: frozenset[DType] = frozenset(d for d in ALL if d.is_float and d.on_device)
"""The floating types a device tensor may hold."""
INTS: frozenset[DType] = frozenset(d for d in ALL if not d.is_float and d.on_device)
"""The integer types (bool included) a device tensor may hold."""
ON_DEVICE: frozenset[DType] = FLOATS | INTS

DTYPE_CHOICES: dict[str, DType | None] = {"keep": None, "fp32": FLOAT32, "fp16": FLOAT16, "bf16": BFLOAT16}
"""An export's `dtype` (`vkx export --dtype`): the floating type of every parameter, buffer and activation
by its short name (`keep`: each keeps its own)."""

_BY_DATATYPE = {d.datatype: d for d in ALL if d.datatype is not None}
_BY_NAME = {d.name: d for d in ALL}
_BY_SCALAR_TYPE = {d.scalar_type: d for d in ALL}
_BY_SAFETENSORS = {d.safetensors: d for d in ALL if d.safetensors}


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


def of_scalar_type(scalar_type: ScalarType) -> DType | None:
    """The DType of an ExecuTorch ScalarType (None for the 8-bit quantized, packed and float8 types)."""
    return _BY_SCALAR_TYPE.get(scalar_type)


def itemsize(scalar_type: ScalarType) -> int:
    """Bytes per element of an ExecuTorch ScalarType (1 for the types with no DType: 8 bits or packed)."""
    d = _BY_SCALAR_TYPE.get(scalar_type)
    return 1 if d is None else d.itemsize


def numpy_takes(host: DType) -> frozenset[DType]:
    """The dtypes of a numpy array a loaded method takes for an input of host dtype `host` (loader/execute/ports.py,
    and `vkx run --inputs` before the load): its own; float32 for bfloat16, which numpy lacks (rounded on the
    way in); int64 too for int32."""
    if host is BFLOAT16:
        return frozenset({FLOAT32})
    return frozenset({INT32, INT64}) if host is INT32 else frozenset({host})


def by_safetensors(code: str) -> DType:
    """The DType safetensors spells `code` ("F32", ...); ValueError if there is none."""
    try:
        return _BY_SAFETENSORS[code]
    except KeyError:
        raise ValueError(f"unknown safetensors dtype {code!r}") from None
