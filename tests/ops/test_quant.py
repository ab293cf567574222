"""Weight-only int8/int4 ops against torch computing with the same dequantized weights.

The reference is `dequantize(q, scales) @ x` in fp32 (vkx.export.quantize's CPU kernels):
vkx dequantizes the same bytes in the shader and accumulates in fp32, so the two agree
to fp32 rounding (the tolerance of a K-term dot product). Quantization error itself
(quantized vs the float model) is reported, not asserted, beyond a sanity bound.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from vkx.export.errors import ExportError
from vkx.export.quantize import BITS, dequantize, quantize_module, quantize_weight

from .conftest import Const, assert_norm_close, rand, run_graph, run_vkx

pytestmark = pytest.mark.vulkan


def _reference(x, q, s, bias, bits, group):
    w = dequantize(q, s, bits, group)
    out = x.double() @ w.double().T
    return out if bias is None else out + bias.double()


@pytest.mark.parametrize("bits,group", [(4, 32), (4, 64), (4, 128), (4, 256), (8, 32), (8, None)])
@pytest.mark.parametrize("m", [1, 3])
def test_linear_q_matches_dequantized_torch(bits, group, m):
    n, k = 37, 256
    w = rand(n, k, seed=1)
    q, s = quantize_weight(w, bits, group)
    g = group or k
    x, bias = rand(m, k, seed=2), rand(n, seed=3)
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), Const(bias), bits, g], (m, n))
    assert_norm_close(got, _reference(x, q, s, bias, bits, g), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("bits,group", [(4, 32), (8, 64)])
@pytest.mark.parametrize("m,n", [(15, 37), (16, 37), (40, 37), (64, 128)])
def test_linear_q_of_many_rows_dequantizes_the_weight_once(bits, group, m, n, dtype, shaders):
    """From quant.DEQUANT_ROWS rows on, the weight is dequantized into the scratch (in the activations'
    dtype) and the float product kernels multiply (64 x 128: whole tiles, fp16's tensor cores where the
    device has them); fewer rows take linear_q.comp. Both against torch."""
    k = 256
    q, s = quantize_weight(rand(n, k, seed=1), bits, group)
    x, bias = rand(m, k, seed=2).to(dtype), rand(n, seed=3).to(dtype)
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), Const(bias), bits, group], ((m, n), dtype))
    assert ("dequant_q" in shaders) == (m >= 16) and ("linear_q" in shaders) == (m < 16)
    want = _reference(x.float(), q, s, bias.float(), bits, group)
    tol = 1e-5 if dtype == torch.float32 else 2 * torch.finfo(dtype).eps * (k ** 0.5)  # 16-bit: weights rounded too
    assert_norm_close(got.double(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("bits,k", [(8, 40), (4, 72)])
def test_linear_q_by_words_where_16_bytes_do_not_divide_a_row(bits, k):
    """Rows of 40 int8 or 36 bytes of int4 values are read a word at a time (16-byte loads need
    rows of whole 16 bytes)."""
    n = 11
    q, s = quantize_weight(rand(n, k, seed=8), bits, None if bits == 8 else 8)
    g = k if bits == 8 else 8
    x = rand(2, k, seed=9)
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), None, bits, g], (2, n))
    assert_norm_close(got, _reference(x, q, s, None, bits, g), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_linear_q_in_16_bit_activations(dtype):
    n, k = 19, 96
    q, s = quantize_weight(rand(n, k, seed=4), 4, 32)
    x = rand(2, k, seed=5).to(dtype)
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), None, 4, 32], ((2, n), dtype))
    want = _reference(x.float(), q, s, None, 4, 32)
    assert got.dtype == dtype
    eps = torch.finfo(dtype).eps
    assert_norm_close(got.double(), want, rtol=2 * eps, atol=2 * eps)  # one rounding of the output


def test_linear_q_weight_larger_than_one_binding():
    n, k = 203, 128
    q, s = quantize_weight(rand(n, k, seed=6), 4, 32)
    x = rand(1, k, seed=7)
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), None, 4, 32], (1, n),
                    max_binding_bytes=64 * 33)  # 33 rows of 64 bytes a block
    assert_norm_close(got, _reference(x, q, s, None, 4, 32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("bits", [4, 8])
def test_embedding_q_gathers_and_zeroes_out_of_range_rows(bits, dtype):
    """Scales and rows in each export dtype (a 16-bit export's table), one rounding of each row."""
    vocab, dim = 100, 64
    q, s = quantize_weight(rand(vocab, dim, seed=8), bits, 32)
    s = s.to(dtype)
    # 100 and -1 are outside the table; constant, since a call refuses such an input (format/indexing.py)
    idx = torch.tensor([[0, 99, 57], [100, -1, 3]], dtype=torch.int32)
    got = run_graph("vkx.embedding_q.default", [Const(q), Const(s), Const(idx), bits, 32], ((2, 3, dim), dtype),
                    max_binding_bytes=2048)  # the table is split into row blocks
    table = dequantize(q, s.float(), bits, 32).to(dtype)
    want = torch.zeros(2, 3, dim, dtype=dtype)
    for (a, b), row in ((p, int(idx[p])) for p in [(i, j) for i in range(2) for j in range(3)]):
        if 0 <= row < vocab:
            want[a, b] = table[row]
    assert torch.equal(got, want)


@pytest.mark.parametrize("bits", [4, 8])
def test_embedding_q_with_a_ragged_last_group(bits):
    """A width of 576 in groups of 128: four whole groups and one of 64."""
    vocab, dim, group = 50, 576, 128
    q, s = quantize_weight(rand(vocab, dim, seed=9) * 2, bits, group)
    idx = torch.tensor([[3, 49, 0]], dtype=torch.int32)
    got = run_graph("vkx.embedding_q.default", [Const(q), Const(s), idx, bits, group], ((1, 3, dim), torch.float32))
    assert torch.equal(got, dequantize(q, s.float(), bits, group)[idx.long()])


def test_quantize_weight_scales_a_ragged_last_group_by_its_own_values():
    """Each group's scale is its own largest magnitude / 7, the shorter last one's too; dequantized
    values are within half a step of the weight."""
    w = rand(3, 72, seed=10)
    w[:, 64:] *= 0.01  # the last group, 8 values, much smaller than the rest
    q, s = quantize_weight(w, 4, 32, torch.float32)
    assert s.shape == (3, 3)
    assert torch.allclose(s[:, 2], w[:, 64:].abs().amax(-1) / 7)
    assert ((dequantize(q, s, 4, 32) - w).abs() <= s.repeat_interleave(32, 1)[:, :72] / 2 + 1e-6).all()


class TiedLM(nn.Module):
    def __init__(self, vocab=64, dim=96):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, ids):
        return self.head(torch.tanh(self.mix(self.emb(ids))))


@pytest.mark.parametrize("scheme", ["int8", "int4"])
def test_quantized_module_exports_and_matches(tmp_path, scheme):
    import vkx
    torch.manual_seed(0)
    model = TiedLM().eval()
    quantized = quantize_module(model, scheme, embedding=scheme)  # the tied table in the scheme too (int4: affine)
    assert quantized.emb.bits == quantized.head.bits == BITS[scheme]
    ids = torch.tensor([[3, 63, 0, 17, 5]])
    report = vkx.export_model(quantized, (ids,), tmp_path / "q.pte")
    with vkx.load(tmp_path / "q.pte") as program:
        got = program(ids)
    want = quantized(ids)
    assert_norm_close(got, want, rtol=1e-5, atol=1e-6)
    # The tied table is stored once: the embedding and the head read the same packed bytes.
    packed = sum(b.numel() * b.element_size() for n, b in quantized.named_buffers() if n == "emb.weight_q")
    scales = sum(b.numel() * b.element_size() for n, b in quantized.named_buffers() if n == "emb.scales")
    mix = sum(t.numel() * t.element_size() for t in (quantized.mix.weight_q, quantized.mix.scales, model.mix.bias))
    assert report.constant_bytes == packed + scales + mix
    with torch.no_grad():
        error = (want - model(ids)).abs().max() / model(ids).abs().max()
    print(f"\n{scheme}: quantization error {error.item():.3g} of the float model's output scale")
    assert error < (0.05 if scheme == "int8" else 0.35)  # a sanity bound, not a quality claim


def test_k_of_part_of_a_word_is_refused_a_ragged_group_is_not():
    """K = 48 in groups of 32: a group and a half, taken (int4's affine (scale, offset) pairs); K = 44 is
    not whole 32-bit words of int4."""
    assert quantize_module(nn.Sequential(nn.ReLU(), nn.Linear(48, 8)), "int4")[1].scales.shape == (8, 2, 2)
    with pytest.raises(ExportError, match="'1'.*44 input features is not whole 32-bit words of int4"):
        quantize_module(nn.Sequential(nn.ReLU(), nn.Linear(44, 8)), "int4")
    with pytest.raises(ExportError, match="group-size"):
        quantize_module(nn.Linear(64, 8), "int4", group_size=48)


def test_torch_reference_is_the_dequantized_weight():
    w = rand(8, 64, seed=9, scale=3.0)
    for bits in (4, 8):
        q, s = quantize_weight(w, bits, 32)
        back = dequantize(q, s, bits, 32)
        step = s.float().repeat_interleave(32, dim=1)
        assert (back - w).abs().le(step / 2 + 1e-6).all()  # within half a quantization step
    x = rand(2, 64, seed=10)
    layer = nn.Linear(64, 8).eval()
    got = run_vkx(quantize_module(layer, "int8"), (x,))
    assert_norm_close(got, quantize_module(layer, "int8")(x), rtol=1e-5, atol=1e-6)
