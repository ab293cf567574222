"""Sampled decoding chained on the device (loader/lm/greedy.py, `SampledChain`): the tokens the host's
draw gives (loader/ops/sample.py's `sample_reference`, a function of (seed, position)), token for
token, over more than one submission, for vkx's programs and ExecuTorch's; a sampled step's dispatches;
`vkx generate --temperature`."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import vkx
from tests.cli.conftest import one_error_line, vkx as vkx_cli
from tests.llm.families import write_folder
from vkx.export import hf
from vkx.loader.errors import InputError
from vkx.loader.lm.decoders import ExecuTorchDecoder, ProgramDecoder
from vkx.loader.lm.generate import BURST, Sampling, generate
from vkx.loader.lm.greedy import Argmax, GreedyChain, SampledChain
from vkx.loader.ops.sample import sample_reference

pytestmark = pytest.mark.vulkan

PREFILL, MAX_SEQ = 8, 64
PROMPT = [3, 14, 15, 92, 65]
NEW_TOKENS = 44
"""More than BURST after the first (bursts of 1, 2, 4, 8, 16, 12: the last two submissions full or past one)."""
SETTINGS = [(0.8, None, None), (1.0, 20, None), (0.9, None, 0.9), (0.7, 40, 0.95)]
"""(temperature, top_k, top_p): temperature only; top_k; top_p; both."""


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    """A 2-layer random Llama exported by vkx, loaded once; its sampled and its host-drawing decoders."""
    folder = tmp_path_factory.mktemp("llama") / "llama"
    write_folder(folder, "llama")
    pte = folder.parent / "llama.pte"
    hf.export_folder(folder, pte, max_seq_len=MAX_SEQ, prefill_len=PREFILL)
    with vkx.load(pte) as loaded:
        yield pte, loaded, ProgramDecoder(loaded, sampled=True), ProgramDecoder(loaded)


@pytest.mark.parametrize("temperature, top_k, top_p", SETTINGS)
def test_device_tokens_equal_the_host_draws(program, temperature, top_k, top_p):
    """generate over the chained device steps gives the tokens generate gives drawing each step's logits
    on the host (one decode call a token), for several seeds; the first token, from the prompt's logits,
    is drawn at the prompt's last position."""
    _, _, device, host = program
    assert isinstance(device._sampled_steps, SampledChain) and not isinstance(host._sampled_steps, SampledChain)
    assert NEW_TOKENS - 1 > BURST
    seen = set()
    for seed in (0, 1, 12345, 2 ** 32 - 1):
        sampling = Sampling(temperature, top_k, top_p, seed)
        tokens = list(generate(device, PROMPT, NEW_TOKENS, device.shape, sampling=sampling))
        assert tokens == list(generate(host, PROMPT, NEW_TOKENS, host.shape, sampling=sampling)), seed
        seen.add(tuple(tokens))
        host.reset()
        ids = np.array([[0] * (PREFILL - len(PROMPT)) + PROMPT])  # padded in front, as generate pads
        logits = host.prefill(ids, np.array([*range(len(PROMPT), PREFILL), *range(len(PROMPT))]))
        assert tokens[0] == sample_reference(logits.reshape(-1), temperature, top_k, top_p, seed, len(PROMPT) - 1)
    assert len(seen) == 4  # the seed changes the tokens


def test_one_chain_serves_every_setting(program):
    """The chain's parameters are written for each call: chaining 20 steps gives the host's tokens whatever
    setting came before on the same recording; a top_k past the vocabulary filters nothing, on both."""
    _, loaded, _, _ = program
    decode = loaded["decode"]
    chain = SampledChain(decode)
    for temperature, top_k, top_p in [*SETTINGS, (0.8, 2 ** 40, None), SETTINGS[0]]:
        sampling = Sampling(temperature, top_k, top_p, seed=7)
        loaded.reset()
        token, position = 17, 9
        want = []
        for at in range(position, position + 20):
            logits = decode.run_numpy(np.array([[token]]), np.array([at]))[0]
            token = sample_reference(logits.reshape(-1), temperature, top_k, top_p, 7, at)
            want.append(token)
        loaded.reset()
        assert chain(np.array([[17]]), np.array([position]), 20, sampling).tolist() == want


def test_a_sampled_step_is_one_dispatch_more_than_greedy(program):
    """A chained step is the decode call's dispatches, the token's choice and the hand-over: sampling
    (record_sample: 2 dispatches) against the argmax (1 dispatch over this vocabulary of 256)."""
    _, loaded, _, _ = program
    decode = loaded["decode"]
    argmax = len(Argmax(decode)._executor.dispatches) - decode.dispatch_count
    greedy = len(GreedyChain(decode)._steps.dispatches)
    sampled = len(SampledChain(decode)._steps.dispatches)
    assert argmax == 1 and greedy == decode.dispatch_count + argmax + 1
    assert sampled == decode.dispatch_count + 2 + 1 == greedy + 1


def test_sampled_steps_need_a_seed_and_a_temperature(program):
    _, loaded, _, _ = program
    chain = SampledChain(loaded["decode"])
    for bad in (Sampling(0.8), Sampling(seed=3)):
        with pytest.raises(InputError, match="need a temperature and a seed"):
            chain(np.array([[1]]), np.array([0]), 2, bad)


def test_vkx_generate_samples_on_the_device_with_a_seed(program):
    """`vkx generate --temperature 0.8 --seed 1` twice gives the same tokens, those of Program.generate
    (the device chain) and of the host's draw, up to the model's EOS token; another seed others."""
    pte, loaded, _, host = program
    args = ["generate", pte, "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", NEW_TOKENS,
            "--temperature", "0.8", "--json"]
    runs = []
    for seed in (1, 1, 2):
        done = vkx_cli(*args, "--seed", seed)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout)["tokens"])
    assert runs[0] == runs[1] != runs[2]
    assert runs[0] == list(loaded.generate(PROMPT, NEW_TOKENS, temperature=0.8, seed=1))
    assert runs[0] == list(generate(host, PROMPT, NEW_TOKENS, host.shape, sampling=Sampling(0.8, seed=1),
                                    stop=host.eos_token_ids))


def test_a_phone_profile_samples_on_the_host_with_the_same_tokens(program):
    """Under a phone's 16 KiB of shared memory the device sampler is over the limits (it needs 16,404
    bytes): generation draws on the host instead, the same function of (seed, position), so the same
    tokens. Before, `vkx generate --temperature 0.8 --profile android-15` stopped with a LimitError."""
    pte, _, _, _ = program
    args = ["generate", pte, "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", NEW_TOKENS,
            "--temperature", "0.8", "--seed", "1", "--json"]
    tokens = []
    for profile in ((), ("--profile", "android-15")):
        done = vkx_cli(*args, *profile)
        assert done.returncode == 0, done.stderr
        tokens.append(json.loads(done.stdout)["tokens"])
    assert tokens[0] == tokens[1]


@pytest.mark.parametrize("option, line", [
    (["--top-p", "0"], "--top-p: 0 keeps no token (a number more than 0, at most 1)"),
    (["--top-p", "1.5"], "--top-p: 1.5 is more than 1 (a number from 0 to 1)"),
    (["--top-p", "-0.5"], "--top-p: -0.5 is less than 0 (a number from 0 to 1)"),
    (["--top-k", "0"], "--top-k: 0 is less than 1 (an integer, 1 or more)"),
    (["--top-k", "x"], "--top-k: x is not an integer (an integer, 1 or more)"),
    (["--temperature", "1e-40"], "temperature 1e-40 is too small to sample at (0 is greedy)"),
])
def test_a_bad_sampling_option_is_one_error_line(program, option, line):
    pte = program[0]
    done = vkx_cli("generate", pte, "--prompt-ids", "1,2", "--temperature", "0.8", *option)
    assert one_error_line(done) == f"vkx: error: {line}"


def test_an_executorch_llm_program_samples_on_the_device_too():
    """ExecuTorch's Llama recipe file (tests/data, fed one token a call) chains its sampled steps as a vkx
    decode method does, with the host's tokens."""
    with vkx.load(Path(__file__).resolve().parents[1] / "data" / "et_llama_4w.pte", sequence_length=1) as loaded:
        device, host = ExecuTorchDecoder(loaded, sampled=True), ExecuTorchDecoder(loaded)
        assert isinstance(device._sampled_steps, SampledChain)
        sampling = Sampling(0.8, 40, 0.95, seed=3)
        tokens = list(generate(device, [1, 2, 3], 24, device.shape, sampling=sampling))
        assert tokens == list(generate(host, [1, 2, 3], 24, host.shape, sampling=sampling))
