"""The issue's cases, each once refused at load (VariantNotBuiltError: a shape the suite never asked for),
now run on the device and compared with torch:

(a) a plain image classifier (3x3 and grouped convs, batch norm, max pool, a 32x32 input) in fp32, fp16
    and bf16; (b) a 1x1 conv on a 3x5 and on an 8x8 map; (c) amin, amax, argmin and argmax along rows of
    63 to 65537 elements and along a dim that is not the last; (d) a torchao 8da4w-quantized (int8
    dynamic activations, int4 weights in groups of 32) Llama-style block; (e) a linear whose operands have
    different float dtypes (built through the file format: torch.export itself refuses mixed dtypes).
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.ops.conftest import Const, Fn, assert_close, assert_close_in, assert_norm_close, rand, run_graph, run_vkx
from .conftest import calibrated, check_model

pytestmark = pytest.mark.vulkan


# --------------------------------------------------------------------------- (a) a plain classifier

class Classifier(nn.Module):
    """3x3 convs, a grouped 3x3 conv (4 groups) and a depthwise one, batch norm, ReLU, two max pools,
    global average pooling, a linear head."""

    def __init__(self):
        super().__init__()

        def conv_bn(cin, cout, groups=1, stride=1):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, groups=groups, bias=False), nn.BatchNorm2d(cout),
                                 nn.ReLU())

        self.features = nn.Sequential(conv_bn(3, 16), nn.MaxPool2d(2),                # 16x16
                                      conv_bn(16, 32, groups=4), conv_bn(32, 32, groups=32),
                                      nn.MaxPool2d(3, 2, 1),                            # 8x8
                                      conv_bn(32, 64, groups=2, stride=2), conv_bn(64, 64))  # 4x4
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


def _classifier() -> nn.Module:
    torch.manual_seed(0)
    return calibrated(Classifier(), (1, 3, 32, 32))


@pytest.mark.parametrize("dtype", [None, "fp16", "bf16"])
def test_plain_classifier(dtype):
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    check_model(_classifier(), (x,), dtype=dtype)


# --------------------------------------------------------------------------- (b) 1x1 convs on odd maps

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("size", [(3, 5), (8, 8)])
def test_pointwise_conv(size, dtype):
    torch.manual_seed(0)
    conv = nn.Conv2d(24, 40, 1)
    x = rand(2, 24, *size, seed=1)
    if dtype == torch.float32:
        assert_close(run_vkx(conv, (x,)), conv(x).detach())
        return
    name = {torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    got = run_vkx(conv, (x,), dtype=name)
    with torch.no_grad():  # torch in fp32 on the rounded operands, rounded once (as vkx computes)
        want = F.conv2d(x.to(dtype).float(), conv.weight.to(dtype).float(), conv.bias.to(dtype).float()).to(dtype)
    assert_close_in(got, want, dtype, terms=24)


# --------------------------------------------------------------------------- (c) min / max along long rows

ROWS = [63, 64, 65, 127, 4099, 65537]
REDUCE = {"amin": torch.amin, "amax": torch.amax, "argmin": torch.argmin, "argmax": torch.argmax}


def _reduce(name: str, dim: int, keepdim: bool = False) -> nn.Module:
    fn = REDUCE[name]
    return Fn(lambda m, x: fn(x, dim=dim, keepdim=keepdim))


def _check_reduce(name: str, x: torch.Tensor, dim: int, keepdim: bool = False, dtype: str | None = None) -> None:
    want = REDUCE[name](x, dim=dim, keepdim=keepdim)
    got = torch.as_tensor(run_vkx(_reduce(name, dim, keepdim), (x,), dtype=dtype))
    assert tuple(got.shape) == tuple(want.shape)
    if name.startswith("arg"):
        assert got.dtype in (torch.int64, torch.int32), got.dtype  # vkx's device integers are 32-bit
        got = got.long()
        if dtype is None:  # fp32 random values: no ties, one right index
            assert torch.equal(got, want), f"{(got != want).sum()} of {want.numel()} indices differ"
        # in any dtype: the value at the returned index is the extreme one (ties in 16 bits may pick either)
        xr = x.to({None: torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype])
        extreme = (torch.amin if name == "argmin" else torch.amax)(xr, dim=dim, keepdim=True)
        picked = xr.gather(dim, got if keepdim else got.unsqueeze(dim))
        assert torch.equal(picked, extreme)
    else:
        half = {None: torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        assert got.dtype == half
        assert torch.equal(got, REDUCE[name](x.to(half), dim=dim, keepdim=keepdim))  # exact: one of the inputs


@pytest.mark.parametrize("name", REDUCE)
@pytest.mark.parametrize("n", ROWS)
def test_min_max_along_a_row(name, n):
    x = rand(3 if n < 4096 else 2, n, seed=n)
    _check_reduce(name, x, dim=-1)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("name", REDUCE)
def test_min_max_along_a_row_in_half(name, dtype):
    _check_reduce(name, rand(2, 4099, seed=7), dim=-1, dtype=dtype)


@pytest.mark.parametrize("name", REDUCE)
@pytest.mark.parametrize("dim, keepdim", [(0, False), (1, False), (1, True)])
def test_min_max_along_an_inner_dim(name, dim, keepdim):
    """Along the 65 rows (dim 0) or the 70 columns (dim 1) of a (65, 70, 9) tensor."""
    _check_reduce(name, rand(65, 70, 9, seed=dim), dim=dim, keepdim=keepdim)


# --------------------------------------------------------------------------- (d) torchao 8da4w

def test_torchao_8da4w_llama_block(tmp_path):
    """int8 per-token dynamic activations, int4 weights in groups of 32 (torchao's 8da4w), on the
    Llama-style block of tests/ops/test_quant_torchao.py; the oracle is torch running the quantized model."""
    import vkx
    import vkx.export.torchao_import  # noqa: F401  (registers the torchao patterns)
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup
    from tests.ops.test_quant_torchao import Block

    torch.manual_seed(2)
    model = Block().eval()
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))
    ids = torch.tensor([[5, 17, 0, 95, 33, 8]])
    with torch.no_grad():
        want = model(ids)
    assert float(want.abs().max()) > 0.1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        vkx.export_model(model, (ids,), tmp_path / "block.pte")
    with vkx.load(tmp_path / "block.pte") as program:
        got = program(ids)
    # the same int8 activations and int4 weights: a rounding tie of an activation may flip one int8 step
    assert_norm_close(got, want, rtol=1e-2, atol=1e-4)


# --------------------------------------------------------------------------- (e) a linear of mixed dtypes

MIXED = [  # input, weight, bias, output
    (torch.float32, torch.bfloat16, torch.float16, torch.float32),
    (torch.float16, torch.bfloat16, torch.float32, torch.float16),
    (torch.bfloat16, torch.float32, None, torch.bfloat16),
    (torch.float32, torch.float16, None, torch.bfloat16),
]


@pytest.mark.parametrize("x_dtype, w_dtype, b_dtype, out_dtype", MIXED,
                         ids=lambda d: str(d).removeprefix("torch.") if d is not None else "none")
def test_linear_of_mixed_dtypes(x_dtype, w_dtype, b_dtype, out_dtype):
    """The op contract lets each operand have its own float dtype: the loader computes in fp32 on the
    widened operands and rounds once to the output's dtype."""
    x = rand(7, 96, seed=1, dtype=x_dtype)
    w = rand(50, 96, seed=2, dtype=w_dtype, scale=0.3)
    b = rand(50, seed=3, dtype=b_dtype) if b_dtype is not None else None
    got = run_graph("aten.linear.default", [x, Const(w), Const(b) if b is not None else None], ((7, 50), out_dtype))
    want = F.linear(x.float(), w.float(), b.float() if b is not None else None)
    if out_dtype == torch.float32:
        assert got.dtype == torch.float32
        assert_norm_close(got, want, rtol=1e-5, atol=1e-5)
    else:
        assert_close_in(got, want.to(out_dtype), out_dtype, terms=96)
