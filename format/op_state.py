"""The op contract's state ops: persistent tensors that live across calls and the updates
that write into them in place. docs/format.md, "State".

`vkx.state.default` declares a state tensor (its name, and its initial value: a constant, or
Null for zeros) at the head of a method's chain; every method of a program that names the same
state shares one device tensor. The update ops write into their `self` (a state tensor, or the
output of an earlier update of it) and their output is that very tensor, so reads after the
update see the new content. State tensors and update outputs are never planned into shared
memory objects. Integer comparisons (a mask over a cache built from the positions) are here too.
"""
from __future__ import annotations

from . import dtypes
from .contract import Arg, Call, OpDecl
from .op_rules import ALL_TYPES, I, S, T, dim_index, optional, same_shape

DECLS: list[OpDecl] = []
"""This module's declarations, in order (`vkx.format.opset` assembles the table)."""
declare = DECLS.append


STATE = "vkx.state.default"
INDEX_COPY = "vkx.index_copy.default"
COPY = "vkx.copy.default"
UPDATES = frozenset({INDEX_COPY, COPY})
"""Ops that write into their `self` in place; their output is `self`'s tensor."""
STATE_OPS = UPDATES | {STATE}
"""Ops whose output is persistent state, not an activation."""


def _state(call: Call) -> None:
    call.require(bool(call["name"]), "a state needs a non-empty name")
    initial = call["initial"]
    if initial is not None:
        # validate's Specs know constness; the loader's state builder checks it on its own tensors
        call.require(getattr(initial, "is_constant", True), "the initial value must be a constant")
        call.require(initial.dtype is call.out.dtype, f"initial value of {initial.dtype}, the state is {call.out.dtype}")
        call.expect_shape("the initial value", initial.shape, call.out.shape)


def _index_copy(call: Call) -> None:
    target, source, index = call.tensor("self"), call.tensor("source"), call.tensor("index")
    rank = len(target.shape)
    call.require(rank >= 1, "self must have at least one dim")
    dim = dim_index(call, call["dim"], rank)
    call.require(index.dtype is dtypes.INT32 and len(index.shape) == 1,
                 f"index must be a 1-D int32 tensor, not {index.dtype} {list(index.shape)}")
    want = target.shape[:dim] + (index.shape[0],) + target.shape[dim + 1:]
    call.expect_shape("source", source.shape, want)
    call.require(source.dtype is target.dtype, f"source of {source.dtype} into self of {target.dtype}")
    _in_place(call)


def _copy(call: Call) -> None:
    target, src = call.tensor("self"), call.tensor("src")
    call.expect_shape("src", src.shape, target.shape)
    _in_place(call)


def _in_place(call: Call) -> None:
    same_shape(call)
    call.require(call.out.dtype is call.tensor("self").dtype, "the output has another dtype than self")


declare(OpDecl(STATE, (Arg("name", S), optional("initial", T, None)), dtypes=ALL_TYPES, rule=_state))
declare(OpDecl(INDEX_COPY, (Arg("self", T), Arg("dim", I), Arg("index", T), Arg("source", T)),
               dtypes=ALL_TYPES, rule=_index_copy))
declare(OpDecl(COPY, (Arg("self", T), Arg("src", T)), dtypes=ALL_TYPES, rule=_copy))
