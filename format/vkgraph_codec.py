"""VkGraph (`VK00`) <-> format.vkgraph objects: checked decoding, generated-builder encoding."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import flatbuffers

from . import vkgraph as vk
from .errors import InvalidValueError
from .flatbuf import Reader, Table
from .generated import vkgraph_generated as g

_KINDS = {tag: cls for cls, tag in vk.VALUE_TAGS.items()}
_DTYPES = frozenset(int(d) for d in vk.DataType)
_STORAGE = frozenset(int(s) for s in vk.StorageType)
_LAYOUTS = frozenset(int(m) for m in vk.MemoryLayout)


def _tensor(t: Table) -> vk.Tensor:
    return vk.Tensor(
        datatype=vk.DataType(t.enum(0, "b", "datatype", _DTYPES, 0)),
        dims=t.scalars(1, "I", "dims") or (),
        constant_id=t.scalar(2, "i", "constant_id"),
        mem_obj_id=t.scalar(3, "i", "mem_obj_id"),
        storage_type=vk.StorageType(t.enum(4, "B", "storage_type", _STORAGE, 255)),
        memory_layout=vk.MemoryLayout(t.enum(5, "B", "memory_layout", _LAYOUTS, 255)),
        staging_datatype=vk.DataType(t.enum(6, "b", "staging_datatype", _DTYPES, 127)),
    )


def _value(t: Table) -> vk.Value:
    tag, v = t.union(0, "value", len(_KINDS))
    if v is None:
        t.r.fail(InvalidValueError, t.at("value"), "value of type NONE")
    cls = _KINDS[tag]
    if cls is vk.Tensor:
        return _tensor(v)
    if cls is vk.Null:
        return vk.Null()
    if cls is vk.Int:
        return vk.Int(v.scalar(0, "q", "int_val"))
    if cls is vk.Double:
        return vk.Double(v.scalar(0, "d", "double_val", 0.0))
    if cls is vk.Bool:
        return vk.Bool(v.scalar(0, "?", "bool_val", False))
    if cls is vk.String:
        return vk.String(v.string(0, "string_val") or "")
    if cls is vk.SymInt:
        return vk.SymInt(v.scalar(0, "i", "value"))
    code = {vk.IntList: "q", vk.DoubleList: "d", vk.BoolList: "?", vk.ValueList: "i"}[cls]
    return cls(v.scalars(0, code, "items") or ())


def decode_vkgraph(r: Reader) -> vk.VkGraph:
    """Decode the VkGraph at the reader's root; field paths start with `vkgraph`."""
    root = r.root(b"VK00", "vkgraph", "vkgraph")
    return vk.VkGraph(
        version=root.string(0, "version") or "",
        chain=[vk.OperatorCall(c.scalar(0, "I", "node_id"), c.string(1, "name") or "", c.scalars(2, "i", "args") or ())
               for c in root.tables(1, "chain") or ()],
        values=[_value(v) for v in root.tables(2, "values") or ()],
        input_ids=list(root.scalars(3, "I", "input_ids") or ()),
        output_ids=list(root.scalars(4, "I", "output_ids") or ()),
        constants=[vk.ConstantRef(c.scalar(0, "Q", "offset"), c.scalar(1, "Q", "length"), c.string(2, "named_key"))
                   for c in root.tables(5, "constants") or ()],
    )


def build_vector(b: flatbuffers.Builder, start: Callable, prepend: Callable, items: Sequence[Any]) -> int:
    start(b, len(items))
    for x in reversed(items):
        prepend(x)
    return b.EndVector()


def build_offsets(b: flatbuffers.Builder, start: Callable, offsets: Sequence[int]) -> int:
    return build_vector(b, start, b.PrependUOffsetTRelative, offsets)


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
        g.IntStart(b)
        g.IntAddIntVal(b, v.value)
        return g.IntEnd(b)
    if isinstance(v, vk.Double):
        g.DoubleStart(b)
        g.DoubleAddDoubleVal(b, v.value)
        return g.DoubleEnd(b)
    if isinstance(v, vk.Bool):
        g.BoolStart(b)
        g.BoolAddBoolVal(b, v.value)
        return g.BoolEnd(b)
    if isinstance(v, vk.String):
        s = b.CreateString(v.value)
        g.StringStart(b)
        g.StringAddStringVal(b, s)
        return g.StringEnd(b)
    if isinstance(v, vk.SymInt):
        g.SymIntStart(b)
        g.SymIntAddValue(b, v.value)
        return g.SymIntEnd(b)
    if isinstance(v, vk.IntList):
        items = build_vector(b, g.IntListStartItemsVector, b.PrependInt64, v.items)
        g.IntListStart(b)
        g.IntListAddItems(b, items)
        return g.IntListEnd(b)
    if isinstance(v, vk.DoubleList):
        items = build_vector(b, g.DoubleListStartItemsVector, b.PrependFloat64, v.items)
        g.DoubleListStart(b)
        g.DoubleListAddItems(b, items)
        return g.DoubleListEnd(b)
    if isinstance(v, vk.BoolList):
        items = build_vector(b, g.BoolListStartItemsVector, b.PrependBool, v.items)
        g.BoolListStart(b)
        g.BoolListAddItems(b, items)
        return g.BoolListEnd(b)
    if isinstance(v, vk.ValueList):
        items = build_vector(b, g.ValueListStartItemsVector, b.PrependInt32, v.items)
        g.ValueListStart(b)
        g.ValueListAddItems(b, items)
        return g.ValueListEnd(b)
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
