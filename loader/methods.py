"""Several methods of one file in one load: their graphs built as one for the weights stage
(each distinct byte range of the files uploaded once), one buffer per state name, and the
methods' activations taking turns in one allocation (their calls run one at a time).
docs/architecture.md, "Several methods and state"; docs/format.md, "Methods".
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Sequence

import vulkan as vk

from vkx.format import vkgraph as g
from vkx.loader.errors import BadProgramError, DeviceError, InputError, LoadError, OutOfDeviceMemoryError
from vkx.loader.graph import RTensor
from vkx.loader.memory import Allocator, MiB
from vkx.loader.program import (Built, Options, Progress, Resources, check_budget, device_of, io_buffers,
                                memory_objects, share_constants, upload_eager, allocate_activations, build,
                                record, upload_weights)
from vkx.loader.record import StateStore
from vkx.loader.runner import Closes, Program
from vkx.loader.trace import Timeline


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


def load_methods(graphs: dict[str, g.VkGraph], source, bases: Sequence[int], schedule: str = "lazy",
                 device=None, upload: str = "auto", *, staging_chunks: int = 4, staging_chunk_bytes: int = 16 * MiB,
                 memory_budget: int | None = None, timeline: Timeline | None = None, on_close=None,
                 max_binding_bytes: int | None = None, progress: Progress | None = None) -> dict[str, Program]:
    """Run the four stages over the methods' graphs at once: method i's constant_ids start at
    `bases[i]` in `source`. Weights are uploaded once for all of them (a byte range of the
    files is one device tensor, whichever method reads it), state once per name; the methods'
    activations take turns in one allocation (calls run one at a time); each method's command
    buffer is recorded once. Returns each method's `Program`, all sharing one device load."""
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
        programs = {}
        for (name, graph), built, (io_in, io_out) in zip(graphs.items(), builts, io):
            executor = record(built, res, io_in, io_out)
            programs[name] = Program(res, graph, executor, io_in, io_out, options.schedule,
                                     "import" if res.uploader.imports else res.uploader.mode, name)
        dev.check()
        return programs
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


class Methods(Closes):
    """A loaded program of several methods: `program.decode(...)` or `program["decode"](...)`.

    The methods share one load: the weights (each once), the state tensors and the
    activation memory, so their calls run one at a time. `close()` releases it all.
    """

    def __init__(self, programs: dict[str, Program], eos_token_ids: tuple[int, ...] = ()):
        self._programs = programs
        self.eos_token_ids = eos_token_ids
        """The token ids that end a generated sequence, as the file records them (a causal LM's)."""
        lock = threading.Lock()
        for program in programs.values():
            program._lock, program._owner = lock, False
        first = next(iter(programs.values()))
        self._first, self._lock = first, lock
        self.device, self.ledger, self.timeline = first.device, first.ledger, first.timeline
        self.weight_bytes = first.weight_bytes
        """Device bytes of the constants of all methods, each once."""
        self.closed = False

    @property
    def methods(self) -> list[str]:
        """The method names, in file order."""
        return list(self._programs)

    def __getitem__(self, name: str) -> Program:
        program = self._programs.get(name)
        if program is None:
            raise InputError(f"no method {name!r} (methods: {', '.join(self._programs)})")
        return program

    def __getattr__(self, name: str) -> Program:
        programs = self.__dict__.get("_programs", {})
        if name in programs:
            return programs[name]
        raise AttributeError(f"{type(self).__name__} has no attribute or method {name!r}")

    @property
    def states(self) -> list[str]:
        return self._first.states

    def reset(self) -> None:
        """Every state tensor back to its initial value."""
        self._first.reset()

    def state(self, name: str):
        """A copy of state tensor `name`: a torch tensor, or a numpy array where torch is not installed."""
        return self._first.state(name)

    def state_spec(self, name: str):
        """(shape, dtype name) of state tensor `name`, without reading it."""
        return self._first.state_spec(name)

    @property
    def memory(self) -> dict:
        return self._first.memory

    def generate(self, input_ids, max_new_tokens: int = 32, *, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int | None = None, timings=None):
        """Yield the token ids that follow `input_ids`, for a causal LM program (methods prefill and
        decode, what `vkx export DIR` writes): greedy unless a temperature is given, up to
        `max_new_tokens` or an EOS token of the model (yielded, then the end). The cache starts
        empty; `timings` (a `vkx.loader.generate.Timings`) receives the measurements."""
        from vkx.loader.generate import ProgramDecoder, Sampling, generate

        decoder = ProgramDecoder(self)
        return generate(decoder, input_ids, max_new_tokens, decoder.shape,
                        sampling=Sampling(temperature, top_k, top_p, seed), timings=timings,
                        stop=decoder.eos_token_ids)

    def close(self) -> None:
        """Release the load (every method's memory, the weights, the state)."""
        if self.closed:
            return
        for program in self._programs.values():
            program.close()
        with self._lock:
            self.closed = True
            self._first._resources.close()
        self.device.check()
