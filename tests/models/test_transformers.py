"""Hugging Face transformers families (Llama, Qwen2/3, Mistral, Phi-3, Gemma, GPT-2, BERT, T5 and Whisper
encoders) in small configurations with random weights, exported by vkx,
run on the device and compared with torch (no downloads: each model is built from its config)."""
from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn

from .conftest import check_model

pytestmark = pytest.mark.vulkan

VOCAB, SEQ = 96, 8


class Output(nn.Module):
    """The model's one tensor output (`logits` or `last_hidden_state`), its tensor inputs passed by keyword
    (`inputs`: input ids, or ids and a padding mask, or audio features)."""

    def __init__(self, model: nn.Module, field: str, inputs: tuple[str, ...] = ("input_ids",)):
        super().__init__()
        self.model, self.field, self.inputs = model, field, inputs

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(**dict(zip(self.inputs, tensors))), self.field)


def _ids(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(seed))


def _causal_lm(config_class, model_class, attn: str) -> nn.Module:
    config = config_class(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                          use_cache=False, attn_implementation=attn, bos_token_id=1, eos_token_id=2,
                          pad_token_id=0)
    torch.manual_seed(0)
    return Output(model_class(config), "logits")


CAUSAL = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
}


@pytest.mark.parametrize("family, attn", [(family, "sdpa") for family in CAUSAL] + [("llama", "eager")])
def test_causal_lm(family, attn):
    """Grouped-query attention (4 query heads over 2 key/value heads), RoPE, RMSNorm, SwiGLU."""
    config, model = (getattr(transformers, name) for name in CAUSAL[family])
    check_model(_causal_lm(config, model, attn), (_ids(),))


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_llama_in_half(dtype):
    """The whole model in fp16/bf16 (masks and rotary tables folded in that dtype)."""
    check_model(_causal_lm(transformers.LlamaConfig, transformers.LlamaForCausalLM, "sdpa"), (_ids(),), dtype=dtype)


def test_gpt2():
    """Learned positions, fused QKV (Conv1D), tanh GELU, layer norm, tied head."""
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=1, n_head=4, n_positions=64,
                                     use_cache=False, attn_implementation="sdpa", bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    check_model(Output(transformers.GPT2LMHeadModel(config), "logits"), (_ids(),))


def _bert(attn: str) -> nn.Module:
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=64, attn_implementation=attn)
    torch.manual_seed(0)
    return transformers.BertModel(config, add_pooling_layer=False)


def test_bert():
    check_model(Output(_bert("eager"), "last_hidden_state"), (_ids(),))


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_bert_padding_mask(attn):
    """The padding mask (1 = token, 0 = padding) is a model input: its expansion to an additive mask runs on
    the device."""
    mask = torch.ones(2, SEQ, dtype=torch.int64)
    mask[1, 5:] = 0
    ids = torch.cat([_ids(0), _ids(1)])
    check_model(Output(_bert(attn), "last_hidden_state", ("input_ids", "attention_mask")), (ids, mask))


def test_t5_encoder():
    """Relative position buckets (log, minimum, where), RMS-style layer norm without mean."""
    config = transformers.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=1, num_heads=4,
                                   relative_attention_num_buckets=8, relative_attention_max_distance=16,
                                   attn_implementation="sdpa")
    torch.manual_seed(0)
    check_model(Output(transformers.T5EncoderModel(config), "last_hidden_state"), (_ids(),))


def test_whisper_encoder():
    """Two Conv1d layers with GELU over log-mel features, sinusoidal positions, pre-norm blocks."""
    config = transformers.WhisperConfig(num_mel_bins=16, d_model=64, encoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
                                        encoder_ffn_dim=128, max_source_positions=16, attn_implementation="sdpa")
    torch.manual_seed(0)
    encoder = transformers.WhisperModel(config).get_encoder()
    features = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(0))
    check_model(Output(encoder, "last_hidden_state", ("input_features",)), (features,))
