"""What the op declarations share: shape helpers for rules, and the shorthands declarations are written in."""
from __future__ import annotations

from typing import Any, Sequence

from . import dtypes
from .contract import Arg, Call, Kind

T, TS, I, N, B, L, S = Kind.TENSOR, Kind.TENSORS, Kind.INT, Kind.NUMBER, Kind.BOOL, Kind.INTS, Kind.STRING
ALL_TYPES = dtypes.ON_DEVICE


def optional(name: str, kind: Kind, default: Any = ..., saturates: bool = False) -> Arg:
    return Arg(name, kind, optional=True, default=default, saturates=saturates)


TENSOR_OPTIONS = (optional("dtype", I, None), optional("layout", I, None), optional("device", I, None),
                  optional("pin_memory", B, None))
"""The factory options of ATen's schemas that make a tensor (factories, *_like, dtype copies): the
output tensor's dtype says everything (ExecuTorch writes them Null)."""


def floats(call: Call, *names: str) -> None:
    """The named tensor arguments (None: left out) and every output are floating."""
    tensors = [call[n] for n in names if call[n] is not None] + list(call.outputs)
    bad = [str(t.dtype) for t in tensors if not t.dtype.is_float]
    call.require(not bad, f"{', '.join(bad)} tensors: the op computes on floats")


def broadcast(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """numpy's broadcast of `shapes`, or None when they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(rank):
        sizes = {s[len(s) - rank + d] for s in shapes if len(s) - rank + d >= 0} - {1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def dim_index(call: Call, dim: int, rank: int, what: str = "dim") -> int:
    n = max(rank, 1)
    call.require(-n <= dim < n, f"{what} {dim} out of range for {rank} dims")
    return dim % n


def same_shape(call: Call, name: str = "self") -> None:
    call.expect_shape("the output", call.out.shape, call.tensor(name).shape)


def matmul_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """torch.matmul's result shape, or None when the operands do not multiply."""
    if not a or not b:
        return None
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        return None
    batch = broadcast(a2[:-2], b2[:-2])
    if batch is None:
        return None
    out = (*batch, *(a2[-2:-1] if len(a) > 1 else ()), *(b2[-1:] if len(b) > 1 else ()))
    return out


def window_size(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil: bool) -> int:
    """Windows along one dim, as torch counts them (rounding down, also below zero: a ceil-mode window
    larger than the input is one window over all of it); 0 or less when none fits."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and (out - 1) * stride >= size + pad:  # the last window must start inside the input
        out -= 1
    return out


def pool_shape(call: Call) -> tuple[int, ...]:
    """The output shape of a 2-D pooling call (max_pool2d's and avg_pool2d's arguments)."""
    x = call.tensor("self")
    call.require(len(x.shape) in (3, 4), f"input {list(x.shape)} must be 3-D or 4-D")
    kernel = int_pairs(call, "kernel_size", 2)
    stride = int_pairs(call, "stride", 2) if call["stride"] else kernel
    padding = int_pairs(call, "padding", 2, positive=False)
    dilation = int_pairs(call, "dilation", 2) if call.decl.has("dilation") else (1, 1)
    call.require(all(p * 2 <= k for p, k in zip(padding, kernel)), "padding over half the kernel")
    sizes = [window_size(x.shape[-2 + d], kernel[d], stride[d], padding[d], dilation[d], call["ceil_mode"])
             for d in range(2)]
    call.require(all(s > 0 for s in sizes), "the window is larger than the padded input")
    if call.decl.has("divisor_override"):
        call.require(call["divisor_override"] != 0, "divisor_override 0")
    return (*x.shape[:-2], *sizes)


def int_pairs(call: Call, name: str, n: int, positive: bool = True) -> tuple[int, ...]:
    v = tuple(call[name])
    if len(v) == 1:
        v = v * n
    call.require(len(v) == n, f"{name} {list(v)} must have {n} entries")
    call.require(all((x > 0) if positive else (x >= 0) for x in v), f"{name} {list(v)} out of range")
    return v


def slice_length(size: int, start: int | None, end: int | None, step: int) -> tuple[int, int]:
    """(start, length) of Python's slice [start:end:step] over `size` elements (step > 0)."""
    start = 0 if start is None else start
    end = size if end is None else end
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, start), size)
    return start, -(-(end - start) // step)
