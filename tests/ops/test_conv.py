"""Convolution and 2-D pooling against torch (through vkx.export_model + vkx.load).

fp32 results must satisfy max|err| <= 1e-4 * max|ref| + 1e-5.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from .conftest import (FLOAT_DTYPES, Const, Fn, assert_close, assert_close_in, assert_equal, assert_norm_close, rand,
                       run_graph, run_vkx)

pytestmark = pytest.mark.vulkan


CONVS = {
    # name: (input NCHW, Conv2d kwargs)
    "plain3x3": ((1, 3, 9, 11), dict(in_channels=3, out_channels=5, kernel_size=3)),
    "stride2_pad1_nobias": ((2, 4, 8, 7), dict(in_channels=4, out_channels=6, kernel_size=3, stride=2,
                                                padding=1, bias=False)),
    "dilation2": ((1, 3, 12, 10), dict(in_channels=3, out_channels=4, kernel_size=3, padding=2, dilation=2)),
    "groups2": ((1, 4, 10, 10), dict(in_channels=4, out_channels=8, kernel_size=3, padding=1, groups=2)),
    "depthwise": ((3, 6, 7, 9), dict(in_channels=6, out_channels=6, kernel_size=3, padding=1, groups=6)),
    "depthwise_mult2": ((1, 4, 7, 9), dict(in_channels=4, out_channels=8, kernel_size=3, groups=4)),
    "rect_kernel": ((1, 6, 7, 9), dict(in_channels=6, out_channels=12, kernel_size=(3, 1), stride=(2, 1),
                                       padding=(1, 0), groups=3)),
    "odd_5x5_s3": ((2, 3, 17, 33), dict(in_channels=3, out_channels=7, kernel_size=5, stride=3, padding=2)),
    "pointwise": ((2, 16, 5, 5), dict(in_channels=16, out_channels=8, kernel_size=1)),
    "one_pixel": ((1, 1, 1, 1), dict(in_channels=1, out_channels=1, kernel_size=1, bias=False)),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_conv2d(name):
    shape, kwargs = CONVS[name]
    torch.manual_seed(len(name))
    m = nn.Conv2d(**kwargs).eval()
    x = rand(*shape, seed=1)
    with torch.no_grad():
        assert_norm_close(run_vkx(m, (x,)), m(x))


def test_conv1d_graph():
    # 1-D convolutions run as 2-D ones (H = 1); test_exported_conv1d exports one.
    x, w, b = rand(2, 4, 20, seed=1), rand(6, 2, 3, seed=2), rand(6, seed=3)
    want = F.conv1d(x, w, b, 2, 1, 1, 2)
    got = run_graph("aten.convolution.default", [x, Const(w), Const(b), [2], [1], [1], False, [0], 2],
                    tuple(want.shape))
    assert_norm_close(got, want)


def test_conv_graph_hand_built():
    # The op contract directly: int-list args, bias as a constant, batch 3.
    x, w, b = rand(3, 4, 6, 5, seed=1), rand(6, 2, 3, 3, seed=2), rand(6, seed=3)
    want = F.conv2d(x, w, b, (2, 1), (1, 2), (1, 2), 2)
    got = run_graph("aten.convolution.default",
                    [x, Const(w), Const(b), [2, 1], [1, 2], [1, 2], False, [0, 0], 2], tuple(want.shape))
    assert_norm_close(got, want)


def test_conv_transposed_runs_and_a_wrong_output_size_is_refused():
    # ExecuTorch files call it so (hand-built here); the rule gives the output size
    from vkx.loader.errors import BadProgramError
    x, w, b = rand(1, 4, 5, 5, seed=1), rand(4, 2, 3, 3, seed=2), rand(4, seed=3)
    want = F.conv_transpose2d(x, w, b, 2, 1, 1, 2, 1)  # stride 2, padding 1, output_padding 1, groups 2
    got = run_graph("aten.convolution.default",
                    [x, Const(w), Const(b), [2, 2], [1, 1], [1, 1], True, [1, 1], 2], tuple(want.shape))
    assert_norm_close(got, want)
    with pytest.raises(BadProgramError, match="the op gives"):
        run_graph("aten.convolution.default",
                  [x, Const(w), None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1], (1, 2, 6, 6))


MAXPOOLS = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, dilation=2),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), ceil_mode=True),
    dict(kernel_size=2, stride=2, ceil_mode=True),
]


@pytest.mark.parametrize("kwargs", MAXPOOLS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_max_pool2d(kwargs):
    x = rand(2, 3, 9, 11, seed=1)
    fn = Fn(lambda m, x: F.max_pool2d(x, **kwargs))
    assert_norm_close(run_vkx(fn, (x,)), fn(x))


AVGPOOLS = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=3, stride=2, padding=1, divisor_override=5),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), ceil_mode=True, count_include_pad=False),
]


@pytest.mark.parametrize("kwargs", AVGPOOLS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_avg_pool2d(kwargs):
    x = rand(2, 3, 9, 11, seed=2)
    fn = Fn(lambda m, x: F.avg_pool2d(x, **kwargs))
    assert_norm_close(run_vkx(fn, (x,)), fn(x))


def test_pool_graph_unbatched_default_stride():
    # [C, H, W] input and an empty stride list (= kernel_size).
    x = rand(3, 7, 8, seed=3)
    want = F.max_pool2d(x, 3, ceil_mode=True)
    got = run_graph("aten.max_pool2d.default", [x, [3], [], [0], [1], True], tuple(want.shape))
    assert_norm_close(got, want)
    want = F.avg_pool2d(x, 3, ceil_mode=True, count_include_pad=False)
    got = run_graph("aten.avg_pool2d.default", [x, [3, 3], [], [0, 0], True, False, None], tuple(want.shape))
    assert_norm_close(got, want)


def test_conv_pool_chain():
    torch.manual_seed(1)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.MaxPool2d(2, ceil_mode=True),
                      nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.AvgPool2d(2)).eval()
    x = rand(1, 3, 15, 13, seed=4)
    with torch.no_grad():
        assert_norm_close(run_vkx(m, (x,)), m(x))


def test_conv_batch_split_small_binding_limit():
    # x (6912 bytes) and out exceed a 4096-byte binding: one dispatch per sample chunk.
    x, w, b = rand(4, 3, 12, 12, seed=5), rand(4, 3, 3, 3, seed=6), rand(4, seed=7)
    want = F.conv2d(x, w, b, padding=1)
    got = run_graph("aten.convolution.default", [x, Const(w), Const(b), [1, 1], [1, 1], [1, 1], False, [0, 0], 1],
                    tuple(want.shape), max_binding_bytes=4096)
    assert_norm_close(got, want)


# --------------------------------------------------------------------------- every float dtype
# Hand-built graphs with every tensor (input, weight, bias, output) in one dtype, against
# torch in that dtype. torch's CPU convolution rounds once from a wide sum, as vkx does.

def _conv_graph(x, w, b, stride, padding, dilation, groups, out_shape, dtype, **load):
    args = [x, Const(w), None if b is None else Const(b), list(stride), list(padding), list(dilation), False,
            [0] * len(stride), groups]
    return run_graph("aten.convolution.default", args, (out_shape, dtype), **load)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", ["plain3x3", "stride2_pad1_nobias", "groups2", "depthwise", "odd_5x5_s3"])
def test_conv2d_dtypes(dtype, name):
    shape, kw = CONVS[name]
    k = kw["kernel_size"]
    w = rand(kw["out_channels"], kw["in_channels"] // kw.get("groups", 1), k, k, seed=2, dtype=dtype)
    b = rand(kw["out_channels"], seed=3, dtype=dtype) if kw.get("bias", True) else None
    x = rand(*shape, seed=1, dtype=dtype)
    s, p, d, g = kw.get("stride", 1), kw.get("padding", 0), kw.get("dilation", 1), kw.get("groups", 1)
    want = F.conv2d(x, w, b, s, p, d, g)
    got = _conv_graph(x, w, b, [s, s], [p, p], [d, d], g, want.shape, dtype)
    assert_close_in(got, want, dtype)


@pytest.mark.parametrize("wdtype", [torch.float16, torch.bfloat16], ids=str)
def test_conv_mixed_fp32_input_16bit_weights(wdtype):
    x, w, b = rand(2, 4, 8, 7, seed=1), rand(6, 4, 3, 3, seed=2, dtype=wdtype), rand(6, seed=3, dtype=wdtype)
    want = F.conv2d(x, w.float(), b.float(), 2, 1)
    got = _conv_graph(x, w, b, [2, 2], [1, 1], [1, 1], 1, want.shape, torch.float32)
    assert_norm_close(got, want)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_conv1d_and_batch_split_dtypes(dtype):
    x, w, b = rand(2, 4, 20, seed=1, dtype=dtype), rand(6, 2, 3, seed=2, dtype=dtype), rand(6, seed=3, dtype=dtype)
    want = F.conv1d(x, w, b, 2, 1, 1, 2)
    assert_close_in(_conv_graph(x, w, b, [2], [1], [1], 2, want.shape, dtype), want, dtype)
    x, w, b = rand(5, 3, 12, 12, seed=5, dtype=dtype), rand(4, 3, 3, 3, seed=6, dtype=dtype), rand(4, seed=7, dtype=dtype)
    want = F.conv2d(x, w, b, padding=1)
    got = _conv_graph(x, w, b, [1, 1], [1, 1], [1, 1], 1, want.shape, dtype, max_binding_bytes=4096)
    assert_close_in(got, want, dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("bounds", [(0.0, None), (-0.5, 0.25), (None, None), (-1.7976931348623157e308, 1.7976931348623157e308)],
                         ids=["relu", "both", "none", "dbl_max"])
def test_conv_with_clamp(dtype, bounds):
    x, w, b = rand(1, 3, 8, 9, seed=1, dtype=dtype), rand(5, 3, 3, 3, seed=2, dtype=dtype), rand(5, seed=3, dtype=dtype)
    x[0, 1, 4, 4] = float("nan")
    low, high = bounds
    conv = F.conv2d(x, w, b, padding=1)
    lo = None if low is None or abs(low) > 3.5e38 else low
    hi = None if high is None or abs(high) > 3.5e38 else high
    want = conv if lo is None and hi is None else torch.clamp(conv, lo, hi)
    got = run_graph("et_vk.conv_with_clamp.default",
                    [x, Const(w), Const(b), [1, 1], [1, 1], [1, 1], False, [0, 0], 1, low, high],
                    (tuple(want.shape), dtype))
    assert torch.equal(got.isnan(), want.isnan()) and got.isnan().any()
    ok = ~want.isnan()
    assert_close_in(got[ok], want[ok], dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("kwargs", MAXPOOLS[1:3], ids=["ceil", "dilation"])
def test_max_pool2d_dtypes_and_nan(dtype, kwargs):
    x = rand(2, 3, 9, 11, seed=1, dtype=dtype)
    x[0, 0, 3, 3] = float("nan")                  # inside windows of both cases
    x[1, 2, 8, 10] = float("nan")                 # a corner: the last ceil-mode window
    want = F.max_pool2d(x, **kwargs)
    k, s, p, d = kwargs["kernel_size"], kwargs["stride"], kwargs["padding"], kwargs.get("dilation", 1)
    got = run_graph("aten.max_pool2d.default", [x, [k, k], [s, s], [p, p], [d, d], kwargs.get("ceil_mode", False)],
                    (tuple(want.shape), dtype))
    assert torch.equal(got.isnan(), want.isnan()) and got.isnan().any()
    assert torch.equal(got[~want.isnan()], want[~want.isnan()])   # max is exact in any dtype


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("kwargs", AVGPOOLS[1:4] + [dict(kernel_size=2, stride=1, padding=0, divisor_override=-3)],
                         ids=["ceil", "exclude_pad", "divisor", "negative_divisor"])
def test_avg_pool2d_dtypes(dtype, kwargs):
    x = rand(2, 3, 9, 11, seed=2, dtype=dtype)
    want = F.avg_pool2d(x, **kwargs)
    k, s, p = kwargs["kernel_size"], kwargs["stride"], kwargs["padding"]
    got = run_graph("aten.avg_pool2d.default",
                    [x, [k, k], [s, s], [p, p], kwargs.get("ceil_mode", False), kwargs.get("count_include_pad", True),
                     kwargs.get("divisor_override")], (tuple(want.shape), dtype))
    assert_close_in(got, want, dtype, terms=k * k)


def test_avg_pool2d_zero_divisor_is_refused():
    from vkx.loader.errors import BadProgramError
    with pytest.raises(BadProgramError, match="divisor_override"):
        run_graph("aten.avg_pool2d.default", [rand(1, 2, 4, 4), [2, 2], [2, 2], [0, 0], False, True, 0], (1, 2, 2, 2))


# --------------------------------------------------------------------------- max pool with indices

INDEXED_POOLS = [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, stride=2, padding=0, ceil_mode=True),
         dict(kernel_size=3, stride=1, padding=1, dilation=2)]


@pytest.mark.parametrize("kwargs", INDEXED_POOLS, ids=["resnet", "ceil", "dilated"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_max_pool2d_with_indices(kwargs, dtype):
    x = rand(2, 3, 9, 11, seed=9, dtype=dtype)
    x[0, 1, 4, 4] = float("nan")
    x[1, 0, :3, :3] = float("-inf")  # a window of -inf only: torch's index is its first element
    want, want_idx = F.max_pool2d(x, return_indices=True, **kwargs)
    k, s, p, d = kwargs["kernel_size"], kwargs["stride"], kwargs["padding"], kwargs.get("dilation", 1)
    got, idx = run_graph("aten.max_pool2d_with_indices.default",
                         [x, [k, k], [s, s], [p, p], [d, d], kwargs.get("ceil_mode", False)],
                         [(tuple(want.shape), dtype), (tuple(want.shape), torch.int32)])
    assert torch.equal(got.isnan(), want.isnan()) and got.isnan().any()
    assert torch.equal(got.nan_to_num(), want.nan_to_num())  # max is exact in any dtype
    assert_equal(idx.long(), want_idx)


def test_max_pool2d_with_indices_defaults():
    """ExecuTorch may leave out stride ([]: the kernel), padding, dilation and ceil_mode."""
    x = rand(1, 2, 8, 8, seed=10)
    want, want_idx = F.max_pool2d(x, 2, return_indices=True)
    got, idx = run_graph("aten.max_pool2d_with_indices.default", [x, [2, 2]],
                         [(tuple(want.shape), torch.float32), (tuple(want.shape), torch.int32)])
    assert_equal(got, want)
    assert_equal(idx.long(), want_idx)


def test_exported_conv1d():
    module = Fn(lambda m, x: F.conv1d(x, m.w, m.b, stride=2, padding=1), w=rand(6, 4, 3, seed=9), b=rand(6, seed=10))
    x = rand(1, 4, 16, seed=8)
    assert_close(run_vkx(module, [x]), module(x))
