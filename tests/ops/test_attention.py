"""aten.scaled_dot_product_attention against torch (the Vulkan backend's et_vk.sdpa and rotary
embeddings at the end, against its reference kernels written out here).

Exported modules for the common forms (plain, causal, custom scale, bool and float
masks given as inputs or buffers); hand-built graphs for enable_gqa and the
dropout error. fp32 results must satisfy max|err| <= 1e-4 * max|ref| + 1e-5.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from vkx.loader.errors import BadProgramError

from .conftest import (FLOAT_DTYPES, Const, assert_close_in, assert_equal, assert_norm_close, rand, run_graph,
                       run_vkx)

pytestmark = pytest.mark.vulkan


class SDPA(nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, q, k, v, *mask):
        return F.scaled_dot_product_attention(q, k, v, *mask, **self.kwargs)


def _qkv(b=2, h=3, L=7, S=5, E=8, Ev=6, seed=0):
    return rand(b, h, L, E, seed=seed), rand(b, h, S, E, seed=seed + 1), rand(b, h, S, Ev, seed=seed + 2)


@pytest.mark.parametrize("kwargs", [
    {},
    {"is_causal": True},
    {"scale": 0.3},
    {"is_causal": True, "scale": 1.7},
], ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()) or "plain")
@pytest.mark.parametrize("dims", [(2, 3, 7, 5, 8, 6), (1, 1, 1, 1, 4, 4), (1, 2, 17, 17, 16, 16),
                                  (1, 2, 3, 33, 7, 3)], ids=lambda d: "x".join(map(str, d)))
def test_sdpa(kwargs, dims):
    q, k, v = _qkv(*dims)
    m = SDPA(**kwargs)
    assert_norm_close(run_vkx(m, (q, k, v)), m(q, k, v))


@pytest.mark.parametrize("mask_shape", [(7, 5), (2, 1, 7, 5), (2, 3, 7, 5), (1, 5)], ids=str)
def test_sdpa_bool_mask(mask_shape):
    q, k, v = _qkv()
    mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(3)) > 0.4
    mask[..., 0] = True                       # no fully masked rows here
    m = SDPA()
    assert_norm_close(run_vkx(m, (q, k, v, mask)), m(q, k, v, mask))


@pytest.mark.parametrize("mask_shape", [(7, 5), (3, 1, 5), (2, 3, 7, 5)], ids=str)
def test_sdpa_float_mask(mask_shape):
    q, k, v = _qkv()
    mask = rand(*mask_shape, seed=4)
    m = SDPA(scale=0.5)
    assert_norm_close(run_vkx(m, (q, k, v, mask)), m(q, k, v, mask))


def test_sdpa_mask_buffer():
    # A constant causal-like float mask with -inf (stored in the graph's constants).
    class WithMask(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mask", torch.full((7, 5), float("-inf")).triu(1))

        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)

    q, k, v = _qkv(seed=5)
    m = WithMask()
    assert_norm_close(run_vkx(m, (q, k, v)), m(q, k, v))


def test_sdpa_fully_masked_row_is_zero():
    q, k, v = _qkv(seed=6)
    mask = torch.ones(7, 5, dtype=torch.bool)
    mask[2] = False
    want = F.scaled_dot_product_attention(q, k, v, mask)
    got = run_graph("aten.scaled_dot_product_attention.default",
                    [q, k, v, Const(mask), 0.0, False, None, False], tuple(want.shape))
    assert_norm_close(got, want)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_gqa_graph(causal):
    q, k, v = rand(2, 4, 3, 8, seed=7), rand(2, 2, 6, 8, seed=8), rand(2, 2, 6, 4, seed=9)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    got = run_graph("aten.scaled_dot_product_attention.default",
                    [q, k, v, None, 0.0, causal, None, True], tuple(want.shape))
    assert_norm_close(got, want)


def test_sdpa_broadcast_kv_graph():
    q, k, v = rand(2, 5, 2, 16, seed=10), rand(1, 5, 33, 16, seed=11), rand(1, 5, 33, 16, seed=12)
    want = F.scaled_dot_product_attention(q, k, v, scale=0.25)
    got = run_graph("aten.scaled_dot_product_attention.default",
                    [q, k, v, None, 0.0, False, 0.25, False], tuple(want.shape))
    assert_norm_close(got, want)


def test_sdpa_dropout_is_unsupported():
    from vkx.loader.errors import UnsupportedOpError
    q, k, v = _qkv()
    with pytest.raises(UnsupportedOpError, match="dropout"):
        run_graph("aten.scaled_dot_product_attention.default",
                  [q, k, v, None, 0.1, False, None, False], (2, 3, 7, 6))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_sdpa_split_small_binding_limit(dtype):
    # scores [2, 2, 16, 40] (fp32, 10240 bytes), k and v exceed a 4096-byte binding: the
    # matmuls split by batch and the softmax by rows.
    q, k, v = (rand(2, 2, 16, 8, seed=13, dtype=dtype), rand(2, 2, 40, 8, seed=14, dtype=dtype),
               rand(2, 2, 40, 8, seed=15, dtype=dtype))
    mask = rand(16, 40, seed=16, dtype=dtype)
    want = F.scaled_dot_product_attention(q, k, v, mask)
    got = run_graph("aten.scaled_dot_product_attention.default",
                    [q, k, v, mask, 0.0, False, None, False], (tuple(want.shape), dtype), max_binding_bytes=4096)
    assert_close_in(got, want, dtype)


# --------------------------------------------------------------------------- every float dtype
# Hand-built graphs with q, k, v, the output (and a float mask) in one dtype, against
# torch's F.scaled_dot_product_attention in that dtype on the CPU.

def _sdpa_graph(q, k, v, mask=None, causal=False, scale=None, gqa=False, **load):
    out_shape = (*q.shape[:-1], v.shape[-1])
    return run_graph("aten.scaled_dot_product_attention.default",
                     [q, k, v, mask, 0.0, causal, scale, gqa], (out_shape, q.dtype), **load)


def _qkv_in(dtype, b=2, hq=3, hkv=3, L=7, S=5, E=8, Ev=6, seed=0):
    return (rand(b, hq, L, E, seed=seed, dtype=dtype), rand(b, hkv, S, E, seed=seed + 1, dtype=dtype),
            rand(b, hkv, S, Ev, seed=seed + 2, dtype=dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("causal,scale", [(False, None), (True, None), (False, 0.3), (True, 1.7)],
                         ids=["plain", "causal", "scale", "causal_scale"])
@pytest.mark.parametrize("L,S", [(7, 5), (3, 9), (1, 33), (9, 70), (2, 1030)], ids=lambda d: str(d))
def test_sdpa_dtypes(dtype, causal, scale, L, S):
    q, k, v = _qkv_in(dtype, L=L, S=S)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    assert_close_in(_sdpa_graph(q, k, v, causal=causal, scale=scale), want, dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("mask_shape", [(7, 5), (2, 1, 7, 5), (2, 3, 7, 5), (1, 5)], ids=str)
def test_sdpa_bool_mask_dtypes(dtype, mask_shape):
    # A bool mask is one byte per element on the device; an odd element count leaves
    # the binding short of a 4-byte word.
    q, k, v = _qkv_in(dtype)
    mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(3)) > 0.4
    mask[..., 0] = True
    want = F.scaled_dot_product_attention(q, k, v, mask)
    assert_close_in(_sdpa_graph(q, k, v, mask), want, dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("mask_shape", [(7, 5), (3, 1, 5), (2, 3, 7, 5)], ids=str)
def test_sdpa_float_mask_dtypes(dtype, mask_shape):
    q, k, v = _qkv_in(dtype, seed=4)
    mask = rand(*mask_shape, seed=4, dtype=dtype)
    mask[..., 1] = float("-inf")
    want = F.scaled_dot_product_attention(q, k, v, mask, scale=0.5)
    assert_close_in(_sdpa_graph(q, k, v, Const(mask), scale=0.5), want, dtype)


@pytest.mark.parametrize("mdtype", [torch.float16, torch.bfloat16], ids=str)
def test_sdpa_16bit_mask_fp32_qkv(mdtype):
    # A mask stored narrower than q (torch itself wants them equal: the reference widens it).
    q, k, v = _qkv_in(torch.float32, seed=5)
    mask = rand(7, 5, seed=5, dtype=mdtype)
    want = F.scaled_dot_product_attention(q, k, v, mask.float())
    assert_norm_close(_sdpa_graph(q, k, v, mask), want)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_sdpa_fully_masked_rows_dtypes(dtype):
    q, k, v = _qkv_in(dtype, seed=6)
    mask = torch.ones(7, 5, dtype=torch.bool)
    mask[2] = False
    want = F.scaled_dot_product_attention(q, k, v, mask)
    got = _sdpa_graph(q, k, v, mask)
    assert torch.equal(got[:, :, 2], torch.zeros_like(got[:, :, 2]))
    assert_close_in(got, want, dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("hq,hkv", [(4, 2), (6, 1), (3, 3)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L", [1, 5])
def test_sdpa_gqa_dtypes(dtype, hq, hkv, causal, L):
    q, k, v = _qkv_in(dtype, hq=hq, hkv=hkv, L=L, S=9, E=16, Ev=12, seed=7)
    mask = torch.rand(L, 9, generator=torch.Generator().manual_seed(8)) > 0.3
    mask[:, 0] = True
    want = F.scaled_dot_product_attention(q, k, v, mask, is_causal=False, enable_gqa=True, scale=0.4)
    assert_close_in(_sdpa_graph(q, k, v, mask, scale=0.4, gqa=True), want, dtype)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    assert_close_in(_sdpa_graph(q, k, v, causal=causal, gqa=True), want, dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_sdpa_decode_split_small_binding_limit(dtype):
    # One query row (q @ k^T runs the matvec path over the batch grid), k/v past a
    # 4096-byte binding: the matmuls split by batch.
    q, k, v = _qkv_in(dtype, b=2, hq=4, hkv=4, L=1, S=70, E=16, Ev=12, seed=9)
    assert k.numel() * k.element_size() > 4096
    want = F.scaled_dot_product_attention(q, k, v)
    assert_close_in(_sdpa_graph(q, k, v, max_binding_bytes=4096), want, dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("where", ["query", "key", "value"])
def test_sdpa_nan_like_torch(dtype, where):
    # A NaN score makes its softmax row NaN: NaN in a query element poisons that row, in a
    # key element one score of every row of the head, in a value element that output column.
    # (torch 2.13's CPU SDPA zeroes a query row of NaNs for some other shapes, e.g. q
    # [1, 2, 4, 8] against k [1, 2, 5, 8]; here it propagates NaN, as softmax defines.)
    q, k, v = _qkv_in(dtype, seed=10)
    {"query": q, "key": k, "value": v}[where][1, 2, 3, 4] = float("nan")
    want = F.scaled_dot_product_attention(q, k, v)
    got = _sdpa_graph(q, k, v)
    assert torch.equal(got.isnan(), want.isnan()) and want.isnan().any()
    ok = ~want.isnan()
    assert_close_in(got[ok], want[ok], dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_sdpa_long_rows_bool_mask_and_masked_row(dtype):
    """Rows of 70 scores (a workgroup each): a random bool mask, one row fully masked (zeros)."""
    q, k, v = _qkv_in(dtype, L=9, S=70, seed=8)
    mask = torch.rand(9, 70, generator=torch.Generator().manual_seed(9)) > 0.5
    mask[:, 37] = True
    mask[4] = False
    want = F.scaled_dot_product_attention(q, k, v, mask)
    got = _sdpa_graph(q, k, v, mask)
    assert torch.equal(got[:, :, 4], torch.zeros_like(got[:, :, 4]))
    assert_close_in(got, torch.nan_to_num(want), dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("S,seen", [(72, 72), (640, 513), (4100, 4100), (1200, 3)], ids=str)
@pytest.mark.parametrize("units", [1, 64])
def test_sdpa_decode_split_along_the_sequence(monkeypatch, dtype, S, seen, units):
    """Decode attention split along the sequence (attention_decode.comp's chunks, the last of a
    row merging them) against torch, with one chunk per row and with several: grouped heads, a bool
    mask showing the first `seen` positions (whole chunks masked out), NaN in the masked values
    (never read: torch's 0 * NaN would poison the row), a cache longer than one workgroup's chunk."""
    from vkx.loader.gpu.device import default_device
    from vkx.loader.ops.attention import decode_split

    monkeypatch.setattr(default_device(), "compute_units", units)
    q, k, v = _qkv_in(dtype, b=1, hq=4, hkv=2, L=1, S=S, E=64, Ev=64, seed=20)
    mask = torch.zeros(1, S, dtype=torch.bool)
    mask[:, :seen] = True
    v[:, :, seen:] = float("nan")
    want = F.scaled_dot_product_attention(q, k[:, :, :seen], v[:, :, :seen], enable_gqa=True)
    chunk, parts = decode_split(4, S, units)
    assert parts == -(-S // chunk) and (parts == 1) == (S == 72 and units == 1)
    got = _sdpa_graph(q, k, v, mask, gqa=True)
    assert_close_in(got, want, dtype, terms=seen)


# --------------------------------------------------------------------------- the Vulkan backend's et_vk.sdpa and rotary embeddings

def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


def _rope_hf_reference(x, cos, sin, start):
    r = cos.shape[-1]
    c, s = cos[start:start + x.shape[1]].unsqueeze(1).float(), sin[start:start + x.shape[1]].unsqueeze(1).float()
    rot = x[..., :r].float()
    return torch.cat([rot * c + _rotate_half(rot) * s, x[..., r:].float()], -1).to(x.dtype)


def _tables(rows, cols, dtype):
    angles = torch.outer(torch.arange(rows).float(), 1.0 / 100 ** (torch.arange(cols // 2).float() / cols))
    angles = torch.cat([angles, angles], -1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


@pytest.mark.parametrize("rotary,start", [(16, 0), (12, 3)], ids=["full", "partial_at_3"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_apply_rotary_emb_hf(rotary, start, dtype):
    xq, xk = rand(2, 5, 4, 16, seed=12, scale=2.0, dtype=dtype), rand(2, 5, 2, 16, seed=13, scale=2.0, dtype=dtype)
    cos, sin = _tables(10, rotary, torch.float32)
    got = run_graph("et_vk.apply_rotary_emb_hf.default", [xq, xk, Const(cos), Const(sin), start],
                    [(xq.shape, dtype), (xk.shape, dtype)])
    for g_, x in zip(got, (xq, xk)):
        want = _rope_hf_reference(x, cos, sin, start)
        assert_close_in(g_, want, dtype, terms=2, each=True)
        if rotary < 16:
            assert_equal(g_[..., rotary:], x[..., rotary:])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_apply_rotary_emb_interleaved(dtype):
    xq, xk = rand(1, 6, 4, 8, seed=14, scale=2.0, dtype=dtype), rand(1, 6, 2, 8, seed=15, scale=2.0, dtype=dtype)
    angles = torch.outer(torch.arange(6).float(), 1.0 / 100 ** (torch.arange(4).float() / 4))
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    got = run_graph("et_vk.apply_rotary_emb.default", [xq, xk, cos, sin], [(xq.shape, dtype), (xk.shape, dtype)])
    for g_, x in zip(got, (xq, xk)):
        re, im = x.float().reshape(*x.shape[:-1], -1, 2).unbind(-1)
        c, s = cos.float()[None, :, None, :], sin.float()[None, :, None, :]
        want = torch.stack([re * c - im * s, re * s + im * c], -1).flatten(3).to(dtype)
        assert_close_in(g_, want, dtype, terms=2, each=True)


def test_rotary_tables_must_hold_the_positions():
    xq = rand(1, 5, 2, 8)
    cos, sin = _tables(6, 8, torch.float32)
    with pytest.raises(BadProgramError, match="positions 2..7 outside the 6-row tables"):
        run_graph("et_vk.apply_rotary_emb_hf.default", [xq, xq, cos, sin, 2], [tuple(xq.shape)] * 2)


@pytest.mark.parametrize("masked,scale", [(False, None), (True, None), (True, 0.3)], ids=["plain", "mask", "scale"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_vk_sdpa(masked, scale, dtype):
    q, k, v = (rand(2, 3, 5 if i == 0 else 7, 16, seed=16 + i, dtype=dtype) for i in range(3))
    args = [q, k, v]
    mask = None
    if masked:
        mask = torch.zeros(5, 7).masked_fill(torch.ones(5, 7, dtype=torch.bool).triu(3), float("-inf")).to(dtype)
        args.append(mask)
        args.append(scale)
    s = 1 / 16 ** 0.5 if scale is None else scale
    scores = (q.double() @ k.double().transpose(-1, -2)) * s + (0 if mask is None else mask.double())
    want = (torch.softmax(scores, -1) @ v.double()).to(dtype)
    got = run_graph("et_vk.sdpa.default", args, ((2, 3, 5, 16), dtype))
    assert_close_in(got, want, dtype, terms=16)
