"""loader/lm/generate.py: sampling on the host (the device's draw, a function of (seed, position)), and the
generation loop (chunked prefill, decode) against transformers."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.llm.families import VOCAB, write_folder
from vkx.export import hf
from vkx.loader.errors import InputError
from vkx.loader.lm.generate import (BURST, LMShape, Sampling, Timings, generate, greedy_by_calls, sample,
                                    sampled_by_calls)
from vkx.format.errors import VkxError


class TorchDecoder:
    """The Decoder protocol over hf.CausalLM in torch (the vkx program's stand-in for the loop's tests)."""

    def __init__(self, lm: hf.CausalLM):
        self.lm = lm

    def prefill(self, input_ids, cache_position):
        with torch.no_grad():
            return self.lm(torch.from_numpy(input_ids), torch.from_numpy(cache_position)).numpy()

    decode = prefill

    def prefill_argmax(self, input_ids, cache_position):
        return self.prefill(input_ids, cache_position).argmax(-1)

    def decode_greedy(self, input_ids, cache_position, steps):
        return greedy_by_calls(self.prefill_argmax, input_ids, cache_position, steps)

    def decode_sampled(self, input_ids, cache_position, steps, sampling):
        return sampled_by_calls(self.decode, input_ids, cache_position, steps, sampling)

    def reset(self):
        self.lm.reset()


def rng(seed=0):
    return np.random.default_rng(seed)


def test_greedy_is_the_argmax():
    logits = rng().standard_normal(1000).astype(np.float32)
    assert sample(logits, Sampling(), 3) == int(np.argmax(logits))
    assert sample(logits, Sampling(temperature=1.0, top_k=1, seed=4), 3) == int(np.argmax(logits))


def draws(logits: np.ndarray, sampling: Sampling, n: int) -> list[int]:
    """The tokens drawn from the same logits at positions 0..n-1 (a seed's draws over positions)."""
    return [sample(logits, sampling, position) for position in range(n)]


def test_sampling_follows_the_softmax():
    p = np.array([0.5, 0.3, 0.15, 0.05])
    drawn = np.bincount(draws(np.log(p), Sampling(temperature=1.0, seed=1), 20000), minlength=4)
    np.testing.assert_allclose(drawn / drawn.sum(), p, atol=0.015)
    hot = np.bincount(draws(np.log(p), Sampling(temperature=2.0, seed=1), 20000), minlength=4)
    flat = np.sqrt(p) / np.sqrt(p).sum()
    np.testing.assert_allclose(hot / hot.sum(), flat, atol=0.015)


def test_top_k_and_top_p_restrict_the_support():
    p = np.array([0.05, 0.4, 0.1, 0.3, 0.15])
    assert set(draws(np.log(p), Sampling(temperature=1.0, top_k=2, seed=2), 2000)) == {1, 3}
    # 0.4 + 0.3 = 0.7 < 0.75, so the third most likely (0.15) is still needed; 0.1 and 0.05 are not
    assert set(draws(np.log(p), Sampling(temperature=1.0, top_p=0.75, seed=2), 2000)) == {1, 3, 4}
    assert set(draws(np.log(p), Sampling(temperature=1.0, top_p=0.01, seed=2), 200)) == {1}


def test_a_draw_is_a_function_of_seed_and_position():
    logits = rng().standard_normal(500)
    sampling = Sampling(temperature=0.8, top_p=0.9, seed=7)
    assert draws(logits, sampling, 50) == draws(logits, sampling, 50)
    assert draws(logits, sampling, 50) != draws(logits, Sampling(temperature=0.8, top_p=0.9, seed=8), 50)
    assert len(set(draws(logits, sampling, 50))) > 10  # the position varies the draw


@pytest.mark.parametrize("bad, match", [
    (Sampling(temperature=-1.0), "temperature"), (Sampling(temperature=1.0, top_k=0), "top_k"),
    (Sampling(temperature=1.0, top_p=1.5), "top_p"), (Sampling(top_k=5), "need a temperature"),
    (Sampling(temperature=1.0, seed=1.5), "seed must be an int")])
def test_bad_sampling_is_refused(bad, match):
    with pytest.raises(InputError, match=match):
        bad.check()
    assert issubclass(InputError, VkxError)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qwen")
    write_folder(folder, "qwen3")
    return hf.build_model(hf.read_folder(folder), torch.float32)


@pytest.mark.parametrize("prompt_len", [3, 8, 19])
def test_generation_matches_transformers_greedy(qwen, prompt_len):
    """Prompts shorter than, as long as and longer than a prefill chunk (padded, exact, overlapping chunks)."""
    prompt = torch.randint(0, VOCAB, (1, prompt_len), generator=torch.Generator().manual_seed(prompt_len))
    ref = qwen.generate(prompt, max_new_tokens=32, do_sample=False, pad_token_id=0, eos_token_id=None)
    decoder = TorchDecoder(hf.CausalLM(qwen, 64))
    timings = Timings()
    tokens = list(generate(decoder, prompt[0].tolist(), 32, LMShape(8, 64, VOCAB), timings=timings))
    assert tokens == ref[0, prompt_len:].tolist()
    assert timings.prompt_tokens == prompt_len and timings.decode_tokens == 31
    assert 0 < timings.prefill_seconds <= timings.first_token_seconds
    assert timings.decode_tokens_per_s > 0
    # a second generation starts from a clean cache
    assert list(generate(decoder, prompt[0].tolist(), 32, LMShape(8, 64, VOCAB))) == tokens


def test_greedy_decodes_in_doubling_bursts_and_stops_inside_one(qwen):
    """Decode steps are asked for in bursts of 1, 2, 4, ... BURST tokens (one device submission
    each for a vkx program); a stop token inside a burst ends the output there."""
    decoder = TorchDecoder(hf.CausalLM(qwen, 64))
    bursts, chained = [], decoder.decode_greedy

    def spy(input_ids, cache_position, steps):
        bursts.append(steps)
        return chained(input_ids, cache_position, steps)

    decoder.decode_greedy = spy
    timings = Timings()
    tokens = list(generate(decoder, [1, 2, 3], 40, LMShape(8, 64, VOCAB), timings=timings))
    assert BURST == 16 and bursts == [1, 2, 4, 8, 16, 8] and len(tokens) == 40
    assert timings.decode_tokens == 39 == len(timings.step_seconds)
    stop = tokens[12]  # decoded in the burst of 8
    assert list(generate(decoder, [1, 2, 3], 40, LMShape(8, 64, VOCAB), stop=[stop])) == \
        tokens[:tokens.index(stop) + 1]


def test_sampled_generation_is_reproducible(qwen):
    """A seed repeats the tokens, which are drawn in doubling bursts as greedy ones are; no seed draws
    one for each generation."""
    decoder = TorchDecoder(hf.CausalLM(qwen, 32))
    bursts, by_calls = [], decoder.decode_sampled

    def spy(input_ids, cache_position, steps, sampling):
        bursts.append(steps)
        return by_calls(input_ids, cache_position, steps, sampling)

    decoder.decode_sampled = spy
    run = lambda seed: list(generate(decoder, [1, 2, 3], 12, LMShape(8, 32, VOCAB),  # noqa: E731
                                     sampling=Sampling(temperature=1.0, top_k=20, seed=seed)))
    assert run(5) == run(5)
    assert bursts == [1, 2, 4, 4] * 2
    assert run(5) != run(6)
    assert run(None) != run(None)


@pytest.mark.parametrize("prompt, new, match", [
    ([], 4, "no tokens"), ([1, VOCAB], 4, "outside the vocabulary"), ([1, 2], 0, "at least 1"),
    (list(range(30)), 4, "do not fit the cache of 32")])
def test_bad_requests_are_refused_before_any_work(prompt, new, match):
    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError(f"{name} called")

    with pytest.raises(InputError, match=match):
        generate(Untouchable(), prompt, new, LMShape(8, 32, VOCAB))
