"""Stateful models in plain torch, the oracles of tests/state: a running sum, a ring buffer,
and a small decoder whose KV cache is updated as Hugging Face's StaticCache does
(`index_copy_(2, cache_position, k)`), with the attention mask built from the positions."""
from __future__ import annotations

import torch
from torch import nn


class RunningSum(nn.Module):
    """total += x; returns total * 2 (the buffer's new content is an activation, copied back)."""

    def __init__(self, shape=(4, 8)):
        super().__init__()
        self.register_buffer("total", torch.zeros(shape))

    def forward(self, x):
        self.total += x
        return self.total * 2


class RingBuffer(nn.Module):
    """ring[slot] = x (index_put at a position given as an input tensor); returns the ring's mean."""

    def __init__(self, slots: int = 5, width: int = 6):
        super().__init__()
        self.register_buffer("ring", torch.full((slots, width), 0.5))

    def forward(self, x, slot):
        self.ring[slot] = x
        return self.ring.mean(0, keepdim=True) + 0


class Layer(nn.Module):
    def __init__(self, dim: int, heads: int, max_len: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.norm1, self.norm2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.up, self.down = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        shape = (1, heads, max_len, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def forward(self, x, cache_position, mask):
        b, p, d = x.shape
        h = self.norm1(x)
        q, k, v = (f(h).view(b, p, self.heads, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v))
        self.k_cache.index_copy_(2, cache_position, k)
        self.v_cache.index_copy_(2, cache_position, v)
        a = nn.functional.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, p, d))
        return x + self.down(nn.functional.silu(self.up(self.norm2(x))))


class Decoder(nn.Module):
    """input_ids [1, P] + cache_position [P] -> logits [1, P, vocab]; the KV cache lives in buffers."""

    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2, max_len: int = 48):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList(Layer(dim, heads, max_len) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("positions", torch.arange(max_len), persistent=False)

    def forward(self, input_ids, cache_position):
        x = self.embed(input_ids) + self.pos(cache_position)
        mask = self.positions[None, :] <= cache_position[:, None]  # [P, max_len]: what each position sees
        for layer in self.layers:
            x = layer(x, cache_position, mask)
        return self.head(self.norm(x))


def decoder(seed: int = 0) -> Decoder:
    """A decoder with random weights of real magnitude."""
    torch.manual_seed(seed)
    model = Decoder().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 1.0))
    return model


def prefill_inputs(prompt: int = 8, vocab: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, vocab, (1, prompt)), torch.arange(prompt)


def decode_inputs(position: int, token: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([[token]]), torch.tensor([position])
