"""Generated code is fresh, and the checked reader agrees with flatc's accessors on real files."""

import pytest

from .conftest import DATA, GOLDEN
from vkx.format import ExternalData, ProgramFile
from vkx.format import _regen
from vkx.format import vkgraph as vk
from vkx.format.generated import enums, flat_tensor_generated as ftg
from vkx.format.generated import program_generated as pg
from vkx.format.generated import scalar_type_generated as sg
from vkx.format.generated import vkgraph_generated as vg

PTES = [DATA / "et_mlp.pte", DATA / "et_cnn.pte", DATA / "et_mlp_ext.pte", GOLDEN / "tiny_named.pte",
        GOLDEN / "tiny_legacy.pte"]


def test_generated_code_is_fresh(tmp_path):
    for fresh in _regen.regenerate(tmp_path):
        committed = _regen.GENERATED_DIR / fresh.name
        assert committed.read_text() == fresh.read_text(), f"{committed} is stale: run `make schemas`"


def _vec(obj, name):
    n = getattr(obj, name + "Length")()
    return tuple(getattr(obj, name)(i) for i in range(n))


def _flatc_program(buf):
    p = pg.Program.GetRootAs(buf, 0)
    plans = []
    for i in range(p.ExecutionPlanLength()):
        e = p.ExecutionPlan(i)
        values = []
        for j in range(e.ValuesLength()):
            ev = e.Values(j)
            if ev.ValType() == pg.KernelTypes.Tensor:
                t = pg.Tensor()
                t.Init(ev.Val().Bytes, ev.Val().Pos)
                a = t.AllocationInfo()
                values.append((t.ScalarType(), _vec(t, "Sizes"), _vec(t, "DimOrder"), t.DataBufferIdx(),
                               None if a is None else a.MemoryId(),
                               0 if a is None else a.MemoryOffsetLow() | a.MemoryOffsetHigh() << 32))
            else:
                values.append(ev.ValType())
        delegates = []
        for j in range(e.DelegatesLength()):
            d = e.Delegates(j)
            delegates.append((d.Id().decode(), d.Processed().Location(), d.Processed().Index()))
        chains = []
        for j in range(e.ChainsLength()):
            c = e.Chains(j)
            for k in range(c.InstructionsLength()):
                ins = c.Instructions(k)
                call = pg.DelegateCall()
                call.Init(ins.InstrArgs().Bytes, ins.InstrArgs().Pos)
                chains.append((ins.InstrArgsType(), call.DelegateIndex(), _vec(call, "Args")))
        meta = e.ContainerMetaType()
        plans.append((e.Name().decode(), values, _vec(e, "Inputs"), _vec(e, "Outputs"), delegates, chains,
                      _vec(e, "NonConstBufferSizes"), meta.EncodedInpStr().decode(), meta.EncodedOutStr().decode()))
    segs = [(p.Segments(i).Offset(), p.Segments(i).Size()) for i in range(p.SegmentsLength())]
    named = None if p.NamedDataIsNone() else [(p.NamedData(i).Key().decode(), p.NamedData(i).SegmentIndex())
                                               for i in range(p.NamedDataLength())]
    cs = p.ConstantSegment()
    return plans, segs, named, (cs.SegmentIndex(), _vec(cs, "Offsets"))


def _ours_program(prog):
    plans = []
    for e in prog.execution_plan:
        values = []
        for ev in e.values:
            if ev.kind == "Tensor":
                t = ev.value
                values.append((int(t.scalar_type), t.sizes, t.dim_order, t.data_buffer_idx, t.memory_id, t.memory_offset))
            else:
                values.append(ev.kind)
        chains = [(2 if i.kind == "DelegateCall" else -1, i.index, i.args) for c in e.chains for i in c.instructions]
        plans.append((e.name, values, e.inputs, e.outputs, [(d.id, d.location, d.index) for d in e.delegates],
                      chains, e.non_const_buffer_sizes, e.encoded_inp_str, e.encoded_out_str))
    named = None if prog.named_data is None else [(n.key, n.segment_index) for n in prog.named_data]
    return plans, [(s.offset, s.size) for s in prog.segments], named, prog.constant_segment


def _flatc_value(v):
    tag = v.ValueType()
    tab = v.Value()
    cls = {1: vg.Null, 2: vg.Int, 3: vg.Double, 4: vg.Bool, 5: vg.VkTensor, 6: vg.IntList, 7: vg.DoubleList,
           8: vg.BoolList, 9: vg.ValueList, 10: vg.String, 11: vg.SymInt}[tag]
    x = cls()
    x.Init(tab.Bytes, tab.Pos)
    if tag == 5:
        return vk.Tensor(vk.DataType(x.Datatype()), _vec(x, "Dims"), x.ConstantId(), x.MemObjId(),
                         vk.StorageType(x.StorageType()), vk.MemoryLayout(x.MemoryLayout()),
                         vk.DataType(x.StagingDatatype()))
    if tag == 1:
        return vk.Null()
    if tag == 2:
        return vk.Int(x.IntVal())
    if tag == 3:
        return vk.Double(x.DoubleVal())
    if tag == 4:
        return vk.Bool(x.BoolVal())
    if tag == 10:
        return vk.String(x.StringVal().decode())
    if tag == 11:
        return vk.SymInt(x.Value())
    items = _vec(x, "Items")
    return {6: vk.IntList, 7: vk.DoubleList, 8: vk.BoolList, 9: vk.ValueList}[tag](
        tuple(bool(i) for i in items) if tag == 8 else items)


def _flatc_graph(buf):
    g = vg.VkGraph.GetRootAs(buf, 0)
    return vk.VkGraph(
        chain=[vk.OperatorCall(c.NodeId(), c.Name().decode(), _vec(c, "Args"))
               for c in (g.Chain(i) for i in range(g.ChainLength()))],
        values=[_flatc_value(g.Values(i)) for i in range(g.ValuesLength())],
        input_ids=list(_vec(g, "InputIds")), output_ids=list(_vec(g, "OutputIds")),
        constants=[vk.ConstantRef(c.Offset(), c.Length(), None if c.NamedKey() is None else c.NamedKey().decode())
                   for c in (g.Constants(i) for i in range(g.ConstantsLength()))],
        version=g.Version().decode(),
    )


@pytest.mark.parametrize("path", PTES, ids=lambda p: p.name)
def test_checked_reader_matches_flatc_accessors(path):
    buf = path.read_bytes()
    with ProgramFile.open(path) as pf:
        assert _ours_program(pf.program) == _flatc_program(buf)
        v = pf.vulkan
        start = v.blob.offset + v.header.flatbuffer_offset
        assert pf.vulkan.graph == _flatc_graph(buf[start:start + v.header.flatbuffer_size])


def test_checked_ptd_reader_matches_flatc_accessors():
    path = DATA / "et_mlp_ext.ptd"
    buf = path.read_bytes()
    t = ftg.FlatTensor.GetRootAs(buf, 0)
    sbo = int.from_bytes(buf[32:40], "little")
    want = {}
    for i in range(t.NamedDataLength()):
        nd = t.NamedData(i)
        seg = t.Segments(nd.SegmentIndex())
        want[nd.Key().decode()] = (sbo + seg.Offset(), seg.Size())
    with ExternalData.open(path) as ext:
        assert {k: (r.offset, r.size) for k, r in ext.named_data.items()} == want


def _members(cls) -> dict[str, int]:
    return {k: v for k, v in vars(cls).items() if not k.startswith("_")}


def test_enums_are_flatcs():
    # enums.py, the IntEnums the readers import without flatbuffers, against flatc's own classes
    for module in (sg, pg, ftg, vg):
        for name, cls in vars(module).items():
            if isinstance(cls, type) and _members(cls) and all(isinstance(v, int) for v in _members(cls).values()):
                assert {m.name: int(m) for m in getattr(enums, name)} == _members(cls), name
    assert set(vk.VALUE_TAGS.values()) == set(_members(vg.GraphTypes).values()) - {0}
