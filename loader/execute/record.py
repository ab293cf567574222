"""The execute command buffer: recorded once, replayed on every call.

Layout of the recording: a barrier that makes prepack uploads and host writes
visible; copies of the host-visible input buffers into the input tensors;
the dispatches, with a compute->compute barrier only before one that touches
bytes an earlier dispatch wrote (or writes bytes one read) since the last barrier
(`vkx.loader.execute.hazards`), so independent dispatches may overlap; copies of the output
tensors into host-visible readback buffers; a barrier to host reads. Hot
paths use raw `vk._vulkan.lib` calls with structs built once.

`Executor.profile` records the same commands once more with a barrier and a
timestamp after every dispatch (serialised, so the difference of two neighbouring
stamps is one dispatch's GPU time) and replays that command buffer;
`Executor.gpu_seconds` records them as a call does, with a timestamp before the
first dispatch and after the last. Its parts (`inputs_in`, `record_dispatches`, `outputs_out`) are methods
of their own, so that a recording of another shape reuses them (loader/lm's chained greedy steps).
"""
from __future__ import annotations

import time

import vulkan as vk

from vkx.loader.gpu.device import UINT64_MAX, CommandPool, Device
from vkx.loader.errors import DeviceError
from vkx.loader.build.graph import Dispatch, RTensor
from vkx.loader.execute.hazards import barriers_before
from vkx.loader.gpu.memory import Buffer
from vkx.loader.gpu.shaders import Pipeline

ffi = vk.ffi
lib = vk._vulkan.lib
SPIN_SECONDS = 0.002
"""How long a call polls its fence before it blocks, on a GPU: a blocking wait costs ~26 µs more
than polling on the H200 (docs/benchmarks.md, per-call overhead), and torch's CUDA synchronise
spins too. Never on a CPU device, whose driver threads need the cores a spin would take."""

COMPUTE = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
TRANSFER = vk.VK_PIPELINE_STAGE_TRANSFER_BIT
_HOST = vk.VK_PIPELINE_STAGE_HOST_BIT
_BIND = vk.VK_PIPELINE_BIND_POINT_COMPUTE
_BOTTOM = vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT


def barrier(src_access: int, dst_access: int):
    mb = ffi.new("VkMemoryBarrier*")
    mb.sType = vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER
    mb.srcAccessMask = src_access
    mb.dstAccessMask = dst_access
    return mb


def _release(device: Device, owner) -> None:
    """Free `owner`'s command pool (its recorded buffers with it) and its fence, waiting for the device
    first: the one release path of Executor and StateStore."""
    d = device.device
    if owner.fence is not None:
        device.wait_idle()
        vk.vkDestroyFence(d, owner.fence, None)
        owner.fence = None
    owner.commands.close()
    owner.cmd = None


class Executor:
    def __init__(self, device: Device, dispatches: list[Dispatch], pipelines: list[Pipeline],
                 inputs: list[tuple[Buffer, RTensor]], outputs: list[tuple[RTensor, Buffer]]):
        self.device = device
        self.dispatches = dispatches
        self.pipelines = pipelines  # one per dispatch
        self.inputs, self.outputs = inputs, outputs
        self.pool = None
        self.commands = CommandPool(device)
        self.cmd = None
        self.fence = None
        self.barriers = 0
        """Compute->compute barriers between the dispatches of the recording a call replays."""

    def record(self) -> None:
        self.allocate_sets()
        self.cmd = self.commands.buffer()
        self.fence = vk.vkCreateFence(self.device.device, vk.VkFenceCreateInfo(), None)
        self._keep = self._commands(self.cmd)

        # Prebuilt submit structures for replay.
        self._cmds = ffi.new("VkCommandBuffer[1]", [self.cmd])
        self._submit = ffi.new("VkSubmitInfo*")
        self._submit.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO
        self._submit.commandBufferCount = 1
        self._submit.pCommandBuffers = self._cmds
        self._fences = ffi.new("VkFence[1]", [self.fence])
        self.device.check()

    def allocate_sets(self) -> None:
        """One descriptor set per dispatch, written once."""
        d = self.device.device
        self._sets = []
        if not self.dispatches:
            return
        nbind = sum(len(x.bindings) for x in self.dispatches)
        sizes = [vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=max(nbind, 1))]
        self.pool = vk.vkCreateDescriptorPool(d, vk.VkDescriptorPoolCreateInfo(
            maxSets=len(self.dispatches), pPoolSizes=sizes), None)
        self._sets = vk.vkAllocateDescriptorSets(d, vk.VkDescriptorSetAllocateInfo(
            descriptorPool=self.pool, pSetLayouts=[p.set_layout for p in self.pipelines]))
        writes = []
        for i, x in enumerate(self.dispatches):
            for j, (t, offset, size) in enumerate(x.bindings):
                info = vk.VkDescriptorBufferInfo(buffer=t.buffer.handle, offset=offset, range=size)
                writes.append(vk.VkWriteDescriptorSet(
                    dstSet=self._sets[i], dstBinding=j, descriptorCount=1,
                    descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, pBufferInfo=[info]))
            if len(writes) >= 256:
                vk.vkUpdateDescriptorSets(d, len(writes), writes, 0, None)
                writes = []
        if writes:
            vk.vkUpdateDescriptorSets(d, len(writes), writes, 0, None)

    def _commands(self, cmd, queries=None, each: bool = False) -> tuple:
        """Record the execution into `cmd`; returns the structs the recording points at, which
        must live as long as it. With query pool `queries`: timestamps before the first dispatch
        and after the last, or (`each`) a barrier and a timestamp after every dispatch."""
        vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo())
        if queries is not None:
            lib.vkCmdResetQueryPool(cmd, queries, 0, len(self.dispatches) + 1 if each else 2)
        keep = (*self.inputs_in(cmd), *self.record_dispatches(cmd, queries, each), *self.outputs_out(cmd))
        vk.vkEndCommandBuffer(cmd)
        return keep

    def inputs_in(self, cmd) -> tuple:
        """Prepack uploads and host writes made visible, then the io buffers copied into the input tensors."""
        rw = vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
        tr = vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT
        start = barrier(vk.VK_ACCESS_TRANSFER_WRITE_BIT | vk.VK_ACCESS_HOST_WRITE_BIT | rw, rw | tr)
        lib.vkCmdPipelineBarrier(cmd, TRANSFER | _HOST | COMPUTE, TRANSFER | COMPUTE, 0,
                                 1, start, 0, ffi.NULL, 0, ffi.NULL)
        region = ffi.new("VkBufferCopy*")
        for io, t in self.inputs:
            region.srcOffset, region.dstOffset, region.size = 0, 0, t.nbytes
            if t.nbytes:
                lib.vkCmdCopyBuffer(cmd, io.handle, t.buffer.handle, 1, region)
        after_in = barrier(vk.VK_ACCESS_TRANSFER_WRITE_BIT, rw)
        lib.vkCmdPipelineBarrier(cmd, TRANSFER, COMPUTE, 0, 1, after_in, 0, ffi.NULL, 0, ffi.NULL)
        return start, after_in, region

    def record_dispatches(self, cmd, queries=None, each: bool = False, needed: list[bool] | None = None) -> tuple:
        """The dispatches, each barrier where `barriers_before` puts one (`needed`, when given:
        worked out once for several recordings), or timestamped (`_commands`)."""
        if queries is not None:
            lib.vkCmdWriteTimestamp(cmd, _BOTTOM, queries, 0)
        rw = vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
        between = barrier(vk.VK_ACCESS_SHADER_WRITE_BIT, rw)
        set_ptr = ffi.new("VkDescriptorSet[1]")
        stage = vk.VK_SHADER_STAGE_COMPUTE_BIT
        if needed is None:
            needed = [False] * len(self.dispatches) if each else barriers_before(self.dispatches)
        for i, (x, p) in enumerate(zip(self.dispatches, self.pipelines)):
            if needed[i]:
                lib.vkCmdPipelineBarrier(cmd, COMPUTE, COMPUTE, 0, 1, between, 0, ffi.NULL, 0, ffi.NULL)
            lib.vkCmdBindPipeline(cmd, _BIND, p.handle)
            set_ptr[0] = self._sets[i]
            lib.vkCmdBindDescriptorSets(cmd, _BIND, p.layout, 0, 1, set_ptr, 0, ffi.NULL)
            if x.push:
                lib.vkCmdPushConstants(cmd, p.layout, stage, 0, len(x.push), ffi.from_buffer(x.push))
            lib.vkCmdDispatch(cmd, *x.groups)
            if each:
                lib.vkCmdPipelineBarrier(cmd, COMPUTE, COMPUTE, 0, 1, between, 0, ffi.NULL, 0, ffi.NULL)
                lib.vkCmdWriteTimestamp(cmd, _BOTTOM, queries, i + 1)
        if queries is not None and not each:
            lib.vkCmdWriteTimestamp(cmd, _BOTTOM, queries, 1)
        if queries is None:
            self.barriers = sum(needed)
        return between, set_ptr

    def outputs_out(self, cmd) -> tuple:
        """The output tensors copied into the readback buffers, then made visible to the host."""
        before_out = barrier(vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                              vk.VK_ACCESS_TRANSFER_READ_BIT)
        lib.vkCmdPipelineBarrier(cmd, COMPUTE | TRANSFER, TRANSFER, 0, 1, before_out, 0, ffi.NULL, 0, ffi.NULL)
        region = ffi.new("VkBufferCopy*")
        for t, io in self.outputs:
            region.srcOffset, region.dstOffset, region.size = 0, 0, t.nbytes
            if t.nbytes:
                lib.vkCmdCopyBuffer(cmd, t.buffer.handle, io.handle, 1, region)
        to_host = barrier(vk.VK_ACCESS_TRANSFER_WRITE_BIT, vk.VK_ACCESS_HOST_READ_BIT)
        lib.vkCmdPipelineBarrier(cmd, TRANSFER, _HOST, 0, 1, to_host, 0, ffi.NULL, 0, ffi.NULL)
        return before_out, to_host, region

    def profile(self, runs: int) -> list[float]:
        """GPU seconds of each dispatch, in order: the median over `runs` replays of a
        timestamped, serialised recording (made for this call; the inputs are what the io
        buffers hold)."""
        return self._timed(runs, each=True)

    def gpu_seconds(self, runs: int) -> float:
        """GPU seconds from the first dispatch's start to the last one's end as a call records
        them: the median over `runs` replays (the inputs are what the io buffers hold)."""
        return self._timed(runs, each=False)[0]

    def _timed(self, runs: int, each: bool) -> list[float]:
        """Medians over `runs` replays of the spans between neighbouring timestamps."""
        dev = self.device
        if not dev.timestamp_bits or dev.timestamp_period <= 0:
            raise DeviceError(f"{dev.name}: its compute queue has no timestamps to profile with")
        n = len(self.dispatches) + 1 if each else 2
        d = dev.device
        queries = vk.vkCreateQueryPool(d, vk.VkQueryPoolCreateInfo(
            queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=n), None)
        cmd = self.commands.buffer()
        try:
            keep = self._commands(cmd, queries, each)
            submit = ffi.new("VkSubmitInfo*")
            submit.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO
            submit.commandBufferCount = 1
            cmds = ffi.new("VkCommandBuffer[1]", [cmd])
            submit.pCommandBuffers = cmds
            stamps = ffi.new("uint64_t[]", n)
            mask = (1 << dev.timestamp_bits) - 1 if dev.timestamp_bits < 64 else (1 << 64) - 1
            samples: list[list[float]] = [[] for _ in range(n - 1)]
            for _ in range(runs):
                with dev.submit_lock:
                    r = lib.vkQueueSubmit(dev.queue, 1, submit, self.fence)
                if r != vk.VK_SUCCESS:
                    raise DeviceError(f"vkQueueSubmit failed ({r})")
                dev.wait_fence(self.fence)
                lib.vkResetFences(d, 1, self._fences)
                r = lib.vkGetQueryPoolResults(d, queries, 0, n, n * 8, stamps, 8,
                                              vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
                if r != vk.VK_SUCCESS:
                    raise DeviceError(f"vkGetQueryPoolResults failed ({r})")
                for i in range(n - 1):
                    ticks = (int(stamps[i + 1]) - int(stamps[i])) & mask
                    samples[i].append(ticks * dev.timestamp_period * 1e-9)
            del keep
            return [sorted(s)[len(s) // 2] for s in samples]
        finally:
            self.commands.free(cmd)
            vk.vkDestroyQueryPool(d, queries, None)
            dev.check()

    def warm_up(self) -> None:
        """Have the driver finish compiling every pipeline now, at load: each bound once and
        dispatched with no workgroups (no work, no memory touched). A CPU device (lavapipe) compiles
        a pipeline's code at its first dispatch, which would otherwise land in the first call."""
        first = {}
        for i, p in enumerate(self.pipelines):
            first.setdefault(id(p), i)
        if not first:
            return
        dev = self.device
        cmd = self.commands.buffer()
        fence = vk.vkCreateFence(dev.device, vk.VkFenceCreateInfo(), None)
        try:
            vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo(
                flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
            set_ptr = ffi.new("VkDescriptorSet[1]")
            rw = vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
            between = barrier(rw, rw)  # the sets name real buffers: synchronization validation
            for k, i in enumerate(first.values()):  # checks even a dispatch of no workgroups
                x, p = self.dispatches[i], self.pipelines[i]
                if k:
                    lib.vkCmdPipelineBarrier(cmd, COMPUTE, COMPUTE, 0, 1, between, 0, ffi.NULL, 0, ffi.NULL)
                lib.vkCmdBindPipeline(cmd, _BIND, p.handle)
                set_ptr[0] = self._sets[i]
                lib.vkCmdBindDescriptorSets(cmd, _BIND, p.layout, 0, 1, set_ptr, 0, ffi.NULL)
                if x.push:
                    lib.vkCmdPushConstants(cmd, p.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, len(x.push),
                                           ffi.from_buffer(x.push))
                lib.vkCmdDispatch(cmd, 0, 0, 0)
            vk.vkEndCommandBuffer(cmd)
            cmds = ffi.new("VkCommandBuffer[1]", [cmd])
            submit = ffi.new("VkSubmitInfo*")
            submit.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO
            submit.commandBufferCount = 1
            submit.pCommandBuffers = cmds
            with dev.submit_lock:
                r = lib.vkQueueSubmit(dev.queue, 1, submit, fence)
            if r != vk.VK_SUCCESS:
                raise DeviceError(f"vkQueueSubmit failed ({r})")
            dev.wait_fence(fence)
        finally:
            vk.vkDestroyFence(dev.device, fence, None)
            self.commands.free(cmd)
        dev.check()

    def run(self) -> None:
        self.submit_and_wait(self._submit)

    def submit_and_wait(self, submit) -> None:
        d = self.device
        with d.submit_lock:
            r = lib.vkQueueSubmit(d.queue, 1, submit, self.fence)
        if r != vk.VK_SUCCESS:
            raise DeviceError(f"vkQueueSubmit failed ({r})")
        r = self._spin() if not d.is_cpu else vk.VK_NOT_READY
        if r == vk.VK_NOT_READY:
            r = lib.vkWaitForFences(d.device, 1, self._fences, vk.VK_TRUE, UINT64_MAX)
        lib.vkResetFences(d.device, 1, self._fences)
        if r != vk.VK_SUCCESS:
            raise DeviceError(f"waiting for the GPU failed ({r})")
        d.check()

    def _spin(self) -> int:
        """Poll the fence for up to SPIN_SECONDS: VK_SUCCESS, VK_NOT_READY, or an error code."""
        end = time.perf_counter() + SPIN_SECONDS
        while True:
            r = lib.vkGetFenceStatus(self.device.device, self.fence)
            if r != vk.VK_NOT_READY or time.perf_counter() > end:
                return r

    def close(self) -> None:
        _release(self.device, self)
        if self.pool is not None:
            vk.vkDestroyDescriptorPool(self.device.device, self.pool, None)
            self.pool = None


class StateStore:
    """The persistent state tensors: one device buffer per name, shared by every method.

    `reset()` replays a command buffer recorded once: each state zero-filled in place
    (vkCmdFillBuffer: no staging) or copied from its initial value's constant.
    """

    def __init__(self, device: Device, states: dict[str, tuple[RTensor, RTensor | None]]):
        self.device = device
        self.states = states
        self.commands = CommandPool(device)
        self.cmd = self.fence = None
        if states:
            self._record()

    def _record(self) -> None:
        self.cmd = self.commands.buffer()
        self.fence = vk.vkCreateFence(self.device.device, vk.VkFenceCreateInfo(), None)
        vk.vkBeginCommandBuffer(self.cmd, vk.VkCommandBufferBeginInfo())
        # earlier calls may still read or write the state: they finish before it is overwritten
        rw = vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
        before = barrier(rw | vk.VK_ACCESS_TRANSFER_WRITE_BIT, vk.VK_ACCESS_TRANSFER_WRITE_BIT)
        lib.vkCmdPipelineBarrier(self.cmd, COMPUTE | TRANSFER, TRANSFER, 0, 1, before, 0, ffi.NULL, 0, ffi.NULL)
        region = ffi.new("VkBufferCopy*")
        for t, initial in self.states.values():
            if initial is None:
                lib.vkCmdFillBuffer(self.cmd, t.buffer.handle, 0, UINT64_MAX, 0)  # VK_WHOLE_SIZE
            else:
                region.srcOffset, region.dstOffset, region.size = 0, 0, t.nbytes
                lib.vkCmdCopyBuffer(self.cmd, initial.buffer.handle, t.buffer.handle, 1, region)
        after = barrier(vk.VK_ACCESS_TRANSFER_WRITE_BIT, rw | vk.VK_ACCESS_TRANSFER_READ_BIT)
        lib.vkCmdPipelineBarrier(self.cmd, TRANSFER, COMPUTE | TRANSFER, 0, 1, after, 0, ffi.NULL, 0, ffi.NULL)
        vk.vkEndCommandBuffer(self.cmd)

    def reset(self) -> None:
        """Every state back to its initial value (waits until done)."""
        if self.cmd is not None:
            self._submit(self.cmd, self.fence)

    def read(self, name: str, allocator) -> bytes:
        """A copy of state `name`'s bytes, through a readback buffer freed before returning."""
        t = self.states[name][0]
        out = allocator.buffer(t.nbytes, "io", "readback")
        cmd = self.commands.buffer()
        fence = vk.vkCreateFence(self.device.device, vk.VkFenceCreateInfo(), None)
        try:
            vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo())
            done = barrier(vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                            vk.VK_ACCESS_TRANSFER_READ_BIT)
            lib.vkCmdPipelineBarrier(cmd, COMPUTE | TRANSFER, TRANSFER, 0, 1, done, 0, ffi.NULL, 0, ffi.NULL)
            region = ffi.new("VkBufferCopy*")
            region.srcOffset, region.dstOffset, region.size = 0, 0, t.nbytes
            lib.vkCmdCopyBuffer(cmd, t.buffer.handle, out.handle, 1, region)
            to_host = barrier(vk.VK_ACCESS_TRANSFER_WRITE_BIT, vk.VK_ACCESS_HOST_READ_BIT)
            lib.vkCmdPipelineBarrier(cmd, TRANSFER, _HOST, 0, 1, to_host, 0, ffi.NULL, 0, ffi.NULL)
            vk.vkEndCommandBuffer(cmd)
            self._submit(cmd, fence)
            return bytes(out.mapped()[:t.nbytes])
        finally:
            vk.vkDestroyFence(self.device.device, fence, None)
            self.commands.free(cmd)
            out.free()

    def _submit(self, cmd, fence) -> None:
        d = self.device
        with d.submit_lock:
            vk.vkQueueSubmit(d.queue, 1, [vk.VkSubmitInfo(pCommandBuffers=[cmd])], fence)
        d.wait_fence(fence)
        vk.vkResetFences(d.device, 1, [fence])

    def close(self) -> None:
        _release(self.device, self)
