"""VkGraph (`VK00`) -> format.vkgraph objects, through the checked reader (no flatbuffers import)."""
from __future__ import annotations

from . import vkgraph as vk
from .errors import InvalidValueError
from .flatbuf import Reader, Table

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
    root = r.root(vk.IDENTIFIER, "vkgraph", "vkgraph")
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
