"""Sampling a decode step's next token on the device (issue 40): temperature, top-k, then top-p over
one row of logits, drawn as a function of (seed, position) so that steps chain like greedy's argmax
(shaders/sample.comp, two dispatches), and `sample_reference`, the same draw on the host.

The filters (`kept_tokens`): logits / T, the top_k largest kept (all ties with the k-th too), then,
in (value descending, index ascending) order, each token whose preceding tokens hold less than top_p
of the kept softmax. The draw is the Gumbel-max of the kept tokens: the argmax of logit * (1 / T) +
g_i, g_i = -log(-log(u_i)), u_i from a hash of (seed, position, i) (a counter-based generator: no
state carried between steps), which picks token i with its softmax probability. Generation draws
with it on the host too (loader.lm.generate.sample), so host and device give the same tokens.

The parameters live in a small int32 tensor, `state` (sample_state), whose word 0 receives the
token: the place shaders/next_token.comp takes a chained step's token from (lm.greedy.HAND_OVER_BINDINGS'
first binding, bound to its first word); the position is the step's cache_position tensor, which the
hand-over writes, so one recording serves every step and every generation.
"""
from __future__ import annotations

import struct
from typing import Iterable

import numpy as np

from vkx.format import dtypes
from vkx.loader.errors import LimitError

from . import (FLOATS, WORDS_MODES, Defines, OpBuilder, TensorArg, UnsupportedOpError, binding_forms,
               read_defines, variants)

SEGMENT = 2048
"""Logits a workgroup of the first pass owns (shaders/sample.comp's SEG): its top-k candidates. A vocabulary
of at most a segment a lane of the second pass is run (`record_sample`): V up to 524,288 at 256 invocations."""
WORKGROUP = 256
"""Invocations a workgroup (sample.comp's WG and its histograms' BINS), fewer where the device has fewer."""
DRAW_SHARED = 14 * 1024
"""Shared-memory bytes of the second pass besides its candidate cache (sample.comp, DRAW: the
segment offsets, histograms, scans and the reduction)."""
CACHED = 4096
"""Most candidates the second pass holds in shared memory (8 bytes each); more are read from the
first pass's buffer on each of its walks."""

STATE_WORDS = 5
"""sample_state's words: token (written), top_k (0: none), top_p (fp32 bits; 1: none), 1 / T (fp32
bits), seed."""


def sample_state(temperature: float, top_k: int | None, top_p: float | None, seed: int) -> np.ndarray:
    """The int32 words of the state tensor for these parameters (token 0); top_k None or 0 and top_p
    None or 1 filter nothing, temperature > 0 (0 is greedy: the argmax, not this op)."""
    words = struct.pack("<IIffI", 0, top_k or 0, 1.0 if top_p is None else top_p, 1.0 / temperature,
                        seed & 0xFFFFFFFF)
    return np.frombuffer(words, dtype=np.int32).copy()


def _segment_defines(words: bool) -> list[Defines]:
    return [{**form, "SEGMENT": 1} for form in binding_forms("X", "x", FLOATS, words)]


@variants("sample")
def sample_variants() -> Iterable[Defines]:
    """The first pass for logits of each float dtype in each storage mode; the second pass."""
    for words in WORDS_MODES:
        yield from _segment_defines(words)
    yield {"DRAW": 1}


def record_sample(builder: OpBuilder, logits: TensorArg, state: TensorArg, position: TensorArg) -> None:
    """Record the two dispatches that sample one token from `logits` (one row, float) with the
    parameters in `state` (int32 [STATE_WORDS], sample_state) at `position` (int32 [1]) into
    state's word 0."""
    vocab = logits.shape[-1] if logits.shape else 0
    if not logits.dtype.is_float or vocab < 1 or logits.numel != vocab:
        raise UnsupportedOpError(f"sampling needs one row of float logits, not {logits.dtype} {list(logits.shape)}")
    if state.dtype != dtypes.INT32 or state.numel != STATE_WORDS or position.dtype != dtypes.INT32 \
            or position.numel != 1:
        raise UnsupportedOpError(f"sampling needs an int32 state of {STATE_WORDS} words and one int32 position")
    segments = -(-vocab // SEGMENT)
    limits = builder.limits
    wg = min(WORKGROUP, limits.max_compute_work_group_invocations)
    if segments > wg:  # more than a segment a lane drew no token at a tiny top-p (V = 600,000 on lavapipe)
        raise LimitError(f"kernel sample: {vocab} logits make {segments} segments of {SEGMENT}, more than the "
                         f"{wg} invocations of a workgroup on this device")
    cached = min(CACHED, max(1, (limits.max_compute_shared_memory_size - DRAW_SHARED) // 8))
    cached = 1 << (cached.bit_length() - 1)
    pairs = (segments + 1) // 2 * 2
    cand = builder.scratch(pairs + 2 * segments * SEGMENT, "sample", dtypes.INT32)
    push = struct.pack("<2I", vocab, segments)
    builder.dispatch("sample", [logits, cand, state, position], push, (segments, 1, 1),
                     {**read_defines(builder, "X", "x", logits), "SEGMENT": 1}, (wg, SEGMENT))
    builder.dispatch("sample", [cand, state, position], push, (1, 1, 1), {"DRAW": 1}, (wg, SEGMENT, cached))


def gumbel_scores(logits: np.ndarray, temperature: float, seed: int, position: int) -> np.ndarray:
    """sample.comp's score of every token: fp32 logit * fp32(1 / T) + its Gumbel noise at
    (seed, position), in fp32 (the device's log may differ in its last places)."""
    def mix(h):
        h = h ^ (h >> np.uint32(16))
        h = h * np.uint32(0x7FEB352D)
        h = h ^ (h >> np.uint32(15))
        h = h * np.uint32(0x846CA68B)
        return h ^ (h >> np.uint32(16))

    with np.errstate(over="ignore"):
        base = mix(mix(np.array([seed & 0xFFFFFFFF], np.uint32)) + np.uint32(position & 0xFFFFFFFF))
        h = mix(base + np.arange(logits.size, dtype=np.uint32))
    u = ((h >> np.uint32(9)).astype(np.float32) + np.float32(0.5)) * np.float32(1.0 / 8388608.0)
    noise = -np.log(-np.log(u))
    scaled = logits.astype(np.float32).reshape(-1) * np.float32(1.0 / temperature)
    return scaled + noise


def kept_tokens(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None) -> np.ndarray:
    """The probabilities a token is drawn with: the softmax of the kept tokens (0 outside them)."""
    x = logits.astype(np.float32).reshape(-1).astype(np.float64) / temperature
    if top_k and top_k < x.size:
        kth = np.partition(x, -top_k)[-top_k]
        x[x < kth] = -np.inf
    if top_p is not None and top_p < 1:
        order = np.argsort(-x, kind="stable")
        p = np.exp(x[order] - x.max())
        p /= p.sum()
        x[order[np.cumsum(p) - p >= top_p]] = -np.inf
    p = np.exp(x - x.max())
    return p / p.sum()


def sample_reference(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None,
                     seed: int, position: int) -> int:
    """The token record_sample draws for these logits at (seed, position): the Gumbel-max of the
    tokens kept_tokens keeps (ties: the lower index)."""
    scores = gumbel_scores(logits, temperature, seed, position)
    scores[kept_tokens(logits, temperature, top_k, top_p) == 0] = -np.inf
    return int(np.argmax(scores))
