"""A pinned, compact copy of ExecuTorch 1.5.1's Vulkan op cases (backends/vulkan/test/op_tests/cases.py):
for each op its suite tests, a few of its published shapes and arguments (made smaller where they
were large), in the dtypes the suite runs it in. Written out here as data; each case becomes a
one-op module (`Case.module`) that tests/ops/test_et_op_cases.py exports with vkx and reads back
from ExecuTorch's own export (tests/data/et_op_cases/, made by make_et_op_cases.py).

An input is `In(shape, kind)`: "float" (normal), "pos" (0.5 to 2.5: sqrt, log, divisors), "unit"
(-1.1 to 1.1: sample grids), "steps" (integers -2..2 as floats: ties for comparisons), "bool", or "int:N" (int64 in 0..N-1: indices).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

A = torch.ops.aten
FP32, FP16 = "fp32", "fp16"
DTYPES = {FP32: torch.float32, FP16: torch.float16}


@dataclass(frozen=True)
class In:
    shape: tuple[int, ...]
    kind: str = "float"


class Fn(nn.Module):
    """A module around `fn(self, *inputs)`; keyword tensors become its parameters or buffers (a floating
    one a constant): `Fn(lambda m, x: x * m.w, w=torch.randn(3))` exports `x * w` (tests/ops use it too)."""

    def __init__(self, fn: Callable, **tensors: torch.Tensor):
        super().__init__()
        self._fn = fn
        for name, t in tensors.items():
            if t.is_floating_point():
                self.register_parameter(name, nn.Parameter(t, requires_grad=False))
            else:
                self.register_buffer(name, t)

    def forward(self, *inputs):
        return self._fn(self, *inputs)


@dataclass(frozen=True)
class Case:
    op: str
    """The op as ExecuTorch's suite names it."""
    name: str
    """Unique: the case's file stem is `<name>-<dtype>`."""
    make: Callable[[], nn.Module]
    inputs: tuple[In, ...]
    dtypes: tuple[str, ...] = (FP32, FP16)
    terms: int = 1
    """How many rounded terms an output element sums (the fp16 tolerance grows with it)."""

    def module(self, dtype: str) -> nn.Module:
        torch.manual_seed(len(self.name))
        return self.make().eval().to(DTYPES[dtype])

    def example(self, dtype: str) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(sum(map(ord, self.name)))
        out = []
        for spec in self.inputs:
            if spec.kind == "bool":
                out.append(torch.rand(spec.shape, generator=g) > 0.5)
            elif spec.kind.startswith("int:"):
                out.append(torch.randint(0, int(spec.kind[4:]), spec.shape, generator=g))
            else:
                x = torch.randn(spec.shape, generator=g)
                if spec.kind == "steps":
                    x = torch.randint(-2, 3, spec.shape, generator=g).float()
                elif spec.kind == "pos":
                    x = 0.5 + 2 * torch.rand(spec.shape, generator=g)
                elif spec.kind == "unit":
                    x = 2.2 * torch.rand(spec.shape, generator=g) - 1.1
                out.append(x.to(DTYPES[dtype]))
        return tuple(out)


def fn(f: Callable, **tensors: Callable[[], torch.Tensor]) -> Callable[[], nn.Module]:
    return lambda: Fn(f, **{k: v() for k, v in tensors.items()})


CASES: list[Case] = []


def case(op: str, name: str, make: Callable[[], nn.Module], *inputs: In, **kw: Any) -> None:
    CASES.append(Case(op, name, make, inputs, **kw))


X = In((3, 5))
X3 = In((2, 3, 4))
X4 = In((1, 4, 6, 6))
POS = In((3, 5), "pos")

# --- binary and comparisons
for op, f in (("add", torch.add), ("sub", torch.sub), ("mul", torch.mul)):
    case(f"aten.{op}.Tensor", f"{op}", fn(lambda m, x, y, f=f: f(x, y)), X, X)
    case(f"aten.{op}.Tensor", f"{op}_broadcast", fn(lambda m, x, y, f=f: f(x, y)), X3, In((4,)))
case("aten.add.Tensor", "add_alpha", fn(lambda m, x, y: torch.add(x, y, alpha=0.5)), X, X)
case("aten.div.Tensor", "div", fn(lambda m, x, y: x / y), X, POS)
case("aten.div.Tensor", "div_broadcast", fn(lambda m, x, y: x / y), X3, In((3, 1), "pos"))
for op in ("eq", "gt", "lt", "ge", "le"):
    case(f"aten.{op}.Tensor", f"{op}_tensor", fn(lambda m, x, y, op=op: getattr(torch, op)(x, y)),
         In((3, 5), "steps"), In((1, 5), "steps"))
for op, value in (("eq", 1.0), ("ne", 0.5), ("lt", 0.25), ("le", -0.5), ("gt", 0.5), ("ge", 1.5)):
    case(f"aten.{op}.Scalar", f"{op}_scalar", fn(lambda m, x, op=op, v=value: getattr(torch, op)(x, v)),
         In((3, 5), "steps"))
case("aten.minimum.default", "minimum", fn(lambda m, x, y: torch.minimum(x, y)), X3, In((3, 4)))
case("aten.pow.Tensor_Scalar", "pow", fn(lambda m, x: x ** 2.5), POS)
case("aten.pow.Tensor_Scalar", "pow_int", fn(lambda m, x: x ** 3), X)
case("aten.where.self", "where", fn(lambda m, c, x, y: torch.where(c, x, y)), In((3, 5), "bool"), X, In((5,)))
case("aten.bitwise_and.Tensor", "bitwise_and", fn(lambda m, x, y: x & y), In((3, 5), "bool"), In((3, 5), "bool"),
     dtypes=(FP32,))
case("aten.bitwise_or.Tensor", "bitwise_or", fn(lambda m, x, y: x | y), In((3, 5), "bool"), In((3, 5), "bool"),
     dtypes=(FP32,))
case("aten.logical_or.default", "logical_or", fn(lambda m, x, y: torch.logical_or(x, y)), In((3, 5), "bool"),
     In((3, 5), "bool"), dtypes=(FP32,))

# --- matrix products
case("aten.mm.default", "mm", fn(lambda m, x, y: x @ y), In((4, 6)), In((6, 5)), terms=6)
case("aten.bmm.default", "bmm", fn(lambda m, x, y: torch.bmm(x, y)), In((2, 4, 6)), In((2, 6, 5)), terms=6)
case("aten.addmm.default", "addmm", fn(lambda m, b, x, y: torch.addmm(b, x, y, beta=0.5, alpha=2.0)),
     In((5,)), In((4, 6)), In((6, 5)), terms=6)
case("aten.linear.default", "linear", lambda: nn.Linear(8, 6), In((3, 8)), terms=8)
case("aten.linear.default", "linear_3d", lambda: nn.Linear(8, 6, bias=False), In((2, 3, 8)), terms=8)
case("aten._weight_int8pack_mm.default", "weight_int8pack_mm",
     fn(lambda m, x: A._weight_int8pack_mm(x, m.w, m.scales),
        w=lambda: torch.randint(-100, 100, (16, 32), dtype=torch.int8), scales=lambda: 0.001 + 0.01 * torch.rand(16)),
     In((3, 32)), dtypes=(FP32,), terms=32)

# --- pooling, convolution, normalisation
case("aten.avg_pool2d.default", "avg_pool2d", fn(lambda m, x: F.avg_pool2d(x, 3, 2, 1)), X4, terms=9)
case("aten.max_pool2d.default", "max_pool2d", fn(lambda m, x: F.max_pool2d(x, 3, 2, 1)), X4)
case("aten.max_pool2d_with_indices.default", "max_pool2d_with_indices",
     fn(lambda m, x: F.max_pool2d(x, 2, 2, return_indices=True)), X4)
case("aten.convolution.default", "conv2d", lambda: nn.Conv2d(4, 6, 3, padding=1), X4, terms=36)
case("aten.convolution.default", "conv2d_depthwise", lambda: nn.Conv2d(4, 4, 3, stride=2, groups=4), X4, terms=9)
case("aten.convolution.default", "conv1d", lambda: nn.Conv1d(4, 6, 3), In((1, 4, 9)), terms=12)
case("aten.convolution.default", "conv_transpose2d", lambda: nn.ConvTranspose2d(4, 2, 2, stride=2), X4, terms=16)
case("aten.native_layer_norm.default", "layer_norm", lambda: nn.LayerNorm(8), In((2, 3, 8)), terms=8)
case("aten.native_group_norm.default", "group_norm", lambda: nn.GroupNorm(2, 8, eps=1e-3), In((1, 8, 4, 4)),
     terms=64)
case("aten.native_group_norm.default", "group_norm_3", lambda: nn.GroupNorm(3, 6, eps=1e-3), In((2, 6, 1, 8)),
     terms=16)


def _batch_norm() -> nn.Module:
    bn = nn.BatchNorm2d(4)
    bn.running_mean.normal_()
    bn.running_var.uniform_(0.5, 2.0)
    bn.weight.data.normal_()
    bn.bias.data.normal_()
    return bn


case("aten._native_batch_norm_legit_no_training.default", "batch_norm", _batch_norm, X4)

# --- resampling
case("aten.upsample_nearest2d.vec", "upsample_nearest_scale",
     fn(lambda m, x: F.interpolate(x, scale_factor=(2, 4), mode="nearest")), In((1, 2, 2, 3)))
case("aten.upsample_nearest2d.vec", "upsample_nearest_size",
     fn(lambda m, x: F.interpolate(x, size=(3, 5), mode="nearest")), In((2, 2, 2, 2)))
for corners in (False, True):
    case("aten.upsample_bilinear2d.vec", f"upsample_bilinear_scale_{str(corners).lower()}",
         fn(lambda m, x, c=corners: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=c)),
         In((1, 2, 3, 3)), terms=4)
    case("aten.upsample_bilinear2d.vec", f"upsample_bilinear_size_{str(corners).lower()}",
         fn(lambda m, x, c=corners: F.interpolate(x, size=(3, 5), mode="bilinear", align_corners=c)),
         In((1, 2, 2, 2)), terms=4)
case("aten.pixel_shuffle.default", "pixel_shuffle", fn(lambda m, x: F.pixel_shuffle(x, 2)), In((2, 4, 3, 5)))
case("aten.pixel_shuffle.default", "pixel_shuffle_3", fn(lambda m, x: F.pixel_shuffle(x, 3)), In((1, 9, 3, 3)))
case("aten.grid_sampler_2d.default", "grid_sampler_2d",
     fn(lambda m, x, g: F.grid_sample(x, g, mode="bilinear", padding_mode="border", align_corners=True)),
     In((1, 4, 8, 8)), In((1, 5, 6, 2), "unit"), terms=4)

# --- factories
case("aten.full.default", "full", fn(lambda m, x: x + torch.full((3, 5), 1.5, dtype=x.dtype)), X)
case("aten.full_like.default", "full_like", fn(lambda m, x: torch.full_like(x, 2.5)), X)
case("aten.scalar_tensor.default", "scalar_tensor", fn(lambda m, x: x * torch.scalar_tensor(0.75, dtype=x.dtype)), X)
case("aten.zeros_like.default", "zeros_like", fn(lambda m, x: torch.zeros_like(x)), X)
case("aten.ones_like.default", "ones_like", fn(lambda m, x: torch.ones_like(x)), X)
case("aten.zeros.default", "zeros", fn(lambda m, x: x + torch.zeros((3, 5), dtype=x.dtype)), X)
case("aten.ones.default", "ones", fn(lambda m, x: x - torch.ones((3, 5), dtype=x.dtype)), X)
case("aten.arange.start_step", "arange", fn(lambda m, x: x * torch.arange(1, 11, 2, dtype=x.dtype)), In((3, 5)))

# --- shapes and copies
case("aten.select_copy.int", "select", fn(lambda m, x: x.select(1, 2)), X3)
case("aten.select_copy.int", "select_last", fn(lambda m, x: x[:, :, -1]), X3)
case("aten.permute_copy.default", "permute", fn(lambda m, x: x.permute(2, 0, 1)), X3)
case("aten.permute_copy.default", "permute_4d", fn(lambda m, x: x.permute(0, 3, 1, 2)), X4)
case("aten.view_copy.default", "view", fn(lambda m, x: x.view(4, -1)), X3)
case("aten.slice_copy.Tensor", "slice", fn(lambda m, x: x[:, 1:4]), X)
case("aten.slice_copy.Tensor", "slice_step", fn(lambda m, x: x[:, :, 1::2]), X3)
case("aten.index_select.default", "index_select",
     fn(lambda m, x: x.index_select(1, m.index), index=lambda: torch.tensor([3, 1, 5, 5])), In((3, 9, 4)),
     dtypes=(FP32,))
case("aten.index_select.default", "index_select_0",
     fn(lambda m, x: x.index_select(0, m.index), index=lambda: torch.tensor([2, 0])), In((3, 9, 4)), dtypes=(FP32,))
case("aten.embedding.default", "embedding",
     fn(lambda m, i: F.embedding(i, m.weight), weight=lambda: torch.randn(10, 9)), In((2, 3), "int:10"))
case("aten.gather.default", "gather", fn(lambda m, x, i: torch.gather(x, 1, i)), In((3, 5)), In((3, 4), "int:5"))
case("aten.unsqueeze_copy.default", "unsqueeze", fn(lambda m, x: x.unsqueeze(1)), X)
case("aten.squeeze_copy.dims", "squeeze_dims", fn(lambda m, x: x.squeeze((0, 2))), In((1, 3, 1, 5)))
case("aten.clone.default", "clone", fn(lambda m, x: (x * 2).clone()), X)
case("aten.expand_copy.default", "expand", fn(lambda m, x: x.expand(2, 3, 4)), In((3, 1)))
case("aten.repeat.default", "repeat", fn(lambda m, x: x.repeat(2, 1, 3)), In((3, 4)))
case("aten.repeat.default", "repeat_same_rank", fn(lambda m, x: x.repeat(1, 2, 2)), X3)
case("aten.repeat_interleave.self_int", "repeat_interleave", fn(lambda m, x: x.repeat_interleave(2, dim=1)), X3)
case("aten.cat.default", "cat", fn(lambda m, x, y: torch.cat([x, y], 1)), X3, In((2, 2, 4)))
case("aten.split_with_sizes_copy.default", "split_with_sizes", fn(lambda m, x: torch.split(x, [1, 3], 2)), X3)
case("aten.flip.default", "flip", fn(lambda m, x: x.flip(1)), X3)
case("aten.constant_pad_nd.default", "constant_pad_nd", fn(lambda m, x: F.pad(x, (1, 2, 0, 1), value=0.5)), X3)
case("aten.unfold_copy.default", "unfold", fn(lambda m, x: x.unfold(-1, 5, 2)), In((3, 11)))
case("aten.unfold_copy.default", "unfold_dim1", fn(lambda m, x: x.unfold(1, 3, 2)), In((3, 7, 11)))
case("aten.index.Tensor", "index", fn(lambda m, x, i: x[i]), In((6, 4)), In((3,), "int:6"))

# --- reductions
for op in ("_softmax", "_log_softmax"):
    f = F.softmax if op == "_softmax" else F.log_softmax
    case(f"aten.{op}.default", f"{op[1:]}", fn(lambda m, x, f=f: f(x, -1)), X3, terms=4)
    case(f"aten.{op}.default", f"{op[1:]}_dim0", fn(lambda m, x, f=f: f(x, 0)), X3, terms=2)
for op in ("amax", "amin"):
    case(f"aten.{op}.default", op, fn(lambda m, x, op=op: getattr(torch, op)(x, dim=-1)), X3)
    case(f"aten.{op}.default", f"{op}_keepdim", fn(lambda m, x, op=op: getattr(torch, op)(x, dim=1, keepdim=True)), X3)
case("aten.sum.dim_IntList", "sum", fn(lambda m, x: x.sum(-1)), X3, terms=4)
case("aten.sum.dim_IntList", "sum_keepdim", fn(lambda m, x: x.sum(0, keepdim=True)), X3, terms=2)
case("aten.mean.dim", "mean", fn(lambda m, x: x.mean(1)), X3, terms=3)
for op in ("argmax", "argmin"):
    case(f"aten.{op}.default", op, fn(lambda m, x, op=op: getattr(torch, op)(x, dim=-1)), X3, dtypes=(FP32,))
    case(f"aten.{op}.default", f"{op}_dim0", fn(lambda m, x, op=op: getattr(torch, op)(x, dim=0)), X3,
         dtypes=(FP32,))
case("aten.var.dim", "var", fn(lambda m, x: x.var(-1)), X3, terms=4)
case("aten.var.dim", "var_biased", fn(lambda m, x: x.var(1, unbiased=False, keepdim=True)), X3, terms=3)

# --- unary
UNARY = {
    "sqrt": (torch.sqrt, "pos"), "rsqrt": (torch.rsqrt, "pos"), "exp": (torch.exp, "float"),
    "hardshrink": (lambda x: F.hardshrink(x, 0.5), "float"), "sin": (torch.sin, "float"),
    "neg": (torch.neg, "float"), "cos": (torch.cos, "float"), "hardswish": (F.hardswish, "float"),
    "hardsigmoid": (F.hardsigmoid, "float"), "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), "float"),
    "log10": (torch.log10, "pos"), "round": (lambda x: torch.round(x * 4), "float"),
    "tan": (lambda x: torch.tan(x * 0.5), "float"), "relu6": (F.relu6, "float"),
}
for op, (f, kind) in UNARY.items():
    case(f"aten.{op}.default", op, fn(lambda m, x, f=f: f(x)), In((3, 5), kind))
case("aten.gelu.default", "gelu", fn(lambda m, x: F.gelu(x)), X)
case("aten.gelu.default", "gelu_tanh", fn(lambda m, x: F.gelu(x, approximate="tanh")), X)


def runs() -> dict[str, tuple[Case, str]]:
    """Each (case, dtype) by its id `<name>-<dtype>`, the stem of its ExecuTorch file."""
    return {f"{c.name}-{d}": (c, d) for c in CASES for d in c.dtypes}
