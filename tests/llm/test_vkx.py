"""Hugging Face folders exported by vkx and generated on the device, against transformers (fp32, random weights)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import vkx
from tests.llm.families import FAMILIES, VOCAB, write_folder
from vkx.export import hf
from vkx.loader.errors import InputError, LoadError
from vkx.loader.lm.decoders import ProgramDecoder
from vkx.loader.lm.generate import generate
from vkx.loader.lm.greedy import Argmax, GreedyChain, chains

pytestmark = pytest.mark.vulkan

NEW_TOKENS = 32
PREFILL = 8
MAX_SEQ = 64
# Per-step logits against transformers' generate: fp32 shaders against torch's CPU kernels, in
# another summation order, over two layers; logits are about N(0, 1) (families.py), so 1e-3 of
# that scale is far below the gap between a greedy choice and the runner-up in all but exact ties.
LOGIT_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """family -> (model folder, .pte, export report), each exported once for the module's tests."""
    made = {}

    def export(family: str):
        if family not in made:
            folder = tmp_path_factory.mktemp(family) / family
            write_folder(folder, family)
            pte = folder.parent / f"{family}.pte"
            made[family] = folder, pte, hf.export_folder(folder, pte, max_seq_len=MAX_SEQ, prefill_len=PREFILL)
        return made[family]
    return export


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_tokens_and_logits_match_transformers(exported, family):
    folder, pte, report = exported(family)
    assert report.methods == ["prefill", "decode"]
    model = hf.build_model(hf.read_folder(folder), torch.float32)
    prompt = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(11))
    ref = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
    expected = ref.sequences[0, 5:].tolist()
    with vkx.load(pte) as program:
        decoder = ProgramDecoder(program)
        assert (decoder.shape.prefill_len, decoder.shape.max_seq_len, decoder.shape.vocab_size) == \
            (PREFILL, MAX_SEQ, VOCAB)
        tokens = list(generate(decoder, prompt[0].tolist(), NEW_TOKENS, decoder.shape))
        assert tokens == expected
        # the same steps, fed transformers' tokens: every step's logits
        decoder.reset()
        ids = np.zeros((1, PREFILL), np.int64)  # padded in front, at the positions after the prompt's
        ids[0, PREFILL - 5:] = prompt[0].numpy()
        logits = decoder.prefill(ids, np.array([*range(5, PREFILL), *range(5)]))
        assert logits.shape == (1, 1, VOCAB)  # the last position's only
        steps = [logits[0, 0]]
        for position, token in enumerate(expected[:-1], start=5):
            steps.append(decoder.decode(np.array([[token]]), np.array([position]))[0, 0])
    scale = float(ref.logits[0].std())
    for step, (ours, theirs) in enumerate(zip(steps, ref.logits)):
        err = float(np.abs(ours - theirs[0].numpy()).max())
        assert err < LOGIT_TOLERANCE * max(1.0, scale), (step, err)


def test_repeated_kv_heads_fuse_away(exported, tmp_path, monkeypatch):
    """An export whose transformers repeats the key/value heads before sdpa (repeat_kv: expand +
    reshape, what a transformers that ignores export/hf.py's switch writes, as on the H200's)
    loads with sdpa reading the grouped heads in place (loader/build/fuse.py): no more copies than the
    grouped export, and the same greedy tokens as transformers."""
    import contextlib

    folder, grouped, _ = exported("llama")
    repeated = tmp_path / "repeated.pte"
    monkeypatch.setattr(hf, "_grouped_sdpa", contextlib.nullcontext)
    hf.export_folder(folder, repeated, max_seq_len=MAX_SEQ, prefill_len=PREFILL)
    model = hf.build_model(hf.read_folder(folder), torch.float32)
    prompt = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(12))
    expected = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0,
                              eos_token_id=None)[0, 5:].tolist()
    shaders, expands = [], []
    for pte in (grouped, repeated):
        with vkx.load(pte) as program:
            expands.append(sum(op.name == "aten.expand_copy.default" for op in program["decode"].graph.chain))
            shaders.append(sorted(d.shader for d in program["decode"]._executor.dispatches))
            decoder = ProgramDecoder(program)
            assert list(generate(decoder, prompt[0].tolist(), 8, decoder.shape)) == expected
    assert expands[1] >= 4  # the repeated file: k and v of two layers (some transformers repeat in both files)
    assert shaders[1] == shaders[0]


def test_chained_greedy_steps_equal_one_call_each(exported):
    """`GreedyChain` (steps chained on the device, each feeding its argmax to the next) gives the tokens and
    the KV cache that one `Argmax` call a step gives, whatever the number of steps; each is recorded
    once per method, however often it is made."""
    _, pte, _ = exported("llama")
    ids = np.array([[3, 14, 15, 92, 65, 35, 89, 79]])
    with vkx.load(pte) as program:
        decode = program["decode"]
        assert chains(decode) and not chains(program["prefill"])
        recordings = len(program._load.resources.executors)
        chain, argmax, prefill_argmax = GreedyChain(decode), Argmax(decode), Argmax(program["prefill"])
        assert len(program._load.resources.executors) == recordings + 3  # the load's: released with it
        GreedyChain(decode), Argmax(decode)
        assert len(program._load.resources.executors) == recordings + 3

        def after_prompt() -> tuple[int, int]:
            program.reset()
            return int(prefill_argmax(ids, np.arange(PREFILL))[0, 0]), PREFILL

        token, position = after_prompt()
        expected = []
        for step in range(21):
            expected.append(int(argmax(np.array([[token]]), np.array([position + step]))[0, 0]))
            token = expected[-1]
        caches = {name: program.state(name).clone() for name in program.states}
        for bursts in ([21], [1, 2, 4, 6, 8], [5, 16], [20, 1]):  # 16 a submission: more take turns
            token, position = after_prompt()
            got = []
            for n in bursts:
                out = chain(np.array([[token]]), np.array([position]), n)
                assert out.dtype == np.int32 and out.shape == (n,)
                got += out.tolist()
                token, position = got[-1], position + n
            assert got == expected, bursts
            for name, cache in caches.items():
                assert torch.equal(program.state(name), cache), name
        for bad in (0, -3, 2.0):
            with pytest.raises(InputError, match="greedy steps must be"):
                chain(np.array([[token]]), np.array([position]), bad)
        with pytest.raises(LoadError, match="cannot chain greedy steps"):
            GreedyChain(program["prefill"])
    with pytest.raises(LoadError, match="program is closed"):
        chain(np.array([[token]]), np.array([position]), 1)
    assert program.ledger.is_zero
