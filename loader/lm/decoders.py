"""The decoders over loaded programs, and `generate_program`, the one path from a `Program` to its
generated tokens (`Program.generate` and `vkx generate` both take it).

`ProgramDecoder` runs vkx's causal LM programs (methods prefill and decode, what `vkx export DIR`
writes); `ExecuTorchDecoder` ExecuTorch's own LLM programs (its Llama recipe): one method,
`forward(tokens [1, n], input_pos [1]) -> logits [1, vocab]` (the last token's), its KV caches as state
(vkx.format.et_llm), the cache length and EOS ids in its metadata methods (`Program.llm`); loaded for
one token (`vkx.load(path, sequence_length=1)`), each prompt token and each new token is one call at
its position. A method of one graph takes its greedy steps' argmax on the device, and chains its
decode steps there, greedy or sampled, where it can (vkx.loader.lm.greedy); one run instruction by
instruction (a `PlanMethod`) reads its logits back, and sampling draws on the host the same tokens.
"""
from __future__ import annotations

import functools
from typing import Callable, Iterable, Iterator

import numpy as np

from vkx.loader.errors import InputError, LimitError
from vkx.loader.lm.generate import (Decoder, LMShape, Sampling, greedy_by_calls, generate, sampled_by_calls,
                                    warm_up)
from vkx.loader.lm.greedy import Argmax, GreedyChain, SampledChain, chains
from vkx.loader.execute.method import LoadedMethod

Step = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""A greedy step's argmax: (input_ids, cache_position) -> token ids."""


def _host_argmax(method: LoadedMethod, input_ids: np.ndarray, cache_position: np.ndarray) -> np.ndarray:
    """The argmax over the vocabulary of the method's logits, read back and taken on the host."""
    return np.argmax(method.run_numpy(input_ids, cache_position)[0], -1)


def argmax_of(method: LoadedMethod) -> Step:
    """A greedy step's argmax over `method`: on the device where the method takes a tail graph
    (`Argmax`: one id read back a row, recorded now), else on the host."""
    return functools.partial(_host_argmax, method) if method.tail is None else Argmax(method)


def steps_of(method: LoadedMethod, argmax: Step) -> Callable[[np.ndarray, np.ndarray, int], np.ndarray]:
    """`decode_greedy` over a decode method: chained on the device where it can be (`GreedyChain`, recorded
    now), else one `argmax` call a token (`greedy_by_calls`)."""
    return GreedyChain(method) if chains(method) else functools.partial(greedy_by_calls, argmax)


def sampled_steps_of(method: LoadedMethod, decode: Callable[[np.ndarray, np.ndarray], np.ndarray], chained: bool
                     ) -> Callable[[np.ndarray, np.ndarray, int, Sampling], np.ndarray]:
    """`decode_sampled` over a decode method: when `chained`, on the device where it can be (`SampledChain`,
    recorded now), else, or where the device's limits refuse the sampler, one `decode` call a token, drawn on
    the host (`sampled_by_calls`): the same tokens."""
    if chained and chains(method):
        try:
            return SampledChain(method)
        except LimitError:  # the sampler is over the device's limits (a phone's 16 KiB of shared memory)
            pass
    return functools.partial(sampled_by_calls, decode)


def require_lm_methods(methods: Iterable[str]) -> None:
    """InputError unless the methods include prefill and decode (a vkx causal LM program)."""
    methods = set(methods)
    if not {"prefill", "decode"} <= methods:
        raise InputError("not a causal LM program: it needs methods prefill and decode "
                         f"(it has {', '.join(sorted(methods)) or 'one unnamed method'}); "
                         "export a Hugging Face folder with vkx export DIR")


class ProgramDecoder:
    """The Decoder over a loaded vkx program of methods `prefill` and `decode` (what `vkx export DIR` writes).

    Its device recordings (the argmax of each method, the chained greedy decode steps, and the sampled
    ones when `sampled`) are made as it is built, not in the first token's time, and it warms up what
    the generation runs (`warm_up`); it needs numpy only: the cache length is the state's shape
    (`state_spec`, nothing read back)."""

    def __init__(self, program, sampled: bool = False):
        require_lm_methods(program.methods)
        self.program = program
        (ids_shape, _), _ = program["prefill"].input_specs
        (logits_shape, _), = program["prefill"].output_specs
        # every state is a KV cache [1, kv_heads, max_seq_len, head_dim]
        (cache_shape, _) = program.state_spec(program.states[0])
        self.shape = LMShape(prefill_len=ids_shape[1], max_seq_len=cache_shape[2], vocab_size=logits_shape[-1])
        self.eos_token_ids: tuple[int, ...] = program.eos_token_ids
        """What the program records as the model's EOS ids (generation stops at one)."""
        self.prefill_argmax = argmax_of(program["prefill"])
        self._decode_steps = steps_of(program["decode"], argmax_of(program["decode"]))
        self._sampled_steps = sampled_steps_of(program["decode"], self.decode, sampled)
        warm_up(self, self.shape, sampled)

    def prefill(self, input_ids: np.ndarray, cache_position: np.ndarray) -> np.ndarray:
        return self.program["prefill"].run_numpy(input_ids, cache_position)[0]

    def decode(self, input_ids: np.ndarray, cache_position: np.ndarray) -> np.ndarray:
        return self.program["decode"].run_numpy(input_ids, cache_position)[0]

    def decode_greedy(self, input_ids: np.ndarray, cache_position: np.ndarray, steps: int) -> np.ndarray:
        return self._decode_steps(input_ids, cache_position, steps)

    def decode_sampled(self, input_ids: np.ndarray, cache_position: np.ndarray, steps: int,
                       sampling: Sampling) -> np.ndarray:
        return self._sampled_steps(input_ids, cache_position, steps, sampling)

    def reset(self) -> None:
        self.program.reset()


class ExecuTorchDecoder:
    """The Decoder over an ExecuTorch LLM program loaded for one token: prefill in chunks of one; its
    chained sampled steps recorded when `sampled`."""

    def __init__(self, program, sampled: bool = False):
        method = program.only
        (ids_shape, _), (pos_shape, _) = method.input_specs
        if tuple(ids_shape) != (1, 1) or tuple(pos_shape) != (1,):
            raise InputError(f"ExecuTorch's LLM program takes tokens {list(ids_shape)}: generation loads it for "
                             "one token (vkx.load(path, sequence_length=1))")
        self.program, self.method = program, method
        (logits_shape, _), = method.output_specs
        self.shape = LMShape(prefill_len=1, max_seq_len=program.llm.max_context_len, vocab_size=logits_shape[-1])
        self.eos_token_ids: tuple[int, ...] = program.eos_token_ids
        self._steps = steps_of(method, self._argmax)
        self._sampled_steps = sampled_steps_of(method, self._step, sampled)
        warm_up(self, self.shape, sampled)

    def _step(self, input_ids: np.ndarray, cache_position: np.ndarray) -> np.ndarray:
        return self.method.run_numpy(input_ids, cache_position[:1])[0]

    prefill = decode = _step

    def _argmax(self, input_ids: np.ndarray, cache_position: np.ndarray) -> np.ndarray:
        """A greedy step's token id: the argmax of the logits on the host (the program's one output
        is the last token's logits, [1, vocab])."""
        return np.argmax(self._step(input_ids, cache_position), -1)

    prefill_argmax = _argmax

    def decode_greedy(self, input_ids: np.ndarray, cache_position: np.ndarray, steps: int) -> np.ndarray:
        return self._steps(input_ids, cache_position[:1], steps)

    def decode_sampled(self, input_ids: np.ndarray, cache_position: np.ndarray, steps: int,
                       sampling: Sampling) -> np.ndarray:
        return self._sampled_steps(input_ids, cache_position[:1], steps, sampling)

    def reset(self) -> None:
        self.program.reset()


def decoder_for(program, sampled: bool = False) -> Decoder:
    """ExecuTorchDecoder for ExecuTorch's LLM programs, else ProgramDecoder (vkx's prefill/decode files);
    its sampled steps chained on the device where they can be when `sampled`."""
    return (ExecuTorchDecoder if program.llm is not None else ProgramDecoder)(program, sampled)


def generate_program(program, input_ids, max_new_tokens: int = 32, *, temperature: float = 0.0,
                     top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                     timings=None) -> Iterator[int]:
    """`Program.generate`: the program's decoder (built and warmed up now, for greedy or sampled steps as
    asked), then `generate` over it, stopping at the program's EOS ids; the request is checked now, before
    the first token is asked for."""
    sampling = Sampling(temperature, top_k, top_p, seed)
    sampling.check()
    decoder = decoder_for(program, sampling.temperature > 0)
    return generate(decoder, input_ids, max_new_tokens, decoder.shape, sampling=sampling, timings=timings,
                    stop=decoder.eos_token_ids)
