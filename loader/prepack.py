"""Uploading constants to their GPU tensors ("prepack"): their bytes, as stored in the file.

A device tensor has its constant's dtype, so an upload is a byte copy and the
device bytes of a weight equal its bytes in the file. Three ways, one per load mode:
- "direct": the destination is DEVICE_LOCAL|HOST_VISIBLE; the file's bytes
  are read (pread) straight into it: one copy of every byte, no host copy.
- "ring": the destination is device memory; bytes are read into the fixed
  `StagingRing`'s chunks, then copied with vkCmdCopyBuffer.
- "eager" (the old order): host copies are read and kept until the end of the
  load; a full-size staging buffer per tensor, copied with vkCmdCopyBuffer,
  waited for, then freed.
"""
from __future__ import annotations

import vulkan as vk

from vkx.loader.device import Device
from vkx.loader.errors import BadProgramError
from vkx.loader.graph import RTensor
from vkx.loader.memory import Allocator, Buffer
from vkx.loader.named_data import FreeableBuffer
from vkx.loader.staging import StagingRing, submit_copies, wait_and_reset

lib = vk._vulkan.lib


def check_size(t: RTensor, host: FreeableBuffer) -> int:
    """The constant's byte count, checked against its tensor's dims and dtype."""
    need = t.nbytes
    if host.nbytes != need:
        raise BadProgramError(f"constant value {t.vid} (constant {t.constant_id}): {host.nbytes} bytes, "
                              f"but dims {t.arg.shape} of {t.arg.dtype} need {need}")
    return need


class Uploader:
    def __init__(self, device: Device, allocator: Allocator, mode: str, ring: StagingRing | None = None):
        if mode not in ("direct", "ring", "eager"):
            raise ValueError(mode)
        self.device, self.allocator, self.mode, self.ring = device, allocator, mode, ring
        self.host_copy_bytes = 0     # bytes written by the CPU (cast copies)
        self.device_copy_bytes = 0   # bytes moved by vkCmdCopyBuffer
        self.weight_bytes = 0        # device bytes of all constants (== their file bytes)
        self._cmd = None
        self._fence = None

    @property
    def want(self) -> str:
        return "direct" if self.mode == "direct" else "device"

    def allocate(self, t: RTensor) -> Buffer:
        return self.allocator.buffer(t.nbytes, "weights", self.want)

    def upload(self, t: RTensor, host: FreeableBuffer, dst: Buffer, release: bool) -> None:
        """Copy one constant into `dst`; with `release` the host keeps nothing of it afterwards,
        without, its host copy is kept until `host.free()` (the old runtime's order)."""
        n = check_size(t, host)
        self.weight_bytes += n
        if not release and host.hold():
            self.host_copy_bytes += n
        if self.mode == "direct":
            host.read_into(0, dst.mapped()[:n])
            self.host_copy_bytes += n
        elif self.mode == "ring":
            self.ring.upload(host, dst)
            self.host_copy_bytes += n
            self.device_copy_bytes += n
        else:
            self._eager(host, dst, n)
        if release:
            host.free()

    def _eager(self, host: FreeableBuffer, dst: Buffer, n: int) -> None:
        if n == 0:
            return
        staging = self.allocator.buffer(n, "staging", "host")
        try:
            host.read_into(0, staging.mapped()[:n])
            self.host_copy_bytes += n
            if self._cmd is None:
                self._cmd = self.device.command_buffer()
                self._fence = vk.vkCreateFence(self.device.device, vk.VkFenceCreateInfo(), None)
            submit_copies(self.device, self._cmd, staging, [(dst.handle, 0, 0, n)], self._fence)
            wait_and_reset(self.device, self._fence)
            self.device_copy_bytes += n
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
