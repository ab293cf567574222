# Written by vkx.format._regen from flatc's modules beside it: do not modify.
"""The enums and union tags of schemas/*.fbs as IntEnums (names and values as flatc writes them), for
readers that do not import flatbuffers."""
from enum import IntEnum


class ScalarType(IntEnum):
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


class TensorShapeDynamism(IntEnum):
    STATIC = 0
    DYNAMIC_BOUND = 1
    DYNAMIC_UNBOUND = 2


class TensorDataLocation(IntEnum):
    SEGMENT = 0
    EXTERNAL = 1


class DeviceType(IntEnum):
    CPU = 0
    CUDA = 1


class DataLocation(IntEnum):
    INLINE = 0
    SEGMENT = 1


class KernelTypes(IntEnum):
    NONE = 0
    Null = 1
    Int = 2
    Bool = 3
    Double = 4
    Tensor = 5
    String = 6
    IntList = 7
    DoubleList = 8
    BoolList = 9
    TensorList = 10
    OptionalTensorList = 11


class InstructionArguments(IntEnum):
    NONE = 0
    KernelCall = 1
    DelegateCall = 2
    MoveCall = 3
    JumpFalseCall = 4
    FreeCall = 5


class VkDataType(IntEnum):
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


class VkStorageType(IntEnum):
    BUFFER = 0
    TEXTURE_3D = 1
    TEXTURE_2D = 2
    DEFAULT_STORAGE = 255


class VkMemoryLayout(IntEnum):
    TENSOR_WIDTH_PACKED = 0
    TENSOR_HEIGHT_PACKED = 1
    TENSOR_CHANNELS_PACKED = 2
    PACKED_INT8_4W4C = 3
    PACKED_INT8_4H4W = 4
    PACKED_INT8_4W = 5
    PACKED_INT8_4C = 6
    PACKED_INT8_4C1W = 8
    PACKED_INT8_CONV2D = 9
    DEFAULT_LAYOUT = 255


class GraphTypes(IntEnum):
    NONE = 0
    Null = 1
    Int = 2
    Double = 3
    Bool = 4
    VkTensor = 5
    IntList = 6
    DoubleList = 7
    BoolList = 8
    ValueList = 9
    String = 10
    SymInt = 11
