"""`Program`: a loaded graph you can call with torch tensors (or numpy arrays).

Inputs are checked (count, shape, dtype: the dtype each input was exported with;
int64 is also taken for int32 inputs), written into host-visible io buffers, the
pre-recorded command buffer is replayed, and outputs come back in the dtype
the graph declares. One output gives one tensor; several give a tuple.

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
    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu().contiguous()
        if str(x.dtype) == _BF16_TORCH:
            import torch
            return x.view(torch.int16).numpy().view(np.uint16), "bfloat16"
        return x.numpy(), x.numpy().dtype.name
    a = np.asarray(x)
    return a, a.dtype.name


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
    __slots__ = ("shape", "dtype", "device", "accepts", "view")

    def __init__(self, t: RTensor, io: Buffer):
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
        self.schedule = schedule
        """The load order that was used: "lazy" or "eager"."""
        self.upload = upload
        """How weights reached the device: "import" (used in place where possible, the rest
        copied directly or staged), "direct", "ring" or "eager"."""
        self.device = resources.device
        self.ledger = resources.allocator.ledger
        self.timeline = resources.timeline
        self.copies_per_weight_byte = resources.uploader.copies_per_byte
        self.weight_bytes = resources.uploader.weight_bytes
        """Device bytes of the constants: equal to their bytes in the file."""
        self.weight_paths = dict(resources.uploader.path_bytes)
        """Weight bytes "imported" (used in place, no copy), copied "direct", or "staged"."""
        self.dispatch_count = len(executor.dispatches)
        self._executor = executor
        self._in = [_Port(t, io) for io, t in io_in]
        self._out = [_Port(t, io) for t, io in io_out]
        self.closed = False
        self._owner = True
        """Whether close() releases the load (a method of a `Methods` leaves that to it)."""
        self._executed = False
        # One recorded command buffer, one fence and one set of io buffers serve every call, so a
        # call (write inputs, submit, wait, read outputs) must not overlap another call or close().
        self._lock = threading.Lock()

    # -- signatures --------------------------------------------------------------
    @property
    def input_specs(self) -> list[tuple[tuple[int, ...], str]]:
        """(shape, dtype name) of each input, in order."""
        return [(p.shape, p.dtype.name) for p in self._in]

    @property
    def output_specs(self) -> list[tuple[tuple[int, ...], str]]:
        """(shape, dtype name) of each output, in order."""
        return [(p.shape, p.dtype.name) for p in self._out]

    # -- calling -------------------------------------------------------------------
    def _run(self, arrays, torch_out: bool) -> list[np.ndarray]:
        if len(arrays) != len(self._in):
            raise InputError(f"expected {len(self._in)} input(s), got {len(arrays)}")
        given = []
        for i, (x, p) in enumerate(zip(arrays, self._in)):
            a, name = _to_numpy(x)
            if tuple(a.shape) != p.shape:
                raise InputError(f"input {i}: shape {tuple(a.shape)}, expected {p.shape}")
            if name not in p.accepts:
                raise InputError(f"input {i}: dtype {name}, expected {p.dtype}")
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

    def run_numpy(self, *arrays) -> list[np.ndarray]:
        """Run on numpy arrays (or anything numpy takes); returns one array per output."""
        return self._run(arrays, torch_out=False)

    def __call__(self, *tensors):
        """Run on torch tensors; returns a tensor, or a tuple of them for several outputs."""
        import torch
        outs = self._run(tensors, torch_out=True)
        res = [torch.from_numpy(o).view(torch.bfloat16) if p.dtype is dtypes.BFLOAT16 else torch.from_numpy(o)
               for o, p in zip(outs, self._out)]
        return res[0] if len(res) == 1 else tuple(res)

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

    def state(self, name: str):
        """A copy of state tensor `name` as a torch tensor."""
        import torch
        store = self._resources.states
        if name not in store.states:
            known = ", ".join(store.states) or "none"
            raise InputError(f"no state {name!r} (states: {known})")
        t = store.states[name][0]
        with self._lock:
            if self.closed:
                raise LoadError("program is closed")
            data = store.read(name, self._resources.allocator)
        dtype = t.arg.dtype
        array = np.frombuffer(data, np.dtype(dtype.numpy)).reshape(t.arg.shape).copy()
        out = torch.from_numpy(array)
        return out.view(torch.bfloat16) if dtype is dtypes.BFLOAT16 else out

    # -- memory ----------------------------------------------------------------------
    @property
    def memory(self) -> dict:
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


class Methods(Closes):
    """A loaded program of several methods: `program.decode(...)` or `program["decode"](...)`.

    The methods share one load: the weights (each once), the state tensors and the
    activation memory, so their calls run one at a time. `close()` releases it all.
    """

    def __init__(self, programs: dict[str, Program]):
        self._programs = programs
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
        """A copy of state tensor `name` as a torch tensor."""
        return self._first.state(name)

    @property
    def memory(self) -> dict:
        return self._first.memory

    def generate(self, input_ids, max_new_tokens: int = 32, *, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int | None = None, timings=None):
        """Yield the token ids that follow `input_ids`, for a causal LM program (methods prefill and
        decode, what `vkx export DIR` writes): greedy unless a temperature is given. The cache starts
        empty; `timings` (a `vkx.loader.generate.Timings`) receives the measurements."""
        from vkx.loader.generate import ProgramDecoder, Sampling, generate

        decoder = ProgramDecoder(self)
        return generate(decoder, input_ids, max_new_tokens, decoder.shape,
                        sampling=Sampling(temperature, top_k, top_p, seed), timings=timings)

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


