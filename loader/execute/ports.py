"""The host side of a graph input or output: checking a caller's array and moving its bytes.

A call's fixed cost is mostly Python, so everything a port can know ahead is worked
out once at load: the dtypes it accepts, a view of its mapped io buffer in the
tensor's shape, and whether a plain copy suffices. Per call an input is one
`np.copyto` from the caller's array (strided or not) straight into the mapped
buffer, and an output one copy out of its readback buffer into a fresh array
that the caller owns: a later call never overwrites it (the io buffers are
reused, so handing out views of them would not be safe).

numpy has no bfloat16: a torch bfloat16 tensor arrives as its uint16 bits with
`bits` set; numpy callers give and get float32 for bfloat16 ports.
"""
from __future__ import annotations

import numpy as np

from vkx.format import dtypes
from vkx.format.dtypes import DType
from vkx.loader.build.graph import RTensor
from vkx.loader.gpu.memory import Buffer


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def host_array(x) -> tuple[np.ndarray, bool, bool]:
    """(array, bits, from_torch): `x` as a numpy array without a copy where it can be;
    `bits` when it holds a torch bfloat16 tensor's uint16 bits."""
    if type(x) is np.ndarray:
        return x, False, False
    if is_torch(x):
        import torch
        if x.dtype is torch.bfloat16:
            return x.view(torch.int16).numpy(force=True).view(np.uint16), True, True
        return x.numpy(force=True), False, True  # detaches, and copies off a GPU only
    return np.asarray(x), False, False


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest even), as uint16 bits."""
    u = np.ascontiguousarray(a, np.float32).reshape(np.shape(a)).view(np.uint32)  # a 0-d array stays 0-d
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(a), ((u >> 16) | 0x40).astype(np.uint16), rounded)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bits as float32 values (exact)."""
    # asarray: a shift of a 0-d array gives a numpy scalar, whose view would be a scalar too
    return np.asarray(bits.astype(np.uint32) << 16).view(np.float32)


class Port:
    """One graph input or output: its shape, its dtype as the caller sees it, and its io buffer."""
    __slots__ = ("shape", "dtype", "device", "accepts", "view", "name", "_bits", "_plain")

    def __init__(self, t: RTensor, io: Buffer):
        self.name: str | None = None
        self.shape = t.arg.shape
        self.dtype: DType = t.staging
        self.device: DType = t.arg.dtype
        self._bits = self.device is dtypes.BFLOAT16
        self._plain = self.device is self.dtype and not self._bits
        self.accepts = {(np.dtype(d.numpy), False) for d in dtypes.numpy_takes(self.dtype)}
        if self.dtype is dtypes.BFLOAT16:
            self.accepts.add((np.dtype(np.uint16), True))  # a torch bfloat16 tensor's bits
        self.view = np.frombuffer(io.mapped(), np.dtype(self.device.numpy), count=t.arg.numel).reshape(self.shape)

    def takes(self, a: np.ndarray, bits: bool) -> bool:
        return (a.dtype, bits) in self.accepts

    def write(self, a: np.ndarray, bits: bool) -> None:
        """The caller's array into the mapped io buffer: one copy (a cast where dtypes differ)."""
        if bits != self._bits:
            a = bf16_values(a) if bits else bf16_bits(a)
        np.copyto(self.view, a, casting="unsafe")

    def read(self, torch_out: bool) -> np.ndarray:
        """A copy of the output in the caller's dtype (bfloat16 as uint16 bits when `torch_out`)."""
        v = self.view
        if self._plain:
            return v.copy()
        if self._bits:
            if self.dtype is dtypes.BFLOAT16 and torch_out:
                return v.copy()
            v = bf16_values(v)
        elif self.dtype is dtypes.BFLOAT16:
            return bf16_bits(v) if torch_out else v.astype(np.float32)
        return v.astype(np.float32 if self.dtype is dtypes.BFLOAT16 else np.dtype(self.dtype.numpy))
