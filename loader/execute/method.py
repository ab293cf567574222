"""`Method`: one loaded graph (a method of a program) you can call with numpy arrays or torch tensors;
`LoadedMethod`, the interface every method of a program offers (`PlanMethod` too); `Tail`, the one way
to extend a loaded method by a tail graph on the device (loader/lm's argmax and chained greedy steps).

Inputs are checked (count, shape, dtype: the dtype each input was exported with;
int64 is also taken for int32 inputs; the elements of an input that indexes memory, a token id or
a cache position, in range: vkx.format.indexing.index_ranges), written into host-visible io buffers, the
pre-recorded command buffer is replayed, and outputs come back in the dtype
the graph declares: torch tensors when any input was one, else numpy arrays (torch
is not needed to run). One output gives one value; several give a tuple. Inputs
may be given by name (the model's forward argument names, recorded in the file).
Each call returns arrays of its own: one copy out of the readback buffers, which
the next call reuses (loader/execute/ports.py).

numpy has no bfloat16: `run_numpy` takes and returns float32 arrays for
bfloat16 inputs and outputs (rounded to bfloat16 on the way in, as torch rounds);
`method(...)` takes and returns torch.bfloat16 tensors.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

import numpy as np

from vkx.format import dtypes, vkgraph as g
from vkx.format.indexing import IndexRange, index_ranges
from vkx.loader.errors import InputError, LoadError
from vkx.loader.build.graph import Dispatch, GraphBuilder, RTensor
from vkx.loader.gpu.memory import Buffer
from vkx.loader.execute.ports import Port, host_array
from vkx.loader.execute.record import Executor
from vkx.loader.gpu.shaders import Pipeline, pipelines_for
from vkx.loader.upload.stages import Built, Options, graph_builder, recorded

if TYPE_CHECKING:
    from vkx.loader.program import Load

R = TypeVar("R")


class TensorSpec(tuple):
    """(shape, dtype name) of one input or output, with `.name`: its name in the model (None without one)."""
    name: str | None

    def __new__(cls, shape: tuple[int, ...], dtype: str, name: str | None = None):
        spec = super().__new__(cls, (shape, dtype))
        spec.name = name
        return spec

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's shape."""
        return self[0]

    @property
    def dtype(self) -> str:
        """The dtype's name as the caller passes and gets it ("float32", "int32", "bfloat16", ...)."""
        return self[1]

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self[0]}, dtype={self[1]!r}, name={self.name!r})"


class Closes:
    """`with` support for objects with a `close()`."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class OwnsMemory:
    """A last-resort close for the one object that owns a load's device memory (`close()`, `closed`),
    when its last reference goes: a program's methods reference that load, so `vkx.load(p).run_numpy(x)`
    keeps it while the call runs (a close in the program's own finalizer released it mid-call)."""

    def __del__(self):
        if not getattr(self, "closed", True):
            try:
                self.close()
            except Exception:  # interpreter shutdown: nothing to report to
                pass


class LoadedMethod(Closes, ABC):
    """What every method of a `Program` offers, whichever way it runs: `Method` runs one graph on the
    device, `PlanMethod` an ExecuTorch plan instruction by instruction. Code that takes a method asks
    this interface, never the method's kind."""

    name: str
    """The method's name (its execution plan's name)."""
    load: Any
    """The load it belongs to (`program.Load`, `plan.PlanLoad`), which its `Program` holds and closes."""
    closed: bool
    """True once `close()` has closed the method (its program's `close()` does)."""

    @property
    @abstractmethod
    def input_specs(self) -> list[TensorSpec]:
        """(shape, dtype name) of each input, in order."""

    @property
    @abstractmethod
    def output_specs(self) -> list[TensorSpec]:
        """(shape, dtype name) of each output, in order."""

    @abstractmethod
    def __call__(self, *inputs, **named):
        """Run on tensors; one output, or a tuple for several."""

    @abstractmethod
    def run_numpy(self, *arrays, **named) -> list[np.ndarray]:
        """Run on numpy arrays; one array per output."""

    @property
    def tail(self) -> "Tail | None":
        """What extends this method by a tail graph on the device (`Tail`); None for a method that runs
        its plan on the host."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Refuse later calls (the load is its program's to release)."""


class Tail:
    """The one way to extend a loaded method by a tail graph over its outputs (an argmax, the hand-over
    of a token to the next step, sampling: loader/lm): `build` binds and builds the tail's ops as a
    load builds any graph, over tensors of the method's load, and `recording` keeps what is recorded
    with them. What it allocates and records is the load's, released with it."""

    def __init__(self, method: "Method", built: Built, options: Options, io_in: list, io_out: list):
        self._method, self._built, self._options = method, built, options
        self.io_in: list[tuple[Buffer, RTensor]] = io_in
        """The method's io buffers and its input tensors, which a recording copies in first."""
        self.inputs: list[RTensor] = [t for _, t in io_in]
        """The method's input tensors (`.arg.dtype`: as held on the device)."""
        self.outputs: list[RTensor] = [t for t, _ in io_out]
        """The method's output tensors."""
        self._recordings: dict[str, Any] = {}

    @property
    def _resources(self):
        return self._method.load.resources

    @property
    def device(self):
        """The Vulkan device of the load."""
        return self._resources.device

    def recording(self, key: str, make: Callable[["Tail"], R]) -> R:
        """The recording `key` of this method, made by `make(tail)` on first use and kept: made under the
        load's lock (no call runs meanwhile), the load open."""
        with self._method.load.lock:
            self._method.check_open()
            if key not in self._recordings:
                self._recordings[key] = make(self)
            return self._recordings[key]

    def build(self, graph: g.VkGraph, sources: Sequence[RTensor] | None = None,
              extend: Callable[[GraphBuilder], list[RTensor]] | None = None
              ) -> tuple[list[Dispatch], list[Pipeline], list[RTensor]]:
        """The method's dispatches then `graph`'s, their pipelines, and `graph`'s output tensors: input i
        of `graph` is `sources[i]`, a tensor of the method's (default: its outputs; of its dtype and
        shape); its other tensors get memory of the load. A tail graph has no constants. `extend`, when
        given, records more dispatches on the graph's builder after its ops (an op called on a builder
        directly, as loader/ops/sample.py's `record_sample` is) and returns tensors of the graph they
        write, which follow `graph`'s outputs."""
        method_graph = self._method.graph
        sources = self.outputs if sources is None else sources
        if len(graph.input_ids) > len(sources):
            raise LoadError(f"a tail graph of {len(graph.input_ids)} inputs over {len(sources)} tensors of "
                            f"method {self._method.name!r}")
        bound = {}
        for vid, out in zip(graph.input_ids, sources):
            value, source = graph.values[vid], method_graph.values[out.vid]
            if not isinstance(value, g.Tensor) or (value.datatype, tuple(value.dims)) != \
                    (source.datatype, tuple(out.arg.shape)):
                raise LoadError(f"tail graph input {vid} is not tensor {out.vid} of method {self._method.name!r} "
                                f"({source.datatype.name} {list(out.arg.shape)})")
            bound[vid] = out
        res = self._resources
        builder = graph_builder(graph, res.device, self._options).build()
        written = extend(builder) if extend is not None else []
        pipelines = self.pipelines([(x.shader, dict(x.defines), len(x.bindings), x.spec) for x in builder.dispatches])
        for t in builder.used_tensors():
            if t.is_constant:
                raise LoadError(f"a tail graph has no constants (value {t.vid} is constant {t.constant_id})")
            t.buffer = bound[t.vid].buffer if t.vid in bound else self.buffer(t.nbytes, "activations", "device")
        return ([*self._built.builder.dispatches, *builder.dispatches], [*self._built.pipelines, *pipelines],
                [*(builder.tensors[vid] for vid in graph.output_ids), *written])

    def buffer(self, nbytes: int, kind: str, want: str) -> Buffer:
        """A buffer of the load's (`Allocator.buffer`'s kinds and memory types)."""
        return self._resources.allocator.buffer(nbytes, kind, want)

    def pipelines(self, requests: list[tuple]) -> list[Pipeline]:
        """The compute pipelines of (shader, defines, bindings, specialization) requests."""
        return pipelines_for(self.device).get_all(requests)

    def record(self, executor: Executor) -> Executor:
        """`executor` recorded and warmed up, owned by the load."""
        return recorded(executor, self._resources)


class Method(LoadedMethod):
    """One loaded graph of a `Program`: call it with tensors. It owns nothing of the load it runs on
    (`load`, which the program holds and closes).

    Safe to call from several threads: calls run one at a time (the load's lock).
    """

    def __init__(self, load: "Load", graph: g.VkGraph, built: Built, options: Options, executor: Executor,
                 io_in: list, io_out: list, name: str = "forward"):
        self.load = load
        """The program's shared load (`program.Load`), which the program closes."""
        self.name = name
        """The method's name (its execution plan's name)."""
        self.graph = graph
        """The VkGraph that was loaded (vkx.format.vkgraph)."""
        self.dispatch_count = len(executor.dispatches)
        """Compute dispatches recorded in the command buffer that each call replays."""
        self.barrier_count = executor.barriers
        """Barriers between those dispatches (one only where a dispatch depends on an earlier one)."""
        self._executor = executor
        self._tail = Tail(self, built, options, io_in, io_out)
        self._in = [Port(t, io) for io, t in io_in]
        self._ranges: list[IndexRange] = index_ranges(graph)
        """What the elements of the inputs that index memory must lie in, checked on the host each call."""
        self._out = [Port(t, io) for t, io in io_out]
        self.closed = False
        """True once `close()` has closed the method (its program's `close()` does)."""
        self._executed = False

    # -- signatures --------------------------------------------------------------
    @property
    def input_specs(self) -> list[TensorSpec]:
        """(shape, dtype name) of each input, in order; `.name` is its name in the model."""
        return [TensorSpec(p.shape, p.dtype.name, p.name) for p in self._in]

    @property
    def output_specs(self) -> list[TensorSpec]:
        """(shape, dtype name) of each output, in order; `.name` is its name in the model."""
        return [TensorSpec(p.shape, p.dtype.name, p.name) for p in self._out]

    def name_io(self, inputs: list[str | None], outputs: list[str | None]) -> None:
        """Give the inputs and outputs the names the file records (vkx.format.names)."""
        for port, name in zip(self._in + self._out, inputs + outputs):
            port.name = name

    # -- calling -------------------------------------------------------------------
    def _arguments(self, arrays: tuple, named: dict) -> list:
        """The inputs in order: positional ones first, then those given by name."""
        if named:
            names = [p.name for p in self._in]
            unknown = [k for k in named if k not in names]
            if unknown:
                known = ", ".join(n for n in names if n) or "none (the file records no input names)"
                raise InputError(f"no input named {unknown[0]!r} (inputs: {known})")
            twice = [k for k in named if names.index(k) < len(arrays)]
            if twice:
                raise InputError(f"input {twice[0]!r} given by position and by name")
            missing = [n or str(i) for i, n in enumerate(names) if i >= len(arrays) and n not in named]
            if missing:
                raise InputError(f"input {missing[0]!r} not given")
            arrays = (*arrays, *(named[n] for n in names[len(arrays):]))
        if len(arrays) != len(self._in):
            raise InputError(f"expected {len(self._in)} input(s), got {len(arrays)}")
        return arrays

    def _inputs(self, arrays) -> tuple[list, bool]:
        """Each input checked against its port, as (port, host array, bits); and whether any was torch's."""
        given = []
        from_torch = False
        for p, x in zip(self._in, arrays):
            a, bits, torch_in = host_array(x)
            from_torch |= torch_in
            if a.shape != p.shape or not p.takes(a, bits):
                self._refuse(len(given), a, bits)
            given.append((p, a, bits))
        for r in self._ranges:
            self._in_range(r, given[r.input][1])
        return given, from_torch

    def _in_range(self, r: IndexRange, a: np.ndarray) -> None:
        """InputError naming the first element of `a` (input `r.input`) outside `r`."""
        if a.size and not (r.low <= a.min() and a.max() < r.high):
            bad = a[(a < r.low) | (a >= r.high)].flat[0]
            p = self._in[r.input]
            label = f"input {r.input}" if p.name is None else f"input {r.input} ({p.name})"
            raise InputError(f"{label}: {r.refusal(int(bad))}")

    def _refuse(self, i: int, a: np.ndarray, bits: bool) -> None:
        p = self._in[i]
        label = f"input {i}" if p.name is None else f"input {i} ({p.name})"
        if a.shape != p.shape:
            raise InputError(f"{label}: shape {a.shape}, expected {p.shape}")
        raise InputError(f"{label}: dtype {'bfloat16' if bits else a.dtype.name}, expected {p.dtype}")

    def check_index(self, i: int, values) -> None:
        """InputError unless `values`, elements for input `i`, lie in the range an input that indexes memory
        must (a token id, a position: vkx.format.indexing); no check where input `i` indexes nothing."""
        for r in self._ranges:
            if r.input == i:
                self._in_range(r, np.asarray(values))

    def check_open(self) -> None:
        """LoadError once the method or its program is closed (under the load's lock)."""
        if self.closed:
            raise LoadError("program is closed")
        self.load.check_open()

    def _call(self, given: list, run: Callable[[], R]) -> R:
        """Under the load's lock, the method open and imported weights' files unchanged (docs/safety.md):
        the checked inputs written into the io buffers, then `run()`."""
        with self.load.lock:
            self.check_open()
            self.load.resources.source.check_mapped()
            for p, a, bits in given:
                p.write(a, bits)
            out = run()
            if not self._executed:
                self._executed = True
                self.load.timeline.mark("after execute")
            return out

    def _execute(self, given: list, torch_out: bool) -> list[np.ndarray]:
        """Write the inputs, replay the command buffer, and read the outputs (fresh arrays)."""
        def run() -> list[np.ndarray]:
            self._executor.run()
            return [p.read(torch_out) for p in self._out]
        return self._call(given, run)

    def replay(self, arrays: Sequence, run: Callable[[list], R]) -> R:
        """Check `arrays` as this method's inputs, as a call does, then, as a call runs, write them into
        the io buffers and return `run(given)` (given: each input's `Port`, array and bits): what a
        recording made through `tail` runs in place of the method's own (loader/lm)."""
        given = self._inputs(self._arguments(tuple(arrays), {}))[0]
        return self._call(given, lambda: run(given))

    def run_numpy(self, *arrays, **named) -> list[np.ndarray]:
        """Run on numpy arrays (or anything numpy takes), by position or input name; returns
        one array per output (bfloat16 ones as float32)."""
        return self._execute(self._inputs(self._arguments(arrays, named))[0], torch_out=False)

    def __call__(self, *inputs, **named):
        """Run on numpy arrays or torch tensors, by position or input name; returns one output,
        or a tuple for several: torch tensors when any input is one, else numpy arrays. Every
        call returns new arrays, which a later call does not overwrite."""
        given, from_torch = self._inputs(self._arguments(inputs, named))
        res = self._execute(given, torch_out=from_torch)
        if from_torch:
            import torch
            res = [torch.from_numpy(o).view(torch.bfloat16) if p.dtype is dtypes.BFLOAT16 else torch.from_numpy(o)
                   for o, p in zip(res, self._out)]
        return res[0] if len(res) == 1 else tuple(res)

    @property
    def tail(self) -> Tail:
        """What extends this method by a tail graph on the device (`Tail`)."""
        return self._tail

    def profile(self, *tensors, runs: int = 10) -> list[tuple[str, str, float]]:
        """(node, shader, GPU seconds) of every dispatch in order, the median of `runs`
        timestamped calls on these inputs (bench/infer.py --profile)."""
        self._execute(self._inputs(self._arguments(tensors, {}))[0], torch_out=False)  # checks, writes the inputs
        with self.load.lock:
            self.check_open()
            times = self._executor.profile(runs)
            return [(x.node, x.shader, t) for x, t in zip(self._executor.dispatches, times)]

    def gpu_seconds(self, *tensors, runs: int = 10) -> float:
        """GPU seconds of one call on these inputs, first dispatch to last as a call records them
        (timestamps; the median of `runs` calls). DeviceError where the queue has no timestamps."""
        self._execute(self._inputs(self._arguments(tensors, {}))[0], torch_out=False)  # checks, writes the inputs
        with self.load.lock:
            self.check_open()
            return self._executor.gpu_seconds(runs)

    @property
    def has_timestamps(self) -> bool:
        """Whether the device's compute queue can time dispatches (profile, gpu_seconds)."""
        device = self.load.device
        return bool(device.timestamp_bits) and device.timestamp_period > 0

    # -- lifetime -----------------------------------------------------------------------
    def close(self) -> None:
        """Refuse later calls; waits for a call in progress. The load is the program's to release."""
        with self.load.lock:
            if self.closed:
                return
            self.closed = True
            for port in self._in + self._out:
                port.view = None  # drop views of the io buffers before their memory goes
