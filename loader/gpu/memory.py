"""Device memory: an allocator with a ledger of live and peak bytes per kind.

Kinds: "weights", "activations", "staging", "io", and "imported": host memory
(a mapped file's pages) that the device uses in place through
VK_EXT_external_memory_host; it is counted apart because vkx allocated none of
it (the memory budget does not count it). Every tensor is its own
VkBuffer. Small buffers (< `small_limit`) are bound at aligned offsets inside
shared blocks (4 MiB, doubling up to 64 MiB, or sized to what `expect` says
is to come; one pool per kind and memory type) so that glibc returns their
memory on free (lavapipe's vkAllocateMemory is malloc); large ones get a
dedicated VkDeviceMemory. Activation tensors of
one shared memory object alias a single allocation at offset 0 (`alias_group`).
Nothing is allocated before a caller asks.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import vulkan as vk

from vkx.format.common import align
from vkx.loader.gpu.device import HOST_ALLOCATION, Device, MemoryType
from vkx.loader.errors import DeviceError, ImportRefusedError, OutOfDeviceMemoryError

ffi = vk.ffi
lib = vk._vulkan.lib
KINDS = ("weights", "activations", "staging", "io", "imported", "state")
MiB = 1 << 20
USAGE = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
         | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
_OOM = (vk.VkErrorOutOfDeviceMemory, vk.VkErrorOutOfHostMemory)


@dataclass
class Ledger:
    """Device bytes per kind: live now, peak, and allocation counts."""
    live: dict = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    peak: dict = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    used: dict = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    allocations: dict = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    total_allocations: int = 0
    buffers: int = 0
    peak_total: int = 0

    @property
    def total(self) -> int:
        return sum(self.live.values())

    def add(self, kind: str, nbytes: int) -> None:
        self.live[kind] += nbytes
        self.peak[kind] = max(self.peak[kind], self.live[kind])
        self.peak_total = max(self.peak_total, self.total)
        self.allocations[kind] += 1
        self.total_allocations += 1

    def sub(self, kind: str, nbytes: int) -> None:
        self.live[kind] -= nbytes
        self.allocations[kind] -= 1

    @property
    def is_zero(self) -> bool:
        return self.total == 0 and self.buffers == 0 and not any(self.allocations.values())

    def snapshot(self) -> dict:
        return {"live": dict(self.live), "peak": dict(self.peak), "used": dict(self.used),
                "allocations": dict(self.allocations), "total": self.total,
                "peak_total": self.peak_total, "total_allocations": self.total_allocations,
                "buffers": self.buffers}


class Allocation:
    """One VkDeviceMemory."""
    __slots__ = ("memory", "size", "mtype", "kind", "users", "cursor", "_mapped")

    def __init__(self, memory, size: int, mtype: MemoryType, kind: str):
        self.memory, self.size, self.mtype, self.kind = memory, size, mtype, kind
        self.users = 0
        self.cursor = 0
        self._mapped = None


class Buffer:
    """One VkBuffer bound to `allocation` at `offset`."""
    __slots__ = ("handle", "size", "allocation", "offset", "kind", "_allocator")

    def __init__(self, handle, size, allocation, offset, kind, allocator):
        self.handle, self.size, self.allocation, self.offset = handle, size, allocation, offset
        self.kind, self._allocator = kind, allocator

    @property
    def host_visible(self) -> bool:
        return self.allocation is not None and self.allocation.mtype.host_visible

    def mapped(self) -> memoryview:
        """A writable byte view of this buffer (host-visible memory only).

        The view dangles once the buffer is freed: never keep it beyond that."""
        a = self.allocation
        if a._mapped is None:
            a._mapped = vk.vkMapMemory(self._allocator.device.device, a.memory, 0, a.size, 0)
        return memoryview(a._mapped)[self.offset:self.offset + self.size]

    def free(self) -> None:
        if self.handle is not None:
            self._allocator.free_buffer(self)


class Allocator:
    def __init__(self, device: Device, budget: int | None = None, small_limit: int = 4 * MiB,
                 first_block: int = 4 * MiB, max_block: int = 64 * MiB):
        self.device = device
        self.budget = budget
        self.small_limit = small_limit
        self.first_block = first_block
        self.max_block = max_block
        self.ledger = Ledger()
        self._pools: dict[tuple[str, int], list[Allocation]] = {}
        self._expected: dict[str, int] = {}
        self._dedicated: set[Allocation] = set()
        self._buffers: set[Buffer] = set()

    # -- memory types --------------------------------------------------------
    def direct_type(self, type_bits: int = 0xFFFFFFFF) -> MemoryType | None:
        """A DEVICE_LOCAL | HOST_VISIBLE | HOST_COHERENT type (UMA, resizable BAR), or None."""
        for t in self.device.memory_types:
            if (type_bits >> t.index) & 1 and t.device_local and t.host_visible and t.host_coherent:
                return t
        return None

    def choose_type(self, type_bits: int, want: str) -> MemoryType:
        ok = [t for t in self.device.memory_types if (type_bits >> t.index) & 1]
        if want == "direct":
            t = self.direct_type(type_bits)
            if t is not None:
                return t
            raise DeviceError("no DEVICE_LOCAL|HOST_VISIBLE memory type: the direct upload path is unavailable")
        if want == "device":
            order = sorted(ok, key=lambda t: (not t.device_local, t.host_visible, t.index))
        elif want in ("host", "readback"):
            host = [t for t in ok if t.host_visible and t.host_coherent]
            if not host:
                raise DeviceError("no HOST_VISIBLE|HOST_COHERENT memory type")
            order = sorted(host, key=lambda t: (t.device_local, want == "readback" and not t.host_cached, t.index))
        else:
            raise ValueError(want)
        return order[0]

    # -- raw VkDeviceMemory --------------------------------------------------
    def _allocate(self, size: int, mtype: MemoryType, kind: str) -> Allocation:
        if size > self.device.max_memory_allocation_size:
            raise OutOfDeviceMemoryError(
                f"{kind}: allocation of {size} bytes exceeds maxMemoryAllocationSize "
                f"({self.device.max_memory_allocation_size})")
        in_use = self.ledger.total - self.ledger.live["imported"]
        if self.budget is not None and in_use + size > self.budget:
            raise OutOfDeviceMemoryError(
                f"{kind}: out of device memory: {size} bytes requested, "
                f"{in_use} of the {self.budget}-byte budget in use")
        try:
            memory = vk.vkAllocateMemory(self.device.device, vk.VkMemoryAllocateInfo(
                allocationSize=size, memoryTypeIndex=mtype.index), None)
        except _OOM as error:
            raise OutOfDeviceMemoryError(
                f"{kind}: out of device memory allocating {size} bytes "
                f"({self.ledger.total} in use)") from error
        a = Allocation(memory, size, mtype, kind)
        self.ledger.add(kind, size)
        return a

    def _release(self, a: Allocation) -> None:
        if a._mapped is not None:
            a._mapped = None
            vk.vkUnmapMemory(self.device.device, a.memory)
        vk.vkFreeMemory(self.device.device, a.memory, None)
        self.ledger.sub(a.kind, a.size)

    # -- buffers ---------------------------------------------------------------
    def create_unbound(self, size: int):
        """A VkBuffer with no memory yet, and its memory requirements (whole 32-bit words: a shader
        may read a 16- or 8-bit tensor through words, vkx.loader.ops.read_defines)."""
        size = max(align(int(size), 4), 16)
        try:
            handle = vk.vkCreateBuffer(self.device.device, vk.VkBufferCreateInfo(
                size=size, usage=USAGE, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
        except _OOM as error:
            raise OutOfDeviceMemoryError(f"cannot create a buffer of {size} bytes") from error
        return handle, vk.vkGetBufferMemoryRequirements(self.device.device, handle)

    def expect(self, kind: str, nbytes: int) -> None:
        """That about `nbytes` of small buffers (under small_limit) of `kind` are to come: the blocks
        made for them are sized to what is left (up to max_block), not doubled, so that a load's
        small weights leave at most a MiB of a block empty (2,472 MB of 1B weights took 2,534 MB
        of buffers with doubling blocks). 0: back to doubling."""
        self._expected[kind] = nbytes

    def buffer(self, size: int, kind: str, want: str = "device", dedicated: bool = False) -> Buffer:
        """A new buffer of `size` bytes in memory of kind `want` ("device", "direct", "host", "readback")."""
        handle, req = self.create_unbound(size)
        try:
            mtype = self.choose_type(req.memoryTypeBits, want)
            if req.size < self.small_limit and not dedicated:
                alloc, offset = self._suballocate(req.size, max(int(req.alignment), 256), mtype, kind)
            else:
                alloc, offset = self._allocate(req.size, mtype, kind), 0
                self._dedicated.add(alloc)
            vk.vkBindBufferMemory(self.device.device, handle, alloc.memory, offset)
        except BaseException:
            vk.vkDestroyBuffer(self.device.device, handle, None)
            raise
        alloc.users += 1
        return self._track(Buffer(handle, max(int(size), 16), alloc, offset, kind, self))

    def import_host(self, address: int, size: int, limit: int) -> Buffer:
        """A buffer over the `size` host bytes at `address`, used in place (no device memory, no copy).

        The import covers the enclosing range aligned to the device's import alignment
        and the buffer is bound at `address`'s offset inside it, so a weight need not
        start on a page of its own, only on the buffer offset alignment. The host bytes
        must stay mapped until the buffer is freed; `limit` is the end address of that
        mapping. Raises `ImportRefusedError` (nothing left allocated) where the device cannot.
        """
        dev = self.device
        if dev.import_alignment is None:
            raise ImportRefusedError(f"{dev.name}: no VK_EXT_external_memory_host")
        size = max(align(int(size), 4), 16)  # whole words, as create_unbound
        base = address - address % dev.import_alignment
        span = align(address + size, dev.import_alignment) - base
        offset = address - base
        if base + span > limit:
            raise ImportRefusedError(f"alignment: the {dev.import_alignment}-byte import pages around the "
                                     f"bytes run past the end of the mapping")
        try:
            handle = vk.vkCreateBuffer(dev.device, vk.VkBufferCreateInfo(
                pNext=vk.VkExternalMemoryBufferCreateInfo(handleTypes=HOST_ALLOCATION),
                size=size, usage=USAGE, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
        except _OOM as error:
            raise OutOfDeviceMemoryError(f"cannot create a buffer of {size} bytes") from error
        try:
            req = vk.vkGetBufferMemoryRequirements(dev.device, handle)
            if offset % int(req.alignment):
                raise ImportRefusedError(f"alignment: the bytes start {offset} bytes into a "
                                         f"{dev.import_alignment}-byte import page; a buffer needs a "
                                         f"multiple of {int(req.alignment)}")
            if offset + int(req.size) > span or span > dev.max_memory_allocation_size:
                raise ImportRefusedError(f"size: {span} bytes cannot be imported as one allocation "
                                         f"(maxMemoryAllocationSize {dev.max_memory_allocation_size})")
            bits = dev.host_pointer_types(base) & int(req.memoryTypeBits)
            if not bits:
                raise ImportRefusedError(f"{dev.name}: the driver refuses this host memory for import")
            mtype = self.choose_type(bits, "device")
            try:
                memory = vk.vkAllocateMemory(dev.device, vk.VkMemoryAllocateInfo(
                    pNext=vk.VkImportMemoryHostPointerInfoEXT(handleType=HOST_ALLOCATION,
                                                              pHostPointer=ffi.cast("void *", base)),
                    allocationSize=span, memoryTypeIndex=mtype.index), None)
            except vk.VkError as error:
                raise ImportRefusedError(f"{dev.name}: the driver refused the import "
                                         f"({type(error).__name__})") from error
            alloc = Allocation(memory, span, mtype, "imported")
            self.ledger.add("imported", span)
            try:
                vk.vkBindBufferMemory(dev.device, handle, memory, offset)
            except BaseException:
                self._release(alloc)
                raise
            self._dedicated.add(alloc)
        except BaseException:
            vk.vkDestroyBuffer(dev.device, handle, None)
            raise
        alloc.users += 1
        return self._track(Buffer(handle, size, alloc, offset, "imported", self))

    def alias_group(self, sizes: list[int], kind: str = "activations") -> list[Buffer]:
        """Buffers of `sizes` that all alias one allocation at offset 0 (a shared memory object)."""
        created = []
        try:
            bits, need = 0xFFFFFFFF, 0
            for s in sizes:
                handle, req = self.create_unbound(s)
                created.append((handle, max(int(s), 16)))
                bits &= req.memoryTypeBits
                need = max(need, int(req.size))
            alloc = self._allocate(need, self.choose_type(bits, "device"), kind)
            self._dedicated.add(alloc)
        except BaseException:
            for handle, _ in created:
                vk.vkDestroyBuffer(self.device.device, handle, None)
            raise
        out = []
        for handle, s in created:
            vk.vkBindBufferMemory(self.device.device, handle, alloc.memory, 0)
            alloc.users += 1
            out.append(self._track(Buffer(handle, s, alloc, 0, kind, self)))
        return out

    def overlay(self, layouts: list[list[list[int]]], kind: str = "activations") -> list[list[list[Buffer]]]:
        """Buffers for several layouts that take turns in one allocation (methods that never run
        at once). A layout is a list of slots laid out one after another from offset 0; the
        buffers of one slot (a shared memory object's members) alias each other. The allocation
        is as large as the largest layout."""
        created: list[list[list[tuple]]] = []
        try:
            bits, need = 0xFFFFFFFF, 0
            for layout in layouts:
                slots, end = [], 0
                created.append(slots)  # in the list before any handle exists: the cleanup sees it
                for sizes in layout:
                    members: list[tuple] = []
                    slots.append(members)
                    for s in sizes:
                        handle, req = self.create_unbound(s)
                        members.append((handle, max(int(s), 16), req))
                        bits &= req.memoryTypeBits
                    if members:
                        align = max(max(int(req.alignment), 256) for _, _, req in members)
                        offset = -(-end // align) * align
                        end = offset + max(int(req.size) for _, _, req in members)
                        members[:] = [(h, size, offset) for h, size, _ in members]
                need = max(need, end)
            alloc = self._allocate(max(need, 16), self.choose_type(bits, "device"), kind) if need else None
            if alloc is not None:
                self._dedicated.add(alloc)
        except BaseException:
            for slots in created:
                for members in slots:
                    for handle, *_ in members:
                        vk.vkDestroyBuffer(self.device.device, handle, None)
            raise
        out = []
        for slots in created:
            out.append([])
            for members in slots:
                bound = []
                for handle, s, offset in members:
                    vk.vkBindBufferMemory(self.device.device, handle, alloc.memory, offset)
                    alloc.users += 1
                    bound.append(self._track(Buffer(handle, s, alloc, offset, kind, self)))
                out[-1].append(bound)
        return out

    def _track(self, b: Buffer) -> Buffer:
        self._buffers.add(b)
        self.ledger.buffers += 1
        self.ledger.used[b.kind] += b.size
        return b

    def _suballocate(self, size: int, align: int, mtype: MemoryType, kind: str):
        pool = self._pools.setdefault((kind, mtype.index), [])
        left = self._expected.get(kind, 0)  # this buffer's bytes included
        if left:
            self._expected[kind] = max(0, left - size)
        for block in reversed(pool):
            offset = -(-block.cursor // align) * align
            if offset + size <= block.size:
                block.cursor = offset + size
                return block, offset
        if left > 0:
            block_size = min(self.max_block, -(-left // MiB) * MiB)
        else:
            block_size = self.first_block if not pool else min(self.max_block, pool[-1].size * 2)
        block_size = max(block_size, -(-size // MiB) * MiB)
        block = self._allocate(block_size, mtype, kind)
        pool.append(block)
        block.cursor = size
        return block, 0

    def free_buffer(self, b: Buffer) -> None:
        vk.vkDestroyBuffer(self.device.device, b.handle, None)
        b.handle = None
        self._buffers.discard(b)
        self.ledger.buffers -= 1
        self.ledger.used[b.kind] -= b.size
        a = b.allocation
        a.users -= 1
        if a.users == 0:
            if a in self._dedicated:
                self._dedicated.discard(a)
            else:
                self._pools[(a.kind, a.mtype.index)].remove(a)
            self._release(a)

    def close(self) -> None:
        """Free every buffer and allocation still alive (the ledger returns to zero)."""
        for b in list(self._buffers):
            self.free_buffer(b)
        for pool in self._pools.values():
            for a in pool:
                self._release(a)
        self._pools.clear()
        for a in list(self._dedicated):
            self._release(a)
        self._dedicated.clear()
