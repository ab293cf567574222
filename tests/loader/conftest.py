"""Loader tests run with the Khronos validation layer on; any message fails the test.

Throwaway ops (`test.relu`, `test.add`) with their shaders in tests/loader/shaders
let the loader be tested without the op modules.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

os.environ.setdefault("VKX_VALIDATION", "1")


from vkx.loader import ops  # noqa: E402
from vkx.loader import shaders  # noqa: E402

shaders.add_shader_dir(Path(__file__).parent / "shaders")

try:
    ops._load_all()
except ImportError:  # the op modules have not landed yet
    ops._loaded = True


def groups(n: int, local: int = 64) -> tuple[int, int, int]:
    g = -(-n // local)
    return (min(g, 65535), -(-g // 65535), 1)


@ops.register("test.relu.default")
def _test_relu(b, args):
    x, out = b.tensor(args[0]), b.tensor(args[1])
    bias = float(b.scalar(args[2])) if len(args) > 3 else 0.0
    out = b.tensor(args[-1])
    b.dispatch("test_relu", [x, out], struct.pack("<If", out.numel, bias), groups(out.numel))


@ops.register("test.add.default")
def _test_add(b, args):
    x, y, out = (b.tensor(a) for a in args)
    b.dispatch("test_add", [x, y, out], struct.pack("<I", out.numel), (-(-out.numel // 64), 1, 1))


@ops.register("test.relu_split.default")
def _test_relu_split(b, args):
    """relu over SubRanges of at most max_binding_bytes (how ops handle huge tensors)."""
    x, out = b.tensor(args[0]), b.tensor(args[1])
    step = (b.max_binding_bytes // 4) // (b.offset_alignment // 4 or 1) * (b.offset_alignment // 4 or 1)
    for lo in range(0, out.numel, step):
        n = min(step, out.numel - lo)
        b.dispatch("test_relu", [ops.SubRange(x, lo * 4, n * 4), ops.SubRange(out, lo * 4, n * 4)],
                   struct.pack("<If", n, 0.0), groups(n))
