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


def _tensor_value(b: flatbuffers.Builder, t: IOTensor) -> int:
    sizes = build_vector(b, pg.TensorStartSizesVector, b.PrependInt32, t.sizes)
    dim_order = build_vector(b, pg.TensorStartDimOrderVector, b.PrependUint8, range(len(t.sizes)))
    pg.AllocationDetailsStart(b)
    pg.AllocationDetailsAddMemoryId(b, 1)
    pg.AllocationDetailsAddMemoryOffsetLow(b, t.memory_offset & 0xFFFFFFFF)
    pg.AllocationDetailsAddMemoryOffsetHigh(b, t.memory_offset >> 32)
    alloc = pg.AllocationDetailsEnd(b)
    pg.TensorStart(b)
    pg.TensorAddScalarType(b, int(t.scalar_type))
    pg.TensorAddSizes(b, sizes)
    pg.TensorAddDimOrder(b, dim_order)
    pg.TensorAddAllocationInfo(b, alloc)
    tensor = pg.TensorEnd(b)
    pg.EValueStart(b)
    pg.EValueAddValType(b, pg.KernelTypes.Tensor)
    pg.EValueAddVal(b, tensor)
    return pg.EValueEnd(b)


def _segment_table(b: flatbuffers.Builder, mod: ModuleType, offset: int, size: int) -> int:
    """A DataSegment of the Program (mod=pg) or FlatTensor (mod=ft) schema, which spell it alike."""
    mod.DataSegmentStart(b)
    mod.DataSegmentAddOffset(b, offset)
    mod.DataSegmentAddSize(b, size)
    return mod.DataSegmentEnd(b)


def _named_data(b: flatbuffers.Builder, mod: ModuleType, named: Sequence[tuple[str, int]]) -> list[int]:
    """NamedData tables of the Program (mod=pg) or FlatTensor (mod=ft) schema, which spell them alike."""
    entries = []
    for key, index in named:
        k = b.CreateString(key)
        mod.NamedDataStart(b)
        mod.NamedDataAddKey(b, k)
        mod.NamedDataAddSegmentIndex(b, index)
        entries.append(mod.NamedDataEnd(b))
    return entries


def _compile_spec(b: flatbuffers.Builder, key: str, value: bytes) -> int:
    k = b.CreateString(key)
    v = b.CreateByteVector(value)
    pg.CompileSpecStart(b)
    pg.CompileSpecAddKey(b, k)
    pg.CompileSpecAddValue(b, v)
    return pg.CompileSpecEnd(b)


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
    pg.DelegateCallStart(b)
    pg.DelegateCallAddDelegateIndex(b, 0)
    pg.DelegateCallAddArgs(b, args)
    call = pg.DelegateCallEnd(b)
    pg.InstructionStart(b)
    pg.InstructionAddInstrArgsType(b, pg.InstructionArguments.DelegateCall)
    pg.InstructionAddInstrArgs(b, call)
    instructions = build_offsets(b, pg.ChainStartInstructionsVector, [pg.InstructionEnd(b)])
    chain_in = build_vector(b, pg.ChainStartInputsVector, b.PrependInt32, [])
    chain_out = build_vector(b, pg.ChainStartOutputsVector, b.PrependInt32, [])
    pg.ChainStart(b)
    pg.ChainAddInputs(b, chain_in)
    pg.ChainAddOutputs(b, chain_out)
    pg.ChainAddInstructions(b, instructions)
    chains = build_offsets(b, pg.ExecutionPlanStartChainsVector, [pg.ChainEnd(b)])
    backend = b.CreateString("VulkanBackend")
    pg.BackendDelegateDataReferenceStart(b)
    pg.BackendDelegateDataReferenceAddLocation(b, pg.DataLocation.SEGMENT)
    pg.BackendDelegateDataReferenceAddIndex(b, plan.delegate_segment)
    processed = pg.BackendDelegateDataReferenceEnd(b)
    specs = build_offsets(b, pg.BackendDelegateStartCompileSpecsVector,
                          [_compile_spec(b, key, value) for key, value in plan.compile_specs])
    pg.BackendDelegateStart(b)
    pg.BackendDelegateAddId(b, backend)
    pg.BackendDelegateAddProcessed(b, processed)
    pg.BackendDelegateAddCompileSpecs(b, specs)
    delegates = build_offsets(b, pg.ExecutionPlanStartDelegatesVector, [pg.BackendDelegateEnd(b)])
    inp_str, out_str = b.CreateString(plan.pytree_in), b.CreateString(plan.pytree_out)
    pg.ContainerMetadataStart(b)
    pg.ContainerMetadataAddEncodedInpStr(b, inp_str)
    pg.ContainerMetadataAddEncodedOutStr(b, out_str)
    meta = pg.ContainerMetadataEnd(b)
    name = b.CreateString(plan.name)
    plan_inputs = build_vector(b, pg.ExecutionPlanStartInputsVector, b.PrependInt32, ids[:len(plan.inputs)])
    plan_outputs = build_vector(b, pg.ExecutionPlanStartOutputsVector, b.PrependInt32, ids[len(plan.inputs):])
    operators = build_offsets(b, pg.ExecutionPlanStartOperatorsVector, [])
    buffer_sizes = build_vector(b, pg.ExecutionPlanStartNonConstBufferSizesVector, b.PrependInt64, [0, plan.arena])
    pg.ExecutionPlanStart(b)
    pg.ExecutionPlanAddName(b, name)
    pg.ExecutionPlanAddContainerMetaType(b, meta)
    pg.ExecutionPlanAddValues(b, values)
    pg.ExecutionPlanAddInputs(b, plan_inputs)
    pg.ExecutionPlanAddOutputs(b, plan_outputs)
    pg.ExecutionPlanAddChains(b, chains)
    pg.ExecutionPlanAddOperators(b, operators)
    pg.ExecutionPlanAddDelegates(b, delegates)
    pg.ExecutionPlanAddNonConstBufferSizes(b, buffer_sizes)
    return pg.ExecutionPlanEnd(b)


def encode_program(plans: Sequence[PlanSpec], segments: Sequence[tuple[int, int]],
                   named: Sequence[tuple[str, int]] | None) -> bytes:
    """The Program: one plan per method, each calling its own delegate; one named-data map for all."""
    b = flatbuffers.Builder(1024)
    plans_v = build_offsets(b, pg.ProgramStartExecutionPlanVector, [_encode_plan(b, plan) for plan in plans])
    constant_buffer = build_offsets(b, pg.ProgramStartConstantBufferVector, [])
    inline_data = build_offsets(b, pg.ProgramStartBackendDelegateDataVector, [])
    segs = build_offsets(b, pg.ProgramStartSegmentsVector, [_segment_table(b, pg, o, s) for o, s in segments])
    const_offsets = build_vector(b, pg.SubsegmentOffsetsStartOffsetsVector, b.PrependUint64, [0])
    pg.SubsegmentOffsetsStart(b)
    pg.SubsegmentOffsetsAddSegmentIndex(b, 0)
    pg.SubsegmentOffsetsAddOffsets(b, const_offsets)
    constant_segment = pg.SubsegmentOffsetsEnd(b)
    named_v = None if named is None else build_offsets(b, pg.ProgramStartNamedDataVector, _named_data(b, pg, named))
    pg.ProgramStart(b)
    pg.ProgramAddExecutionPlan(b, plans_v)
    pg.ProgramAddConstantBuffer(b, constant_buffer)
    pg.ProgramAddBackendDelegateData(b, inline_data)
    pg.ProgramAddSegments(b, segs)
    pg.ProgramAddConstantSegment(b, constant_segment)
    if named_v is not None:
        pg.ProgramAddNamedData(b, named_v)
    b.Finish(pg.ProgramEnd(b), file_identifier=PROGRAM_IDENTIFIER)
    return bytes(b.Output())


def encode_flat_tensor(segments: Sequence[tuple[int, int]], named: Sequence[tuple[str, int]]) -> bytes:
    """A FlatTensor (version 0) without tensor layouts, as ExecuTorch's Vulkan exports have."""
    b = flatbuffers.Builder(1024)
    named_v = build_offsets(b, ft.FlatTensorStartNamedDataVector, _named_data(b, ft, named))
    segs = build_offsets(b, ft.FlatTensorStartSegmentsVector, [_segment_table(b, ft, o, s) for o, s in segments])
    ft.FlatTensorStart(b)
    ft.FlatTensorAddSegments(b, segs)
    ft.FlatTensorAddNamedData(b, named_v)
    b.Finish(ft.FlatTensorEnd(b), file_identifier=b"FT01")
    return bytes(b.Output())


def _one_field(b: flatbuffers.Builder, start: Callable, add: Callable, end: Callable, field: Any) -> int:
    """A table with a single field; `field` (a scalar or an offset) is built before the table starts."""
    start(b)
    add(b, field)
    return end(b)


def _encode_value(b: flatbuffers.Builder, v: vk.Value) -> int:
    if isinstance(v, vk.Tensor):
        dims = build_vector(b, g.VkTensorStartDimsVector, b.PrependUint32, v.dims)
        g.VkTensorStart(b)
        g.VkTensorAddDatatype(b, int(v.datatype))
        g.VkTensorAddDims(b, dims)
        g.VkTensorAddConstantId(b, v.constant_id)
        g.VkTensorAddMemObjId(b, v.mem_obj_id)
        g.VkTensorAddStorageType(b, int(v.storage_type))
        g.VkTensorAddMemoryLayout(b, int(v.memory_layout))
        g.VkTensorAddStagingDatatype(b, int(v.staging_datatype))
        return g.VkTensorEnd(b)
    if isinstance(v, vk.Null):
        g.NullStart(b)
        return g.NullEnd(b)
    if isinstance(v, vk.Int):
        return _one_field(b, g.IntStart, g.IntAddIntVal, g.IntEnd, v.value)
    if isinstance(v, vk.Double):
        return _one_field(b, g.DoubleStart, g.DoubleAddDoubleVal, g.DoubleEnd, v.value)
    if isinstance(v, vk.Bool):
        return _one_field(b, g.BoolStart, g.BoolAddBoolVal, g.BoolEnd, v.value)
    if isinstance(v, vk.String):
        return _one_field(b, g.StringStart, g.StringAddStringVal, g.StringEnd, b.CreateString(v.value))
    if isinstance(v, vk.SymInt):
        return _one_field(b, g.SymIntStart, g.SymIntAddValue, g.SymIntEnd, v.value)
    if isinstance(v, vk.IntList):
        items = build_vector(b, g.IntListStartItemsVector, b.PrependInt64, v.items)
        return _one_field(b, g.IntListStart, g.IntListAddItems, g.IntListEnd, items)
    if isinstance(v, vk.DoubleList):
        items = build_vector(b, g.DoubleListStartItemsVector, b.PrependFloat64, v.items)
        return _one_field(b, g.DoubleListStart, g.DoubleListAddItems, g.DoubleListEnd, items)
    if isinstance(v, vk.BoolList):
        items = build_vector(b, g.BoolListStartItemsVector, b.PrependBool, v.items)
        return _one_field(b, g.BoolListStart, g.BoolListAddItems, g.BoolListEnd, items)
    if isinstance(v, vk.ValueList):
        items = build_vector(b, g.ValueListStartItemsVector, b.PrependInt32, v.items)
        return _one_field(b, g.ValueListStart, g.ValueListAddItems, g.ValueListEnd, items)
    raise TypeError(f"not a VkGraph value: {v!r}")


def encode_vkgraph(graph: vk.VkGraph) -> bytes:
    """The VkGraph as a finished flatbuffer with identifier VK00."""
    b = flatbuffers.Builder(1024)
    values = []
    for v in graph.values:
        off = _encode_value(b, v)
        g.VkValueStart(b)
        g.VkValueAddValueType(b, vk.VALUE_TAGS[type(v)])
        g.VkValueAddValue(b, off)
        values.append(g.VkValueEnd(b))
    chain = []
    for op in graph.chain:
        name = b.CreateString(op.name)
        args = build_vector(b, g.OperatorCallStartArgsVector, b.PrependInt32, op.args)
        g.OperatorCallStart(b)
        g.OperatorCallAddNodeId(b, op.node_id)
        g.OperatorCallAddName(b, name)
        g.OperatorCallAddArgs(b, args)
        chain.append(g.OperatorCallEnd(b))
    constants = []
    for c in graph.constants:
        key = None if c.named_key is None else b.CreateString(c.named_key)
        g.VkBytesStart(b)
        g.VkBytesAddOffset(b, c.offset)
        g.VkBytesAddLength(b, c.length)
        if key is not None:
            g.VkBytesAddNamedKey(b, key)
        constants.append(g.VkBytesEnd(b))
    version = b.CreateString(graph.version)
    chain_v = build_offsets(b, g.VkGraphStartChainVector, chain)
    values_v = build_offsets(b, g.VkGraphStartValuesVector, values)
    inputs_v = build_vector(b, g.VkGraphStartInputIdsVector, b.PrependUint32, graph.input_ids)
    outputs_v = build_vector(b, g.VkGraphStartOutputIdsVector, b.PrependUint32, graph.output_ids)
    constants_v = build_offsets(b, g.VkGraphStartConstantsVector, constants)
    shaders_v = build_offsets(b, g.VkGraphStartShadersVector, [])
    g.VkGraphStart(b)
    g.VkGraphAddVersion(b, version)
    g.VkGraphAddChain(b, chain_v)
    g.VkGraphAddValues(b, values_v)
    g.VkGraphAddInputIds(b, inputs_v)
    g.VkGraphAddOutputIds(b, outputs_v)
    g.VkGraphAddConstants(b, constants_v)
    g.VkGraphAddShaders(b, shaders_v)
    b.Finish(g.VkGraphEnd(b), file_identifier=b"VK00")
    return bytes(b.Output())
