"""Loading a VkGraph onto the device, in the lazy (default) or eager order.

lazy (the seed's order): build the graph with no memory; for each constant,
get its freeable host buffer, allocate its GPU tensor right before the copy,
copy (direct, or through the staging ring), free the host pages; then
allocate activation memory (one allocation per shared object); then record
the execute command buffer once.

eager (the old order, for comparison): allocate every weight while building,
every activation at prepare, a full-size staging buffer per constant, and
keep the host copies until the end of the load.
"""
from __future__ import annotations

from typing import Sequence

import vulkan as vk

from vkx.format import vkgraph as g
from vkx.loader.device import Device, default_device
from vkx.loader.errors import DeviceError, LoadError, OutOfDeviceMemoryError
from vkx.loader.graph import GraphBuilder, RTensor
from vkx.loader.memory import Allocator, MiB
from vkx.loader.named_data import FreeableBuffer
from vkx.loader.prepack import Uploader
from vkx.loader.runner import Program
from vkx.loader.shaders import pipelines_for
from vkx.loader.staging import StagingRing
from vkx.loader.trace import Timeline

SCHEDULES = ("lazy", "eager")
UPLOADS = ("auto", "staging", "direct")


class InMemoryConstants:
    """Constants given as bytes-like objects (for graphs built by hand)."""

    def __init__(self, constants: Sequence):
        self.constants = list(constants)

    def get(self, cid: int) -> FreeableBuffer:
        if not 0 <= cid < len(self.constants):
            raise LoadError(f"constant {cid} not given ({len(self.constants)} constants)")
        return FreeableBuffer.in_memory(self.constants[cid])

    def finish_prepack(self) -> None:
        pass

    def close(self) -> None:
        self.constants = []


def load_graph(graph: g.VkGraph, constants: Sequence = (), schedule: str = "lazy",
               device: Device | str | int | None = None, upload: str = "auto", **options) -> Program:
    """Load a hand-built VkGraph whose constant i has the bytes `constants[i]`."""
    return load_source(graph, InMemoryConstants(constants), schedule, device, upload, **options)


def _device(device) -> tuple[Device, bool]:
    if device is None:
        return default_device(), False
    if isinstance(device, Device):
        return device, False
    return Device(str(device)), True


def load_source(graph: g.VkGraph, source, schedule: str = "lazy", device=None, upload: str = "auto",
                *, staging_chunks: int = 4, staging_chunk_bytes: int = 16 * MiB,
                memory_budget: int | None = None, timeline: Timeline | None = None,
                on_close=None, max_binding_bytes: int | None = None, progress=None) -> Program:
    if schedule not in SCHEDULES:
        raise LoadError(f"schedule must be one of {SCHEDULES}, not {schedule!r}")
    if upload not in UPLOADS:
        raise LoadError(f"upload must be one of {UPLOADS}, not {upload!r}")
    timeline = timeline or Timeline()
    if not timeline.phases:
        timeline.mark("before load")
    dev, own_device = _device(device)
    allocator = Allocator(dev, budget=memory_budget)
    timeline.ledger = allocator.ledger
    state = _LoadState(dev, own_device, allocator, source, timeline, on_close)
    state.max_binding_bytes = min(max_binding_bytes or dev.max_storage_buffer_range, dev.max_storage_buffer_range)
    state.progress = progress  # progress(done_bytes, total_bytes) after each constant's upload
    try:
        state.run(graph, schedule, upload, staging_chunks, staging_chunk_bytes)
        dev.check()
        return state.program
    except BaseException as error:
        state.abort()
        if isinstance(error, LoadError):
            error.ledger = allocator.ledger.snapshot()  # after cleanup: all zero
        if isinstance(error, vk.VkError):
            if isinstance(error, (vk.VkErrorOutOfDeviceMemory, vk.VkErrorOutOfHostMemory)):
                raise OutOfDeviceMemoryError(f"out of memory in a Vulkan call ({type(error).__name__})") from error
            raise DeviceError(f"Vulkan call failed: {type(error).__name__}") from error
        raise


class _LoadState:
    """Everything a load creates, so that a failure at any point releases all of it."""

    def __init__(self, device, own_device, allocator, source, timeline, on_close):
        self.device, self.own_device, self.allocator = device, own_device, allocator
        self.source, self.timeline, self.on_close = source, timeline, on_close
        self.ring = None
        self.uploader = None
        self.executor = None
        self.program = None

    def run(self, graph, schedule, upload, staging_chunks, staging_chunk_bytes) -> None:
        dev, allocator = self.device, self.allocator
        # -- build: every op looked up and run, no memory ---------------------------
        cache = pipelines_for(dev)
        builder = GraphBuilder(graph, self.max_binding_bytes, dev.min_storage_buffer_offset_alignment,
                               cache.push_bytes, dev.max_compute_work_group_count).build()
        pipelines = [cache.get(x.shader, dict(x.defines), len(x.bindings)) for x in builder.dispatches]
        used = builder.used_tensors()
        consts: dict[int, list[RTensor]] = {}
        for t in used:
            if t.is_constant:
                consts.setdefault(t.constant_id, []).append(t)
        activ = [t for t in used if not t.is_constant]
        total, done = sum(ts[0].nbytes for ts in consts.values()), 0

        mode = self._mode(schedule, upload)
        if mode == "ring":
            self.ring = StagingRing(dev, allocator, staging_chunks, staging_chunk_bytes)
        self.uploader = up = Uploader(dev, allocator, mode, self.ring)

        if schedule == "eager":
            hosts = {cid: self.source.get(cid) for cid in consts}       # M = W (host)
            for cid, ts in consts.items():                                # M = 2W
                buf = up.allocate(ts[0])
                for t in ts:
                    t.buffer = buf
            self.timeline.mark("after graph build")
            self._allocate_activations(activ)                              # M = 2W + A
            io_in, io_out = self._allocate_io(graph, builder)
            self.timeline.mark("prepack start")
            for cid, ts in consts.items():                                 # +w staging each
                up.upload(ts[0], hosts[cid], ts[0].buffer, release=False)
                if self.progress is not None:
                    done += ts[0].nbytes
                    self.progress(done, total)
            up.finish()
            self.timeline.mark("after prepack")
            for h in hosts.values():                                       # the old runtime freed here
                h.free()
            self.source.finish_prepack()
            self.timeline.mark("after activation allocation")
        else:
            self.timeline.mark("after graph build")
            self.timeline.mark("prepack start")
            for cid, ts in sorted(consts.items()):
                host = self.source.get(cid)                                 # M = W
                buf = up.allocate(ts[0])                                    # + w (GPU)
                for t in ts:
                    t.buffer = buf
                up.upload(ts[0], host, buf, release=True)                   # host pages freed
                if self.progress is not None:
                    done += ts[0].nbytes
                    self.progress(done, total)
            up.finish()
            if self.ring is not None:
                self.ring.close()                                           # staging back to 0
            self.source.finish_prepack()                                    # legacy blob freed
            self.timeline.mark("after prepack")
            self._allocate_activations(activ)                               # M = W + A
            io_in, io_out = self._allocate_io(graph, builder)
            self.timeline.mark("after activation allocation")

        from vkx.loader.record import Executor
        self.executor = Executor(dev, builder.dispatches, pipelines, io_in, io_out)
        self.executor.record()
        self.program = Program(self, graph, builder, io_in, io_out, schedule, mode)

    def _mode(self, schedule: str, upload: str) -> str:
        if schedule == "eager":
            if upload == "direct":
                raise LoadError("upload='direct' needs schedule='lazy'")
            return "eager"
        if upload == "staging":
            return "ring"
        has_direct = self.allocator.direct_type() is not None
        if upload == "direct" and not has_direct:
            raise DeviceError(f"{self.device.name}: no DEVICE_LOCAL|HOST_VISIBLE memory type for upload='direct'")
        return "direct" if has_direct else "ring"

    def _allocate_activations(self, tensors: list[RTensor]) -> None:
        groups: dict[int, list[RTensor]] = {}
        for t in tensors:
            if t.mem_obj_id >= 0 and not t.is_temp:
                groups.setdefault(t.mem_obj_id, []).append(t)
            else:
                t.buffer = self.allocator.buffer(t.nbytes, "activations", "device")
        for mid in sorted(groups):
            members = groups[mid]
            for t, b in zip(members, self.allocator.alias_group([t.nbytes for t in members])):
                t.buffer = b

    def _allocate_io(self, graph, builder):
        io_in, io_out = [], []
        for vid in graph.input_ids:
            t = builder.tensors[vid]
            io_in.append((self.allocator.buffer(t.nbytes, "io", "host"), t))
        for vid in graph.output_ids:
            t = builder.tensors[vid]
            io_out.append((t, self.allocator.buffer(t.nbytes, "io", "readback")))
        return io_in, io_out

    def close(self) -> None:
        """Release every Vulkan object of this load (ledger back to zero)."""
        try:
            if self.executor is not None:
                self.executor.close()
            if self.uploader is not None:
                self.uploader.close()
            if self.ring is not None:
                self.ring.close()
            self.allocator.close()
            self.source.close()
            if self.own_device:
                self.device.close()
        finally:
            if self.on_close is not None:
                self.on_close()

    def abort(self) -> None:
        try:
            self.close()
        except Exception:  # the original error matters more
            pass
