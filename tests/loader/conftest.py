"""Loader tests run with the Khronos validation layer on; any message fails the test.

Throwaway ops (`test.relu`, `test.add`) with their shaders in tests/loader/shaders
let the loader be tested without the op modules.
"""
from __future__ import annotations

import struct
from pathlib import Path

from vkx.format import contract, opset
from vkx.format.contract import Arg, Kind, OpDecl
from vkx.loader import ops
from vkx.loader.gpu import shaders

shaders.add_shader_dir(Path(__file__).parent / "shaders")

try:
    ops._load_all()
except ImportError:  # the op modules have not landed yet
    ops._loaded = True


def groups(n: int, local: int = 64) -> tuple[int, int, int]:
    g = -(-n // local)
    return (min(g, 65535), -(-g // 65535), 1)


def _same_shape(call: contract.Call) -> None:
    call.expect_shape("the output", call.out.shape, call.tensor("self").shape)


_T = Kind.TENSOR
opset.declare(OpDecl("test.relu.default", (Arg("self", _T), Arg("bias", Kind.NUMBER, default=0.0)),
                        rule=_same_shape))
opset.declare(OpDecl("test.add.default", (Arg("self", _T), Arg("other", _T)), rule=_same_shape))
opset.declare(OpDecl("test.relu_split.default", (Arg("self", _T),), rule=_same_shape))


@ops.builds("test.relu.default")
def _test_relu(b, call):
    x, out = call.tensor("self"), call.out
    b.dispatch("test_relu", [x, out], struct.pack("<If", out.numel, float(call["bias"])), groups(out.numel))


@ops.builds("test.add.default")
def _test_add(b, call):
    out = call.out
    b.dispatch("test_add", [call.tensor("self"), call.tensor("other"), out], struct.pack("<I", out.numel),
               (-(-out.numel // 64), 1, 1))


@ops.builds("test.relu_split.default")
def _test_relu_split(b, call):
    """relu over SubRanges of at most max_binding_bytes (how ops handle huge tensors)."""
    x, out = call.tensor("self"), call.out
    words = b.limits.min_storage_buffer_offset_alignment // 4 or 1
    step = (b.limits.max_storage_buffer_range // 4) // words * words
    for lo in range(0, out.numel, step):
        n = min(step, out.numel - lo)
        b.dispatch("test_relu", [ops.SubRange(x, lo * 4, n * 4), ops.SubRange(out, lo * 4, n * 4)],
                   struct.pack("<If", n, 0.0), groups(n))
