"""Ops whose kernels bind more than 4 storage buffers, on a device of 4 a stage (Khronos' Android
baseline 2022) against torch, and the same ops unchanged where the device allows their kernels.

Under the baseline: decode attention binds q, k, v and out alone (attention_decode's QKVO_ONLY, one
split), a masked one takes the general path; aten.index binds its own 1 or 2 index tensors
(INDICES); a quantized product's bias is added by an elementwise dispatch of its own. On the
device's own limits the kernels bind 7, 5 and 5 as ever, with no extra dispatch.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vkx.export.quantize import dequantize, quantize_weight
from tests.loader.helpers import baseline_device
from vkx.loader.gpu.device import Device
from vkx.loader.errors import LimitError
from vkx.loader.build.graph import GraphBuilder

from .conftest import (FLOAT_DTYPES, Const, Values, assert_close, assert_close_in, assert_norm_close, rand, rand_of,
                       run_graph)

pytestmark = pytest.mark.vulkan

BASELINE = "android-baseline-2022"
FOUR = 4
"""The baseline's maxPerStageDescriptorStorageBuffers."""
KINDS = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
"""The summary's tolerance class of an output dtype."""


@pytest.fixture(scope="module")
def baseline():
    with baseline_device() as dev:
        assert dev.limits.max_per_stage_descriptor_storage_buffers == FOUR
        yield dev


@pytest.fixture(scope="module")
def desktop():
    """The device on its own limits ("" puts no profile in force, whatever --device-profile says)."""
    dev = Device(profile="")
    assert dev.limits.max_per_stage_descriptor_storage_buffers >= 7
    yield dev
    dev.close()


@pytest.fixture
def bound(monkeypatch) -> list[tuple[str, int, dict]]:
    """(shader, bindings, defines) of every dispatch recorded while the test runs."""
    seen: list[tuple[str, int, dict]] = []
    dispatch = GraphBuilder.dispatch

    def recording(self, shader, bindings, push, groups, defines=None, spec=()):
        seen.append((shader, len(bindings), dict(defines or {})))
        return dispatch(self, shader, bindings, push, groups, defines, spec)

    monkeypatch.setattr(GraphBuilder, "dispatch", recording)
    return seen


def _within_four(bound: list[tuple[str, int, dict]]) -> None:
    assert bound and all(n <= FOUR for _, n, _ in bound), bound


# --------------------------------------------------------------------------- decode attention

def _sdpa(q, k, v, mask=None, causal=False, gqa=False, device=None):
    return run_graph("aten.scaled_dot_product_attention.default", [q, k, v, mask, 0.0, causal, None, gqa],
                     ((*q.shape[:-1], v.shape[-1]), q.dtype), device=device)


def _qkv(dtype, b, hq, hkv, L, S, E, Ev, seed=0):
    return (rand(b, hq, L, E, seed=seed, dtype=dtype), rand(b, hkv, S, E, seed=seed + 1, dtype=dtype),
            rand(b, hkv, S, Ev, seed=seed + 2, dtype=dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
@pytest.mark.parametrize("b,hq,hkv,L,S,E,Ev", [(1, 1, 1, 1, 1, 8, 8), (2, 4, 2, 1, 37, 64, 64),
                                               (1, 3, 3, 3, 1024, 16, 24), (1, 6, 2, 8, 131, 8, 40)],
                         ids=lambda d: str(d))
def test_decode_binds_q_k_v_and_out_alone(baseline, bound, dtype, causal, b, hq, hkv, L, S, E, Ev):
    """One attention_decode of one split a row over the whole cache (up to its 1024 positions)."""
    q, k, v = _qkv(dtype, b, hq, hkv, L, S, E, Ev)
    got = _sdpa(q, k, v, causal=causal, gqa=hq != hkv, device=baseline)
    assert [(s, n, "QKVO_ONLY" in d) for s, n, d in bound] == [("attention_decode", FOUR, True)]
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hkv)
    assert_close_in(got, want, dtype, terms=S)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("mask", ["bool", "float", "long"])
def test_decode_that_needs_more_takes_the_general_path(baseline, bound, dtype, mask):
    """A mask (a fifth binding) or a cache past one workgroup's 1024 positions (a split): the
    general path's products and softmax, within 4 bindings."""
    S = 1031 if mask == "long" else 53
    q, k, v = _qkv(dtype, 1, 4, 2, 2, S, 16, 8, seed=3)
    m = None
    if mask == "bool":
        m = rand(2, S, seed=4) > 0
        m[:, 0] = True
    elif mask == "float":
        m = Const(rand(1, 2, S, seed=4, dtype=dtype))
    got = _sdpa(q, k, v, m, gqa=True, device=baseline)
    assert "attention_decode" not in [s for s, _, _ in bound]
    _within_four(bound)
    want = F.scaled_dot_product_attention(q, k, v, m.tensor if isinstance(m, Const) else m, enable_gqa=True)
    assert_close_in(got, want, dtype, terms=S)


def test_decode_on_the_devices_own_limits_is_unchanged(desktop, bound):
    """The split (counts zeroed at load) with its mask binding, 7 bindings; unmasked and unsplit, the
    placeholders bound as ever."""
    q, k, v = _qkv(torch.float32, 1, 4, 2, 1, 300, 64, 64, seed=5)
    mask = rand(1, 300, seed=6) > 0
    mask[:, 0] = True
    assert_close(_sdpa(q, k, v, mask, gqa=True, device=desktop),
                 F.scaled_dot_product_attention(q, k, v, mask, enable_gqa=True), 1e-4, 1e-5)
    decode = [(n, d) for s, n, d in bound if s == "attention_decode"]
    assert [s for s, _, _ in bound] == ["fill", "attention_decode"]
    assert decode[0][0] == 7 and "QKVO_ONLY" not in decode[0][1] and "MASK_BOOL" in decode[0][1]
    bound.clear()
    q, k, v = _qkv(torch.float32, 1, 1, 1, 1, 5, 8, 8, seed=7)
    assert_close(_sdpa(q, k, v, device=desktop), F.scaled_dot_product_attention(q, k, v), 1e-4, 1e-5)
    assert [(s, n, "QKVO_ONLY" in d) for s, n, d in bound] == [("attention_decode", 7, False)]


# --------------------------------------------------------------------------- aten.index

def _index(x, indices, device):
    want = x[tuple(i.long() for i in indices)]
    return run_graph("aten.index.Tensor", [x, Values(indices)], (tuple(want.shape), x.dtype), device=device), want


def _indices(k: int, seed: int) -> list[torch.Tensor]:
    """k index tensors into [5, 7, 3, ...] (negative ones included), broadcasting [11, 1] with [1, 2]."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(11, 1), (1, 2), (1, 1)]
    sizes = [5, 7, 3]
    return [torch.randint(-sizes[j], sizes[j], shapes[j], generator=g).to(torch.int32) for j in range(k)]


@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, torch.int32, torch.bool], ids=str)
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("rest", [(), (1,), (13,)], ids=str)
def test_index_binds_only_its_index_tensors(baseline, bound, dtype, k, rest):
    x = rand_of((5, 7, *rest), 8, dtype)
    got, want = _index(x, _indices(k, seed=k), baseline)
    assert [(s, n, d.get("INDICES")) for s, n, d in bound] == [("index", 2 + k, k)]
    assert_close(got, want)


def test_index_of_three_tensors_is_refused_under_four_buffers(baseline):
    """src, three index tensors and out are 5 bindings: over the limit, named."""
    x = rand(5, 7, 3, seed=9)
    with pytest.raises(LimitError, match="kernel index: maxPerStageDescriptorStorageBuffers is 4 in force, "
                                         "the kernel needs 5"):
        _index(x, _indices(3, seed=3), baseline)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_index_on_the_devices_own_limits_is_unchanged(desktop, bound, k):
    """Three index bindings (the op's own, then the first again): one pipeline for every k."""
    x = rand(5, 7, 3, seed=10)
    got, want = _index(x, _indices(k, seed=k), desktop)
    assert [(s, n, "INDICES" in d) for s, n, d in bound] == [("index", 5, False)]
    assert_close(got, want)


# --------------------------------------------------------------------------- quantized products

def _linear_q(x, bits, n, group, dtype, device, seed=11):
    """vkx.linear_q of x with a bias, and torch's: the same dequantized weight and bias in fp64."""
    k = x.shape[-1]
    q, s = quantize_weight(rand(n, k, seed=seed), bits, group)
    bias = rand(n, seed=seed + 1, dtype=dtype)
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), Const(bias), bits, group],
                    ((*x.shape[:-1], n), dtype), device=device)
    want = x.double() @ dequantize(q, s, bits, group).double().T + bias.double()
    return got, want


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("m,n,k,group", [(1, 1, 64, 32), (1, 37, 256, 64), (3, 37, 256, 32), (7, 5, 96, 32),
                                         (1, 131, 128, 128)], ids=str)
def test_quantized_product_adds_its_bias_apart(baseline, bound, dtype, bits, m, n, k, group):
    """matvec_q (one row) or linear_q without the bias, into fp32, then one add rounded into out."""
    x = rand(m, k, seed=12, dtype=dtype)
    got, want = _linear_q(x, bits, n, group, dtype, baseline)
    kernel = "matvec_q" if m == 1 and group % (128 // bits) == 0 else "linear_q"
    assert [(s, n_, d.get("HAS_BIAS")) for s, n_, d in bound] == [(kernel, FOUR, None), ("binary", 3, None)]
    assert got.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2 * torch.finfo(dtype).eps
    assert_norm_close(got.double(), want, rtol=tol, atol=tol, kind=KINDS[dtype])


def test_many_rows_keep_the_bias_in_the_dequantized_product(baseline, bound):
    """From quant.DEQUANT_ROWS rows the float product binds the bias as its fourth buffer: no add."""
    x = rand(17, 64, seed=13)
    got, want = _linear_q(x, 4, 19, 32, torch.float32, baseline)
    assert "dequant_q" in [s for s, _, _ in bound] and "binary" not in [s for s, _, _ in bound]
    _within_four(bound)
    assert_norm_close(got.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m", [1, 3])
def test_quantized_product_on_the_devices_own_limits_is_unchanged(desktop, bound, m):
    """The bias bound as the kernel's fifth buffer, one dispatch."""
    got, want = _linear_q(rand(m, 256, seed=14), 4, 37, 32, torch.float32, desktop)
    assert [(s, n, d.get("HAS_BIAS")) for s, n, d in bound] == [("matvec_q" if m == 1 else "linear_q", 5, 1)]
    assert_norm_close(got.double(), want, rtol=1e-5, atol=1e-5)
