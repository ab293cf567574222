"""A fixed ring of host-visible staging chunks for uploads to device-only memory.

Source bytes are read (from the file, or copied from memory) into the next free
chunk, a vkCmdCopyBuffer to the destination is recorded, and the chunk is
submitted with its own fence once it is full (several small tensors share a
chunk); a chunk is reused after its fence signals, so the file read and host copy
into one chunk overlap the device's copies out of the others. Staging memory
never grows with the largest tensor: a big tensor simply takes many chunks.

Size (`ring_shape`): at most W / RING_SHARE bytes in all for W bytes of weights,
so a staged load peaks within 1% of W over a direct one whatever the model (a
64 MiB ring for every model measured 1.146 W on an H200 at W = 1 GiB); the load
options' 4 x 16 MiB is the most it takes, and a chunk is never under 64 KiB.
"""
from __future__ import annotations

import numpy as np
import vulkan as vk

from vkx.loader.gpu.device import UINT64_MAX, CommandPool, Device
from vkx.loader.errors import DeviceError
from vkx.loader.gpu.memory import Allocator, Buffer, MiB
from vkx.loader.upload.named_data import FreeableBuffer

ffi = vk.ffi
lib = vk._vulkan.lib
_ALIGN = 16
RING_SHARE = 100
MIN_CHUNK = 64 * 1024


def ring_shape(weight_bytes: int, chunks: int, max_chunk_bytes: int) -> tuple[int, int]:
    """(chunks, bytes per chunk) of the ring that stages `weight_bytes` of weights."""
    share = weight_bytes // RING_SHARE // chunks
    return chunks, max(MIN_CHUNK, min(max_chunk_bytes, share - share % _ALIGN))


class CopyBatch:
    """One command buffer and fence for buffer copies, re-recorded for each submission. Its
    cffi structs are built once: the binding's own begin and submit infos cost ~60 µs a
    submission (lavapipe's host), which a ring pays once per chunk."""

    def __init__(self, device: Device):
        self.device = device
        self.commands = CommandPool(device)
        self.cmd = self.commands.buffer()
        self.fence = vk.vkCreateFence(device.device, vk.VkFenceCreateInfo(), None)
        self._fences = ffi.new("VkFence[1]", [self.fence])
        self._cmds = ffi.new("VkCommandBuffer[1]", [self.cmd])
        self._begin = ffi.new("VkCommandBufferBeginInfo*")
        self._begin.sType = vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO
        self._begin.flags = vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT
        self._submit = ffi.new("VkSubmitInfo*")
        self._submit.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO
        self._submit.commandBufferCount = 1
        self._submit.pCommandBuffers = self._cmds
        self._region = ffi.new("VkBufferCopy[1]")

    def submit(self, src: Buffer, regions: list[tuple]) -> None:
        """Record copies out of `src`, (dst VkBuffer, src offset, dst offset, size) each, and submit them."""
        d = self.device
        _check(lib.vkBeginCommandBuffer(self.cmd, self._begin), "vkBeginCommandBuffer")
        region = self._region
        for dst, src_off, dst_off, size in regions:
            region[0].srcOffset, region[0].dstOffset, region[0].size = src_off, dst_off, size
            lib.vkCmdCopyBuffer(self.cmd, src.handle, dst, 1, region)
        _check(lib.vkEndCommandBuffer(self.cmd), "vkEndCommandBuffer")
        with d.submit_lock:
            _check(lib.vkQueueSubmit(d.queue, 1, self._submit, self.fence), "vkQueueSubmit")

    def wait(self) -> None:
        """Wait for the submitted copies (raising on failure or validation messages); the fence is reusable then."""
        self.device.wait_fence(self.fence)
        lib.vkResetFences(self.device.device, 1, self._fences)

    def close(self, in_flight: bool) -> None:
        """Free the command buffer and fence, after the copies in flight (no error raised: this is cleanup)."""
        d = self.device.device
        if in_flight:
            lib.vkWaitForFences(d, 1, self._fences, vk.VK_TRUE, UINT64_MAX)
        vk.vkDestroyFence(d, self.fence, None)
        self.commands.close()


def _check(result: int, call: str) -> None:
    if result != vk.VK_SUCCESS:
        raise DeviceError(f"{call} failed ({result})")


class _Chunk:
    def __init__(self, device: Device, allocator: Allocator, size: int):
        self.buffer: Buffer = allocator.buffer(size, "staging", "host", dedicated=True)
        try:
            self.view = np.frombuffer(self.buffer.mapped(), np.uint8)
            self.batch = CopyBatch(device)
        except BaseException:
            self.buffer.free()
            raise
        self.fill = 0
        self.regions: list[tuple] = []  # (dst VkBuffer, src offset, dst offset, size)
        self.in_flight = False


class StagingRing:
    def __init__(self, device: Device, allocator: Allocator, chunks: int = 4, chunk_bytes: int = 16 * MiB):
        if chunks < 1 or chunk_bytes < MIN_CHUNK:
            raise ValueError("staging ring needs at least 1 chunk of at least 64 KiB")
        self.device, self.allocator = device, allocator
        self.nchunks, self.chunk_bytes = chunks, chunk_bytes - chunk_bytes % _ALIGN
        self._chunks: list[_Chunk] = []
        self._current = 0
        self.submits = 0

    def _chunk(self) -> _Chunk:
        """The chunk being filled; created on first need, waited for when reused."""
        if self._current == len(self._chunks):
            self._chunks.append(_Chunk(self.device, self.allocator, self.chunk_bytes))
        c = self._chunks[self._current]
        self._retire(c)
        return c

    def _retire(self, c: _Chunk) -> None:
        """Wait until `c`'s copies are done (when it has some in flight)."""
        if c.in_flight:
            c.batch.wait()
            c.in_flight = False

    def _submit(self, c: _Chunk) -> None:
        if not c.regions:
            return
        c.batch.submit(c.buffer, c.regions)
        c.in_flight = True
        c.regions = []
        c.fill = 0
        self.submits += 1
        self._current = (self._current + 1) % self.nchunks

    def upload(self, src: FreeableBuffer, dst: Buffer) -> None:
        """Copy the bytes of `src` into `dst`, chunk by chunk."""
        n = src.nbytes
        done = 0
        while done < n:
            c = self._chunk()
            room = self.chunk_bytes - c.fill
            if room == 0 or (room < n - done and c.fill and room < self.chunk_bytes // 4):
                self._submit(c)  # nearly full: start a fresh chunk rather than split finely
                continue
            take = min(room, n - done)
            src.read_into(done, c.view[c.fill:c.fill + take])
            c.regions.append((dst.handle, c.fill, done, take))
            c.fill = -(-(c.fill + take) // _ALIGN) * _ALIGN
            done += take
            if c.fill >= self.chunk_bytes:
                self._submit(c)

    def flush(self) -> None:
        """Submit what is pending and wait until every chunk's copies are done."""
        if self._chunks and self._current < len(self._chunks):
            self._submit(self._chunks[self._current])
        for c in self._chunks:
            self._retire(c)

    def close(self) -> None:
        """Wait for pending copies and free every chunk (staging goes back to zero)."""
        for c in self._chunks:
            c.batch.close(c.in_flight)
            c.in_flight = False
            c.view = None
            c.buffer.free()
        self._chunks.clear()
        self._current = 0
