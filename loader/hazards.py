"""Where the recorded command buffer needs a barrier: before a dispatch that reads or writes bytes
an earlier dispatch wrote, or writes bytes an earlier one read, since the last barrier.

What a dispatch reads and writes comes from its shader's declarations: binding i is written
unless every declaration of it says `readonly`, and read unless every one says `writeonly`
(shaders/*.comp declare their storage buffers so; a binding neither says is both). Bytes are
the bound range of the memory the tensor's buffer sits in (buffers of one memory object alias).
"""
from __future__ import annotations

import functools
import re
from typing import Sequence

from vkx.loader.graph import Dispatch
from vkx.loader.shaders import find_shader

_DECLARATION = re.compile(r"layout\s*\(([^)]*)\)\s*((?:\w+\s+)*)buffer\b")
_BINDING = re.compile(r"\bbinding\s*=\s*(\d+)")


@functools.lru_cache(maxsize=None)
def binding_access(shader: str) -> dict[int, tuple[bool, bool]]:
    """Binding index -> (read, written) of `shaders/<shader>.comp`, from its declarations."""
    _, path = find_shader(shader)
    access: dict[int, tuple[bool, bool]] = {}
    for layout, qualifiers in _DECLARATION.findall(path.read_text()):
        found = _BINDING.search(layout)
        if found is None:
            continue
        words = qualifiers.split()
        read, written = access.get(int(found.group(1)), (False, False))
        access[int(found.group(1))] = (read or "writeonly" not in words, written or "readonly" not in words)
    return access


def _ranges(x: Dispatch) -> tuple[list[tuple], list[tuple]]:
    """(read, written) byte ranges of a recorded dispatch, as (memory, start, end)."""
    access = binding_access(x.shader)
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
