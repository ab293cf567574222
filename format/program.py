"""The decoded ExecuTorch Program (the subset vkx reads), from a checked Reader."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import dtypes
from .common import SCALAR_TYPE_VALUES, ScalarType
from .errors import InvalidValueError
from .flatbuf import Reader, Table
from .generated.enums import DataLocation, InstructionArguments, KernelTypes

EVALUE_KINDS = tuple(k.name for k in KernelTypes if k != KernelTypes.NONE)
"""The kinds of EValue, in tag order from 1."""
INSTRUCTION_KINDS = tuple(k.name for k in InstructionArguments if k != InstructionArguments.NONE)
INLINE, SEGMENT = DataLocation.INLINE, DataLocation.SEGMENT
PLAN_REQUIRED = {"name": 0, "container_meta_type": 1, "values": 2, "inputs": 3, "outputs": 4, "chains": 5,
                 "delegates": 7, "non_const_buffer_sizes": 8}


@dataclass(frozen=True)
class TensorMeta:
    """An ExecuTorch `Tensor` value (only what vkx uses)."""
    scalar_type: ScalarType
    sizes: tuple[int, ...]
    dim_order: tuple[int, ...]
    data_buffer_idx: int
    memory_id: int | None
    """Planned arena id (`allocation_info.memory_id`), None if not memory-planned."""
    memory_offset: int
    shape_dynamism: int

    @property
    def nbytes(self) -> int:
        return dtypes.itemsize(self.scalar_type) * math.prod(self.sizes)


@dataclass(frozen=True)
class EValue:
    kind: str
    """One of EVALUE_KINDS, or "None" for an empty union."""
    value: Any
    """TensorMeta, int, bool, float, str, tuple, or None."""


@dataclass(frozen=True)
class Instruction:
    kind: str
    index: int
    """op_index of a KernelCall, delegate_index of a DelegateCall,
    destination_instruction of a JumpFalseCall, else -1."""
    args: tuple[int, ...]
    """Value ids: the call's args; (move_from, move_to) of a MoveCall,
    (cond_value_index,) of a JumpFalseCall, (value_index,) of a FreeCall."""


@dataclass(frozen=True)
class Chain:
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    instructions: tuple[Instruction, ...]
    has_instructions: bool


@dataclass(frozen=True)
class Delegate:
    id: str
    location: int
    """INLINE (index into backend_delegate_data) or SEGMENT (index into segments)."""
    index: int
    compile_specs: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class ExecutionPlan:
    name: str
    values: tuple[EValue, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    chains: tuple[Chain, ...]
    operators: tuple[tuple[str, str], ...]
    delegates: tuple[Delegate, ...]
    non_const_buffer_sizes: tuple[int, ...]
    encoded_inp_str: str | None
    encoded_out_str: str | None
    absent: frozenset[str]
    """Names of the fields (of PLAN_REQUIRED and container_meta_type) the file leaves out."""


@dataclass(frozen=True)
class DataSegment:
    offset: int
    """Relative to the file's segment_base_offset."""
    size: int


@dataclass(frozen=True)
class NamedData:
    key: str
    segment_index: int


@dataclass(frozen=True)
class DecodedProgram:
    version: int
    execution_plan: tuple[ExecutionPlan, ...]
    segments: tuple[DataSegment, ...] | None
    constant_segment: tuple[int, tuple[int, ...]] | None
    """(segment_index, offsets) or None when absent."""
    named_data: tuple[NamedData, ...] | None
    """None when the field is absent (not the same as empty for the runtime)."""
    constant_buffer_count: int
    inline_data: tuple[tuple[int, int], ...]
    """(flatbuffer position, size) of each backend_delegate_data[i].data."""
    mutable_data_segment_count: int
    has_execution_plan: bool


def _items(t: Table | None, code: str) -> tuple:
    return () if t is None else (t.scalars(0, code, "items") or ())


def _tensor(t: Table) -> TensorMeta:
    st = t.enum(0, "b", "scalar_type", SCALAR_TYPE_VALUES)
    alloc = t.table(6, "allocation_info")
    memory_id = offset = None
    if alloc is not None:
        memory_id = alloc.scalar(0, "I", "memory_id")
        offset = alloc.scalar(1, "I", "memory_offset_low") | alloc.scalar(2, "I", "memory_offset_high") << 32
    return TensorMeta(
        scalar_type=ScalarType(st),
        sizes=t.scalars(2, "i", "sizes") or (),
        dim_order=t.scalars(3, "B", "dim_order") or (),
        data_buffer_idx=t.scalar(5, "I", "data_buffer_idx"),
        memory_id=memory_id,
        memory_offset=offset or 0,
        shape_dynamism=t.enum(8, "b", "shape_dynamism", range(3)),
    )


def _evalue(t: Table) -> EValue:
    tag, v = t.union(0, "val", len(EVALUE_KINDS))
    if v is None:
        return EValue("None", None)
    kind = EVALUE_KINDS[tag - 1]
    value: Any
    if kind == "Null":
        value = None
    elif kind == "Int":
        value = v.scalar(0, "q", "int_val")
    elif kind == "Bool":
        value = v.scalar(0, "?", "bool_val", False)
    elif kind == "Double":
        value = v.scalar(0, "d", "double_val", 0.0)
    elif kind == "Tensor":
        value = _tensor(v)
    elif kind == "String":
        value = v.string(0, "string_val") or ""
    else:
        value = _items(v, {"IntList": "q", "DoubleList": "d", "BoolList": "?"}.get(kind, "i"))
    return EValue(kind, value)


def _instruction(t: Table) -> Instruction:
    tag, v = t.union(0, "instr_args", len(INSTRUCTION_KINDS))
    if v is None:
        t.r.fail(InvalidValueError, t.at("instr_args"), "instruction without arguments")
    kind = INSTRUCTION_KINDS[tag - 1]
    if kind in ("KernelCall", "DelegateCall"):
        index = v.scalar(0, "i", "op_index" if kind == "KernelCall" else "delegate_index")
        return Instruction(kind, index, v.scalars(1, "i", "args") or ())
    if kind == "MoveCall":
        return Instruction(kind, -1, (v.scalar(0, "i", "move_from"), v.scalar(1, "i", "move_to")))
    if kind == "JumpFalseCall":
        return Instruction(kind, v.scalar(1, "i", "destination_instruction"), (v.scalar(0, "i", "cond_value_index"),))
    return Instruction(kind, -1, (v.scalar(0, "i", "value_index"),))


def _chain(t: Table) -> Chain:
    return Chain(
        inputs=t.scalars(0, "i", "inputs") or (),
        outputs=t.scalars(1, "i", "outputs") or (),
        instructions=tuple(_instruction(i) for i in t.tables(2, "instructions") or ()),
        has_instructions=t.has(2),
    )


def _delegate(t: Table) -> Delegate:
    ref = t.table(1, "processed")
    if ref is None:
        t.r.fail(InvalidValueError, t.at("processed"), "missing")
    specs = tuple((s.string(0, "key") or "", s.raw(1, "value") or b"") for s in t.tables(2, "compile_specs") or ())
    return Delegate(
        id=t.string(0, "id") or "",
        location=ref.enum(0, "b", "location", range(2)),
        index=ref.scalar(1, "I", "index"),
        compile_specs=specs,
    )


def _plan(t: Table) -> ExecutionPlan:
    meta = t.table(1, "container_meta_type")
    return ExecutionPlan(
        name=t.string(0, "name") or "",
        values=tuple(_evalue(v) for v in t.tables(2, "values") or ()),
        inputs=t.scalars(3, "i", "inputs") or (),
        outputs=t.scalars(4, "i", "outputs") or (),
        chains=tuple(_chain(c) for c in t.tables(5, "chains") or ()),
        operators=tuple((o.string(0, "name") or "", o.string(1, "overload") or "")
                        for o in t.tables(6, "operators") or ()),
        delegates=tuple(_delegate(d) for d in t.tables(7, "delegates") or ()),
        non_const_buffer_sizes=t.scalars(8, "q", "non_const_buffer_sizes") or (),
        encoded_inp_str=None if meta is None else meta.string(0, "encoded_inp_str"),
        encoded_out_str=None if meta is None else meta.string(1, "encoded_out_str"),
        absent=frozenset(name for name, slot in PLAN_REQUIRED.items() if not t.has(slot)),
    )


PROGRAM_IDENTIFIER = b"ET12"
"""The FlatBuffer file identifier of an ExecuTorch program (bytes 4..8 of a .pte)."""


def decode_program(r: Reader) -> DecodedProgram:
    """Decode the Program at the reader's root (identifier PROGRAM_IDENTIFIER)."""
    root = r.root(PROGRAM_IDENTIFIER, "program")
    segs = root.tables(4, "segments")
    cs = root.table(5, "constant_segment")
    named = root.tables(7, "named_data")
    inline = []
    for d in root.tables(3, "backend_delegate_data") or ():
        inline.append(d.span(0, "data") or (0, 0))
    return DecodedProgram(
        version=root.scalar(0, "I", "version"),
        execution_plan=tuple(_plan(p) for p in root.tables(1, "execution_plan") or ()),
        segments=None if segs is None else tuple(
            DataSegment(s.scalar(0, "Q", "offset"), s.scalar(1, "Q", "size")) for s in segs),
        constant_segment=None if cs is None else (cs.scalar(0, "I", "segment_index"), cs.scalars(1, "Q", "offsets") or ()),
        named_data=None if named is None else tuple(
            NamedData(n.string(0, "key") or "", n.scalar(1, "I", "segment_index")) for n in named),
        constant_buffer_count=len(root.tables(2, "constant_buffer") or ()),
        inline_data=tuple(inline),
        mutable_data_segment_count=len(root.tables(6, "mutable_data_segments") or ()),
        has_execution_plan=root.has(1),
    )
