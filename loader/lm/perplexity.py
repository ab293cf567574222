"""Perplexity of a causal LM program over a text, from its `score` method (`vkx export DIR --score`).

The text's tokens are cut into windows of the method's length, each scored alone: one call gives every
position's fp32 logits, and position p predicts token p + 1 from the window's tokens up to p (the
window's first token is predicted by nothing). A shorter last window is padded after its tokens, which
no earlier position sees (the mask is causal), and only its own positions count. Perplexity is
exp(mean negative log-likelihood) over every predicted token: what transformers gives on the same
windows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from vkx.format.methods import SCORE
from vkx.loader.errors import InputError


@dataclass(frozen=True)
class Perplexity:
    perplexity: float
    mean_nll: float
    """Mean negative log-likelihood of a predicted token, in nats."""
    predicted: int
    """Tokens predicted: the text's tokens less one a window."""
    window: int
    windows: int


def require_score(methods: Sequence[str]) -> None:
    """InputError unless the program has the score method."""
    if SCORE not in methods:
        raise InputError(f"no {SCORE} method (it has {', '.join(methods) or 'one unnamed method'}): export the "
                         "model folder with vkx export DIR --score")


def perplexity(program, token_ids: Sequence[int], progress: Callable[[int, int], None] | None = None) -> Perplexity:
    """The perplexity of `token_ids` under `program`'s score method; `progress(done, total)` after each window."""
    require_score(program.methods)
    method = program[SCORE]
    (ids_shape, _), _ = method.input_specs
    window = ids_shape[1]
    (logits_shape, _), = method.output_specs
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.ndim != 1 or len(ids) < 2:
        raise InputError(f"perplexity needs at least 2 tokens, not {len(ids)}")
    if ids.min() < 0 or ids.max() >= logits_shape[-1]:
        raise InputError(f"token ids must be in [0, {logits_shape[-1]}): the text does not match the model's "
                         "vocabulary (another tokenizer?)")
    starts = [s for s in range(0, len(ids), window) if len(ids) - s >= 2]
    total, predicted = 0.0, 0
    for done, start in enumerate(starts, 1):
        chunk = ids[start:start + window]
        padded = np.zeros((1, window), np.int64)
        padded[0, :len(chunk)] = chunk
        logits = method.run_numpy(padded, np.arange(window, dtype=np.int64))[0][0, :len(chunk) - 1]
        total += float(_nll(logits.astype(np.float64), chunk[1:]).sum())
        predicted += len(chunk) - 1
        if progress is not None:
            progress(done, len(starts))
    mean = total / predicted
    return Perplexity(math.exp(mean), mean, predicted, window, len(starts))


def _nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[target] of each row."""
    top = logits.max(-1, keepdims=True)
    log_sum = np.log(np.exp(logits - top).sum(-1)) + top[:, 0]
    return log_sum - logits[np.arange(len(targets)), targets]
