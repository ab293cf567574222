"""Where the recorded command buffer needs a barrier: before a dispatch that reads or writes bytes
an earlier dispatch wrote, or writes bytes an earlier one read, since the last barrier.

What a dispatch reads and writes comes from its SPIR-V (the prebuilt variant it runs): binding i
is written unless it is decorated NonWritable (GLSL `readonly`), and read unless it is decorated
NonReadable (`writeonly`); a binding neither says is both. Bytes are the bound range of the
memory the tensor's buffer sits in (buffers of one memory object alias).
"""
from __future__ import annotations

import functools
import struct
from typing import Sequence

from vkx.loader.build.graph import Dispatch
from vkx.loader.gpu.shaders import compile_spirv

_OP_DECORATE, _OP_MEMBER_DECORATE, _OP_VARIABLE, _OP_TYPE_POINTER, _OP_TYPE_STRUCT = 71, 72, 59, 32, 30
_BINDING, _NON_WRITABLE, _NON_READABLE = 33, 24, 25


def binding_access(spirv: bytes) -> dict[int, tuple[bool, bool]]:
    """Binding index -> (read, written) of a SPIR-V module, from its NonWritable/NonReadable
    decorations (on the variable, or on every member of its block)."""
    words = struct.unpack(f"<{len(spirv) // 4}I", spirv[:len(spirv) // 4 * 4])
    binding: dict[int, int] = {}
    decorated: dict[int, set[int]] = {}
    members: dict[int, dict[int, set[int]]] = {}
    member_count: dict[int, int] = {}
    pointee: dict[int, int] = {}
    variable_type: dict[int, int] = {}
    i = 5
    while i < len(words):
        count, op = words[i] >> 16, words[i] & 0xFFFF
        a = words[i + 1:i + max(count, 1)]
        if op == _OP_DECORATE:
            if a[1] == _BINDING:
                binding[a[0]] = a[2]
            decorated.setdefault(a[0], set()).add(a[1])
        elif op == _OP_MEMBER_DECORATE:
            members.setdefault(a[0], {}).setdefault(a[1], set()).add(a[2])
        elif op == _OP_TYPE_STRUCT:
            member_count[a[0]] = len(a) - 1
        elif op == _OP_TYPE_POINTER:
            pointee[a[0]] = a[2]
        elif op == _OP_VARIABLE:
            variable_type[a[1]] = a[0]
        i += max(count, 1)
    access: dict[int, tuple[bool, bool]] = {}
    for var, index in binding.items():
        block = pointee.get(variable_type.get(var, -1), -1)
        flags = decorated.get(var, set())
        each = members.get(block, {})

        def on_all(decoration: int) -> bool:
            return decoration in flags or (member_count.get(block, 0) > 0 and all(
                decoration in each.get(m, set()) for m in range(member_count[block])))
        read, written = access.get(index, (False, False))
        access[index] = (read or not on_all(_NON_READABLE), written or not on_all(_NON_WRITABLE))
    return access


@functools.lru_cache(maxsize=None)
def _access(shader: str, defines: tuple) -> dict[int, tuple[bool, bool]]:
    return binding_access(compile_spirv(shader, dict(defines)))


def _ranges(x: Dispatch) -> tuple[list[tuple], list[tuple]]:
    """(read, written) byte ranges of a recorded dispatch, as (memory, start, end)."""
    access = _access(x.shader, x.defines)
    reads, writes = [], []
    for i, (t, offset, size) in enumerate(x.bindings):
        b = t.buffer
        memory = id(b.allocation) if b.allocation is not None else id(b)
        span = (memory, b.offset + offset, b.offset + offset + size)
        read, written = access.get(i, (True, True))
        if read:
            reads.append(span)
        if written:
            writes.append(span)
    return reads, writes


def _overlaps(spans: Sequence[tuple], pending: Sequence[tuple]) -> bool:
    return any(m == pm and s < pe and ps < e for m, s, e in spans for pm, ps, pe in pending)


def barriers_before(dispatches: Sequence[Dispatch]) -> list[bool]:
    """For each dispatch, whether a compute->compute barrier must come right before it."""
    need: list[bool] = []
    pending_reads: list[tuple] = []
    pending_writes: list[tuple] = []
    for x in dispatches:
        reads, writes = _ranges(x)
        hazard = _overlaps(reads, pending_writes) or _overlaps(writes, pending_writes) \
            or _overlaps(writes, pending_reads)
        if hazard:
            pending_reads, pending_writes = [], []
        need.append(hazard)
        pending_reads += reads
        pending_writes += writes
    return need
