"""Op registry: each op turns one `OperatorCall` into GPU dispatches.

An op is a function `fn(builder: OpBuilder, args: tuple[int, ...]) -> None`
registered under one or more `OperatorCall.name`s. It reads its arguments
through the builder and records dispatches; it never touches Vulkan.
Op modules register themselves on import (see `_OP_MODULES`).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence, Union

Scalar = Union[int, float, bool, str, None]


@dataclass(frozen=True)
class TensorArg:
    """A GPU tensor as an op sees it: a contiguous row-major buffer."""
    vid: int
    shape: tuple[int, ...]
    dtype: str  # "float32" or "int32"

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * 4


@dataclass(frozen=True)
class SubRange:
    """Bind only `size` bytes of `tensor` starting at byte `offset`."""
    tensor: TensorArg
    offset: int
    size: int


Binding = Union[TensorArg, SubRange]


class OpBuilder(Protocol):
    max_binding_bytes: int
    """Largest range one storage-buffer binding may cover (maxStorageBufferRange)."""
    offset_alignment: int
    """Required alignment of `SubRange.offset` (minStorageBufferOffsetAlignment)."""

    def tensor(self, vid: int) -> TensorArg: ...
    def scalar(self, vid: int) -> Scalar: ...
    def int_list(self, vid: int) -> tuple[int, ...]: ...
    def value_list(self, vid: int) -> tuple[int, ...]: ...
    def is_null(self, vid: int) -> bool: ...
    def temp(self, shape: Sequence[int], dtype: str = "float32") -> TensorArg:
        """Scratch tensor, allocated with the activations, alive for the whole graph."""
    def dispatch(self, shader: str, bindings: Sequence[Binding], push: bytes,
                 groups: tuple[int, int, int], defines: Mapping[str, Union[str, int]] = ...) -> None:
        """Record `shaders/<shader>.comp` (built with `defines`), binding i = bindings[i]."""


OpFn = Callable[[OpBuilder, tuple[int, ...]], None]
OPS: dict[str, OpFn] = {}


class UnsupportedOpError(Exception):
    """The graph uses an op or an argument combination that vkx cannot run."""


def register(*names: str) -> Callable[[OpFn], OpFn]:
    def wrap(fn: OpFn) -> OpFn:
        for name in names:
            OPS[name] = fn
        return fn
    return wrap


_OP_MODULES = ("elementwise", "reduce", "shape", "matmul", "conv", "attention")


def lookup(name: str) -> OpFn:
    if not _loaded:
        _load_all()
    try:
        return OPS[name]
    except KeyError:
        raise UnsupportedOpError(f"unsupported op {name!r}") from None


_loaded = False


def _load_all() -> None:
    global _loaded
    for module in _OP_MODULES:
        importlib.import_module(f"{__name__}.{module}")
    _loaded = True
