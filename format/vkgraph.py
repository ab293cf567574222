"""In-memory model of a Vulkan delegate graph (the `VK00` VkGraph flatbuffer).

Plain data only: no file I/O, no torch, no Vulkan. Field meanings and wire
values are in docs/format.md ("VkGraph").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Generic, TypeVar, Union

from .dtypes import DataType, DType, of as dtype_of
from .generated.enums import GraphTypes, VkMemoryLayout as MemoryLayout, VkStorageType as StorageType

T = TypeVar("T")

IDENTIFIER = b"VK00"
"""The VkGraph FlatBuffer's file identifier."""
NAMED_OFFSET = 2**64 - 1
"""`ConstantRef.offset` sentinel: the bytes live in named data under `named_key`."""


@dataclass(frozen=True)
class Null:
    pass


@dataclass(frozen=True)
class _Scalar(Generic[T]):
    """A value holding one scalar."""
    value: T


@dataclass(frozen=True)
class _List(Generic[T]):
    """A value holding a list of scalars."""
    items: tuple[T, ...]


class Int(_Scalar[int]):
    pass


class Double(_Scalar[float]):
    pass


class Bool(_Scalar[bool]):
    pass


class String(_Scalar[str]):
    pass


class SymInt(_Scalar[int]):
    pass


class IntList(_List[int]):
    pass


class DoubleList(_List[float]):
    pass


class BoolList(_List[bool]):
    pass


class ValueList(_List[int]):
    """A list of value ids (for example the outputs of a multi-output op)."""


@dataclass(frozen=True)
class Tensor:
    datatype: DataType
    dims: tuple[int, ...]
    constant_id: int = -1
    """Index into `VkGraph.constants`; negative for a non-constant tensor."""
    mem_obj_id: int = -1
    """Shared memory object this tensor lives in; negative for dedicated memory."""
    storage_type: StorageType = StorageType.DEFAULT_STORAGE
    memory_layout: MemoryLayout = MemoryLayout.DEFAULT_LAYOUT
    staging_datatype: DataType = DataType.UNSET

    @property
    def numel(self) -> int:
        return math.prod(self.dims)

    @property
    def host_datatype(self) -> DataType:
        """The element type on the host side of a graph input or output: `staging_datatype`, else `datatype`."""
        return self.staging_datatype if self.staging_datatype != DataType.UNSET else self.datatype

    @property
    def dtype(self) -> DType:
        """The element type (InvalidValueError for UNSET or an unknown wire value)."""
        return dtype_of(self.datatype)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


Value = Union[Null, Int, Double, Bool, IntList, DoubleList, BoolList, ValueList, String, SymInt, Tensor]

VALUE_TAGS: dict[type, int] = {cls: GraphTypes["VkTensor" if cls is Tensor else cls.__name__] for cls in Value.__args__}
"""Each value class's tag in the wire's GraphTypes union (the schema names the tensor VkTensor)."""


@dataclass(frozen=True)
class ConstantRef:
    """Where a constant tensor's bytes are (`VkBytes` on the wire)."""
    offset: int
    length: int
    named_key: str | None = None

    @property
    def is_named(self) -> bool:
        return self.offset == NAMED_OFFSET and bool(self.named_key)


@dataclass(frozen=True)
class OperatorCall:
    node_id: int
    name: str
    args: tuple[int, ...]


@dataclass
class VkGraph:
    chain: list[OperatorCall] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    input_ids: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    constants: list[ConstantRef] = field(default_factory=list)
    version: str = "0"

    @property
    def constant_layout(self) -> str:
        """Where the constants' bytes are: "none", "named", "legacy" (in the blob) or "mixed"."""
        named = sum(1 for c in self.constants if c.is_named)
        if not self.constants:
            return "none"
        return "named" if named == len(self.constants) else "legacy" if not named else "mixed"
