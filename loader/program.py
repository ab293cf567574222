"""`Program`: a loaded .pte — its methods by name, and the load they share (`Load`: the weights,
the state, the memory, the device), which the program owns and releases.

`vkx.load()` and `load_graph()` return one. A program of one method is called as that method
(`program(...)`, `program.input_specs`, ...); one of several names the method
(`program.decode(...)`, `program["decode"](...)`). docs/format.md, "Methods".
"""
from __future__ import annotations

import importlib
import threading
from typing import Any

import numpy as np

from vkx.format import dtypes
from vkx.format.et_llm import LLMInfo
from vkx.loader.errors import InputError, LoadError
from vkx.loader.execute.method import Closes, LoadedMethod, OwnsMemory, TensorSpec
from vkx.loader.execute.ports import bf16_bits, bf16_values
from vkx.loader.upload.report import MemoryReport
from vkx.loader.upload.stages import Resources


class Load(OwnsMemory):
    """The load that the methods of a program share (vkx.loader.upload.loading.load_methods): the device,
    the allocator and its ledger, the weights (each once), the state, the activation memory (the
    methods' calls take turns in it, so they hold one lock), the timeline; `close()` is its one release
    path. A `Program` holds and closes it; each of its `Method`s references it and owns none of it."""

    def __init__(self, resources: Resources, schedule: str):
        self.resources = resources
        self.schedule = schedule
        """The load order that was used: "lazy" or "eager"."""
        uploader = resources.uploader
        self.upload = "import" if uploader.imports else uploader.mode
        """How weights reached the device: "import" (used in place where possible, the rest
        copied directly or staged), "direct", "ring" or "eager"."""
        self.weight_bytes = uploader.weight_bytes
        """Device bytes of the constants of all methods, each once: equal to their bytes in the file."""
        self.copies_per_weight_byte = uploader.copies_per_byte
        """Bytes the CPU and the device copied per weight byte on its way (0 imported, 1 direct, 2 staged)."""
        self.weight_paths = dict(uploader.path_bytes)
        """Weight bytes "imported" (used in place, no copy), copied "direct", or "staged"."""
        self.lock = threading.Lock()
        """Held by every call of every method and by `close()`: one recorded command buffer, one fence
        and one set of io buffers serve a method's calls, and the methods share the activations."""
        self.closed = False
        """True once `close()` has released the load."""

    @property
    def device(self):
        """The Vulkan device the program runs on."""
        return self.resources.device

    @property
    def ledger(self):
        """Device bytes per kind (live now, peak, allocation counts)."""
        return self.resources.allocator.ledger

    @property
    def timeline(self):
        """Host and device memory at each load phase (`memory["phases"]`)."""
        return self.resources.timeline

    def check_open(self) -> None:
        """LoadError once the program is closed (under `lock`)."""
        if self.closed:
            raise LoadError("program is closed")

    @property
    def states(self) -> list[str]:
        """The names of the persistent state tensors."""
        return list(self.resources.states.states)

    def reset(self) -> None:
        """Every state tensor back to its initial value."""
        with self.lock:
            self.check_open()
            self.resources.states.reset()

    def _state_tensor(self, name: str):
        store = self.resources.states
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
        t = self._state_tensor(name)
        with self.lock:
            self.check_open()
            data = self.resources.states.read(name, self.resources.allocator)
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

    @property
    def memory(self) -> MemoryReport:
        """The load's memory report: schedule, upload, weight bytes and paths, the ledger, the heap
        budget (None once closed) and the phases (docs/memory.md); `print()` it for the tables."""
        return MemoryReport({"schedule": self.schedule, "upload": self.upload, "device": self.device.name,
                             "weight_bytes": self.weight_bytes,
                             "copies_per_weight_byte": self.copies_per_weight_byte,
                             "weight_paths": dict(self.weight_paths),
                             "ledger": self.ledger.snapshot(),
                             "heap_budget": self.device.heap_budget() if not self.closed else None,
                             "phases": self.timeline.as_list()})

    def close(self) -> None:
        """Release every Vulkan object of the load (the ledger back to zero); waits for a call in progress."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.resources.close()
        self.device.check()


class Program(Closes):
    """A loaded program: `program(...)` for a file of one method, `program.decode(...)` or
    `program["decode"](...)` for one of several; `close()` (or `with`) releases its load.

    Methods loaded together (`vkx.loader.upload.loading.load_methods`) share one `Load`: the weights
    (each once), the state tensors and the activation memory, so their calls run one at a time.
    A plan-driven method (`PlanMethod`) has a load of its own: its delegates' programs.
    """

    def __init__(self, methods: dict[str, LoadedMethod], eos_token_ids: tuple[int, ...] = (),
                 llm: LLMInfo | None = None):
        loads = {id(m.load): m.load for m in methods.values()}
        if len(loads) != 1:
            raise LoadError(f"a program's methods share one load, not {len(loads)}")
        self._methods = methods
        self._load, = loads.values()
        self.eos_token_ids = eos_token_ids
        """The token ids that end a generated sequence, as the file records them (a causal LM's)."""
        self.llm = llm
        """What ExecuTorch's LLM recipe recorded in the file (None: not one of its programs)."""

    @property
    def closed(self) -> bool:
        """True once `close()` has released the load."""
        return self._load.closed

    @property
    def only(self) -> LoadedMethod:
        """The program's one method (an `InputError` for a file of several)."""
        if len(self._methods) != 1:
            raise InputError(f"the program has methods {', '.join(self._methods)}: call one of them, "
                             f"program.{next(iter(self._methods))}(...)")
        return next(iter(self._methods.values()))

    def __call__(self, *inputs, **named):
        """Call the program's one method (`Method.__call__`)."""
        return self.only(*inputs, **named)

    def __getattr__(self, name: str) -> Any:
        """A method by name; for a program of one method, that method's attributes too
        (`run_numpy`, `input_specs`, `profile`, `graph`, ...)."""
        methods = self.__dict__.get("_methods", {})
        if name in methods:
            return methods[name]
        if len(methods) == 1 and not name.startswith("_"):
            return getattr(next(iter(methods.values())), name)
        raise AttributeError(f"{type(self).__name__} has no attribute or method {name!r}")

    @property
    def methods(self) -> list[str]:
        """The method names, in file order."""
        return list(self._methods)

    def __getitem__(self, name: str) -> LoadedMethod:
        method = self._methods.get(name)
        if method is None:
            raise InputError(f"no method {name!r} (methods: {', '.join(self._methods)})")
        return method

    # -- the load ----------------------------------------------------------------------
    @property
    def device(self):
        """The Vulkan device the program runs on."""
        return self._load.device

    @property
    def ledger(self):
        """Device bytes per kind (live now, peak, allocation counts); a plan's delegates have one each
        (`program.delegates`)."""
        return self._load.ledger

    @property
    def timeline(self):
        """Host and device memory at each load phase."""
        return self._load.timeline

    @property
    def schedule(self) -> str:
        """The load order that was used: "lazy" or "eager"."""
        return self._load.schedule

    @property
    def upload(self) -> str:
        """How weights reached the device: "import", "direct", "ring" or "eager"."""
        return self._load.upload

    @property
    def weight_bytes(self) -> int:
        """Device bytes of the constants of all methods, each once."""
        return self._load.weight_bytes

    @property
    def copies_per_weight_byte(self) -> float:
        """Bytes the CPU and the device copied per weight byte on its way (0 imported, 1 direct, 2 staged)."""
        return self._load.copies_per_weight_byte

    @property
    def weight_paths(self) -> dict[str, int]:
        """Weight bytes "imported" (used in place, no copy), copied "direct", or "staged"."""
        return self._load.weight_paths

    @property
    def states(self) -> list[str]:
        """The names of the program's persistent state tensors."""
        return self._load.states

    def reset(self) -> None:
        """Every state tensor back to its initial value."""
        self._load.reset()

    def state(self, name: str):
        """A copy of state tensor `name`: a torch tensor, or a numpy array where torch is not installed."""
        return self._load.state(name)

    def state_spec(self, name: str) -> TensorSpec:
        """(shape, dtype name) of state tensor `name`, without reading it."""
        return self._load.state_spec(name)

    @property
    def memory(self) -> MemoryReport:
        """The load's memory report (docs/memory.md)."""
        return self._load.memory

    def generate(self, input_ids, max_new_tokens: int = 32, *, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int | None = None, timings=None):
        """Yield the token ids that follow `input_ids`, for a causal LM program (methods prefill and
        decode, what `vkx export DIR` writes; or ExecuTorch's LLM recipe program loaded with
        `sequence_length=1`): greedy unless a temperature is given, up to `max_new_tokens` or an EOS
        token of the model (yielded, then the end). The cache starts empty; `timings` (a
        `vkx.loader.lm.generate.Timings`) receives the measurements. `vkx generate` calls this too."""
        # imported on first use, as vkx.loader's entry points are: loading a program never imports
        # the lm package (tests/loader/test_structure_lm.py)
        lm = importlib.import_module("vkx.loader.lm.decoders")
        return lm.generate_program(self, input_ids, max_new_tokens, temperature=temperature, top_k=top_k,
                                   top_p=top_p, seed=seed, timings=timings)

    def close(self) -> None:
        """Release the load (every method's memory, the weights, the state)."""
        if self.closed:
            return
        for method in self._methods.values():
            method.close()
        self._load.close()
