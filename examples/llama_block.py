"""A Llama-style decoder block: RMSNorm, rotary embedding, grouped-query causal attention, SiLU-gated MLP."""
import torch
from torch import nn
from torch.nn import functional as F


def rotary_tables(tokens: int, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's angles, [tokens, head_dim] (each frequency twice, as rotate_half pairs them)."""
    frequencies = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(tokens, dtype=torch.float32), frequencies)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class DecoderBlock(nn.Module):
    def __init__(self, width: int = 64, heads: int = 4, kv_heads: int = 2, hidden: int = 172, max_tokens: int = 32):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, width // heads
        self.attention_norm = nn.RMSNorm(width, eps=1e-5)
        self.wq = nn.Linear(width, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(width, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(width, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, width, bias=False)
        self.mlp_norm = nn.RMSNorm(width, eps=1e-5)
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)
        cos, sin = rotary_tables(max_tokens, self.head_dim)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.shape[-2]
        return x * self.cos[:tokens] + rotate_half(x) * self.sin[:tokens]

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape
        q = self.wq(x).view(batch, tokens, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, tokens, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, tokens, self.kv_heads, self.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(self.rotate(q), self.rotate(k), v, is_causal=True, enable_gqa=True)
        return self.wo(y.transpose(1, 2).reshape(batch, tokens, -1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def get_model():
    torch.manual_seed(0)
    return DecoderBlock().eval(), (torch.randn(1, 11, 64),)
