"""The op contract's matrix products: linear, addmm, mm, bmm and matmul, each with its rule beside
it (the quantized linears are `op_quant`'s).

Arguments come in ATen schema order, the output last (vkx.format.contract). docs/architecture.md
lists the same ops in prose.
"""
from __future__ import annotations

from .contract import Arg, Call, OpDecl
from .op_rules import N, T, broadcast, floats, matmul_shape, optional

DECLS: list[OpDecl] = []
"""This module's declarations, in order (`vkx.format.opset` assembles the table)."""
declare = DECLS.append


def _linear(call: Call) -> None:
    floats(call, "input", "weight", "bias")
    x, w = call.tensor("input"), call.tensor("weight")
    call.require(len(w.shape) == 2 and len(x.shape) >= 1, f"weight {list(w.shape)} must be 2-D")
    n, k = w.shape
    call.require(x.shape[-1] == k, f"input {list(x.shape)} and weight {list(w.shape)} disagree on K")
    if call["bias"] is not None:
        call.expect_shape("bias", call["bias"].shape, (n,))
    call.expect_shape("the output", call.out.shape, (*x.shape[:-1], n))


def _mm(call: Call) -> None:
    floats(call, "self", "mat2")
    a, b = call.tensor("self"), call.tensor("mat2")
    call.require(len(a.shape) == 2 and len(b.shape) == 2 and a.shape[1] == b.shape[0],
                 f"mm of {list(a.shape)} by {list(b.shape)}")
    call.expect_shape("the output", call.out.shape, (a.shape[0], b.shape[1]))


def _addmm(call: Call) -> None:
    floats(call, "self", "mat1", "mat2")
    a, b, c = call.tensor("mat1"), call.tensor("mat2"), call.tensor("self")
    call.require(len(a.shape) == 2 and len(b.shape) == 2 and a.shape[1] == b.shape[0],
                 f"addmm of {list(a.shape)} by {list(b.shape)}")
    want = (a.shape[0], b.shape[1])
    call.require(broadcast(c.shape, want) == want, f"self {list(c.shape)} does not broadcast to {list(want)}")
    call.expect_shape("the output", call.out.shape, want)


def _bmm(call: Call) -> None:
    floats(call, "self", "mat2")
    a, b = call.tensor("self"), call.tensor("mat2")
    call.require(len(a.shape) == 3 and len(b.shape) == 3 and a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1],
                 f"bmm of {list(a.shape)} by {list(b.shape)}")
    call.expect_shape("the output", call.out.shape, (a.shape[0], a.shape[1], b.shape[2]))


def _matmul(call: Call) -> None:
    floats(call, "self", "other")
    a, b = call.tensor("self"), call.tensor("other")
    want = matmul_shape(a.shape, b.shape)
    call.require(want is not None, f"matmul of {list(a.shape)} by {list(b.shape)}")
    call.expect_shape("the output", call.out.shape, want)


declare(OpDecl("aten.linear.default", (Arg("input", T), Arg("weight", T), optional("bias", T, None)), rule=_linear))
declare(OpDecl("aten.addmm.default", (Arg("self", T), Arg("mat1", T), Arg("mat2", T),
                                      Arg("beta", N, default=1), Arg("alpha", N, default=1)), rule=_addmm))
declare(OpDecl("aten.mm.default", (Arg("self", T), Arg("mat2", T)), rule=_mm))
declare(OpDecl("aten.bmm.default", (Arg("self", T), Arg("mat2", T)), rule=_bmm))
declare(OpDecl("aten.matmul.default", (Arg("self", T), Arg("other", T)), rule=_matmul))
