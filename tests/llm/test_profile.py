"""A causal LM under the Android baseline profile (no 16- or 8-bit storage, docs/profiles.md): the
same file, fp16 and fp16 with int4 weights, generates the unprofiled run's greedy tokens, its
weights on the device byte for byte as stored (read through 32-bit words) and its 16-bit
activations held in fp32 (A doubles, W does not)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import vkx
from tests.llm.families import write_folder
from vkx.export import hf
from vkx.format import dtypes
from vkx.loader.gpu.device import Device
from vkx.loader.lm.decoders import ProgramDecoder
from vkx.loader.lm.generate import generate

pytestmark = pytest.mark.vulkan

BASELINE = "android-baseline-2022"
NEW_TOKENS = 12
PROMPT = [5, 17, 101, 33, 64]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile") / "llama"
    write_folder(out, "llama", weights=True)
    return out


def _generate(pte, profile: str | None, forced: list[int] | None = None) -> tuple[list[int], object, list[np.ndarray]]:
    """Greedy tokens, the memory report, and the decode logits (as the file types them) of each step
    teacher-forced along `forced` after the prompt (the unprofiled run's tokens)."""
    dev = Device(profile=profile) if profile else Device()
    try:
        with vkx.load(pte, device=dev) as program:
            decoder = ProgramDecoder(program)
            tokens = list(generate(decoder, PROMPT, NEW_TOKENS, decoder.shape))
            # each step writes its own cache row before any later step reads it: the greedy run's rows
            # are overwritten by the forced tokens' in order
            steps = [program["decode"].run_numpy(np.array([[token]]), np.array([len(PROMPT) + i]))[0].reshape(-1)
                     for i, token in enumerate(forced or tokens)]
            cache = program.states[0]
            assert program.state_spec(cache)[1] == "float16"  # the file's dtype, however the device holds it
            assert program.state(cache).dtype == torch.float16
            return tokens, program.memory, steps
    finally:
        dev.close()


@pytest.mark.parametrize("quantize", [None, "int4"])
def test_llm_generates_the_unprofiled_tokens_under_the_baseline(tmp_path, folder, quantize):
    """The profiled run computes in fp32 what the unprofiled one rounds to fp16 after each op, so a
    step where fp16 ties two tokens may go either way: at every step, the profiled pick is one the
    unprofiled logits rank within the two runs' difference of the best."""
    pte = tmp_path / "lm.pte"
    hf.export_folder(folder, pte, max_seq_len=32, prefill_len=8, dtype="fp16", quantize=quantize)
    plain, plain_memory, plain_steps = _generate(pte, None)
    tokens, memory, steps = _generate(pte, BASELINE, forced=plain)
    assert tokens[0] == plain[0]
    for plain_logits, logits in zip(plain_steps, steps):
        assert logits.dtype == plain_logits.dtype == np.float32  # fp32 logits (hf.fp32_head)
        np.testing.assert_allclose(logits, plain_logits, atol=0.05 * float(np.abs(plain_logits).max()))
        difference = float(np.abs(logits - plain_logits).max())
        assert plain_logits[logits.argmax()] >= plain_logits.max() - 2 * difference
    assert memory.W == plain_memory.W  # weights as stored: no fp32 copy
    assert plain_memory.A < memory.A <= 2 * plain_memory.A + dtypes.FLOAT32.itemsize * 64  # fp16 activations in fp32
