"""ExecuTorch 1.5.1's own Llama recipe files (`export_llama --vulkan`, tests/data/et_llama_*.pte, made by
tests/data/make_et_llm_files.py) run on vkx and match the recipe's quantized torch model.

The oracle (tests/data/et_llama_*.npz) is that model run by torch when the files were made: a prompt's
last logits, then one token at a time, and its greedy continuation. 4w: both multiply by the same
dequantized weights in fp32. 8da4w: both also quantize each row of activations to int8 with the same
scale and zero point (the same integers), so the bound is the same.
"""
from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import vkx
from vkx.format import ProgramFile, validate
from vkx.format.et_llm import LLMInfo, llm_info
from vkx.format.program import EValue
from tests.cli.conftest import vkx as run_vkx
from tests.ops.conftest import assert_norm_close

DATA = Path(__file__).resolve().parents[1] / "data"
FILES = {"et_llama_4w": "et_vk.linear_q4gsw.default", "et_llama_8da4w": "et_vk.linear_dq8ca_q4gsw.default"}
"""Each file's linear op."""
RTOL = 1e-4
"""The logits' max error relative to their largest (measured: 7e-7 for 4w, 4e-7 for 8da4w)."""

pytestmark = pytest.mark.vulkan


def oracle(name: str) -> dict[str, np.ndarray]:
    return dict(np.load(DATA / f"{name}.npz"))


@pytest.mark.parametrize("name", FILES)
def test_recipe_file_is_dynamic_and_validates(name):
    ops = Counter(op.name for op in ProgramFile.open(DATA / f"{name}.pte").vulkan.graph.chain)
    assert ops["sym_size.int"] == 1 and ops["et_vk.select_as_symint.default"] == 2 and ops["add"] == 1
    assert ops["sdpa_with_kv_cache.default"] == 2 and ops[FILES[name]] == 15
    assert validate(DATA / f"{name}.pte").delegates == 1  # raises a FormatError for a file it refuses


@pytest.mark.parametrize("name", FILES)
def test_prefill_matches_torch(name):
    want = oracle(name)
    prompt = want["prompt"]
    with vkx.load(DATA / f"{name}.pte", sequence_length=len(prompt)) as program:
        logits = program.run_numpy(prompt[None].astype(np.int64), np.array([0], np.int64))[0]
    assert_norm_close(logits.reshape(-1), want["prefill"], rtol=RTOL)


@pytest.mark.parametrize("name", FILES)
def test_one_token_at_a_time_matches_torch(name):
    """The prompt fed token by token fills the cache as the prefill does; then each step attends to it."""
    want = oracle(name)
    prompt, steps = list(want["prompt"]), list(want["steps"])
    with vkx.load(DATA / f"{name}.pte", sequence_length=1) as program:
        got = [program.run_numpy(np.array([[t]], np.int64), np.array([i], np.int64))[0].reshape(-1)
               for i, t in enumerate(prompt + steps)]
        program.reset()
        again = program.run_numpy(np.array([[prompt[0]]], np.int64), np.array([0], np.int64))[0].reshape(-1)
    assert_norm_close(got[len(prompt) - 1], want["prefill"], rtol=RTOL)
    for i, logits in enumerate(want["step_logits"]):
        assert_norm_close(got[len(prompt) + i], logits, rtol=RTOL)
    np.testing.assert_array_equal(again, got[0])  # reset empties the caches


@pytest.mark.parametrize("name", FILES)
def test_generate_drives_the_recipe_file(name):
    want = oracle(name)
    prompt, greedy = [int(t) for t in want["prompt"]], [int(t) for t in want["greedy"]]
    with vkx.load(DATA / f"{name}.pte", sequence_length=1) as program:
        assert list(program.generate(prompt, len(greedy))) == greedy
    report = json.loads(run_vkx("generate", DATA / f"{name}.pte", "--prompt-ids", ",".join(map(str, prompt)),
                                "--max-new-tokens", len(greedy), "--json").stdout)
    assert report["tokens"] == greedy and report["stop"] == "max_new_tokens"


def test_metadata_methods_give_the_cache_length_and_eos_ids():
    """export_llama --metadata '{"get_eos_ids": [7, 9]}' adds a method of one Int output per id."""
    program = ProgramFile.open(DATA / "et_llama_4w.pte").program
    assert llm_info(program) == LLMInfo(32, ())
    base = next(p for p in program.execution_plan if p.name == "get_max_context_len")
    eos = dataclasses.replace(base, name="get_eos_ids", values=(EValue("Int", 7), EValue("Int", 9)), outputs=(0, 1))
    assert llm_info(dataclasses.replace(program, execution_plan=(*program.execution_plan, eos))) == LLMInfo(32, (7, 9))


def test_generation_needs_the_one_token_form():
    with vkx.load(DATA / "et_llama_4w.pte") as program:
        with pytest.raises(vkx.VkxError, match="sequence_length=1"):
            list(program.generate([1, 2], 2))


def test_sequence_length_past_the_bound_is_refused():
    with pytest.raises(vkx.VkxError, match="takes 1 to 31"):
        vkx.load(DATA / "et_llama_4w.pte", sequence_length=32)


def test_phi3_grouped_heads_rotary_matches_torch():
    """ExecuTorch's partitioner on a transformers Phi-3 (tests/data/make_et_phi3_file.py): its rotary
    embedding as et_vk.apply_rotary_emb_hf on heads-first xq [1, 4, 16, 32], xk [1, 2, 16, 32]."""
    graphs = [d.graph for d in ProgramFile.open(DATA / "et_phi3.pte").vulkan_delegates]
    rotary = [op for g in graphs for op in g.chain if op.name == "et_vk.apply_rotary_emb_hf.default"]
    shapes = [[list(g.values[a].dims) for a in op.args[:3]] for g in graphs for op in g.chain if op in rotary]
    assert shapes == [[[1, 4, 16, 32], [1, 2, 16, 32], [1, 16, 32]]]
    want = np.load(DATA / "et_phi3.npz")
    with vkx.load(DATA / "et_phi3.pte") as program:
        got = program(torch.from_numpy(want["input_ids"]))  # a plan with CPU ops between delegates: torch tensors
    assert_norm_close(got[0] if isinstance(got, (list, tuple)) else got, want["logits"], rtol=RTOL)
