"""Token generation over a causal LM with a prefill method, a decode method and a KV cache as state.

The methods take `(input_ids [1, n], cache_position [n])` and return the logits of the last
position, `[1, 1, vocab]` (the form `vkx export DIR` writes, docs/architecture.md; a file whose
methods return every position's `[1, n, vocab]` works too: the last row is read). The prompt goes
through prefill in chunks of its fixed length, so that the prompt's last token is always a chunk's
last position: a prompt shorter than a chunk is padded in front, the pads at the positions after
the prompt's (their slots are written but never seen: a query at position p sees slots 0..p, and
decode overwrites slot p before any query reaches it); a longer one is cut in chunks, the last one
ending at the prompt's end and overlapping the one before (rewriting those slots with the same
values). Greedy unless a temperature is given; a sampled token is a function of (seed, its logits'
position), loader/ops/sample.py's draw, on the host (`sample_reference`) and on the device alike, so
both give the same tokens for a seed. Greedy decoding never reads logits: the prefill's argmax is
taken on the device (`Argmax`: one token id read back); decode steps, greedy or sampled, run in
bursts chained on the device (`GreedyChain`, `SampledChain`: one submission and one read back for up
to BURST tokens, each step feeding its token to the next). The decoders over loaded programs are
vkx.loader.lm.decoders'.
"""
from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Protocol, Sequence

import numpy as np

from vkx.format import ProgramFile, vkgraph as vk
from vkx.format.indexing import IndexRange
from vkx.format.methods import methods, states
from vkx.loader.errors import InputError
from vkx.loader.ops.sample import sample_reference


BURST = 16
"""Tokens one submission decodes at most: the steps a vkx decode method's recording chains on the
device (vkx.loader.lm.greedy, `GreedyChain` and `SampledChain`) and the largest burst `generate` asks
a decoder for. The GPU idles while the host waits, reads back and submits again (0.05 ms a submission
on the H200 against 1.9 ms a 1B fp16 step, docs/benchmarks.md), once in 16 steps, while the step
recordings (one per place in the chain) stay few; the bursts double from one, so the first tokens come
at once, and a stop token wastes at most 15 steps."""


class Decoder(Protocol):
    """What generation calls: both methods on numpy int64 arrays, returning float logits (of the
    call's last position, or of every position: the last row is read); `prefill_argmax` returns
    those logits' argmax over the vocabulary instead (token ids, what a greedy step reads),
    `decode_greedy` the next `steps` greedy tokens after one token (int [steps]: `greedy_by_calls`,
    or chained on the device by vkx.loader.lm.greedy's `GreedyChain`) and `decode_sampled` the next
    `steps` sampled ones (`sampled_by_calls`, or `SampledChain`; a seed given)."""

    def prefill(self, input_ids: np.ndarray, cache_position: np.ndarray) -> np.ndarray: ...

    def decode(self, input_ids: np.ndarray, cache_position: np.ndarray) -> np.ndarray: ...

    def prefill_argmax(self, input_ids: np.ndarray, cache_position: np.ndarray) -> np.ndarray: ...

    def decode_greedy(self, input_ids: np.ndarray, cache_position: np.ndarray, steps: int) -> np.ndarray: ...

    def decode_sampled(self, input_ids: np.ndarray, cache_position: np.ndarray, steps: int,
                       sampling: "Sampling") -> np.ndarray: ...

    def reset(self) -> None: ...


def warm_up(decoder: Decoder, shape: LMShape, sampled: bool = False) -> None:
    """One prompt chunk and one burst of decode steps (greedy, or sampled when `sampled`: what the
    generation will run) on zeros, then the state reset: a load's first calls ran slower than later
    ones on a GPU (the H200, 1B fp16: the first 128 greedy tokens at 387 against 522 tokens/s, 471
    after this warm-up; docs/benchmarks.md), so a decoder pays that once, as it is built, not in its
    first generation."""
    ids, positions = np.zeros((1, shape.prefill_len), np.int64), np.arange(shape.prefill_len, dtype=np.int64)
    steps = (np.zeros((1, 1), np.int64), np.zeros(1, np.int64), min(BURST, shape.max_seq_len))
    if sampled:
        decoder.prefill(ids, positions)
        decoder.decode_sampled(*steps, Sampling(temperature=1.0, seed=0))
    else:
        decoder.prefill_argmax(ids, positions)
        decoder.decode_greedy(*steps)
    decoder.reset()


def greedy_by_calls(argmax: Callable[[np.ndarray, np.ndarray], np.ndarray], input_ids: np.ndarray,
                    cache_position: np.ndarray, steps: int) -> np.ndarray:
    """`decode_greedy` for a decoder whose steps are host calls: one `argmax(ids, position)` call a token."""
    token, position = int(input_ids.reshape(-1)[-1]), int(cache_position.reshape(-1)[-1])
    tokens = []
    for i in range(steps):
        token = int(np.asarray(argmax(np.array([[token]], np.int64), np.array([position + i], np.int64))).reshape(-1)[-1])
        tokens.append(token)
    return np.array(tokens, np.int64)


def sampled_by_calls(decode: Callable[[np.ndarray, np.ndarray], np.ndarray], input_ids: np.ndarray,
                     cache_position: np.ndarray, steps: int, sampling: "Sampling") -> np.ndarray:
    """`decode_sampled` for a decoder whose steps are host calls: one `decode(ids, position)` call a
    token, its logits' last row drawn by `sample` at that position."""
    token, position = int(input_ids.reshape(-1)[-1]), int(cache_position.reshape(-1)[-1])
    tokens = []
    for at in range(position, position + steps):
        logits = np.asarray(decode(np.array([[token]], np.int64), np.array([at], np.int64)))
        token = sample(logits.reshape(-1, logits.shape[-1])[-1], sampling, at)
        tokens.append(token)
    return np.array(tokens, np.int64)


@dataclass(frozen=True)
class LMShape:
    """The sizes a program was exported with."""

    prefill_len: int
    max_seq_len: int
    vocab_size: int

    @classmethod
    def of_file(cls, pf: ProgramFile) -> "LMShape | None":
        """The sizes of a program `vkx export DIR` wrote, read from its header (what `ProgramDecoder`
        reads from the loaded methods), so that a request that cannot fit costs no load; None for
        another program (ExecuTorch's LLM recipe: checked once loaded)."""
        delegates = methods(pf)
        names = [plan.name for plan in pf.program.execution_plan]
        if delegates is None or "prefill" not in names:
            return None
        graph = delegates[names.index("prefill")].graph

        def first(vids) -> vk.Tensor | None:
            value = graph.values[vids[0]] if vids and 0 <= vids[0] < len(graph.values) else None
            return value if isinstance(value, vk.Tensor) else None
        ids, logits, caches = first(graph.input_ids), first(graph.output_ids), states(graph)
        if ids is None or logits is None or not caches or len(ids.dims) != 2 or len(caches[0].tensor.dims) != 4:
            return None
        return cls(prefill_len=ids.dims[1], max_seq_len=caches[0].tensor.dims[2], vocab_size=logits.dims[-1])


@dataclass(frozen=True)
class Sampling:
    """Greedy when `temperature` is 0; otherwise sampled from the softmax of logits / temperature,
    restricted to the `top_k` most likely tokens and to the smallest set whose probability
    reaches `top_p`: a token is a function of (`seed`, its logits' position) (`sample`); a seed of
    None is drawn once for each generation."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def check(self) -> None:
        """InputError for a value outside its range."""
        if not self.temperature >= 0:
            raise InputError(f"temperature must be 0 (greedy) or more, not {self.temperature}")
        if 0 < self.temperature < 1 / float(np.finfo(np.float32).max):  # the sampler's 1 / T is fp32
            raise InputError(f"temperature {self.temperature} is too small to sample at (0 is greedy)")
        if self.top_k is not None and self.top_k < 1:
            raise InputError(f"top_k must be at least 1, not {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], not {self.top_p}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer))):
            raise InputError(f"seed must be an int, not {type(self.seed).__name__}")
        if self.temperature == 0 and (self.top_k, self.top_p) != (None, None):
            raise InputError("top_k and top_p need a temperature (greedy decoding takes the most likely token)")


def sample(logits: np.ndarray, sampling: Sampling, position: int) -> int:
    """One token id from a vector of logits at cache position `position`: their argmax when greedy,
    else the token the device's sampler draws (`sample_reference`: `sampling.seed` set)."""
    if sampling.temperature == 0:
        return int(np.argmax(logits))
    return sample_reference(logits, sampling.temperature, sampling.top_k, sampling.top_p, sampling.seed, position)


@dataclass
class Timings:
    """What one generation measured (seconds; token counts without padding)."""

    prompt_tokens: int = 0
    prefill_seconds: float = 0.0
    first_token_seconds: float = 0.0
    """From the call to the first generated token: the prefill plus its sampling."""
    decode_tokens: int = 0
    decode_seconds: float = 0.0
    step_seconds: list[float] = field(default_factory=list)

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_seconds else 0.0


def check_token_ids(input_ids: Sequence[int], shape: LMShape) -> None:
    """InputError naming the first id outside the vocabulary."""
    vocabulary = IndexRange(0, 0, shape.vocab_size, "token id", "the vocabulary")
    bad = [t for t in input_ids if not vocabulary.low <= t < vocabulary.high]
    if bad:
        raise InputError(vocabulary.refusal(bad[0]))


def check_request(input_ids: Sequence[int], max_new_tokens: int, shape: LMShape) -> None:
    """InputError, before any work, for an empty prompt, an id outside the vocabulary or too long a sequence."""
    if not input_ids:
        raise InputError("the prompt has no tokens")
    check_token_ids(input_ids, shape)
    if max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be at least 1, not {max_new_tokens}")
    # the last new token is never fed back, so it needs no cache slot
    if len(input_ids) + max_new_tokens - 1 > shape.max_seq_len:
        raise InputError(f"{len(input_ids)} prompt tokens + {max_new_tokens} new tokens do not fit the "
                         f"cache of {shape.max_seq_len} positions (export with a larger --max-seq-len)")


def generate(decoder: Decoder, input_ids: Sequence[int], max_new_tokens: int, shape: LMShape, *,
             sampling: Sampling = Sampling(), timings: Timings | None = None,
             stop: Sequence[int] = ()) -> Iterator[int]:
    """Yield `max_new_tokens` token ids after `input_ids`, starting from an empty cache; a token
    of `stop` (the model's EOS ids) is yielded and ends the sequence early.

    The request is checked when this is called, before the first token is asked for.
    """
    input_ids = [int(t) for t in input_ids]
    check_request(input_ids, max_new_tokens, shape)
    sampling.check()
    return _tokens(decoder, input_ids, max_new_tokens, shape, sampling, timings or Timings(), frozenset(stop))


def _tokens(decoder: Decoder, input_ids: list[int], max_new_tokens: int, shape: LMShape, sampling: Sampling,
            timings: Timings, stop: frozenset[int]) -> Iterator[int]:
    greedy = sampling.temperature == 0
    if not greedy and sampling.seed is None:
        sampling = replace(sampling, seed=secrets.randbits(32))
    began = time.perf_counter()
    decoder.reset()
    last = _prefill(decoder, input_ids, shape.prefill_len, greedy)
    timings.prompt_tokens = len(input_ids)
    timings.prefill_seconds = time.perf_counter() - began
    token = _token(last, shape, sampling, len(input_ids) - 1)
    timings.first_token_seconds = time.perf_counter() - began
    yield token
    position, left, burst = len(input_ids), max_new_tokens - 1, 1
    while left and token not in stop:
        step = time.perf_counter()
        ids, at = np.array([[token]], np.int64), np.array([position], np.int64)
        if greedy:
            tokens = [int(t) for t in decoder.decode_greedy(ids, at, min(burst, left))]
        else:
            tokens = [int(t) for t in decoder.decode_sampled(ids, at, min(burst, left), sampling)]
        burst = min(2 * burst, BURST)
        spent = time.perf_counter() - step
        for token in tokens:
            timings.step_seconds.append(spent / len(tokens))
            timings.decode_tokens += 1
            timings.decode_seconds += spent / len(tokens)
            yield token
            if token in stop:
                return
        position += len(tokens)
        left -= len(tokens)


def _token(out: np.ndarray, shape: LMShape, sampling: Sampling, position: int) -> int:
    """The next token from a call's output: its last argmax (greedy), else its last row of logits (at
    cache position `position`) sampled."""
    out = np.asarray(out)
    if sampling.temperature == 0:
        return int(out.reshape(-1)[-1])
    return sample(out.reshape(-1, shape.vocab_size)[-1], sampling, position)


def _prefill(decoder: Decoder, input_ids: list[int], chunk: int, greedy: bool) -> np.ndarray:
    """Run the prompt through prefill, its last token at the last call's last position; that call's
    output (logits, or their argmax when `greedy`)."""
    n = len(input_ids)
    if n < chunk:  # pads in front, at the positions after the prompt's (never seen: see the top)
        calls = [([0] * (chunk - n) + input_ids, [*range(n, chunk), *range(n)])]
    else:
        calls = [(input_ids[s:s + chunk], range(s, s + chunk))
                 for s in [*range(0, n - chunk, chunk), n - chunk]]
    run = decoder.prefill_argmax if greedy else decoder.prefill
    for ids, positions in calls:
        out = run(np.array([ids], np.int64), np.array(positions, np.int64))
    return out
