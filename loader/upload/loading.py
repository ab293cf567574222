"""`load_methods`: the one driver that runs the load stages (vkx.loader.upload.stages) over one graph or
every method of a file, in the lazy (default) or eager order, into one `Load` that the methods share;
`load_graph` (graphs built by hand) and `load_source` return the `Program` of one such graph.
"""
from __future__ import annotations

from typing import Sequence

import vulkan as vk

from vkx.format import vkgraph as g
from vkx.loader.gpu.device import Device, default_device
from vkx.loader.errors import DeviceError, LoadError, OutOfDeviceMemoryError
from vkx.loader.gpu.memory import Allocator, MiB
from vkx.loader.execute.method import Method
from vkx.loader.upload.named_data import FreeableBuffer
from vkx.loader.program import Load, Program
from vkx.loader.upload.stages import (Options, Progress, Resources, allocate_activations, allocate_shared_activations,
                               allocate_states, build, check_budget, merge, record, upload_eager, upload_weights)
from vkx.loader.upload.trace import Timeline


class InMemoryConstants:
    """Constants given as bytes-like objects (for graphs built by hand)."""

    def __init__(self, constants: Sequence):
        self.constants = list(constants)

    def get(self, cid: int) -> FreeableBuffer:
        if not 0 <= cid < len(self.constants):
            raise LoadError(f"constant {cid} not given ({len(self.constants)} constants)")
        return FreeableBuffer.in_memory(self.constants[cid])

    def key(self, cid: int) -> int:
        return cid

    def in_place(self, cid: int) -> str:
        return f"constant {cid} is given in memory, not in a mapped file"

    def check_mapped(self) -> None:
        pass  # nothing is mapped

    def finish_prepack(self) -> None:
        pass

    def close(self) -> None:
        self.constants = []


def load_methods(graphs: dict[str, g.VkGraph], source, bases: Sequence[int], schedule: str = "lazy",
                 device=None, upload: str = "auto", *, staging_chunks: int = 4, staging_chunk_bytes: int = 16 * MiB,
                 memory_budget: int | None = None, timeline: Timeline | None = None, on_close=None,
                 max_binding_bytes: int | None = None, progress: Progress | None = None) -> dict[str, Method]:
    """Run the four stages over the methods' graphs at once: method i's constant_ids start at
    `bases[i]` in `source`. Weights are uploaded once for all of them (a byte range of the
    files is one device tensor, whichever method reads it), state once per name; the methods'
    activations take turns in one allocation (calls run one at a time); each method's command
    buffer is recorded once. Returns each method's `Method`, all referencing one `Load` (a `Program` of
    them holds it and releases it)."""
    options = Options(schedule, upload, staging_chunks, staging_chunk_bytes, memory_budget, max_binding_bytes)
    timeline = timeline or Timeline()
    if not timeline.phases:
        timeline.mark("before load")
    dev, own_device = device_of(device)
    allocator = Allocator(dev, budget=memory_budget)
    timeline.ledger = allocator.ledger
    res = Resources(dev, own_device, allocator, source, timeline, on_close)
    try:
        builts = [build(graph, dev, options, source, base) for graph, base in zip(graphs.values(), bases)]
        weights = builts[0] if len(builts) == 1 else merge(builts, source)
        check_budget(weights, dev, options)
        kept = upload_weights(weights, res, options, progress)
        res.states = allocate_states(builts, res)
        if options.schedule == "eager":
            timeline.mark("after graph build")
        io = allocate_activations(builts[0], next(iter(graphs.values())), res) if len(builts) == 1 else \
            allocate_shared_activations(builts, list(graphs.values()), res)
        if options.schedule == "eager":
            upload_eager(weights, res, kept, progress)                     # M = 2W + A
        timeline.mark("after activation allocation")
        res.states.reset()
        load = Load(res, options.schedule)
        methods = {name: Method(load, graph, built, options, record(built, res, io_in, io_out), io_in, io_out, name)
                   for (name, graph), built, (io_in, io_out) in zip(graphs.items(), builts, io)}
        dev.check()
        return methods
    except BaseException as error:
        try:
            res.close()
        except Exception:  # the original error matters more
            pass
        if isinstance(error, LoadError):
            error.ledger = allocator.ledger.snapshot()  # after cleanup: all zero
        if isinstance(error, vk.VkError):
            if isinstance(error, (vk.VkErrorOutOfDeviceMemory, vk.VkErrorOutOfHostMemory)):
                raise OutOfDeviceMemoryError(f"out of memory in a Vulkan call ({type(error).__name__})") from error
            raise DeviceError(f"Vulkan call failed: {type(error).__name__}") from error
        raise


def load_graph(graph: g.VkGraph, constants: Sequence = (), schedule: str = "lazy",
               device: Device | str | int | None = None, upload: str = "auto", **options) -> Program:
    """Load a hand-built VkGraph whose constant i has the bytes `constants[i]`: a `Program` of one
    method, "forward", called as that method (`vkx.load`'s programs are too)."""
    return load_source(graph, InMemoryConstants(constants), schedule, device, upload, **options)


def load_source(graph: g.VkGraph, source, schedule: str = "lazy", device=None, upload: str = "auto",
                **options) -> Program:
    """Run the four stages over `graph`, whose constants come from `source` (`get(cid)`): its `Program`."""
    return Program(load_methods({"forward": graph}, source, [0], schedule, device, upload, **options))


def device_of(device) -> tuple[Device, bool]:
    """(the Device a load runs on, whether the load owns it): the default device for None, a Device
    as given, else one opened by name (the load closes it)."""
    if device is None:
        return default_device(), False
    if isinstance(device, Device):
        return device, False
    return Device(str(device)), True
