"""export/hf.py in torch: model folders, lazily mapped weights, and the cached wrapper against transformers."""
from __future__ import annotations

import json

import pytest
import torch

from tests.llm.families import FAMILIES, VOCAB, config, write_folder
from vkx.export import hf
from vkx.export.errors import ExportError

NEW_TOKENS = 32
PROMPT = 5
PREFILL = 8
# Per-step logits of the wrapper against transformers' own generate, both fp32 on the CPU:
# the same ops in another order (sdpa with an explicit mask, a cache written by index_copy_).
LOGIT_TOLERANCE = 1e-4


def greedy_with_cache(lm: hf.CausalLM, prompt: torch.Tensor, steps: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy decoding through the wrapper: a prefill padded in front (the pads at the positions after
    the prompt's), then one token per call; the wrapper returns the last position's logits only."""
    n = prompt.shape[1]
    ids = torch.zeros(1, PREFILL, dtype=torch.long)
    ids[0, PREFILL - n:] = prompt[0]
    with torch.no_grad():
        logits = lm(ids, torch.tensor([*range(n, PREFILL), *range(n)]))
        assert logits.shape == (1, 1, VOCAB)
        logits = logits[0, -1]
        tokens, per_step = [], []
        for position in range(n, n + steps):
            per_step.append(logits)
            tokens.append(int(logits.argmax()))
            logits = lm(torch.tensor([[tokens[-1]]]), torch.tensor([position]))[0, 0]
    return tokens, per_step


@pytest.mark.parametrize("family", FAMILIES)
def test_wrapper_matches_transformers_generate(tmp_path, family):
    write_folder(tmp_path, family)
    model = hf.build_model(hf.read_folder(tmp_path), torch.float32)
    prompt = torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(3))
    ref = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
    tokens, logits = greedy_with_cache(hf.CausalLM(model, 64), prompt, NEW_TOKENS)
    assert tokens == ref.sequences[0, PROMPT:].tolist()
    scale = ref.logits[0].std().item()
    assert scale > 0.5, "random weights must give logits of real magnitude"
    for step, (ours, theirs) in enumerate(zip(logits, ref.logits)):
        assert (ours - theirs[0]).abs().max().item() < LOGIT_TOLERANCE * max(1.0, scale), step


def test_reset_starts_a_new_sequence(tmp_path):
    write_folder(tmp_path, "qwen2")
    lm = hf.CausalLM(hf.build_model(hf.read_folder(tmp_path), torch.float32), 32)
    prompt = torch.tensor([[5, 6, 7]])
    first, _ = greedy_with_cache(lm, prompt, 4)
    greedy_with_cache(lm, torch.tensor([[9, 1, 2, 200]]), 8)
    lm.reset()
    assert all(not b.any() for name, b in lm.named_buffers() if "_cache_" in name)
    again, _ = greedy_with_cache(lm, prompt, 4)
    assert again == first


@pytest.mark.parametrize("shard_bytes", [None, 60_000])
def test_checkpoint_folder_loads_the_saved_weights(tmp_path, shard_bytes):
    saved = write_folder(tmp_path, "llama", weights=True, shard_bytes=shard_bytes)
    folder = hf.read_folder(tmp_path)
    assert len(folder.weights) == (1 if shard_bytes is None else len(set(json.loads(
        (tmp_path / hf.INDEX).read_text())["weight_map"].values()))) and (shard_bytes is None or len(folder.weights) > 1)
    loaded = hf.build_model(folder)
    assert all(p.device.type == "cpu" for p in loaded.parameters())
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight  # tied again
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, saved(ids).logits, rtol=0, atol=0)


def test_mapped_weights_are_views_of_the_file(tmp_path):
    write_folder(tmp_path, "gpt2", weights=True)
    tensors = hf.map_safetensors(tmp_path / hf.SINGLE)
    size = (tmp_path / hf.SINGLE).stat().st_size
    pointers = sorted(t.data_ptr() for t in tensors.values() if t.numel())
    # all in one mapping of the file: the span of their addresses is within the file's size
    assert pointers[-1] - pointers[0] < size


def test_random_weights_follow_the_dtype(tmp_path):
    write_folder(tmp_path, "mistral")
    model = hf.build_model(hf.read_folder(tmp_path), torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_bad_folders_are_refused(tmp_path):
    with pytest.raises(ExportError, match="not a Hugging Face model folder"):
        hf.read_folder(tmp_path)
    from transformers import BertConfig

    BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=64).save_pretrained(tmp_path)
    with pytest.raises(ExportError, match="model_type 'bert' is not one of"):
        hf.build_model(hf.read_folder(tmp_path))


def test_missing_shard_is_refused(tmp_path):
    write_folder(tmp_path, "qwen2", weights=True, shard_bytes=60_000)
    next(tmp_path.glob("model-*.safetensors")).unlink()
    with pytest.raises(ExportError, match="lists shards that are missing"):
        hf.read_folder(tmp_path)


def test_checkpoint_of_another_config_is_refused(tmp_path):
    write_folder(tmp_path, "qwen2", weights=True)
    config("qwen2", num_hidden_layers=3).save_pretrained(tmp_path)
    with pytest.raises(ExportError, match=r"missing model\.layers\.2\."):
        hf.build_model(hf.read_folder(tmp_path))
    config("qwen2", intermediate_size=96).save_pretrained(tmp_path)
    with pytest.raises(ExportError, match="has shape"):
        hf.build_model(hf.read_folder(tmp_path))


def test_truncated_checkpoint_is_refused(tmp_path):
    write_folder(tmp_path, "gpt2", weights=True)
    path = tmp_path / hf.SINGLE
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ExportError, match="do not match its shape"):
        hf.build_model(hf.read_folder(tmp_path))
