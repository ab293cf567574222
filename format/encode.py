"""Program (ET12), FlatTensor (FT01) and VkGraph (VK00) flatbuffers via the generated builders,
and the header-insertion step shared by .pte and .ptd.

Only the writer imports this module: flatbuffers pulls in numpy, which readers never need.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Sequence

import flatbuffers

from . import dtypes, vkgraph as vk
from .common import ScalarType, align
from .headers import FLAT_TENSOR_IDENTIFIER
from .program import PROGRAM_IDENTIFIER
from .generated import flat_tensor_generated as ft
from .generated import program_generated as pg
from .generated import vkgraph_generated as g

IO_ALIGNMENT = 16


@dataclass(frozen=True)
class IOTensor:
    scalar_type: ScalarType
    sizes: tuple[int, ...]
    memory_offset: int


def build_vector(b: flatbuffers.Builder, start: Callable, prepend: Callable, items: Sequence[Any]) -> int:
    start(b, len(items))
    for x in reversed(items):
        prepend(x)
    return b.EndVector()


def build_offsets(b: flatbuffers.Builder, start: Callable, offsets: Sequence[int]) -> int:
    return build_vector(b, start, b.PrependUOffsetTRelative, offsets)


def insert_header(fb: bytes, header: bytes) -> bytes:
    """Put `header` (packed and padded: format/headers.py) after the identifier of flatbuffer `fb`."""
    root = struct.unpack_from("<I", fb, 0)[0]
    return struct.pack("<I", root + len(header)) + fb[4:8] + header + fb[8:]


def plan_io(specs: Sequence[tuple[ScalarType, tuple[int, ...]]]) -> tuple[list[IOTensor], int]:
    """Memory-plan the I/O tensors into arena 1; returns them and the arena size."""
    out, pos = [], 0
    for st, sizes in specs:
        out.append(IOTensor(st, tuple(sizes), pos))
        pos = align(pos + dtypes.itemsize(st) * math.prod(sizes), IO_ALIGNMENT)
    return out, pos


def table(b: flatbuffers.Builder, schema: ModuleType, name: str, **fields: Any) -> int:
    """The table `name` of flatc's `schema` module with `fields` (each built before the table starts:
    a scalar or an offset), added in the order given through its `<name>Add<Field>` functions; a None
    field is left out."""
    getattr(schema, f"{name}Start")(b)
    for field, value in fields.items():
        if value is not None:
            getattr(schema, f"{name}Add{field}")(b, value)
    return getattr(schema, f"{name}End")(b)


def _tensor_value(b: flatbuffers.Builder, t: IOTensor) -> int:
    sizes = build_vector(b, pg.TensorStartSizesVector, b.PrependInt32, t.sizes)
    dim_order = build_vector(b, pg.TensorStartDimOrderVector, b.PrependUint8, range(len(t.sizes)))
    alloc = table(b, pg, "AllocationDetails", MemoryId=1, MemoryOffsetLow=t.memory_offset & 0xFFFFFFFF,
                  MemoryOffsetHigh=t.memory_offset >> 32)
    tensor = table(b, pg, "Tensor", ScalarType=int(t.scalar_type), Sizes=sizes, DimOrder=dim_order,
                   AllocationInfo=alloc)
    return table(b, pg, "EValue", ValType=pg.KernelTypes.Tensor, Val=tensor)


def _segment_tables(b: flatbuffers.Builder, schema: ModuleType, segments: Sequence[tuple[int, int]]) -> list[int]:
    """DataSegment tables of the Program (pg) or FlatTensor (ft) schema, which spell them alike."""
    return [table(b, schema, "DataSegment", Offset=offset, Size=size) for offset, size in segments]


def _named_data(b: flatbuffers.Builder, schema: ModuleType, named: Sequence[tuple[str, int]]) -> list[int]:
    """NamedData tables of the Program (pg) or FlatTensor (ft) schema, which spell them alike."""
    return [table(b, schema, "NamedData", Key=b.CreateString(key), SegmentIndex=index) for key, index in named]


def _compile_spec(b: flatbuffers.Builder, key: str, value: bytes) -> int:
    return table(b, pg, "CompileSpec", Key=b.CreateString(key), Value=b.CreateByteVector(value))


@dataclass(frozen=True)
class PlanSpec:
    """One execution plan: its name, io tensors (memory-planned into `arena` bytes), the segment
    holding its VulkanBackend delegate, its pytree specs and the delegate's compile specs."""
    name: str
    inputs: Sequence[IOTensor]
    outputs: Sequence[IOTensor]
    arena: int
    delegate_segment: int
    pytree_in: str
    pytree_out: str
    compile_specs: Sequence[tuple[str, bytes]] = ()


def _encode_plan(b: flatbuffers.Builder, plan: PlanSpec) -> int:
    """A plan whose only instruction calls its VulkanBackend delegate (inputs then outputs)."""
    io = list(plan.inputs) + list(plan.outputs)
    values = build_offsets(b, pg.ExecutionPlanStartValuesVector, [_tensor_value(b, t) for t in io])
    ids = list(range(len(io)))
    args = build_vector(b, pg.DelegateCallStartArgsVector, b.PrependInt32, ids)
    call = table(b, pg, "DelegateCall", DelegateIndex=0, Args=args)
    instruction = table(b, pg, "Instruction", InstrArgsType=pg.InstructionArguments.DelegateCall, InstrArgs=call)
    instructions = build_offsets(b, pg.ChainStartInstructionsVector, [instruction])
    chain_in = build_vector(b, pg.ChainStartInputsVector, b.PrependInt32, [])
    chain_out = build_vector(b, pg.ChainStartOutputsVector, b.PrependInt32, [])
    chain = table(b, pg, "Chain", Inputs=chain_in, Outputs=chain_out, Instructions=instructions)
    chains = build_offsets(b, pg.ExecutionPlanStartChainsVector, [chain])
    backend = b.CreateString("VulkanBackend")
    processed = table(b, pg, "BackendDelegateDataReference", Location=pg.DataLocation.SEGMENT,
                      Index=plan.delegate_segment)
    specs = build_offsets(b, pg.BackendDelegateStartCompileSpecsVector,
                          [_compile_spec(b, key, value) for key, value in plan.compile_specs])
    delegate = table(b, pg, "BackendDelegate", Id=backend, Processed=processed, CompileSpecs=specs)
    delegates = build_offsets(b, pg.ExecutionPlanStartDelegatesVector, [delegate])
    inp_str, out_str = b.CreateString(plan.pytree_in), b.CreateString(plan.pytree_out)
    meta = table(b, pg, "ContainerMetadata", EncodedInpStr=inp_str, EncodedOutStr=out_str)
    name = b.CreateString(plan.name)
    plan_inputs = build_vector(b, pg.ExecutionPlanStartInputsVector, b.PrependInt32, ids[:len(plan.inputs)])
    plan_outputs = build_vector(b, pg.ExecutionPlanStartOutputsVector, b.PrependInt32, ids[len(plan.inputs):])
    operators = build_offsets(b, pg.ExecutionPlanStartOperatorsVector, [])
    buffer_sizes = build_vector(b, pg.ExecutionPlanStartNonConstBufferSizesVector, b.PrependInt64, [0, plan.arena])
    return table(b, pg, "ExecutionPlan", Name=name, ContainerMetaType=meta, Values=values, Inputs=plan_inputs,
                 Outputs=plan_outputs, Chains=chains, Operators=operators, Delegates=delegates,
                 NonConstBufferSizes=buffer_sizes)


def encode_program(plans: Sequence[PlanSpec], segments: Sequence[tuple[int, int]],
                   named: Sequence[tuple[str, int]] | None) -> bytes:
    """The Program: one plan per method, each calling its own delegate; one named-data map for all."""
    b = flatbuffers.Builder(1024)
    plans_v = build_offsets(b, pg.ProgramStartExecutionPlanVector, [_encode_plan(b, plan) for plan in plans])
    constant_buffer = build_offsets(b, pg.ProgramStartConstantBufferVector, [])
    inline_data = build_offsets(b, pg.ProgramStartBackendDelegateDataVector, [])
    segs = build_offsets(b, pg.ProgramStartSegmentsVector, _segment_tables(b, pg, segments))
    const_offsets = build_vector(b, pg.SubsegmentOffsetsStartOffsetsVector, b.PrependUint64, [0])
    constant_segment = table(b, pg, "SubsegmentOffsets", SegmentIndex=0, Offsets=const_offsets)
    named_v = None if named is None else build_offsets(b, pg.ProgramStartNamedDataVector, _named_data(b, pg, named))
    program = table(b, pg, "Program", ExecutionPlan=plans_v, ConstantBuffer=constant_buffer,
                    BackendDelegateData=inline_data, Segments=segs, ConstantSegment=constant_segment, NamedData=named_v)
    b.Finish(program, file_identifier=PROGRAM_IDENTIFIER)
    return bytes(b.Output())


def encode_flat_tensor(segments: Sequence[tuple[int, int]], named: Sequence[tuple[str, int]]) -> bytes:
    """A FlatTensor (version 0) without tensor layouts, as ExecuTorch's Vulkan exports have."""
    b = flatbuffers.Builder(1024)
    named_v = build_offsets(b, ft.FlatTensorStartNamedDataVector, _named_data(b, ft, named))
    segs = build_offsets(b, ft.FlatTensorStartSegmentsVector, _segment_tables(b, ft, segments))
    b.Finish(table(b, ft, "FlatTensor", Segments=segs, NamedData=named_v), file_identifier=FLAT_TENSOR_IDENTIFIER)
    return bytes(b.Output())


_LISTS = {vk.IntList: ("IntList", "PrependInt64"), vk.DoubleList: ("DoubleList", "PrependFloat64"),
          vk.BoolList: ("BoolList", "PrependBool"), vk.ValueList: ("ValueList", "PrependInt32")}
"""Each list value's table and the builder's function that prepends one item."""
_SCALARS = {vk.Int: ("Int", "IntVal"), vk.Double: ("Double", "DoubleVal"), vk.Bool: ("Bool", "BoolVal"),
            vk.SymInt: ("SymInt", "Value")}
"""Each one-number value's table and its field."""


def _encode_value(b: flatbuffers.Builder, v: vk.Value) -> int:
    if isinstance(v, vk.Tensor):
        dims = build_vector(b, g.VkTensorStartDimsVector, b.PrependUint32, v.dims)
        return table(b, g, "VkTensor", Datatype=int(v.datatype), Dims=dims, ConstantId=v.constant_id,
                     MemObjId=v.mem_obj_id, StorageType=int(v.storage_type), MemoryLayout=int(v.memory_layout),
                     StagingDatatype=int(v.staging_datatype))
    if isinstance(v, vk.Null):
        return table(b, g, "Null")
    if isinstance(v, vk.String):
        return table(b, g, "String", StringVal=b.CreateString(v.value))
    if type(v) in _SCALARS:
        name, field = _SCALARS[type(v)]
        return table(b, g, name, **{field: v.value})
    if type(v) in _LISTS:
        name, prepend = _LISTS[type(v)]
        items = build_vector(b, getattr(g, f"{name}StartItemsVector"), getattr(b, prepend), v.items)
        return table(b, g, name, Items=items)
    raise TypeError(f"not a VkGraph value: {v!r}")


def encode_vkgraph(graph: vk.VkGraph) -> bytes:
    """The VkGraph as a finished flatbuffer with identifier VK00."""
    b = flatbuffers.Builder(1024)
    values = [table(b, g, "VkValue", ValueType=vk.VALUE_TAGS[type(v)], Value=_encode_value(b, v))
              for v in graph.values]
    chain = []
    for op in graph.chain:
        name = b.CreateString(op.name)
        args = build_vector(b, g.OperatorCallStartArgsVector, b.PrependInt32, op.args)
        chain.append(table(b, g, "OperatorCall", NodeId=op.node_id, Name=name, Args=args))
    constants = [table(b, g, "VkBytes", Offset=c.offset, Length=c.length,
                       NamedKey=None if c.named_key is None else b.CreateString(c.named_key))
                 for c in graph.constants]
    version = b.CreateString(graph.version)
    chain_v = build_offsets(b, g.VkGraphStartChainVector, chain)
    values_v = build_offsets(b, g.VkGraphStartValuesVector, values)
    inputs_v = build_vector(b, g.VkGraphStartInputIdsVector, b.PrependUint32, graph.input_ids)
    outputs_v = build_vector(b, g.VkGraphStartOutputIdsVector, b.PrependUint32, graph.output_ids)
    constants_v = build_offsets(b, g.VkGraphStartConstantsVector, constants)
    shaders_v = build_offsets(b, g.VkGraphStartShadersVector, [])
    graph_table = table(b, g, "VkGraph", Version=version, Chain=chain_v, Values=values_v, InputIds=inputs_v,
                        OutputIds=outputs_v, Constants=constants_v, Shaders=shaders_v)
    b.Finish(graph_table, file_identifier=vk.IDENTIFIER)
    return bytes(b.Output())
