"""State: `vkx.state` (a persistent tensor, shared by every method that names it) and the
updates that write into it in place (`vkx.index_copy`, `vkx.copy`). docs/format.md, "State".

A state tensor's memory is its own: the load allocates it once per name, fills it with its
initial value (zeros with vkCmdFillBuffer, or a copy of its constant) and `reset()` does so
again. An update's output is the state's own tensor (`alias`), so later ops read the new
content (an update of any other tensor is refused). The cache positions are an input tensor the shader reads: one recorded command
buffer writes wherever each call's positions say.
"""
from __future__ import annotations

import math
import struct
from typing import Iterable

from vkx.format.contract import Call
from vkx.format.op_state import COPY, INDEX_COPY, STATE

from . import (Defines, OpBuilder, UnsupportedOpError, any_dtype_defines, any_dtype_variants, builds, dtype_spec,
               reads_by_words, variants)
from .shape import convert_copy, dispatch_groups


@builds(STATE)
def state(builder: OpBuilder, call: Call) -> None:
    """Register the output as state `name` (initial value: its constant, or zeros)."""
    builder.state(call.out.vid, call["name"], call.vid("initial") if call["initial"] is not None else None)


@builds(INDEX_COPY)
def index_copy(builder: OpBuilder, call: Call) -> None:
    """self[..., index[j], ...] = source[..., j, ...] along `dim`, in place."""
    target, index, source = call.tensor("self"), call.tensor("index"), call.tensor("source")
    builder.update(call.out.vid, target.vid)
    dim = call["dim"] % len(target.shape)
    if source.numel == 0:
        return
    if max(target.nbytes, source.nbytes) > builder.limits.max_storage_buffer_range:
        raise UnsupportedOpError("index_copy of a state larger than one storage binding")
    inner = math.prod(target.shape[dim + 1:])
    push = struct.pack("<IIIi", source.numel, index.shape[0], inner, target.shape[dim])
    builder.dispatch("index_copy", [target, index, source], push, dispatch_groups(source.numel),
                     any_dtype_defines(WORDS=reads_by_words(builder)),
                     dtype_spec(target, index, source))


@variants("index_copy")
def index_copy_variants() -> Iterable[Defines]:
    return any_dtype_variants()


@builds(COPY)
def copy(builder: OpBuilder, call: Call) -> None:
    """self = src, in place."""
    builder.update(call.out.vid, call.tensor("self").vid)
    convert_copy(builder, call.tensor("src"), call.tensor("self"))
