"""Weight-only quantized ops: `vkx.linear_q` and `vkx.embedding_q` (layout in vkx.format.contract).

The packed weight goes to the device as its file bytes and is dequantized in the
shader, accumulating in fp32. A weight larger than one storage binding is
dispatched in row blocks.
"""
from __future__ import annotations

import struct

from vkx.format.contract import VALUES_PER_WORD, Call

from . import OpBuilder, builds, elem_defines
from .shape import dispatch_groups, row_chunks, rows_binding

ROWS = 4
"""Output rows per linear_q workgroup (ROWS in shaders/linear_q.comp)."""


@builds("vkx.linear_q.default")
def linear_q(builder: OpBuilder, call: Call) -> None:
    x, w, s, out = call.tensor("input"), call.tensor("weight"), call.tensor("scales"), call.out
    bits, group = call["bits"], call["group_size"]
    n_rows, stored = w.shape
    k = x.shape[-1]
    m = x.numel // k if k else 0
    words = k // VALUES_PER_WORD[bits]
    defines = {"BITS": bits, **elem_defines("X", "x", x.dtype), **elem_defines("S", "s", s.dtype),
               **elem_defines("O", "o", out.dtype)}
    bias = call["bias"]
    if bias is not None:
        defines.update(HAS_BIAS=1, **elem_defines("B", "bias", bias.dtype))
    if m == 0 or n_rows == 0:
        return
    for r0, rc in row_chunks(builder, n_rows, stored, [w]):
        push = struct.pack("<7I", n_rows, k, words, k // group, group, r0, rc)
        bindings = [x, rows_binding(w, r0, rc, stored), s, out] + ([bias] if bias is not None else [])
        builder.dispatch("linear_q", bindings, push, (-(-rc // ROWS), m, 1), defines)


@builds("vkx.embedding_q.default")
def embedding_q(builder: OpBuilder, call: Call) -> None:
    w, s, idx, out = call.tensor("weight"), call.tensor("scales"), call.tensor("indices"), call.out
    bits, group = call["bits"], call["group_size"]
    vocab, stored = w.shape
    k = out.shape[-1]
    n = idx.numel * k
    if n == 0:
        return
    defines = {"BITS": bits, **elem_defines("S", "s", s.dtype), **elem_defines("I", "idx", idx.dtype),
               **elem_defines("O", "o", out.dtype)}
    blocks = list(row_chunks(builder, vocab, stored, [w])) or [(0, 0)]
    for r0, rc in blocks:
        last = int(r0 + rc == vocab)
        push = struct.pack("<9I", n, k, k // VALUES_PER_WORD[bits], k // group, group, r0, rc, vocab, last)
        builder.dispatch("embedding_q", [rows_binding(w, r0, rc, stored), s, idx, out], push,
                         dispatch_groups(n), defines)
