"""`Program`: a loaded .pte — its methods by name, the weights they share, its state.

`vkx.load()` returns one. A program of one method is called as that method
(`program(...)`, `program.input_specs`, ...); one of several names the method
(`program.decode(...)`, `program["decode"](...)`). docs/format.md, "Methods".
"""
from __future__ import annotations

import threading
from typing import Any

from vkx.format.et_llm import LLMInfo
from vkx.loader.errors import InputError
from vkx.loader.et_generate import decoder_for
from vkx.loader.generate import Sampling, generate
from vkx.loader.method import Closes, Method
from vkx.loader.plan import PlanMethod


class Program(Closes):
    """A loaded program: `program(...)` for a file of one method, `program.decode(...)` or
    `program["decode"](...)` for one of several; `close()` (or `with`) releases it all.

    Methods loaded together (`vkx.loader.loading.load_methods`) share one load: the weights
    (each once), the state tensors and the activation memory, so their calls run one at a
    time. A plan-driven method (`PlanMethod`) owns its delegates' loads.
    """

    def __init__(self, methods: dict[str, Method | PlanMethod], eos_token_ids: tuple[int, ...] = (),
                 llm: LLMInfo | None = None):
        self._methods = methods
        self.eos_token_ids = eos_token_ids
        """The token ids that end a generated sequence, as the file records them (a causal LM's)."""
        self.llm = llm
        """What ExecuTorch's LLM recipe recorded in the file (None: not one of its programs)."""
        first = next(iter(methods.values()))
        self._first = first
        self._shared = isinstance(first, Method)
        """The methods share one load, which this program releases."""
        self._lock = threading.Lock()
        if self._shared:
            for method in methods.values():
                method._lock, method._owner = self._lock, False
        self.closed = False
        """True once `close()` has released the load."""

    @property
    def only(self) -> Method | PlanMethod:
        """The program's one method (an `InputError` for a file of several)."""
        if len(self._methods) != 1:
            raise InputError(f"the program has methods {', '.join(self._methods)}: call one of them, "
                             f"program.{next(iter(self._methods))}(...)")
        return self._first

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
            return getattr(self._first, name)
        raise AttributeError(f"{type(self).__name__} has no attribute or method {name!r}")

    @property
    def device(self):
        """The Vulkan device the program runs on."""
        return self._first.device

    @property
    def ledger(self):
        """Device bytes per kind (live now, peak, allocation counts)."""
        return self._first.ledger

    @property
    def timeline(self):
        """Host and device memory at each load phase."""
        return self._first.timeline

    @property
    def weight_bytes(self) -> int:
        """Device bytes of the constants of all methods, each once."""
        return self._first.weight_bytes

    @property
    def methods(self) -> list[str]:
        """The method names, in file order."""
        return list(self._methods)

    def __getitem__(self, name: str) -> Method | PlanMethod:
        method = self._methods.get(name)
        if method is None:
            raise InputError(f"no method {name!r} (methods: {', '.join(self._methods)})")
        return method

    @property
    def states(self) -> list[str]:
        """The names of the program's persistent state tensors."""
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
        """The load's memory report (`Method.memory`; docs/memory.md)."""
        return self._first.memory

    def generate(self, input_ids, max_new_tokens: int = 32, *, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int | None = None, timings=None):
        """Yield the token ids that follow `input_ids`, for a causal LM program (methods prefill and
        decode, what `vkx export DIR` writes; or ExecuTorch's LLM recipe program loaded with
        `sequence_length=1`, vkx.loader.et_generate): greedy unless a temperature is given, up to
        `max_new_tokens` or an EOS token of the model (yielded, then the end). The cache starts
        empty; `timings` (a `vkx.loader.generate.Timings`) receives the measurements."""
        decoder = decoder_for(self)
        return generate(decoder, input_ids, max_new_tokens, decoder.shape,
                        sampling=Sampling(temperature, top_k, top_p, seed), timings=timings,
                        stop=decoder.eos_token_ids)

    def close(self) -> None:
        """Release the load (every method's memory, the weights, the state)."""
        if self.closed:
            return
        for method in self._methods.values():
            method.close()
        with self._lock:
            self.closed = True
            if self._shared:
                self._first._resources.close()
        if self._shared:
            self.device.check()
