"""`vkx export DIR` and `vkx generate` through the real console script."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.cli.conftest import EXAMPLES, one_error_line, vkx, vkx_here
from tests.llm.families import VOCAB, write_folder

pytestmark = pytest.mark.vulkan
PROMPT = [3, 14, 15, 92, 65]


def write_tokenizer(path: Path) -> None:
    """A word-level tokenizer over the test vocabulary: token i is the word w<i>."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(path))


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """A Llama-shaped checkpoint folder (weights, tokenizer.json), its model, and its export."""
    folder = tmp_path_factory.mktemp("llama")
    model = write_folder(folder, "llama", weights=True)
    write_tokenizer(folder / "tokenizer.json")
    done = vkx_here("export", folder, "-o", folder / "lm.pte", "--max-seq-len", 64, "--prefill-len", 8, "-q")
    assert done.returncode == 0, done.stderr
    return folder, model


def greedy(model, prompt: list[int], n: int) -> list[int]:
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, pad_token_id=0,
                         eos_token_id=None)
    return out[0, len(prompt):].tolist()


def test_generate_json_gives_transformers_greedy_tokens(lm):
    folder, model = lm
    done = vkx("generate", folder / "lm.pte", "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", 20,
               "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["schema"] == "vkx.generate/1"
    assert report["tokens"] == greedy(model, PROMPT, 20)
    assert report["prompt_tokens"] == 5 and report["text"] is None
    for key in ("prefill_tokens_per_s", "decode_tokens_per_s", "time_to_first_token_seconds", "peak_rss_bytes",
                "device_peak_bytes", "dispatches_per_token", "barriers_per_token", "gpu_ms_per_token"):
        assert report[key] > 0, key  # lavapipe has timestamps
    assert report["barriers_per_token"] < report["dispatches_per_token"]


def test_generate_streams_the_text(lm):
    folder, model = lm
    prompt = " ".join(f"w{i}" for i in PROMPT)
    done = vkx("generate", folder / "lm.pte", "--prompt", prompt, "--tokenizer", folder / "tokenizer.json",
               "--max-new-tokens", 12)
    assert done.returncode == 0, done.stderr
    *text, stats = done.stdout.strip().splitlines()
    assert " ".join(text).split() == [f"w{i}" for i in greedy(model, PROMPT, 12)]
    assert "prefill" in stats and "decode" in stats and "tokens/s" in stats and "time to first token" in stats


def test_json_text_is_the_streamed_text_special_tokens_kept(lm, tmp_path):
    """Every word but w1 a special token: `--json`'s text is what the stream wrote, special tokens included."""
    from tokenizers import AddedToken, Tokenizer

    folder, model = lm
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken(f"w{i}", special=True) for i in range(2, VOCAB)])
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    args = ("generate", folder / "lm.pte", "--prompt-ids", ",".join(map(str, PROMPT)), "--tokenizer",
            tmp_path / "tokenizer.json", "--max-new-tokens", 12)
    streamed = vkx(*args)
    report = json.loads(vkx(*args, "--json").stdout)
    assert streamed.returncode == 0, streamed.stderr
    words = [f"w{i}" for i in greedy(model, PROMPT, 12)]
    assert any(w != "w1" for w in words)  # some special tokens among them
    assert " ".join(streamed.stdout.strip().splitlines()[:-1]).split() == report["text"].split() == words


def test_sampling_with_a_seed_repeats(lm):
    folder, _ = lm
    run = lambda seed: json.loads(vkx(  # noqa: E731
        "generate", folder / "lm.pte", "--prompt-ids", "1,2,3", "--max-new-tokens", 10, "--temperature", "1.0",
        "--top-k", 40, "--top-p", "0.95", "--seed", seed, "--json").stdout)["tokens"]
    assert run(1) == run(1)
    assert run(1) != run(2)


@pytest.mark.parametrize("args, match", [
    ([], "give the prompt as --prompt TEXT"),
    (["--prompt", "w1", "--prompt-ids", "1"], "give the prompt as"),
    (["--prompt", "w1"], "--prompt needs --tokenizer"),
    (["--prompt-ids", "1,x"], "expected comma-separated token ids"),
    (["--prompt-ids", "1", "--top-k", "3"], "need a temperature"),
    (["--prompt-ids", "1", "--tokenizer", "missing.json"], "no such file"),
    (["--prompt-ids", ",".join(["1"] * 60), "--max-new-tokens", "10"], "do not fit the cache of 64"),
    (["--prompt-ids", "1,256"], "outside the vocabulary"),
])
def test_bad_generate_requests_are_one_error_line(lm, args, match):
    folder, _ = lm
    assert match in one_error_line(vkx("generate", folder / "lm.pte", *args))


def test_a_bad_tokenizer_file_is_one_error_line(lm, tmp_path):
    folder, _ = lm
    (tmp_path / "tokenizer.json").write_text("{not json")
    line = one_error_line(vkx("generate", folder / "lm.pte", "--prompt", "w1", "--tokenizer",
                              tmp_path / "tokenizer.json"))
    assert "not a tokenizer.json" in line


def test_a_program_that_is_no_causal_lm_is_refused(tmp_path):
    (tmp_path / "mlp.py").write_bytes((EXAMPLES / "mlp.py").read_bytes())
    assert vkx_here("export", tmp_path / "mlp.py", "-q").returncode == 0
    line = one_error_line(vkx("generate", tmp_path / "mlp.pte", "--prompt-ids", "1"))
    assert "not a causal LM program" in line


@pytest.mark.parametrize("make, args, match", [
    (lambda d: None, [], "a folder without config.json"),
    (lambda d: write_folder(d, "qwen2"), ["--weights", "w.safetensors"], "--weights is for a model file"),
    (lambda d: write_folder(d, "qwen2"), ["--max-seq-len", "8", "--prefill-len", "16"], "prefill length (16)"),
    (lambda d: write_folder(d, "qwen2"), ["--max-seq-len", "1000"], "the model's 256 positions"),
])
def test_bad_folder_exports_are_one_error_line(tmp_path, make, args, match):
    make(tmp_path)
    assert match in one_error_line(vkx("export", tmp_path, "-o", tmp_path.parent / "x.pte", *args))


def test_lengths_are_for_folders_only(tmp_path):
    assert "are for a Hugging Face model folder" in one_error_line(
        vkx("export", EXAMPLES / "mlp.py", "-o", tmp_path / "m.pte", "--max-seq-len", 8))


@pytest.fixture(scope="module")
def scored(lm):
    """The folder's export with --score (a window of 64) and a text of its words."""
    folder, model = lm
    done = vkx_here("export", folder, "-o", folder / "scored.pte", "--max-seq-len", 64, "--prefill-len", 8,
                    "--score", "-q")
    assert done.returncode == 0, done.stderr
    ids = [(7 * i + 3) % VOCAB for i in range(150)]
    (folder / "text.txt").write_text(" ".join(f"w{i}" for i in ids))
    return folder, model, ids


def test_perplexity_json_is_transformers_over_the_same_windows(scored):
    """Three windows of 64 (the last 22 tokens long), each scored alone, as transformers scores them."""
    folder, model, ids = scored
    done = vkx("perplexity", folder / "scored.pte", "--text", folder / "text.txt", "--tokenizer",
               folder / "tokenizer.json", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["schema"], report["tokens"], report["window"], report["windows"], report["predicted_tokens"]) == \
        ("vkx.perplexity/1", 150, 64, 3, 147)
    nll = 0.0
    with torch.no_grad():
        for start in range(0, 150, 64):
            window = torch.tensor(ids[start:start + 64])
            logits = model(window[None]).logits[0, :-1].double()
            nll += torch.nn.functional.cross_entropy(logits, window[1:], reduction="sum").item()
    assert report["perplexity"] == pytest.approx(float(np.exp(nll / 147)), rel=1e-4)
    short = vkx("perplexity", folder / "scored.pte", "--text", folder / "text.txt", "--tokenizer",
                folder / "tokenizer.json", "--max-tokens", 10)
    assert short.returncode == 0 and "over 9 predicted tokens" in short.stdout, short.stderr


def test_generate_loads_no_score_method(scored):
    """A file with score generates as one without: the same tokens, and the window's activations not loaded."""
    folder, model, _ = scored
    runs = [json.loads(vkx("generate", folder / name, "--prompt-ids", ",".join(map(str, PROMPT)),
                           "--max-new-tokens", 8, "--json").stdout) for name in ("lm.pte", "scored.pte")]
    assert runs[0]["tokens"] == runs[1]["tokens"] == greedy(model, PROMPT, 8)
    assert runs[1]["device_peak_bytes"] <= runs[0]["device_peak_bytes"] * 1.05


@pytest.mark.parametrize("args, match", [
    ([], "Missing option '--text'"),
    (["--text", "missing.txt", "--tokenizer", "tokenizer.json"], "--text missing.txt: no such file"),
    (["--text", "text.txt", "--tokenizer", "missing.json"], "--tokenizer missing.json: no such file"),
    (["--text", "text.txt", "--tokenizer", "tokenizer.json", "--max-tokens", "1"], "--max-tokens"),
])
def test_bad_perplexity_requests_are_one_error_line(scored, monkeypatch, args, match):
    folder, _, _ = scored
    monkeypatch.chdir(folder)
    assert match in one_error_line(vkx("perplexity", "scored.pte", *args))


def test_perplexity_of_a_file_without_score_is_one_error_line(lm, tmp_path):
    folder, _ = lm
    (tmp_path / "t.txt").write_text("w1 w2 w3")
    line = one_error_line(vkx("perplexity", folder / "lm.pte", "--text", tmp_path / "t.txt", "--tokenizer",
                              folder / "tokenizer.json"))
    assert "no score method" in line and "--score" in line


@pytest.mark.parametrize("args, match", [
    (["--quantize-head", "int8"], "--quantize-head needs --quantize"),
    (["--quantize", "int4", "--quantize-head", "none"], "lm_head is tied to the token embedding"),
    (["--quantize-embedding", "int4"], "--quantize-embedding needs --quantize"),
])
def test_bad_table_quantizations_are_one_error_line(tmp_path, args, match):
    write_folder(tmp_path, "llama")
    assert match in one_error_line(vkx("export", tmp_path, "-o", tmp_path.parent / "x.pte", *args))


def test_score_and_head_are_for_folders_only(tmp_path):
    for args in (["--score"], ["--quantize", "int4", "--quantize-head", "int8"]):
        assert "is for a Hugging Face model folder" in one_error_line(
            vkx("export", EXAMPLES / "mlp.py", "-o", tmp_path / "m.pte", *args))


def test_load_takes_a_subset_of_methods(scored):
    """vkx.load(methods=...) loads those alone; a name the file lacks is an InputError naming what it has."""
    import vkx
    from vkx.loader.errors import InputError
    folder, _, _ = scored
    with vkx.load(folder / "scored.pte", methods=["score"]) as program:
        assert program.methods == ["score"]
    with pytest.raises(InputError, match="no method generate .it has prefill, decode, score."):
        vkx.load(folder / "scored.pte", methods=["score", "generate"])


def test_a_tokenizer_of_a_larger_vocabulary_is_refused_before_the_load(scored, tmp_path):
    """Token ids past the file's vocabulary (another model's tokenizer) are refused from the header, with
    the vocabulary's one line, before any device work (a device that cannot open would speak first)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder, _, _ = scored
    tokenizer = Tokenizer(models.WordLevel({"w1": 1, "far": 1000, "[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "other.json"))
    (tmp_path / "t.txt").write_text("w1 far w1")
    line = one_error_line(vkx("perplexity", folder / "scored.pte", "--text", tmp_path / "t.txt", "--tokenizer",
                              tmp_path / "other.json", VKX_DEVICE="7"))
    assert line == "vkx: error: token id 1000 is outside the vocabulary (0..255)"
