"""Sampling on the device (loader/ops/sample.py, shaders/sample.comp) against its host reference and
against the softmax it must draw from: the token for each (seed, position), the empirical
distribution, top_k=1 and a tiny top_p as the argmax, ties, and the dispatch count."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from vkx.format import dtypes, vkgraph as g
from vkx.loader.gpu.device import default_device
from vkx.loader.upload.loading import InMemoryConstants
from vkx.loader.gpu.memory import Allocator
from vkx.loader.ops import sample
from vkx.loader.execute.record import Executor
from vkx.loader.gpu.shaders import pipelines_for
from vkx.loader.upload.stages import Built, Options, Resources, graph_builder, io_buffers, recorded
from vkx.loader.upload.trace import Timeline

pytestmark = pytest.mark.vulkan

DATATYPES = {torch.float32: g.DataType.FLOAT32, torch.float16: g.DataType.FLOAT16,
             torch.bfloat16: g.DataType.BFLOAT16}


class Sampler:
    """record_sample's two dispatches over a [1, V] logits input, loaded on the default device:
    `draw(logits, state, position)` runs them and returns the token."""

    def __init__(self, vocab: int, dtype: torch.dtype):
        self.dtype = dtype
        graph = g.VkGraph(chain=[], values=[g.Tensor(DATATYPES[dtype], (1, vocab)),
                                            g.Tensor(g.DataType.INT32, (sample.STATE_WORDS,)),
                                            g.Tensor(g.DataType.INT32, (1,))],
                          input_ids=[0, 1, 2], output_ids=[1])
        device = default_device()
        builder = graph_builder(graph, device, Options()).build()
        sample.record_sample(builder, *(builder.tensors[v].arg for v in range(3)))
        self.held = builder.tensors[0].arg.dtype  # fp32 where the device has no 16-bit storage
        self.dispatches = builder.dispatches
        pipelines = pipelines_for(device).get_all([(x.shader, dict(x.defines), len(x.bindings), x.spec)
                                                   for x in builder.dispatches])
        allocator = Allocator(device)
        self.res = Resources(device, False, allocator, InMemoryConstants([]), Timeline(), None)
        for t in builder.used_tensors():
            t.buffer = allocator.buffer(t.nbytes, "activations", "device")
        self.io_in, io_out = io_buffers(Built(builder, pipelines, []), graph, self.res)
        self.out = io_out[0][1]
        self.executor = recorded(Executor(device, builder.dispatches, pipelines, self.io_in, io_out), self.res)

    def draw(self, logits: torch.Tensor, state: np.ndarray, position: int) -> int:
        if self.held is dtypes.FLOAT32:
            logits = logits.float()
        raw = logits.contiguous().view(torch.int16 if logits.element_size() == 2 else torch.int32).numpy()
        for (io, _), data in zip(self.io_in, (raw, state, np.array([position], np.int32))):
            io.mapped()[:data.nbytes] = data.tobytes()
        self.executor.run()
        return int(np.frombuffer(self.out.mapped(), np.int32)[0])

    def close(self) -> None:
        self.res.close()


@pytest.fixture(scope="module")
def samplers():
    made: dict = {}

    def get(vocab: int, dtype: torch.dtype) -> Sampler:
        if (vocab, dtype) not in made:
            made[vocab, dtype] = Sampler(vocab, dtype)
        return made[vocab, dtype]

    yield get
    for s in made.values():
        s.close()


def host(logits: torch.Tensor) -> np.ndarray:
    """The logits as the device reads them, in fp32."""
    return logits.float().numpy()


def check_draws(sampler: Sampler, logits: torch.Tensor, temperature: float, top_k, top_p, pairs) -> None:
    """The device's token equals sample_reference's for every (seed, position), but where the two best
    kept scores are within the device log's error of each other."""
    x = host(logits)
    state = sample.sample_state(temperature, top_k, top_p, 0)
    kept = sample.kept_tokens(x, temperature, top_k, top_p) > 0
    near = 0
    for seed, position in pairs:
        state[4] = np.int32(np.uint32(seed & 0xFFFFFFFF).view(np.int32))
        got = sampler.draw(logits, state, position)
        want = sample.sample_reference(x, temperature, top_k, top_p, seed, position)
        if got != want:
            scores = sample.gumbel_scores(x, temperature, seed, position)
            assert kept[got], f"seed {seed} position {position}: token {got} is outside the kept set"
            assert abs(float(scores[got]) - float(scores[want])) < 1e-4 * max(1.0, abs(float(scores[want]))), \
                f"seed {seed} position {position}: device {got}, reference {want}"
            near += 1
    assert near <= max(1, len(pairs) // 100)


VOCABS = [1, 7, 97, 32000, 151936]
PARAMS = [(1.0, None, None), (0.8, 40, 0.95), (0.7, None, 0.9), (1.3, 5, None), (0.5, 1000, 0.5)]


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("dtype", list(DATATYPES), ids=["fp32", "fp16", "bf16"])
def test_tokens_equal_the_reference(samplers, vocab, dtype):
    sampler = samplers(vocab, dtype)
    logits = torch.randn(1, vocab, generator=torch.Generator().manual_seed(vocab)).mul(3).to(dtype)
    draws = 40 if vocab > 32000 else 80
    for i, (temperature, top_k, top_p) in enumerate(PARAMS):
        pairs = [(s * 7919 + i, s * 13 + 5) for s in range(draws // len(PARAMS) + 4)]
        check_draws(sampler, logits, temperature, top_k, top_p, pairs)


@pytest.mark.parametrize("dtype", list(DATATYPES), ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, None, None), (0.8, 10, None), (1.5, None, 0.7),
                                                     (0.9, 20, 0.8)])
def test_distribution_matches_the_softmax(samplers, dtype, temperature, top_k, top_p):
    """Over many positions the draws' frequencies are those of the kept softmax (total variation
    under a bound that a wrong filter or a biased generator exceeds)."""
    vocab, draws = 97, 3000
    sampler = samplers(vocab, dtype)
    logits = torch.randn(1, vocab, generator=torch.Generator().manual_seed(5)).mul(1.5).to(dtype)
    want = sample.kept_tokens(host(logits), temperature, top_k, top_p)
    state = sample.sample_state(temperature, top_k, top_p, 1234)
    counts = np.bincount([sampler.draw(logits, state, position) for position in range(draws)], minlength=vocab)
    assert not counts[want == 0].any(), "a token outside the kept set was drawn"
    tv = 0.5 * np.abs(counts / draws - want).sum()
    # E[TV] is about sqrt(kept / (2 pi draws)); 0.1 is several times that for up to 97 kept tokens
    assert tv < 0.1, f"total variation {tv:.3f} between the draws and the kept softmax"


@pytest.mark.parametrize("vocab", [7, 32000, 151936])
@pytest.mark.parametrize("dtype", list(DATATYPES), ids=["fp32", "fp16", "bf16"])
def test_top_k_one_and_tiny_top_p_are_the_argmax(samplers, vocab, dtype):
    sampler = samplers(vocab, dtype)
    logits = torch.randn(1, vocab, generator=torch.Generator().manual_seed(3)).mul(2).to(dtype)
    best = int(torch.argmax(logits.float()))
    for top_k, top_p in ((1, None), (None, 1e-6), (50, 1e-6)):
        state = sample.sample_state(1.0, top_k, top_p, 99)
        assert {sampler.draw(logits, state, position) for position in range(6)} == {best}


@pytest.mark.parametrize("dtype", list(DATATYPES), ids=["fp32", "fp16", "bf16"])
def test_ties(samplers, dtype):
    """Ties with the k-th logit are all kept; top-p cuts a tie group in index order; equal scores
    go to the lower index."""
    vocab = 4099  # three segments, the last of 3
    sampler = samplers(vocab, dtype)
    logits = torch.full((1, vocab), -4.0)
    tied = [5, 900, 2047, 2048, 3000, 4098]
    logits[0, tied] = 2.0
    logits = logits.to(dtype)
    x = host(logits)
    # top_k=2 keeps all six tied tokens: each drawn, nothing else
    state = sample.sample_state(1.0, 2, None, 7)
    drawn = {sampler.draw(logits, state, position) for position in range(300)}
    assert drawn == set(tied)
    # top_p 0.4 of six equal tokens: the first three by index (exclusive mass 0, 1/6, 2/6 < 0.4)
    check_draws(sampler, logits, 1.0, 3, 0.4, [(s, s) for s in range(30)])
    assert sample.kept_tokens(x, 1.0, 3, 0.4).nonzero()[0].tolist() == tied[:3]
    state = sample.sample_state(1.0, 3, 0.4, 11)
    assert {sampler.draw(logits, state, position) for position in range(200)} == set(tied[:3])
    # no top-k, top_p cutting inside the tie group over all 4099 candidates (the uncached walk)
    check_draws(sampler, logits, 1.0, None, 0.4, [(s, 2 * s) for s in range(20)])


def test_dispatches():
    """Two dispatches a step, whatever the parameters (they live in the state tensor)."""
    s = Sampler(151936, torch.float16)
    try:
        assert [d.shader for d in s.dispatches] == ["sample", "sample"]
        assert s.dispatches[0].groups == (75, 1, 1) and s.dispatches[1].groups == (1, 1, 1)
    finally:
        s.close()


def test_more_segments_than_lanes_are_refused():
    """A segment a lane at most: with more (600,000 logits on a desktop GPU, 151,936 on a phone) a tiny
    top-p drew no token (-1). A LimitError, on which generation draws on the host (lm.decoders)."""
    from vkx.loader.errors import LimitError
    with pytest.raises(LimitError, match=r"600000 logits make \d+ segments of \d+, more than the \d+ invocations"):
        Sampler(600000, torch.float32)
