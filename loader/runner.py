"""`Program`: a loaded graph you can call with numpy arrays or torch tensors.

Inputs are checked (count, shape, dtype: the dtype each input was exported with;
int64 is also taken for int32 inputs), written into host-visible io buffers, the
pre-recorded command buffer is replayed, and outputs come back in the dtype
the graph declares: torch tensors when any input was one, else numpy arrays (torch
is not needed to run). One output gives one value; several give a tuple. Inputs
may be given by name (the model's forward argument names, recorded in the file).

numpy has no bfloat16: `run_numpy` takes and returns float32 arrays for
bfloat16 inputs and outputs (rounded to bfloat16 on the way in, as torch rounds);
`program(...)` takes and returns torch.bfloat16 tensors.
"""
from __future__ import annotations

import threading

import numpy as np

from vkx.format import dtypes, vkgraph as g
from vkx.format.dtypes import DType
from vkx.loader.errors import InputError, LoadError
from vkx.loader.graph import RTensor
from vkx.loader.memory import Buffer

_BF16_TORCH = "torch.bfloat16"


def _to_numpy(x) -> tuple[np.ndarray, str]:
    """The array, and the dtype name the caller gave (torch's bfloat16 arrives as its uint16 bits)."""
    if isinstance(x, np.ndarray):
        return x, x.dtype.name
    if _is_torch(x):
        x = x.detach().cpu().contiguous()
        if str(x.dtype) == _BF16_TORCH:
            import torch
            return x.view(torch.int16).numpy().view(np.uint16), "bfloat16"
        return x.numpy(), x.numpy().dtype.name
    a = np.asarray(x)
    return a, a.dtype.name


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


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest even), as uint16 bits."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(a), ((u >> 16) | 0x40).astype(np.uint16), rounded)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bits as float32 values (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


class _Port:
    """One graph input or output: its shape, its dtype as the caller sees it, and its io buffer."""
    __slots__ = ("shape", "dtype", "device", "accepts", "view", "name")

    def __init__(self, t: RTensor, io: Buffer):
        self.name: str | None = None
        self.shape = t.arg.shape
        self.dtype: DType = t.staging
        self.device: DType = t.arg.dtype
        names = {self.dtype.name}
        if self.dtype is dtypes.INT32:
            names.add("int64")
        if self.dtype is dtypes.BFLOAT16:
            names.add("float32")  # numpy callers: rounded to bfloat16
        self.accepts = names
        self.view = np.frombuffer(io.mapped(), np.dtype(self.device.numpy), count=t.arg.numel)

    def write(self, a: np.ndarray, given: str) -> None:
        flat = a.reshape(-1)
        if self.device is dtypes.BFLOAT16 and given != "bfloat16":
            flat = bf16_bits(flat)
        elif self.device is not dtypes.BFLOAT16 and given == "bfloat16":
            flat = bf16_values(flat)
        np.copyto(self.view, flat, casting="unsafe")

    def read(self, torch_out: bool) -> np.ndarray:
        """A copy of the output in the caller's dtype (bfloat16 as uint16 bits when `torch_out`)."""
        v = self.view
        if self.device is dtypes.BFLOAT16:
            if self.dtype is dtypes.BFLOAT16 and torch_out:
                return v.copy().reshape(self.shape)
            v = bf16_values(v)
        elif self.dtype is dtypes.BFLOAT16:
            return bf16_bits(v).reshape(self.shape) if torch_out else v.astype(np.float32).reshape(self.shape)
        want = np.float32 if self.dtype is dtypes.BFLOAT16 else np.dtype(self.dtype.numpy)
        return v.astype(want, copy=True).reshape(self.shape)


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


class Program(Closes):
    """A loaded graph: call it with tensors; `close()` (or `with`) releases its device memory.

    Safe to call from several threads: calls run one at a time.
    """

    def __init__(self, resources, graph: g.VkGraph, executor, io_in, io_out, schedule: str, upload: str,
                 name: str = "forward"):
        self._resources = resources
        self.name = name
        """The method this program runs (its execution plan's name)."""
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
        self._executor = executor
        self._in = [_Port(t, io) for io, t in io_in]
        self._out = [_Port(t, io) for t, io in io_out]
        self.closed = False
        """True once `close()` has released the device memory."""
        self._owner = True
        """Whether close() releases the load (a method of a `Methods` leaves that to it)."""
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
        return list(arrays)

    def _run(self, arrays, torch_out: bool) -> list[np.ndarray]:
        given = []
        for i, (x, p) in enumerate(zip(arrays, self._in)):
            a, name = _to_numpy(x)
            label = f"input {i}" if p.name is None else f"input {i} ({p.name})"
            if tuple(a.shape) != p.shape:
                raise InputError(f"{label}: shape {tuple(a.shape)}, expected {p.shape}")
            if name not in p.accepts:
                raise InputError(f"{label}: dtype {name}, expected {p.dtype}")
            given.append((p, a, name))
        with self._lock:
            if self.closed:
                raise LoadError("program is closed")
            for p, a, name in given:
                p.write(a, name)
            self._executor.run()
            if not self._executed:
                self._executed = True
                self.timeline.mark("after execute")
            return [p.read(torch_out) for p in self._out]

    def run_numpy(self, *arrays, **named) -> list[np.ndarray]:
        """Run on numpy arrays (or anything numpy takes), by position or input name; returns
        one array per output (bfloat16 ones as float32)."""
        return self._run(self._arguments(arrays, named), torch_out=False)

    def __call__(self, *inputs, **named):
        """Run on numpy arrays or torch tensors, by position or input name; returns one output,
        or a tuple for several: torch tensors when any input is one, else numpy arrays."""
        arrays = self._arguments(inputs, named)
        if not any(_is_torch(x) for x in arrays):
            res = self._run(arrays, torch_out=False)
            return res[0] if len(res) == 1 else tuple(res)
        import torch
        outs = self._run(arrays, torch_out=True)
        res = [torch.from_numpy(o).view(torch.bfloat16) if p.dtype is dtypes.BFLOAT16 else torch.from_numpy(o)
               for o, p in zip(outs, self._out)]
        return res[0] if len(res) == 1 else tuple(res)

    def profile(self, *tensors, runs: int = 10) -> list[tuple[str, str, float]]:
        """(node, shader, GPU seconds) of every dispatch in order, the median of `runs`
        timestamped calls on these inputs (bench/infer.py --profile)."""
        self._run(tensors, torch_out=False)  # checks and writes the inputs
        with self._lock:
            if self.closed:
                raise LoadError("program is closed")
            times = self._executor.profile(runs)
            return [(x.node, x.shader, t) for x, t in zip(self._executor.dispatches, times)]

    # -- methods and state -------------------------------------------------------------
    @property
    def methods(self) -> list[str]:
        """The one method this program runs (a file of several loads as `Methods`)."""
        return [self.name]

    def __getitem__(self, name: str) -> "Program":
        if name != self.name:
            raise InputError(f"no method {name!r} (methods: {self.name})")
        return self

    @property
    def states(self) -> list[str]:
        """The names of the program's persistent state tensors."""
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
        return TensorSpec(t.arg.shape, t.arg.dtype.name, name)

    def state(self, name: str):
        """A copy of state tensor `name`: a torch tensor, or a numpy array where torch is not installed."""
        store = self._resources.states
        t = self._state_tensor(name)
        with self._lock:
            if self.closed:
                raise LoadError("program is closed")
            data = store.read(name, self._resources.allocator)
        dtype = t.arg.dtype
        array = np.frombuffer(data, np.dtype(dtype.numpy)).reshape(t.arg.shape).copy()
        try:
            import torch
        except ImportError:
            return bf16_values(array) if dtype is dtypes.BFLOAT16 else array
        out = torch.from_numpy(array)
        return out.view(torch.bfloat16) if dtype is dtypes.BFLOAT16 else out

    # -- memory ----------------------------------------------------------------------
    @property
    def memory(self) -> dict:
        """The load's memory report: schedule, upload, weight bytes and paths, the ledger, the heap
        budget (None once closed) and the phases (docs/memory.md)."""
        return {"schedule": self.schedule, "upload": self.upload,
                "device": self.device.name,
                "weight_bytes": self.weight_bytes,
                "copies_per_weight_byte": self.copies_per_weight_byte,
                "weight_paths": dict(self.weight_paths),
                "ledger": self.ledger.snapshot(),
                "heap_budget": self.device.heap_budget() if not self.closed else None,
                "phases": self.timeline.as_list()}

    # -- lifetime -----------------------------------------------------------------------
    def close(self) -> None:
        """Release the program's device memory; waits for a call in progress."""
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
