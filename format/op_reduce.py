"""The op contract's reductions: softmax and log-softmax, sum and mean over dims, amax, amin, argmax,
argmin and var, and the running sum (cumsum), each with its rule beside it.

Arguments come in ATen schema order, the output last (vkx.format.contract). docs/architecture.md
lists the same ops in prose.
"""
from __future__ import annotations

import math

from . import dtypes
from .contract import Arg, Call, OpDecl
from .op_rules import ALL_TYPES, B, I, L, N, T, dim_index, floats, optional, same_shape

DECLS: list[OpDecl] = []
"""This module's declarations, in order (`vkx.format.opset` assembles the table)."""
declare = DECLS.append


def _softmax(call: Call) -> None:
    floats(call, "self")
    dim_index(call, call["dim"], len(call.tensor("self").shape))
    same_shape(call)


def _reduce(call: Call) -> None:
    floats(call, "self")
    x = call.tensor("self")
    rank = len(x.shape)
    dims = call["dim"]
    dims = range(rank) if dims is None or len(dims) == 0 else [dim_index(call, d, rank) for d in dims]
    dims = set(dims)
    keep = call["keepdim"]
    want = [1 if d in dims else s for d, s in enumerate(x.shape)] if keep else \
        [s for d, s in enumerate(x.shape) if d not in dims]
    call.expect_shape("the output", call.out.shape, want)


def _stats(call: Call) -> None:
    """amax/amin/var over the dims `dim` lists (none: every dim); argmax/argmin over one dim (None:
    the flattened tensor), an int32 index out."""
    src = call.tensor("self")
    call.require(src.dtype.is_float, f"{src.dtype} input: floats only")
    rank = len(src.shape)
    dims = call["dim"]
    if call.decl.arg("dim").kind is I:
        reduced = set(range(rank)) if dims is None else {dim_index(call, dims, rank)}
        call.require(call.out.dtype is dtypes.INT32, f"the output is {call.out.dtype}, an index is int32 on the device")
        call.require(math.prod(src.shape) > 0, "the index of an extreme of no elements")
    else:
        reduced = set(range(rank)) if not dims else {dim_index(call, d, rank) for d in dims}
        call.require(call.out.dtype.is_float, f"the output is {call.out.dtype}, the op gives floats")
    if call["keepdim"]:
        want = [1 if d in reduced else s for d, s in enumerate(src.shape)]
    else:
        want = [s for d, s in enumerate(src.shape) if d not in reduced]
    call.expect_shape("the output", call.out.shape, want)


def _cumsum(call: Call) -> None:
    dim_index(call, call["dim"], len(call.tensor("self").shape))
    same_shape(call)


for _name in ("_softmax", "_log_softmax"):
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T), Arg("dim", I), Arg("half_to_float", B, default=False)),
                   rule=_softmax))
for _name in ("aten.mean.dim", "aten.sum.dim_IntList"):
    declare(OpDecl(_name, (Arg("self", T), optional("dim", L), Arg("keepdim", B, default=False),
                           optional("dtype", I, None)), rule=_reduce))
for _name in ("amax", "amin"):  # the largest / smallest element; NaN wins
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T), Arg("dim", L, default=()), Arg("keepdim", B, default=False)),
                   dtypes=ALL_TYPES, rule=_stats))
for _name in ("argmax", "argmin"):  # the first index of the largest / smallest (NaN counts as both)
    declare(OpDecl(f"aten.{_name}.default", (Arg("self", T), optional("dim", I, None), Arg("keepdim", B, default=False)),
                   dtypes=ALL_TYPES, rule=_stats))
declare(OpDecl("aten.var.correction",  # sum((x - mean)^2) / max(0, N - correction), correction None is 1
               (Arg("self", T), optional("dim", L, None), optional("correction", N, None), Arg("keepdim", B, default=False)),
               dtypes=ALL_TYPES, rule=_stats))
declare(OpDecl("aten.cumsum.default", (Arg("self", T), Arg("dim", I), optional("dtype", I, None)),
               dtypes=ALL_TYPES, rule=_cumsum))
