"""What ExecuTorch's C++ Vulkan runtime implements, for `target="executorch"` (vkx.export.target_executorch):
the storage type, memory layout and dtypes of each contract op it has (the facts of the installed
ExecuTorch's `backends/vulkan/op_registry.py`, which tests/export/test_target_executorch.py checks files
against), and the 3-D texture extents a tensor needs."""
from __future__ import annotations

from dataclasses import dataclass

from vkx.format import dtypes
from vkx.format.liveness import PREPACK
from vkx.format.vkgraph import MemoryLayout, StorageType, Tensor

Repr = tuple[StorageType, MemoryLayout]
BUFFER = (StorageType.BUFFER, MemoryLayout.TENSOR_WIDTH_PACKED)
CHANNELS = (StorageType.TEXTURE_3D, MemoryLayout.TENSOR_CHANNELS_PACKED)
PACKED_BY_WHCN = (MemoryLayout.TENSOR_WIDTH_PACKED, MemoryLayout.TENSOR_HEIGHT_PACKED, MemoryLayout.TENSOR_CHANNELS_PACKED)
TEXTURE_LIMITS = (16384, 16384, 2048)
"""The 3-D image extents (x, y, z) the runtime's partitioner assumes a device has."""
CLONE = "aten.clone.default"
LAYER_NORM = "aten.native_layer_norm.default"
BATCH_NORM = "aten._native_batch_norm_legit_no_training.default"

FLOAT = frozenset({dtypes.FLOAT32, dtypes.FLOAT16})
NUMERIC = FLOAT | {dtypes.INT32}
ANY = NUMERIC | {dtypes.BOOL}


@dataclass(frozen=True)
class Implementation:
    """How the runtime implements an op: which representation its tensors take, and their dtypes."""
    storage: str
    """"texture" (channels-packed), "conv" (the same, one image), "reduce", "follow" (its inputs'), "buffer"."""
    dtypes: frozenset = FLOAT
    indices: str = ""
    """An argument that holds int32 indices instead (embedding)."""


RUNTIME: dict[str, Implementation] = {
    **{f"aten.{name}.default": Implementation("follow") for name in (
        "relu", "sigmoid", "tanh", "neg", "abs", "exp", "rsqrt", "sin", "cos", "hardswish", "gelu")},
    **{f"aten.{name}.Tensor": Implementation("follow", NUMERIC) for name in ("add", "sub", "mul", "div")},
    CLONE: Implementation("follow", ANY),
    PREPACK: Implementation("follow", ANY),
    "aten.linear.default": Implementation("buffer"), "aten.addmm.default": Implementation("buffer"),
    "aten.mm.default": Implementation("buffer"), "aten.bmm.default": Implementation("buffer"),
    "aten._softmax.default": Implementation("buffer"), "aten._log_softmax.default": Implementation("buffer"),
    LAYER_NORM: Implementation("buffer"),
    "aten.embedding.default": Implementation("buffer", FLOAT, indices="indices"),
    "aten.view_copy.default": Implementation("buffer", ANY), "aten.permute_copy.default": Implementation("buffer", ANY),
    "aten.slice_copy.Tensor": Implementation("buffer", ANY), "aten.cat.default": Implementation("buffer", NUMERIC),
    "aten.convolution.default": Implementation("conv"), "et_vk.conv_with_clamp.default": Implementation("conv"),
    BATCH_NORM: Implementation("texture"),
    "aten.max_pool2d.default": Implementation("texture"), "aten.avg_pool2d.default": Implementation("texture"),
    "aten.mean.dim": Implementation("reduce"), "aten.sum.dim_IntList": Implementation("reduce"),
}
"""The ops of vkx's contract that the runtime has, by the storage rule its registry gives them."""


def _extents(dims: tuple[int, ...], layout: MemoryLayout) -> tuple[int, int, int]:
    """The 3-D image a tensor of `dims` needs in `layout` (the packed dim in groups of four)."""
    whcn = [*reversed(dims[-3:]), *[1] * (3 - len(dims[-3:]))]
    packed = PACKED_BY_WHCN.index(layout)
    whcn[packed] = -(-whcn[packed] // 4)
    return whcn[0], whcn[1], whcn[2] * (dims[0] if len(dims) == 4 else 1)


def fits_texture(tensor: Tensor, layout: MemoryLayout) -> bool:
    return len(tensor.dims) <= 4 and all(e <= m for e, m in zip(_extents(tensor.dims, layout), TEXTURE_LIMITS))
