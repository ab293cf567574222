"""Hugging Face transformers families in small configurations with random weights, exported by vkx,
run on the device and compared with torch (no downloads: each model is built from its config)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from .conftest import check_model

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.vulkan

VOCAB, SEQ = 96, 8


class Output(nn.Module):
    """The model's one tensor output (`logits` or `last_hidden_state`) for input ids."""

    def __init__(self, model: nn.Module, field: str):
        super().__init__()
        self.model, self.field = model, field

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(input_ids=ids), self.field)


def _ids(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(seed))


def _causal_lm(config_class, model_class, attn: str, **extra) -> nn.Module:
    config = config_class(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          use_cache=False, attn_implementation=attn, bos_token_id=1, eos_token_id=2,
                          pad_token_id=0, **extra)
    torch.manual_seed(0)
    return Output(model_class(config), "logits")


CAUSAL = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM"),
}


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("family", CAUSAL)
def test_causal_lm(family, attn):
    """Grouped-query attention (4 query heads over 2 key/value heads), RoPE, RMSNorm, SwiGLU."""
    config, model = (getattr(transformers, name) for name in CAUSAL[family])
    check_model(_causal_lm(config, model, attn), (_ids(),))
