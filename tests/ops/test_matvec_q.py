"""The batch-1 quantized kernel (shaders/matvec_q.comp) against torch with the same dequantized weights.

The reference is `dequantize(q) @ x` in fp64; vkx reads the packed bytes, takes the zero point out
per 16 bytes (sum(u * x) - 8 * sum(x), or 128 for int8) and applies the scale once per 16 bytes,
accumulating in fp32, so the two agree to fp32 rounding of a K-term dot product. One row of
activations takes matvec_q where a weight row is whole 16-byte chunks inside its scale groups;
the tests check which kernel ran, so that a shape falling back to linear_q is noticed.
"""
from __future__ import annotations

import pytest
import torch

from vkx.export.quantize import dequantize, quantize_weight
from vkx.loader.ops.quant import BIASED_BINDINGS

from .conftest import Const, assert_norm_close, rand, run_graph

pytestmark = pytest.mark.vulkan


def _reference(x, w, bias):
    out = x.double() @ w.double().T
    return out if bias is None else out + bias.double()


def _kernel(m: int) -> str:
    return "matvec_q" if m == 1 else "linear_q"


def _biased(kernel: str) -> list[str]:
    """The dispatches of a product with a bias: its kernel, then, on a device of fewer storage buffers
    a stage than the biased kernel binds (the Android baseline's 4), the bias added apart."""
    from vkx.loader.gpu.device import default_device

    apart = default_device().limits.max_per_stage_descriptor_storage_buffers < BIASED_BINDINGS
    return [kernel, "binary"] if apart else [kernel]


# K = 4352: 136 int4 (272 int8) 16-byte chunks a row, more than a workgroup's 128 invocations, so
# some read two chunks and others one; N = 37 leaves the last workgroup 5 of its 16 rows. The other
# tests' rows have at most 64 chunks (workgroups of 64).
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [32, 64, 128, 256])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("m", [1, 3])
def test_every_group_size_with_and_without_bias(bits, group, with_bias, m, shaders):
    n, k = 37, 4352
    q, s = quantize_weight(rand(n, k, seed=1), bits, group)
    x, bias = rand(m, k, seed=2), rand(n, seed=3) if with_bias else None
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), Const(bias) if with_bias else None, bits, group],
                    (m, n))
    assert shaders == (_biased(_kernel(m)) if with_bias else [_kernel(m)])
    assert_norm_close(got, _reference(x, dequantize(q, s, bits, group), bias), rtol=1e-5, atol=1e-5)


# A ragged last scale group: the hidden sizes of SmolLM (576) and Qwen2-0.5B (960) at groups that do not
# divide them, K = 72 (not whole 16-byte chunks of int4: linear_q), one row (matvec_q), three (linear_q)
# and 17 (the dequantized weight's float product).
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("k, group", [(576, 128), (576, 256), (960, 128), (960, 256), (72, 32), (200, 64)])
@pytest.mark.parametrize("m", [1, 3, 17])
def test_a_ragged_last_group(bits, k, group, m, shaders):
    n = 37
    q, s = quantize_weight(rand(n, k, seed=4) * 3, bits, group)
    assert s.shape == (n, -(-k // group))
    x, bias = rand(m, k, seed=5), rand(n, seed=6)
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), Const(bias), bits, group], (m, n))
    if m == 1:
        whole_chunks = k % (128 // bits) == 0
        assert shaders[0] == ("matvec_q" if whole_chunks else "linear_q")
    assert_norm_close(got, _reference(x, dequantize(q, s, bits, group), bias), rtol=1e-5, atol=1e-5)


def _full_range(n: int, k: int, bits: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed weight, its integers): every integer of the type, the extremes included."""
    lo, hi = (-8, 8) if bits == 4 else (-128, 128)
    q = torch.randint(lo, hi, (n, k), generator=torch.Generator().manual_seed(seed), dtype=torch.int8)
    flat, every = q.view(-1), torch.arange(lo, hi, dtype=torch.int8)
    flat[0:2 * every.numel():2] = every  # each value at an even and an odd k
    flat[1:2 * every.numel():2] = every
    if bits == 8:
        return q, q
    u = (q.to(torch.int16) + 8).to(torch.uint8)
    return (u[:, 0::2] | (u[:, 1::2] << 4)).contiguous(), q


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("rows", [1, 16, 17, 50])
def test_every_integer_and_row_count(bits, rows, shaders):
    """Every integer of the type (the extremes too, each at an even and an odd k; a field read wrong
    is off by at least one scale step, far over the tolerance); 1, 16, 17, 50 rows (one workgroup,
    full, one row over, several with a partial last)."""
    k, group = 512, 32
    packed, q = _full_range(rows, k, bits, seed=4)
    s = rand(rows, k // group, seed=5, scale=0.05).abs() + 0.01
    x = rand(1, k, seed=6)
    got = run_graph("vkx.linear_q.default", [x, Const(packed), Const(s), None, bits, group], (1, rows))
    assert shaders == ["matvec_q"]
    assert_norm_close(got, _reference(x, q.double() * s.double().repeat_interleave(group, dim=1), None),
                      rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bits,k,group,kernel", [
    (8, 272, 272, "matvec_q"),  # per-channel int8, K a multiple of 16
    (8, 40, 40, "linear_q"),    # rows of 40 bytes are not whole 16-byte chunks
    (4, 96, 16, "linear_q"),    # a 16-byte chunk spans two groups of 16
    (4, 96, 32, "matvec_q"),    # 3 chunks a row
])
def test_which_kernel_a_row_takes(bits, k, group, kernel, shaders):
    n = 21
    q, s = quantize_weight(rand(n, k, seed=7), bits, group)
    x = rand(1, k, seed=8)
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), None, bits, group], (1, n))
    assert shaders == [kernel]
    assert_norm_close(got, _reference(x, dequantize(q, s, bits, group), None), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bits", [4, 8])
def test_16_bit_activations(dtype, bits, shaders):
    n, k = 19, 256
    q, s = quantize_weight(rand(n, k, seed=9), bits, 64)
    x = rand(1, k, seed=10).to(dtype)
    bias = rand(n, seed=11).to(dtype)
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), Const(bias), bits, 64], ((1, n), dtype))
    assert shaders == _biased("matvec_q") and got.dtype == dtype
    eps = torch.finfo(dtype).eps
    want = _reference(x.double(), dequantize(q, s, bits, 64), bias.double())
    assert_norm_close(got.double(), want, rtol=2 * eps, atol=2 * eps)  # one rounding of the output


def test_weight_larger_than_one_binding(shaders):
    n, k = 203, 256
    q, s = quantize_weight(rand(n, k, seed=12), 4, 64)
    x = rand(1, k, seed=13)
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), None, 4, 64], (1, n),
                    max_binding_bytes=128 * 33)  # blocks of 33 rows of 128 bytes
    assert shaders == ["matvec_q"] * 7
    assert_norm_close(got, _reference(x, dequantize(q, s, 4, 64), None), rtol=1e-5, atol=1e-5)


# ExecuTorch's quantized linears at batch 1 (layouts in vkx.format.op_quant) take the same kernel.

def test_et_linear_q4gsw_with_padded_scales_and_bias(shaders):
    n, k, group = 30, 256, 64
    packed, q = _full_range(n, k, 4, seed=14)
    scales = rand(k // group, n, seed=15, scale=0.1).abs()
    bias = rand(n, seed=16)
    pad = torch.nn.functional.pad
    x = rand(1, 1, k, seed=17)
    got = run_graph("et_vk.linear_q4gsw.default",
                    [x, Const(packed), Const(pad(scales, (0, 2), value=7.0)), group, Const(pad(bias, (0, 2), value=7.0))],
                    (1, 1, n))
    assert shaders == _biased("matvec_q")
    w = q.double() * scales.double().T.repeat_interleave(group, dim=1)
    assert_norm_close(got, _reference(x, w, bias), rtol=1e-5, atol=1e-5)


def test_et_linear_qcs4w_high_nibble_first(shaders):
    n, k = 23, 160
    _, q = _full_range(n, k, 4, seed=18)
    u = (q.to(torch.int16) + 8).to(torch.uint8)
    packed = ((u[:, 0::2] << 4) | u[:, 1::2]).contiguous()  # even k in the high nibble
    scales = rand(n, seed=19, scale=0.1).abs()
    x = rand(1, k, seed=20)
    got = run_graph("et_vk.linear_qcs4w.default", [x, Const(packed), Const(scales)], (1, n))
    assert shaders == ["matvec_q"]
    assert_norm_close(got, _reference(x, q.double() * scales.double()[:, None], None), rtol=1e-5, atol=1e-5)


def test_et_weight_int8pack_mm(shaders):
    n, k = 25, 192
    _, q = _full_range(n, k, 8, seed=21)
    scales = rand(n, seed=22, scale=0.02).abs()
    x = rand(1, k, seed=23)
    got = run_graph("aten._weight_int8pack_mm.default", [x, Const(q), Const(scales)], (1, n))
    assert shaders == ["matvec_q"]
    assert_norm_close(got, _reference(x, q.double() * scales.double()[:, None], None), rtol=1e-5, atol=1e-5)

