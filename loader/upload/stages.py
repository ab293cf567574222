"""Loading VkGraphs onto the device: four named stages, run in the lazy (default) or eager order
by `vkx.loader.upload.loading.load_methods` (over one graph, or every method of a file).

    build        every op bound to its contract declaration and built into dispatches; no memory
    weights      each constant's device tensor allocated right before its upload, its host pages
                 freed as soon as they are staged; then the load-time prepack dispatches, once
    activations  one allocation per shared memory object, plus the io buffers
    record       the execute command buffer, recorded once and replayed by `Method`

Each stage is a function that takes what the one before returned. Several methods of one
file load as one: their graphs built as one for the weights stage (each distinct byte range
of the files uploaded once), one buffer per state name, and the methods' activations taking
turns in one allocation (their calls run one at a time; docs/architecture.md, "Several methods
and state"). `Resources`
owns every Vulkan object the stages create, so a failure at any point releases
all of it (the ledger goes back to zero).

Weights used in place: with upload="import" a weight whose file range the device can import
(VK_EXT_external_memory_host) is bound to those file pages; no device memory, no copy, and the
file stays mapped until the program closes (after the device memory is freed); a file changed
under it is an error at the next call (docs/safety.md). "auto" always copies. Other weights fall
back one by one; upload="import" refuses instead (`ImportRefusedError`).

lazy runs the stages as listed: peak W + max(S, A + IO + state) (format.describe.lazy_peak). eager (the old order, for comparison)
allocates every weight and every activation first, copies each weight through a full-size
staging buffer, and keeps the host copies until the end: peak 2W + A + IO + w + state
(format/describe.py spells both; docs/memory.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from vkx.format import vkgraph as g
from vkx.loader.gpu.device import Device
from vkx.loader.errors import BadProgramError, LoadError, OutOfDeviceMemoryError
from vkx.loader.build.graph import GraphBuilder, RTensor
from vkx.loader.gpu.memory import Allocator, Buffer, MiB
from vkx.loader.upload.options import SCHEDULES, UPLOADS
from vkx.loader.upload.prepack import Uploader, imports, upload_mode
from vkx.loader.execute.record import Executor, StateStore
from vkx.loader.gpu.shaders import Pipeline, pipelines_for
from vkx.loader.upload.staging import MIN_CHUNK, StagingRing, ring_shape
from vkx.loader.upload.trace import Timeline


Progress = Callable[[int, int], None]
"""`progress(done_bytes, total_bytes)`, called after each weight's upload."""


@dataclass
class Options:
    """The load options, checked once: what the user chose is what a `Method` reports."""
    schedule: str = "lazy"
    upload: str = "auto"
    staging_chunks: int = 4
    staging_chunk_bytes: int = 16 * MiB
    memory_budget: int | None = None
    max_binding_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise LoadError(f"schedule must be one of {', '.join(SCHEDULES)}, not {self.schedule!r}")
        if self.upload not in UPLOADS:
            raise LoadError(f"upload must be one of {', '.join(UPLOADS)}, not {self.upload!r}")
        if self.schedule == "eager" and self.upload in ("direct", "import"):
            raise LoadError(f"upload={self.upload!r} needs schedule='lazy'")
        for name in ("staging_chunks", "staging_chunk_bytes"):
            if not _positive_int(getattr(self, name)):
                raise LoadError(f"{name} must be a positive integer, not {getattr(self, name)!r}")
        if self.staging_chunk_bytes < MIN_CHUNK:
            raise LoadError(f"staging_chunk_bytes must be at least 64 KiB, not {self.staging_chunk_bytes}")
        for name in ("memory_budget", "max_binding_bytes"):
            value = getattr(self, name)
            if value is not None and not _positive_int(value):
                raise LoadError(f"{name} must be a positive number of bytes, not {value!r}")


def _positive_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0


class Resources:
    """Every object a load creates, with one release path."""

    def __init__(self, device: Device, own_device: bool, allocator: Allocator, source, timeline: Timeline,
                 on_close: Callable[[], None] | None):
        self.device, self.own_device, self.allocator = device, own_device, allocator
        self.source, self.timeline, self.on_close = source, timeline, on_close
        self.ring: StagingRing | None = None
        self.uploader: Uploader | None = None
        self.executors: list[Executor] = []
        self.states: StateStore | None = None

    def close(self) -> None:
        """Release every Vulkan object of this load (ledger back to zero)."""
        try:
            for obj in (*self.executors, self.states, self.uploader, self.ring):
                if obj is not None:
                    obj.close()
            self.allocator.close()
            self.source.close()
            if self.own_device:
                self.device.close()
        finally:
            if self.on_close is not None:
                self.on_close()


@dataclass
class Built:
    """What the build stage hands on: the graph's dispatches and the tensors that need memory."""
    builder: GraphBuilder
    pipelines: list[Pipeline]
    prepack_pipelines: list[Pipeline]
    constants: dict[int, list[RTensor]] = field(default_factory=dict)
    """A constant_id -> the tensors that read it or any constant with the same bytes in the files
    (one device tensor for all of them)."""
    dedicated: list[RTensor] = field(default_factory=list)
    """Load-time prepack outputs: weights in their device form, allocated with the weights."""
    activations: list[RTensor] = field(default_factory=list)
    states: dict[str, tuple[RTensor, RTensor | None]] = field(default_factory=dict)
    """Each persistent state's tensor and its initial value's constant (None: zeros)."""

    @property
    def prepack_dispatches(self) -> list:
        return self.builder.prepack_dispatches


# --------------------------------------------------------------------------- the stages

def build(graph: g.VkGraph, device: Device, options: Options, source, base: int = 0) -> Built:
    """Stage 1: bind and build every op (no memory); refuse a graph that cannot fit the device.

    Constants whose bytes are one range of the files (`source.key`: the writer stores
    a tensor once, however many constant_ids name it) get one device tensor. `base`:
    where this graph's constant_ids start in `source` (methods of one file share it).
    """
    builder = graph_builder(graph, device, options).build()
    every = pipelines_for(device).get_all([(x.shader, dict(x.defines), len(x.bindings), x.spec)
                                           for x in [*builder.dispatches, *builder.prepack_dispatches]])
    pipelines, prepack = every[:len(builder.dispatches)], every[len(builder.dispatches):]
    built = Built(builder, pipelines, prepack)
    produced = {t.vid for d in builder.prepack_dispatches for t, _, _ in d.bindings[-1:]}
    built.states = builder.states
    for t in builder.used_tensors():
        if t.is_constant:
            built.constants.setdefault(base + t.constant_id, []).append(t)
        elif t.state is not None:
            continue
        elif t.vid in produced:
            built.dedicated.append(t)
        else:
            built.activations.append(t)
    share_constants(built, source)
    return built


def graph_builder(graph: g.VkGraph, device: Device, options: Options) -> GraphBuilder:
    """A builder of `graph` for this device: its limits in force, the binding range lowered to the
    load's `max_binding_bytes`, the push constants to what vkx's pipelines declare."""
    binding = device.limits.max_storage_buffer_range
    limits = replace(device.limits, max_storage_buffer_range=min(options.max_binding_bytes or binding, binding),
                     max_push_constants_size=pipelines_for(device).push_bytes)
    return GraphBuilder(graph, limits, device.compute_units, device.is_cpu, device.fp16_cooperative_matrix)


def share_constants(built: Built, source) -> None:
    """One entry (so one device tensor) per byte range of the files."""
    by_key: dict = {}
    for cid in sorted(built.constants):
        first = by_key.setdefault(source.key(cid), cid)
        if first != cid:
            built.constants[first] += built.constants.pop(cid)
    for cid, ts in built.constants.items():
        sizes = {t.nbytes for t in ts}
        if len(sizes) > 1:
            raise BadProgramError(f"constant {cid} is read as tensors of {sorted(sizes)} bytes; "
                                  f"all tensors of one constant must have one size")


def memory_objects(built: Built) -> tuple[dict[int, list[RTensor]], list[RTensor]]:
    """The activations by shared memory object, and those with memory of their own (temps included)."""
    groups: dict[int, list[RTensor]] = {}
    dedicated: list[RTensor] = []
    for t in built.activations:
        if t.mem_obj_id >= 0 and not t.is_temp:
            groups.setdefault(t.mem_obj_id, []).append(t)
        else:
            dedicated.append(t)
    return groups, dedicated


def check_budget(built: Built, device: Device, options: Options) -> None:
    """Refuse, before any work, a graph whose weights and activations cannot fit the device."""
    groups, dedicated = memory_objects(built)
    # upload="import" loads every constant in place or fails: constants need no device memory then
    constants = 0 if options.upload == "import" else sum(ts[0].nbytes for ts in built.constants.values())
    weights = constants + sum(t.nbytes for t in built.dedicated)
    activations = sum(t.nbytes for t in dedicated) + sum(max(t.nbytes for t in ts) for ts in groups.values())
    # A driver may hand out more than its heap (lavapipe's heap is a nominal 2 GiB of host
    # memory), so weights are checked against an explicit budget only; activations alone
    # past the largest device heap cannot be meant.
    heap = max(device.heap_sizes, default=0)
    if heap and activations > heap:
        raise OutOfDeviceMemoryError(f"the program's activations need {activations / MiB:.1f} MiB, more than "
                                     f"the device's largest heap ({heap / MiB:.1f} MiB)")
    budget = options.memory_budget
    if budget is not None and weights + activations > budget:
        raise OutOfDeviceMemoryError(
            f"the program needs {(weights + activations) / MiB:.1f} MiB of device memory (weights "
            f"{weights / MiB:.1f} MiB, activations {activations / MiB:.1f} MiB), over the budget of "
            f"{budget / MiB:.1f} MiB")


def upload_weights(built: Built, res: Resources, options: Options, progress: Progress | None) -> dict[int, tuple]:
    """Stage 2: every constant onto the device, then the load-time prepack dispatches.

    lazy: allocate each constant's tensor right before its upload and free its host
    pages as it goes. eager: allocate all first and keep the host copies (returned,
    freed by the caller after the activations, as the old runtime did).
    """
    dev, allocator = res.device, res.allocator
    mode = upload_mode(options.upload, options.schedule, allocator, dev)
    total = sum(ts[0].nbytes for ts in built.constants.values())
    # the small weights' block is sized for what it will hold: imported constants take none of it
    copied = [] if options.upload == "import" else [ts[0] for ts in built.constants.values()]
    allocator.expect("weights", sum(t.nbytes for t in copied + built.dedicated if t.nbytes < allocator.small_limit))
    if mode == "ring":
        res.ring = StagingRing(dev, allocator, *ring_shape(total, options.staging_chunks, options.staging_chunk_bytes))
    res.uploader = up = Uploader(dev, allocator, mode, res.ring, imports(options.upload, dev))
    done = 0
    kept: dict[int, tuple] = {}
    order = sorted(built.constants.items())
    if options.schedule == "eager":
        hosts = {cid: res.source.get(cid) for cid, _ in order}              # M = W (host)
        for cid, ts in order:                                                # M = 2W
            _give(ts, up.allocate(ts[0]))
        for t in built.dedicated:
            t.buffer = allocator.buffer(t.nbytes, "weights", "device")
        kept = {cid: (hosts[cid], ts) for cid, ts in order}
        return kept
    res.timeline.mark("after graph build")
    res.timeline.mark("prepack start")
    hosts = [res.source.get(cid) for cid, _ in order]                     # byte ranges, no bytes yet
    for i, (cid, ts) in enumerate(order):
        if i + 1 < len(hosts):
            hosts[i + 1].read_ahead()  # the kernel reads the next weight from disk while this one is copied
        # M = W; imported: + 0; else + w (GPU), host pages freed as they are copied
        _give(ts, up.place(ts[0], hosts[i], res.source.in_place(cid) if up.imports else None))
        done += ts[0].nbytes
        if progress is not None:
            progress(done, total)
    up.finish()
    if res.ring is not None:
        res.ring.close()                                                     # staging back to 0
        res.ring = None
    _run_prepack(built, res)
    allocator.expect("weights", 0)
    res.source.finish_prepack()                                              # legacy blob freed
    res.timeline.mark("after prepack")
    return kept


def upload_eager(built: Built, res: Resources, kept: dict[int, tuple], progress: Progress | None) -> None:
    """The old order's prepack: a full-size staging buffer per constant, host copies kept."""
    up = res.uploader
    total = sum(ts[0].nbytes for _, ts in kept.values())
    done = 0
    res.timeline.mark("prepack start")
    for host, ts in kept.values():
        up.upload(ts[0], host, ts[0].buffer, release=False)
        done += ts[0].nbytes
        if progress is not None:
            progress(done, total)
    up.finish()
    _run_prepack(built, res)
    res.timeline.mark("after prepack")
    for host, _ in kept.values():                                            # the old runtime freed here
        host.free()
    res.source.finish_prepack()


def _run_prepack(built: Built, res: Resources) -> None:
    """The load-time dispatches (a weight converted to its device form), submitted once and waited for."""
    dispatches = built.prepack_dispatches
    if not dispatches:
        return
    for t in built.dedicated:
        if t.buffer is None:
            t.buffer = res.allocator.buffer(t.nbytes, "weights", "device")
    once = Executor(res.device, dispatches, built.prepack_pipelines, [], [])
    try:
        once.record()
        once.run()
    finally:
        once.close()


def allocate_activations(built: Built, graph: g.VkGraph, res: Resources) -> list[tuple[list, list]]:
    """Stage 3: one allocation per shared memory object (dedicated ones apart), then the io buffers."""
    allocator = res.allocator
    groups, dedicated = memory_objects(built)
    for t in dedicated:
        t.buffer = allocator.buffer(t.nbytes, "activations", "device")
    for mid in sorted(groups):
        members = groups[mid]
        for t, b in zip(members, allocator.alias_group([t.nbytes for t in members])):
            t.buffer = b
    return [io_buffers(built, graph, res)]


def io_buffers(built: Built, graph: g.VkGraph, res: Resources) -> tuple[list, list]:
    """Host-visible buffers for the graph's inputs and readback buffers for its outputs."""
    tensors, allocator = built.builder.tensors, res.allocator
    io_in = [(allocator.buffer(tensors[vid].nbytes, "io", "host"), tensors[vid]) for vid in graph.input_ids]
    io_out = [(tensors[vid], allocator.buffer(tensors[vid].nbytes, "io", "readback")) for vid in graph.output_ids]
    return io_in, io_out


def record(built: Built, res: Resources, io_in: list, io_out: list) -> Executor:
    """Stage 4: the execute command buffer, recorded once."""
    return recorded(Executor(res.device, built.builder.dispatches, built.pipelines, io_in, io_out), res)


def recorded(executor: Executor, res: Resources) -> Executor:
    """`executor` recorded and its pipelines warmed up, owned by the load (`res`: released with it)."""
    res.executors.append(executor)
    executor.record()
    executor.warm_up()
    return executor


# --------------------------------------------------------------------------- several methods as one

@dataclass
class Merged(Built):
    """The weights of several methods' graphs, built as one: shared constants once."""
    parts: list[Built] = field(default_factory=list)

    @property
    def prepack_dispatches(self) -> list:
        return [d for b in self.parts for d in b.builder.prepack_dispatches]


def merge(builts: list[Built], source) -> Merged:
    """The methods' constants, load-time prepacks and activations in one Built (for the weights stage)."""
    largest = max(builts, key=lambda b: sum(t.nbytes for t in b.activations))
    merged = Merged(None, [], [p for b in builts for p in b.prepack_pipelines], parts=builts,
                    dedicated=[t for b in builts for t in b.dedicated], activations=largest.activations)
    for b in builts:
        for cid, ts in b.constants.items():
            merged.constants.setdefault(cid, []).extend(ts)
    share_constants(merged, source)
    return merged


def allocate_states(builts: list[Built], res: Resources) -> StateStore:
    """One device buffer per state name, shared by every method that declares it (same shape and
    dtype), given its initial value by `StateStore.reset()`."""
    states: dict[str, tuple[RTensor, RTensor | None]] = {}
    for built in builts:
        for name, (t, initial) in built.states.items():
            if name not in states:
                # whole words: vkCmdFillBuffer fills a multiple of 4 bytes
                t.buffer = res.allocator.buffer(-(-t.nbytes // 4) * 4, "state", "device", dedicated=True)
                states[name] = (t, initial)
                continue
            first = states[name][0]
            if (first.arg.shape, first.arg.dtype) != (t.arg.shape, t.arg.dtype):
                raise BadProgramError(f"state {name!r} is {first.arg.dtype} {list(first.arg.shape)} in one method "
                                      f"and {t.arg.dtype} {list(t.arg.shape)} in another")
            t.buffer = first.buffer
    return StateStore(res.device, states)


def allocate_shared_activations(builts: list[Built], graphs: list[g.VkGraph], res: Resources) -> list[tuple]:
    """Stage 3 for several methods: each method's memory objects laid out from offset 0 of one
    allocation as large as the largest method's (their calls never overlap); io buffers per method."""
    layouts, order = [], []
    for built in builts:
        groups, dedicated = memory_objects(built)
        slots = [groups[mid] for mid in sorted(groups)] + [[t] for t in dedicated]
        layouts.append([[t.nbytes for t in members] for members in slots])
        order.append(slots)
    for slots, buffers in zip(order, res.allocator.overlay(layouts)):
        for members, bound in zip(slots, buffers):
            for t, b in zip(members, bound):
                t.buffer = b
    return [io_buffers(built, graph, res) for built, graph in zip(builts, graphs)]


def _give(tensors: list[RTensor], buffer: Buffer) -> None:
    for t in tensors:
        t.buffer = buffer
