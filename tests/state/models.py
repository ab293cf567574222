"""Stateful models in plain torch, the oracles of tests/state: a running sum (with a second
method that reads it), a ring buffer, and examples/kv_decoder.py's decoder with its KV cache."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class RunningSum(nn.Module):
    """total += x; returns total * 2 (the buffer's new content is an activation, copied back)."""

    def __init__(self, shape=(4, 8)):
        super().__init__()
        self.register_buffer("total", torch.zeros(shape))

    def forward(self, x):
        self.total += x
        return self.total * 2


class Accumulator(RunningSum):
    """`forward` adds into the total; `read` (another method of the same module) scales it."""

    def read(self, scale):
        return self.total * scale


class RingBuffer(nn.Module):
    """ring[slot] = x (index_put at a position given as an input tensor); returns the ring's mean."""

    def __init__(self, slots: int = 5, width: int = 6):
        super().__init__()
        self.register_buffer("ring", torch.full((slots, width), 0.5))

    def forward(self, x, slot):
        self.ring[slot] = x
        return self.ring.mean(0, keepdim=True) + 0


def _example():
    spec = importlib.util.spec_from_file_location("_vkx_kv_decoder", EXAMPLES / "kv_decoder.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_decoder = _example()
Decoder, decoder = _decoder.Decoder, _decoder.decoder
prefill_inputs, decode_inputs = _decoder.prefill_inputs, _decoder.decode_inputs
