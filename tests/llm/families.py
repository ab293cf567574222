"""Small configurations of each family vkx exports, and model folders made from them."""
from __future__ import annotations

from pathlib import Path

import torch

VOCAB = 256
_COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=256)


def config(family: str, **overrides):
    """A two-layer config of `family` (grouped-query attention where the family has it), with `overrides`."""
    import transformers as t

    common = {**_COMMON, **overrides}

    if family == "llama":  # Llama 3.x: rope scaling, tied embeddings
        return t.LlamaConfig(**{**dict(rope_theta=500000.0, tie_word_embeddings=True, rope_scaling=dict(
            rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
            original_max_position_embeddings=64)), **common})
    if family == "qwen2":
        return t.Qwen2Config(**common)
    if family == "qwen3":
        return t.Qwen3Config(**common, head_dim=16)
    if family == "mistral":
        return t.MistralConfig(**common)
    if family == "phi3":
        return t.Phi3Config(**common, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if family == "gpt2":
        return t.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=256, bos_token_id=0,
                            eos_token_id=0)
    raise ValueError(family)


FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "phi3", "gpt2")


def write_folder(folder: Path, family: str, *, weights: bool = False, shard_bytes: int | None = None,
                 cfg=None) -> torch.nn.Module | None:
    """A model folder: config.json, and with `weights` a checkpoint of random weights (sharded
    when `shard_bytes` is given) written by save_pretrained; returns the model it saved."""
    from vkx.export import hf

    folder.mkdir(parents=True, exist_ok=True)
    cfg = cfg or config(family)
    cfg.save_pretrained(folder)
    if not weights:
        return None
    model = hf.build_model(hf.read_folder(folder), torch.float32, seed=1)
    model.save_pretrained(folder, max_shard_size=shard_bytes or "50GB")
    return model
