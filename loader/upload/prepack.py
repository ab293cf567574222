"""Uploading constants to their GPU tensors ("prepack"): their bytes, as stored in the file.

A device tensor has its constant's dtype, so an upload is a byte copy and the
device bytes of a weight equal its bytes in the file. With `imports` (upload "import"
only) no weight is uploaded: each buffer is bound to the imported file pages
(`Allocator.import_host`), and a weight the device cannot use in place is refused.
Three ways to copy, one per load mode:
- "direct": the destination is DEVICE_LOCAL|HOST_VISIBLE; the file's bytes
  are read (pread) straight into it: one copy of every byte, no host copy.
- "ring": the destination is device memory; bytes are read into the fixed
  `StagingRing`'s chunks, then copied with vkCmdCopyBuffer.
- "eager" (the old order): host copies are read and kept until the end of the
  load; a full-size staging buffer per tensor, copied with vkCmdCopyBuffer,
  waited for, then freed.
`imports` and `upload_mode` decide, from the load options and the device, which apply.
"""
from __future__ import annotations

import vulkan as vk

from vkx.loader.gpu.device import Device
from vkx.loader.errors import BadProgramError, DeviceError, ImportRefusedError
from vkx.loader.build.graph import RTensor
from vkx.loader.gpu.memory import Allocator, Buffer
from vkx.loader.upload.named_data import FreeableBuffer
from vkx.loader.upload.staging import CopyBatch, StagingRing

lib = vk._vulkan.lib


def check_size(t: RTensor, host: FreeableBuffer) -> int:
    """The constant's byte count, checked against its tensor's dims and dtype."""
    need = t.nbytes
    if host.nbytes != need:
        raise BadProgramError(f"constant value {t.vid} (constant {t.constant_id}): {host.nbytes} bytes, "
                              f"but dims {t.arg.shape} of {t.arg.dtype} need {need}")
    return need


class Uploader:
    def __init__(self, device: Device, allocator: Allocator, mode: str, ring: StagingRing | None = None,
                 imports: bool = False):
        if mode not in ("direct", "ring", "eager"):
            raise ValueError(mode)
        self.device, self.allocator, self.mode, self.ring = device, allocator, mode, ring
        self.imports = imports
        self.host_copy_bytes = 0     # bytes written by the CPU
        self.device_copy_bytes = 0   # bytes moved by vkCmdCopyBuffer
        self.weight_bytes = 0        # device bytes of all constants (== their file bytes)
        self.path_bytes = {"imported": 0, "direct": 0, "staged": 0}
        """Weight bytes per way to the device: used in place, written directly, through staging."""
        self._batch: CopyBatch | None = None

    def place(self, t: RTensor, host: FreeableBuffer, in_place: tuple[int, int, int] | str | None) -> Buffer:
        """The device buffer of constant tensor `t`, filled: its file bytes imported when this load
        imports (`in_place`: `(address, size, limit)`, or the reason there is none: refused), else copied."""
        check_size(t, host)
        if self.imports:
            try:
                if isinstance(in_place, str):
                    raise ImportRefusedError(in_place)
                buf = self.allocator.import_host(*in_place)
            except ImportRefusedError as error:
                raise ImportRefusedError(f"upload='import', constant {t.constant_id}: {error}") from None
            self.weight_bytes += t.nbytes
            self.path_bytes["imported"] += t.nbytes
            host.free()
            return buf
        buf = self.allocate(t)  # on a failure below the allocator frees it, after the ring is idle
        self.upload(t, host, buf, release=True)
        return buf

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
        self.path_bytes["direct" if self.mode == "direct" else "staged"] += n
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
            if self._batch is None:
                self._batch = CopyBatch(self.device)
            self._batch.submit(staging, [(dst.handle, 0, 0, n)])
            self._batch.wait()
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
        if self._batch is not None:
            self.device.wait_idle()
            self._batch.close(in_flight=False)
            self._batch = None


def imports(upload: str, device: Device) -> bool:
    """Whether weights are used in place from their mapped files: only when asked (upload="import").

    "auto" never maps a file: the device would read the file's pages on every call, and a page of
    a file that shrinks kills the process with SIGBUS, which no check can catch in time
    (docs/safety.md). Where device memory is host memory a direct copy costs one memcpy of W.
    """
    if upload != "import":
        return False
    if device.import_alignment is None:
        raise ImportRefusedError(f"upload='import': {device.name} has no VK_EXT_external_memory_host")
    return True


def upload_mode(upload: str, schedule: str, allocator: Allocator, device: Device) -> str:
    """How copied weights reach the device (docs/architecture.md, "Upload paths").

    "auto" writes directly where device memory is host memory (an integrated GPU, a CPU
    device) or is host-cached: there a direct write is the one copy a load needs. Where
    device-local host-visible memory is uncached (a discrete GPU's BAR: write-combined,
    CPU stores over PCIe) the ring is faster, so "auto" stages: the CPU fills cached host
    memory and the GPU's copy engine moves it, overlapped with the next chunk's read.
    """
    if schedule == "eager":
        return "eager"
    if upload == "staging":
        return "ring"
    direct = allocator.direct_type()
    if upload == "direct":
        if direct is None:
            raise DeviceError(f"{device.name}: no DEVICE_LOCAL|HOST_VISIBLE memory type for upload='direct'")
        return "direct"
    return "direct" if direct is not None and (device.integrated or direct.host_cached) else "ring"
