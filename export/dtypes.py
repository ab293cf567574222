"""Which Vulkan data type each torch dtype becomes, on the GPU and in constant bytes."""
from __future__ import annotations

import torch

from vkx.format import ScalarType
from vkx.format.vkgraph import DataType

FP16_MAX = 65504.0

_GPU = {
    torch.float32: DataType.FLOAT32, torch.float64: DataType.FLOAT32,
    torch.float16: DataType.FLOAT32, torch.bfloat16: DataType.FLOAT32,
    torch.int64: DataType.INT32, torch.int32: DataType.INT32,
    torch.int16: DataType.INT32, torch.int8: DataType.INT8,
    torch.uint8: DataType.UINT8, torch.bool: DataType.BOOL,
}
"""Non-constant tensors: floating → float32, 64-bit integers → int32 (formats.md §4.3)."""

_STORED = {
    torch.float32: torch.float32, torch.float64: torch.float32, torch.bfloat16: torch.float32,
    torch.float16: torch.float16, torch.int64: torch.int32, torch.int32: torch.int32,
    torch.int16: torch.int32, torch.int8: torch.int8, torch.uint8: torch.uint8, torch.bool: torch.bool,
}

_DATATYPE = {
    torch.float32: DataType.FLOAT32, torch.float16: DataType.FLOAT16, torch.int32: DataType.INT32,
    torch.int8: DataType.INT8, torch.uint8: DataType.UINT8, torch.bool: DataType.BOOL,
}

SUPPORTED = frozenset(_GPU)


def gpu_datatype(dtype: torch.dtype) -> DataType:
    """The data type of a non-constant tensor of `dtype`."""
    return _GPU[dtype]


def staging_datatype(dtype: torch.dtype) -> DataType:
    """The data type an input/output crosses the host boundary in (half stays half)."""
    return DataType.FLOAT16 if dtype == torch.float16 else _GPU[dtype]


def stored_dtype(dtype: torch.dtype, fp16: bool) -> torch.dtype:
    """The dtype a constant's bytes are written in: 64-bit downcast, floats to half with `fp16`."""
    if fp16 and dtype.is_floating_point:
        return torch.float16
    return _STORED[dtype]


def datatype_of(stored: torch.dtype) -> DataType:
    """The VkGraph data type of constant bytes stored as `stored`."""
    return _DATATYPE[stored]



_SCALAR_TYPES = {
    torch.float32: ScalarType.FLOAT, torch.float16: ScalarType.HALF, torch.float64: ScalarType.DOUBLE,
    torch.bfloat16: ScalarType.BFLOAT16, torch.int64: ScalarType.LONG, torch.int32: ScalarType.INT,
    torch.int16: ScalarType.SHORT, torch.int8: ScalarType.CHAR, torch.uint8: ScalarType.BYTE,
    torch.bool: ScalarType.BOOL,
}


def scalar_type(dtype: torch.dtype) -> ScalarType:
    """The ExecuTorch scalar type a program input/output of `dtype` is declared with."""
    return _SCALAR_TYPES[dtype]
