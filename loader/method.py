"""`Method`: one loaded graph (a method of a program) you can call with numpy arrays or torch tensors.

Inputs are checked (count, shape, dtype: the dtype each input was exported with;
int64 is also taken for int32 inputs; the elements of an input that indexes memory, a token id or
a cache position, in range: vkx.format.indexing.index_ranges), written into host-visible io buffers, the
pre-recorded command buffer is replayed, and outputs come back in the dtype
the graph declares: torch tensors when any input was one, else numpy arrays (torch
is not needed to run). One output gives one value; several give a tuple. Inputs
may be given by name (the model's forward argument names, recorded in the file).
Each call returns arrays of its own: one copy out of the readback buffers, which
the next call reuses (loader/ports.py).

numpy has no bfloat16: `run_numpy` takes and returns float32 arrays for
bfloat16 inputs and outputs (rounded to bfloat16 on the way in, as torch rounds);
`method(...)` takes and returns torch.bfloat16 tensors.
"""
from __future__ import annotations

import math
import threading
from typing import Callable

import numpy as np

from vkx.format import dtypes, vkgraph as g
from vkx.format.indexing import IndexRange, index_ranges
from vkx.loader.errors import InputError, LoadError
from vkx.loader.ports import Port, bf16_bits, bf16_values, host_array
from vkx.loader.report import MemoryReport


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
    """`with` support and a last-resort close for objects that own device memory (`close()`, `closed`)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if not getattr(self, "closed", True):
            try:
                self.close()
            except Exception:  # interpreter shutdown: nothing to report to
                pass


class Method(Closes):
    """One loaded graph: call it with tensors; `close()` (or `with`) releases its device memory
    (a method of a `Program` leaves that to the program).

    Safe to call from several threads: calls run one at a time.
    """

    def __init__(self, resources, graph: g.VkGraph, executor, io_in, io_out, schedule: str, upload: str,
                 name: str = "forward", record_argmax: Callable[[], tuple] | None = None,
                 record_greedy: Callable[[], tuple] | None = None):
        self._resources = resources
        self.name = name
        """The method's name (its execution plan's name)."""
        self.graph = graph
        """The VkGraph that was loaded (vkx.format.vkgraph)."""
        self.schedule = schedule
        """The load order that was used: "lazy" or "eager"."""
        self.upload = upload
        """How weights reached the device: "import" (used in place where possible, the rest
        copied directly or staged), "direct", "ring" or "eager"."""
        self.device = resources.device
        """The Vulkan device the program runs on."""
        self.ledger = resources.allocator.ledger
        """Device bytes per kind (live now, peak, allocation counts)."""
        self.timeline = resources.timeline
        """Host and device memory at each load phase (`memory["phases"]`)."""
        self.copies_per_weight_byte = resources.uploader.copies_per_byte
        """Bytes the CPU and the device copied per weight byte on its way (0 imported, 1 direct, 2 staged)."""
        self.weight_bytes = resources.uploader.weight_bytes
        """Device bytes of the constants: equal to their bytes in the file."""
        self.weight_paths = dict(resources.uploader.path_bytes)
        """Weight bytes "imported" (used in place, no copy), copied "direct", or "staged"."""
        self.dispatch_count = len(executor.dispatches)
        """Compute dispatches recorded in the command buffer that each call replays."""
        self.barrier_count = executor.barriers
        """Barriers between those dispatches (one only where a dispatch depends on an earlier one)."""
        self._executor = executor
        self._record_argmax = record_argmax
        """Records, on the first `argmax()`, the call followed by its output's argmax (greedy.record_argmax)."""
        self._argmax: tuple | None = None
        """(executor, port) of that recording, once made."""
        self._record_greedy = record_greedy
        """Records, on the first `greedy()`, the chained greedy steps (greedy.record_greedy)."""
        self._greedy: tuple | None = None
        """(steps, view of the [count, tokens...] readback buffer) of that recording, once made."""
        self._in = [Port(t, io) for io, t in io_in]
        self._ranges: list[IndexRange] = index_ranges(graph)
        """What the elements of the inputs that index memory must lie in, checked on the host each call."""
        self._out = [Port(t, io) for t, io in io_out]
        self.closed = False
        """True once `close()` has released the device memory."""
        self._owner = True
        """Whether close() releases the load (a method of a `Program` leaves that to it)."""
        self._executed = False
        # One recorded command buffer, one fence and one set of io buffers serve every call, so a
        # call (write inputs, submit, wait, read outputs) must not overlap another call or close().
        self._lock = threading.Lock()

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

    def _execute(self, given: list, torch_out: bool, argmax: bool = False, steps: int | None = None) -> list[np.ndarray]:
        """Write the inputs, replay the command buffer, and read the outputs (fresh arrays); with
        `argmax`, the recording that ends in the output's argmax, and that argmax; with `steps`, that
        many chained greedy steps, and their tokens."""
        with self._lock:
            if self.closed:
                raise LoadError("program is closed")
            self._resources.source.check_mapped()  # imported weights' files (docs/safety.md)
            if steps is not None:
                return [self._run_greedy(given, steps)]
            executor, outputs = self._executor, self._out
            if argmax:
                executor, port = self._argmax_recording()
                outputs = [port]
            for p, a, bits in given:
                p.write(a, bits)
            executor.run()
            if not self._executed:
                self._executed = True
                self.timeline.mark("after execute")
            return [p.read(torch_out) for p in outputs]

    def _argmax_recording(self) -> tuple:
        """(executor, port) of `argmax`'s recording, made on first use (under the lock)."""
        if self._argmax is None:
            if self._record_argmax is None:
                raise LoadError(f"method {self.name!r} has no argmax recording")
            tail, t, readback = self._record_argmax()
            self._argmax = (tail, Port(t, readback))
        return self._argmax

    def _greedy_recording(self) -> tuple:
        """(steps, view of [count, tokens...]) of `greedy`'s recording, made on first use (under the lock)."""
        if self._greedy is None:
            if self._record_greedy is None or not self.chains_greedy:
                raise LoadError(f"method {self.name!r} cannot chain greedy steps: that needs inputs (a token id "
                                "[1, 1], a position [1]) held as int32 and one float output of one row")
            chained, readback = self._record_greedy()
            self._greedy = (chained, np.frombuffer(readback.mapped(), np.int32, count=chained.counter.arg.numel))
        return self._greedy

    def _run_greedy(self, given: list, steps: int) -> np.ndarray:
        """`greedy`'s work, under the lock: write, submit, read; in turns of the chain's length."""
        if steps < 1:
            raise InputError(f"greedy steps must be at least 1, not {steps}")
        chained, tokens = self._greedy_recording()
        (ids, _, _), (position, first, _) = given
        for p, a, bits in given:
            p.write(a, bits)
        out = []
        while len(out) < steps:
            n = min(steps - len(out), chained.chain)
            chained.run(n)
            out.extend(tokens[1:n + 1])
            ids.view[...] = out[-1]  # the next turn starts where this one ended
            position.view[...] = int(first.reshape(-1)[0]) + len(out)
        return np.array(out, np.int32)

    def record_ahead(self, *, argmax: bool = False, greedy: bool = False) -> None:
        """Make now the recordings that `argmax` and `greedy` make on their first call (command
        buffers, pipelines), so that a first call costs what later ones do: generation does this
        before it starts its clock."""
        with self._lock:
            if self.closed:
                raise LoadError("program is closed")
            if argmax:
                self._argmax_recording()
            if greedy:
                self._greedy_recording()

    def run_numpy(self, *arrays, **named) -> list[np.ndarray]:
        """Run on numpy arrays (or anything numpy takes), by position or input name; returns
        one array per output (bfloat16 ones as float32)."""
        return self._execute(self._inputs(self._arguments(arrays, named))[0], torch_out=False)

    def argmax(self, *arrays, **named) -> np.ndarray:
        """Run on numpy arrays as `run_numpy` does, and return the index of the largest element
        along the last dim of the method's one (float) output, its first one (NaN the largest), as
        int32 of the output's shape less that dim: computed on the device after the call, so only
        the indices are read back (a greedy decoding step's token id, not the vocabulary's logits).
        The first call records that second command buffer (the method's dispatches, then the argmax)."""
        return self._execute(self._inputs(self._arguments(arrays, named))[0], torch_out=False, argmax=True)[0]

    @property
    def chains_greedy(self) -> bool:
        """Whether `greedy` can chain this method's steps: a decode method, (token id [1, 1], position
        [1]) held as int32 on the device -> one float output of one row (logits)."""
        ins_ok = [p.device for p in self._in] == [dtypes.INT32] * 2 and [p.shape for p in self._in] == [(1, 1), (1,)]
        return ins_ok and len(self._out) == 1 and self._out[0].device.is_float and \
            math.prod(self._out[0].shape[:-1]) == 1

    def greedy(self, input_ids, cache_position, steps: int) -> np.ndarray:
        """`steps` tokens of greedy decoding after token `input_ids` [1, 1] at `cache_position` [1],
        chained on the device in one submission: each step runs this (decode) method, takes its
        logits' argmax as `argmax` does and feeds that token back at the next position, with no host
        work between steps (a submission chains greedy.GREEDY_CHAIN of them; more take turns); the
        state (the KV cache) advances as `steps` calls would advance it. Returns the tokens, int32
        [steps]. The first call records the steps (greedy.record_greedy)."""
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)):
            raise InputError(f"greedy steps must be an int, not {type(steps).__name__}")
        given = self._inputs(self._arguments((input_ids, cache_position), {}))[0]
        last = given[1][1].astype(np.int64) + max(int(steps) - 1, 0)  # the position the last step writes
        for r in self._ranges:
            if r.input == 1:
                self._in_range(r, last)
        return self._execute(given, torch_out=False, steps=int(steps))[0]

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

    def profile(self, *tensors, runs: int = 10) -> list[tuple[str, str, float]]:
        """(node, shader, GPU seconds) of every dispatch in order, the median of `runs`
        timestamped calls on these inputs (bench/infer.py --profile)."""
        self._execute(self._inputs(self._arguments(tensors, {}))[0], torch_out=False)  # checks, writes the inputs
        with self._lock:
            if self.closed:
                raise LoadError("program is closed")
            times = self._executor.profile(runs)
            return [(x.node, x.shader, t) for x, t in zip(self._executor.dispatches, times)]

    def gpu_seconds(self, *tensors, runs: int = 10) -> float:
        """GPU seconds of one call on these inputs, first dispatch to last as a call records them
        (timestamps; the median of `runs` calls). DeviceError where the queue has no timestamps."""
        self._execute(self._inputs(self._arguments(tensors, {}))[0], torch_out=False)  # checks, writes the inputs
        with self._lock:
            if self.closed:
                raise LoadError("program is closed")
            return self._executor.gpu_seconds(runs)

    @property
    def has_timestamps(self) -> bool:
        """Whether the device's compute queue can time dispatches (profile, gpu_seconds)."""
        return bool(self.device.timestamp_bits) and self.device.timestamp_period > 0

    # -- methods and state -------------------------------------------------------------
    @property
    def methods(self) -> list[str]:
        """This one method (as `Program.methods`, for a graph loaded alone)."""
        return [self.name]

    def __getitem__(self, name: str) -> "Method":
        if name != self.name:
            raise InputError(f"no method {name!r} (methods: {self.name})")
        return self

    @property
    def states(self) -> list[str]:
        """The names of the persistent state tensors."""
        return list(self._resources.states.states)

    def reset(self) -> None:
        """Every state tensor back to its initial value."""
        with self._lock:
            if self.closed:
                raise LoadError("program is closed")
            self._resources.states.reset()

    def _state_tensor(self, name: str):
        store = self._resources.states
        if name not in store.states:
            known = ", ".join(store.states) or "none"
            raise InputError(f"no state {name!r} (states: {known})")
        return store.states[name][0]

    def state_spec(self, name: str) -> TensorSpec:
        """(shape, dtype name) of state tensor `name`, without reading it."""
        t = self._state_tensor(name)
        return TensorSpec(t.arg.shape, t.staging.name, name)

    def state(self, name: str):
        """A copy of state tensor `name`: a torch tensor, or a numpy array where torch is not installed."""
        store = self._resources.states
        t = self._state_tensor(name)
        with self._lock:
            if self.closed:
                raise LoadError("program is closed")
            data = store.read(name, self._resources.allocator)
        held, dtype = t.arg.dtype, t.staging
        array = np.frombuffer(data, np.dtype(held.numpy)).reshape(t.arg.shape).copy()
        if held != dtype:  # held in 32 bits on a device without narrow storage (vkx.loader.ops.held_dtype)
            array = bf16_bits(array) if dtype is dtypes.BFLOAT16 else array.astype(np.dtype(dtype.numpy))
        try:
            import torch
        except ImportError:
            return bf16_values(array) if dtype is dtypes.BFLOAT16 else array
        out = torch.from_numpy(array)
        return out.view(torch.bfloat16) if dtype is dtypes.BFLOAT16 else out

    # -- memory ----------------------------------------------------------------------
    @property
    def memory(self) -> MemoryReport:
        """The load's memory report: schedule, upload, weight bytes and paths, the ledger, the heap
        budget (None once closed) and the phases (docs/memory.md); `print()` it for the tables."""
        return MemoryReport({"schedule": self.schedule, "upload": self.upload,
                "device": self.device.name,
                "weight_bytes": self.weight_bytes,
                "copies_per_weight_byte": self.copies_per_weight_byte,
                "weight_paths": dict(self.weight_paths),
                "ledger": self.ledger.snapshot(),
                "heap_budget": self.device.heap_budget() if not self.closed else None,
                "phases": self.timeline.as_list()})

    # -- lifetime -----------------------------------------------------------------------
    def close(self) -> None:
        """Release the device memory (when this method owns its load); waits for a call in progress."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            for port in self._in + self._out:
                port.view = None  # drop views of the io buffers before their memory goes
            if self._owner:
                self._resources.close()
        if self._owner:
            self.device.check()
