"""A small decoder with a KV cache that lives on the GPU, exported as two methods of one file.

The cache is two registered buffers per layer updated as Hugging Face's StaticCache does
(`index_copy_(2, cache_position, k)`); the attention mask is built from the positions. `prefill`
takes the prompt (input_ids [1, P], cache_position [P]), `decode` one token ([1, 1], [1]); both
share the weights (stored and uploaded once) and the cache (`vkx inspect` lists it).

    vkx export examples/kv_decoder.py decoder.pte
    python -c "import vkx; p = vkx.load('decoder.pte'); print(p.methods, p.states)"
"""
import torch
from torch import nn


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


def get_model():
    return decoder(), {"prefill": prefill_inputs(), "decode": decode_inputs(8)}
