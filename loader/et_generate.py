"""Generation over ExecuTorch's own LLM programs (its Llama recipe), beside vkx's (`ProgramDecoder`).

ExecuTorch's program has one method, `forward(tokens [1, n], input_pos [1]) -> logits [1, vocab]` (the
last token's), its KV caches as state (vkx.format.et_llm), and the cache length and EOS ids in its
metadata methods (`Program.llm`). Loaded for one token (`vkx.load(path, sequence_length=1)`), each
prompt token and each new token is one call at its position.
"""
from __future__ import annotations

import numpy as np

from vkx.loader.errors import InputError
from vkx.loader.generate import Decoder, LMShape, ProgramDecoder, greedy_steps, warm_up


class ExecuTorchDecoder:
    """The Decoder over an ExecuTorch LLM program loaded for one token: prefill in chunks of one."""

    def __init__(self, program):
        method = program.only
        (ids_shape, _), (pos_shape, _) = method.input_specs
        if tuple(ids_shape) != (1, 1) or tuple(pos_shape) != (1,):
            raise InputError(f"ExecuTorch's LLM program takes tokens {list(ids_shape)}: generation loads it for "
                             "one token (vkx.load(path, sequence_length=1))")
        self.program, self.method = program, method
        (logits_shape, _), = method.output_specs
        self.shape = LMShape(prefill_len=1, max_seq_len=program.llm.max_context_len, vocab_size=logits_shape[-1])
        self.eos_token_ids: tuple[int, ...] = program.eos_token_ids
        if getattr(method, "chains_greedy", False):
            method.record_ahead(greedy=True)  # not in the first token's time
        warm_up(self, self.shape)

    def _step(self, input_ids: np.ndarray, cache_position: np.ndarray) -> np.ndarray:
        return self.method.run_numpy(input_ids, cache_position[:1])[0]

    prefill = decode = _step

    def _argmax(self, input_ids: np.ndarray, cache_position: np.ndarray) -> np.ndarray:
        """A greedy step's token id: the argmax of the logits on the host (the program's one output
        is the last token's logits, [1, vocab])."""
        return np.argmax(self._step(input_ids, cache_position), -1)

    prefill_argmax = _argmax

    def decode_greedy(self, input_ids: np.ndarray, cache_position: np.ndarray, steps: int) -> np.ndarray:
        return greedy_steps(self.method, self._argmax, input_ids, cache_position[:1], steps)

    def reset(self) -> None:
        self.program.reset()


def decoder_for(program) -> Decoder:
    """ExecuTorchDecoder for ExecuTorch's LLM programs, else ProgramDecoder (vkx's prefill/decode files)."""
    return ExecuTorchDecoder(program) if getattr(program, "llm", None) is not None else ProgramDecoder(program)
