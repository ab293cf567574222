"""Make ExecuTorch 1.5.1's own Llama recipe files in this folder (run by hand, not in CI):

    python tests/data/make_et_llm_files.py

Needs executorch==1.5.1 and torchao. A tiny Llama (2 layers, dim 64, 4 query heads over 2 key/value
heads, vocabulary 256, 32 positions) with seeded random weights (written as a checkpoint: without one
the recipe leaves the norm weights uninitialised) goes through `export_llama --vulkan -kv
--use_sdpa_with_kv_cache` twice: et_llama_4w.pte (`-qmode 4w`, groups of 32: et_vk.linear_q4gsw) and
et_llama_8da4w.pte (`-qmode 8da4w`: et_vk.linear_dq8ca_q4gsw). Beside each, <name>.npz holds the oracle:
the recipe's own quantized eager model (the module it exports) run by torch on a prompt
(`prompt` at position 0, `prefill` its last token's logits), then one token at a time (`steps` fed at
positions len(prompt).., `step_logits`), and its greedy continuation of the prompt (`greedy`).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import torch
from executorch.examples.models.llama.export_llama_lib import (
    _prepare_for_llama_export, build_args_parser, export_llama)
from executorch.extension.llm.export.config.llm_config import LlmConfig

HERE = Path(__file__).resolve().parent
PARAMS = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 256, "multiple_of": 32,
          "norm_eps": 1e-5, "rope_theta": 10000.0, "use_scaled_rope": False}
HIDDEN = 192  # the recipe's SwiGLU width for dim 64, multiple_of 32
MAX_SEQ = 32
FILES = {"et_llama_4w": "4w", "et_llama_8da4w": "8da4w"}
PROMPT = [3, 141, 59, 26, 53]
STEPS = [58, 97, 93]
GREEDY = 8


def checkpoint(path: Path) -> None:
    """Seeded weights of unit-scale activations: linears N(0, 1/fan_in), norms near 1."""
    gen = torch.Generator().manual_seed(0)
    dim, heads, kv_heads, vocab = PARAMS["dim"], PARAMS["n_heads"], PARAMS["n_kv_heads"], PARAMS["vocab_size"]
    head_dim = dim // heads

    def linear(n: int, k: int) -> torch.Tensor:
        return torch.randn(n, k, generator=gen) / k ** 0.5

    def norm() -> torch.Tensor:
        return 1 + 0.1 * torch.randn(dim, generator=gen)

    state = {"tok_embeddings.weight": torch.randn(vocab, dim, generator=gen), "norm.weight": norm(),
             "output.weight": linear(vocab, dim)}
    for i in range(PARAMS["n_layers"]):
        state |= {f"layers.{i}.attention.wq.weight": linear(heads * head_dim, dim),
                  f"layers.{i}.attention.wk.weight": linear(kv_heads * head_dim, dim),
                  f"layers.{i}.attention.wv.weight": linear(kv_heads * head_dim, dim),
                  f"layers.{i}.attention.wo.weight": linear(dim, heads * head_dim),
                  f"layers.{i}.feed_forward.w1.weight": linear(HIDDEN, dim),
                  f"layers.{i}.feed_forward.w3.weight": linear(HIDDEN, dim),
                  f"layers.{i}.feed_forward.w2.weight": linear(dim, HIDDEN),
                  f"layers.{i}.attention_norm.weight": norm(), f"layers.{i}.ffn_norm.weight": norm()}
    torch.save(state, path)


def recipe_args(work: Path, name: str, qmode: str) -> list[str]:
    return ["-c", str(work / "ckpt.pth"), "-p", str(work / "params.json"), "-kv", "--use_sdpa_with_kv_cache",
            "--vulkan", "-qmode", qmode, "-G", "32", "--max_seq_length", str(MAX_SEQ), "--max_context_length",
            str(MAX_SEQ), "-d", "fp32", "--output_name", str(HERE / f"{name}.pte")]


def oracle(args: list[str]) -> dict[str, np.ndarray]:
    """The recipe's quantized eager model on the prompt, the steps and greedily."""
    model = _prepare_for_llama_export(LlmConfig.from_args(build_args_parser().parse_args(args))).model.eval()

    def call(tokens: list[int], position: int) -> torch.Tensor:
        return model(torch.tensor([tokens]), {"input_pos": torch.tensor([position])})[0].reshape(-1)

    def reset() -> None:  # empty the KV caches (the other buffers are the rotary tables)
        for name, buffer in model.named_buffers():
            if name.endswith(("k_cache", "v_cache")):
                buffer.zero_()

    with torch.no_grad():
        reset()
        prefill = call(PROMPT, 0)
        steps = [call([t], len(PROMPT) + i) for i, t in enumerate(STEPS)]
        reset()
        greedy = [int(call(PROMPT, 0).argmax())]
        while len(greedy) < GREEDY:
            greedy.append(int(call([greedy[-1]], len(PROMPT) + len(greedy) - 1).argmax()))
    return {"prompt": np.array(PROMPT), "prefill": prefill.numpy(), "steps": np.array(STEPS),
            "step_logits": torch.stack(steps).numpy(), "greedy": np.array(greedy)}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "params.json").write_text(json.dumps(PARAMS))
        checkpoint(work / "ckpt.pth")
        for name, qmode in FILES.items():
            args = recipe_args(work, name, qmode)
            torch.manual_seed(42)  # what export_llama's main does
            np.savez(HERE / f"{name}.npz", **oracle(args))
            torch.manual_seed(42)
            export_llama(build_args_parser().parse_args(args))


if __name__ == "__main__":
    main()
