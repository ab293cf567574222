"""torch dtypes as vkx DTypes (`vkx.format.dtypes`) and the narrowing of 64-bit types."""
from __future__ import annotations

import torch

from vkx.export.errors import ExportError
from vkx.format import dtypes
from vkx.format.dtypes import DType

_NARROWED = {dtypes.INT64: dtypes.INT32, dtypes.FLOAT64: dtypes.FLOAT32}
"""What a 64-bit tensor becomes on the device (docs/format.md, "Data types")."""


def of(dtype: torch.dtype) -> DType:
    """The DType named like `dtype` (ValueError when a VkGraph cannot hold it: int16, complex, ...)."""
    own = dtypes.named(str(dtype).removeprefix("torch."))
    if own.datatype is None:
        raise ValueError(f"a VkGraph has no {own} tensors")
    return own


def supported(dtype: torch.dtype) -> bool:
    try:
        of(dtype)
    except ValueError:
        return False
    return True


def on_device(dtype: torch.dtype) -> DType:
    """The DType a tensor of `dtype` has in the graph: its own, 64-bit types narrowed to 32 bits."""
    own = of(dtype)
    return _NARROWED.get(own, own)


def torch_dtype(dtype: DType) -> torch.dtype:
    return getattr(torch, dtype.name)


def check_narrowing(name: str, tensor: torch.Tensor) -> None:
    """ExportError unless narrowing `tensor` to its device dtype keeps its values: int64 within
    int32's range, no finite float64 past float32's (rounding to float32 is expected)."""
    if tensor.dtype == torch.int64:
        info = torch.iinfo(torch.int32)
        low, high = int(tensor.min()), int(tensor.max())
        if low < info.min or high > info.max:
            raise ExportError(f"constant {name} holds {low if low < info.min else high}, "
                              f"which does not fit the int32 it is stored as")
    elif tensor.dtype == torch.float64:
        overflows = torch.isfinite(tensor) & torch.isinf(tensor.to(torch.float32))
        if overflows.any():
            value = float(tensor[overflows].flatten()[0])
            raise ExportError(f"constant {name} holds {value!r}, past the range of the float32 it is stored as")
