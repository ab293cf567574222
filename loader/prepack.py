"""Uploading constants to their GPU tensors ("prepack"), with the cast while copying.

Three ways, one per load mode:
- "direct": the destination is DEVICE_LOCAL|HOST_VISIBLE; numpy cast-copies
  straight from the mmap'd file into it (one copy of every byte), releasing
  the file pages chunk by chunk.
- "ring": the destination is device memory; bytes go through the fixed
  `StagingRing` (host copy into a chunk, then vkCmdCopyBuffer).
- "eager" (the old order): a full-size staging buffer per tensor, copied with
  vkCmdCopyBuffer, waited for, then freed; host copies are kept.
"""
from __future__ import annotations

import numpy as np
import vulkan as vk

from vkx.format import vkgraph as g
from vkx.loader.copy import copy_cast
from vkx.loader.device import Device
from vkx.loader.errors import BadProgramError
from vkx.loader.graph import RTensor
from vkx.loader.memory import Allocator, Buffer, MiB
from vkx.loader.named_data import FreeableBuffer
from vkx.loader.staging import StagingRing, submit_copies, wait_and_reset

lib = vk._vulkan.lib

SOURCE_NUMPY = {
    g.DataType.BOOL: np.dtype(np.bool_), g.DataType.UINT8: np.dtype(np.uint8),
    g.DataType.INT8: np.dtype(np.int8), g.DataType.INT32: np.dtype(np.int32),
    g.DataType.FLOAT16: np.dtype(np.float16), g.DataType.FLOAT32: np.dtype(np.float32),
    g.DataType.FLOAT64: np.dtype(np.float64), g.DataType.INT64: np.dtype(np.int64),
}
CHUNK = 4 * MiB  # file pages in flight per constant on the direct path


def gpu_numpy(dtype: str) -> np.dtype:
    return np.dtype(np.float32 if dtype == "float32" else np.int32)


def source_array(t: RTensor, host: FreeableBuffer) -> np.ndarray:
    """The constant's bytes as a 1-D numpy view of its file dtype (checked against dims)."""
    src = SOURCE_NUMPY.get(t.source_dtype)
    if src is None:
        raise BadProgramError(f"constant value {t.vid}: unsupported datatype {t.source_dtype!r}")
    need = t.arg.numel * src.itemsize
    if host.nbytes != need:
        raise BadProgramError(f"constant value {t.vid} (constant {t.constant_id}): {host.nbytes} bytes, "
                              f"but dims {t.arg.shape} of {t.source_dtype.name} need {need}")
    return host.array(src)


class Uploader:
    def __init__(self, device: Device, allocator: Allocator, mode: str, ring: StagingRing | None = None):
        if mode not in ("direct", "ring", "eager"):
            raise ValueError(mode)
        self.device, self.allocator, self.mode, self.ring = device, allocator, mode, ring
        self.host_copy_bytes = 0     # bytes written by the CPU (cast copies)
        self.device_copy_bytes = 0   # bytes moved by vkCmdCopyBuffer
        self.weight_bytes = 0        # GPU bytes of all constants
        self._cmd = None
        self._fence = None

    @property
    def want(self) -> str:
        return "direct" if self.mode == "direct" else "device"

    def allocate(self, t: RTensor) -> Buffer:
        return self.allocator.buffer(t.nbytes, "weights", self.want)

    def upload(self, t: RTensor, host: FreeableBuffer, dst: Buffer, release: bool) -> None:
        """Copy one constant into `dst`; with `release`, free host pages as soon as they are staged."""
        src = source_array(t, host)
        out = gpu_numpy(t.arg.dtype)
        n = t.arg.numel
        self.weight_bytes += n * 4
        item = src.itemsize
        on_chunk = (lambda lo, hi: host.free_range(lo * item, hi * item)) if release else None
        if self.mode == "direct":
            view = np.frombuffer(dst.mapped(), out, count=n)
            step = max(1, CHUNK // 4)
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                copy_cast(view[lo:hi], src[lo:hi])
                if on_chunk:
                    on_chunk(lo, hi)
            self.host_copy_bytes += n * 4
        elif self.mode == "ring":
            self.ring.upload(src, dst, out, on_chunk=on_chunk)
            self.host_copy_bytes += n * 4
            self.device_copy_bytes += n * 4
        else:
            self._eager(src, dst, out, n)
        if release:
            host.free()

    def _eager(self, src: np.ndarray, dst: Buffer, out: np.dtype, n: int) -> None:
        if n == 0:
            return
        staging = self.allocator.buffer(n * 4, "staging", "host")
        try:
            copy_cast(np.frombuffer(staging.mapped(), out, count=n), src)
            self.host_copy_bytes += n * 4
            if self._cmd is None:
                self._cmd = self.device.command_buffer()
                self._fence = vk.vkCreateFence(self.device.device, vk.VkFenceCreateInfo(), None)
            submit_copies(self.device, self._cmd, staging, [(dst.handle, 0, 0, n * 4)], self._fence)
            wait_and_reset(self.device, self._fence)
            self.device_copy_bytes += n * 4
        finally:
            staging.free()

    def finish(self) -> None:
        if self.ring is not None:
            self.ring.flush()

    @property
    def copies_per_byte(self) -> float:
        if not self.weight_bytes:
            return 0.0
        return (self.host_copy_bytes + self.device_copy_bytes) / self.weight_bytes

    def close(self) -> None:
        d = self.device.device
        if self._cmd is not None:
            lib.vkDeviceWaitIdle(d)
            vk.vkFreeCommandBuffers(d, self.device.command_pool, 1, [self._cmd])
            vk.vkDestroyFence(d, self._fence, None)
            self._cmd = self._fence = None
