"""Matrix products: linear, addmm, mm, bmm, matmul, through `gemm()` (vkx.loader.ops.gemm: the
tiled, register-tiled and matrix-vector kernels), and the batch-dim planning attention shares."""
from __future__ import annotations

import itertools
import math
from typing import Optional, Sequence

from vkx.format.contract import Call
from vkx.loader.ops import OpBuilder, TensorArg, UnsupportedOpError, builds
from vkx.loader.ops.shape import broadcast_strides, contiguous_strides

from vkx.loader.ops.gemm import Operand, gemm

# ----------------------------------------------------------------------------------------
# Batch-dim planning shared with attention.

def batch_strides(batch: Sequence[int], out_batch: Sequence[int], inner: int) -> tuple[int, ...]:
    """Element strides of contiguous batch dims `batch`, each batch element `inner`
    elements long, read at `out_batch` indices (right-aligned broadcast)."""
    return tuple(s * inner for s in broadcast_strides(batch, out_batch))


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    n = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(n):
        size = 1
        for s in shapes:
            j = i - (n - len(s))
            if j >= 0 and s[j] != 1:
                if size != 1 and s[j] != size:
                    raise UnsupportedOpError(f"shapes {[tuple(x) for x in shapes]} do not broadcast")
                size = s[j]
        out.append(size)
    return tuple(out)


def batch_plan(shape: Sequence[int], strides: Sequence[Sequence[int]]):
    """Fold batch dims `shape` (with per-operand `strides`) into dispatches.

    Returns (outer, (nb1, nb2), inner): `outer` lists per-dispatch element offsets
    (one tuple per operand), and inner[k] = (sb1, sb2) of operand k.
    """
    dims = [(size, [s[i] for s in strides]) for i, size in enumerate(shape) if size != 1]
    merged: list[tuple[int, list[int]]] = []
    for size, st in dims:
        if merged:
            psize, pst = merged[-1]
            if all(ps == s * size for ps, s in zip(pst, st)):
                merged[-1] = (psize * size, st)
                continue
        merged.append((size, st))
    nops = len(strides)
    while len(merged) < 2:
        merged.insert(0, (1, [0] * nops))
    head, tail = merged[:-2], merged[-2:]
    outer = []
    for idx in itertools.product(*[range(size) for size, _ in head]):
        outer.append(tuple(sum(i * st[k] for i, (_, st) in zip(idx, head)) for k in range(nops)))
    (nb1, st1), (nb2, st2) = tail
    inner = [(st1[k], st2[k]) for k in range(nops)]
    return outer, (nb1, nb2), inner


def batched_matmul(builder: OpBuilder, a: TensorArg, a_shape: Sequence[int], b: TensorArg,
                   b_shape: Sequence[int], out: TensorArg, alpha: float = 1.0) -> None:
    """out = alpha * (a @ b) for contiguous a [..., M, K], b [..., K, N] with broadcast
    batch dims; `out` is contiguous with the broadcast batch shape + [M, N]."""
    M, K = a_shape[-2:]
    K2, N = b_shape[-2:]
    if K != K2:
        raise UnsupportedOpError(f"matmul inner dims differ: {tuple(a_shape)} @ {tuple(b_shape)}")
    batch_a, batch_b = tuple(a_shape[:-2]), tuple(b_shape[:-2])
    if math.prod(batch_b) == 1:
        # B is shared by every batch: fold A's batch dims into its rows.
        M = math.prod(a_shape[:-1])
        batch_a = batch_b = ()
    out_batch = broadcast_shapes(batch_a, batch_b)
    if K == 0:
        _fill_zero(builder, out)
        return
    sa = batch_strides(batch_a, out_batch, M * K)
    sb = batch_strides(batch_b, out_batch, K * N)
    sc = contiguous_strides(tuple(out_batch) + (M * N,))[:-1]
    outer, (nb1, nb2), inner = batch_plan(out_batch, [sa, sb, sc])
    for offs in outer:
        gemm(builder,
             Operand(a, offs[0], K, 1, *inner[0]),
             Operand(b, offs[1], N, 1, *inner[1]),
             Operand(out, offs[2], N, 1, *inner[2]),
             M, N, K, nb1, nb2, alpha=alpha)


def _fill_zero(builder: OpBuilder, out: TensorArg, N: int = 1, bias: Optional[Operand] = None,
               beta: float = 1.0) -> None:
    """K == 0: the product is all zeros (plus beta * bias). A K = 0 gemm reads neither
    operand, so `out` stands in for both bindings."""
    n = out.numel
    if n == 0:
        return
    dummy = Operand(out, 0, 0, 0)
    gemm(builder, dummy, dummy, Operand(out, 0, N, 1), n // N, N, 0, bias=bias, beta=beta)


# ----------------------------------------------------------------------------------------
# Ops.

@builds("aten.linear.default")
def linear(builder: OpBuilder, call: Call) -> None:
    x, w, out = call.tensor("input"), call.tensor("weight"), call.out
    N, K = w.shape
    bias = None
    if call["bias"] is not None:
        bt = call.tensor("bias")
        bias = Operand(bt, 0, 0, 1 if bt.numel > 1 else 0)
    if K == 0:
        _fill_zero(builder, out, N, bias)
        return
    gemm(builder, Operand(x, 0, K, 1), Operand(w, 0, 1, K), Operand(out, 0, N, 1),
         x.numel // K, N, K, bias=bias)


@builds("aten.addmm.default")
def addmm(builder: OpBuilder, call: Call) -> None:
    s, m1, m2, out = call.tensor("self"), call.tensor("mat1"), call.tensor("mat2"), call.out
    beta, alpha = float(call["beta"]), float(call["alpha"])
    M, K = m1.shape
    N = m2.shape[1]
    shape = (1,) * (2 - len(s.shape)) + tuple(s.shape)  # the rule checked it broadcasts to (M, N)
    bias = None
    if beta != 0.0:
        bias = Operand(s, 0, shape[1] if shape[0] != 1 else 0, 1 if shape[1] != 1 else 0)
    if K == 0:
        _fill_zero(builder, out, N, bias, beta)
        return
    gemm(builder, Operand(m1, 0, K, 1), Operand(m2, 0, N, 1), Operand(out, 0, N, 1),
         M, N, K, bias=bias, alpha=alpha, beta=beta)


@builds("aten.mm.default", "aten.bmm.default")
def mm(builder: OpBuilder, call: Call) -> None:
    a, b = call.tensor("self"), call.tensor("mat2")
    batched_matmul(builder, a, a.shape, b, b.shape, call.out)


@builds("aten.matmul.default")
def matmul(builder: OpBuilder, call: Call) -> None:
    a, b = call.tensor("self"), call.tensor("other")
    a_shape = (1,) + tuple(a.shape) if len(a.shape) == 1 else tuple(a.shape)
    b_shape = tuple(b.shape) + (1,) if len(b.shape) == 1 else tuple(b.shape)
    batched_matmul(builder, a, a_shape, b, b_shape, call.out)
