"""ExecuTorch 1.5.1 agrees with vkx: it reads vkx's files, and vkx reads its files the same way."""
import json

import pytest

from .conftest import DATA, GOLDEN
from .fmt_tiny import tiny_constants, write_tiny, write_tiny_ref
from vkx.format import ExternalData, ProgramFile, resolve_constants
from vkx.format.external import DIGEST_KEY
from vkx.format import vkgraph as vk

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]


@pytest.fixture(scope="module")
def et():
    from executorch.backends.vulkan.serialization.vulkan_graph_serialize import flatbuffer_to_vk_graph
    from executorch.exir._serialize._program import deserialize_pte_binary
    from executorch.extension.flat_tensor.serialize.serialize import _deserialize_to_flat_tensor
    from executorch.runtime import Runtime, Verification

    class ET:
        pass
    e = ET()
    e.deserialize, e.vk_graph, e.flat_tensor = deserialize_pte_binary, flatbuffer_to_vk_graph, _deserialize_to_flat_tensor
    e.runtime, e.verification = Runtime.get(), Verification.InternalConsistency
    return e


def _et_value(v):
    x = v.value
    name = type(x).__name__
    if name == "VkTensor":
        return vk.Tensor(vk.DataType(int(x.datatype)), tuple(x.dims), x.constant_id, x.mem_obj_id,
                         vk.StorageType(int(x.storage_type)), vk.MemoryLayout(int(x.memory_layout)),
                         vk.DataType(int(x.staging_datatype)))
    if name == "Null":
        return vk.Null()
    if name in ("Int", "Double", "Bool", "String", "SymInt"):
        field = {"Int": "int_val", "Double": "double_val", "Bool": "bool_val", "String": "string_val", "SymInt": "value"}[name]
        return getattr(vk, name)(getattr(x, field))
    return getattr(vk, name)(tuple(x.items))


@pytest.mark.parametrize("name", ["et_mlp", "et_cnn", "et_mlp_ext"])
def test_vkx_reads_executorch_files_like_executorch(et, name):
    path = DATA / f"{name}.pte"
    raw = path.read_bytes()
    ours = ProgramFile.open(path)
    theirs = et.deserialize(raw).program
    for plan, tplan in zip(ours.program.execution_plan, theirs.execution_plan):
        assert plan.name == tplan.name
        assert list(plan.inputs) == tplan.inputs and list(plan.outputs) == tplan.outputs
        assert list(plan.non_const_buffer_sizes) == tplan.non_const_buffer_sizes
        for ev, tev in zip(plan.values, tplan.values):
            t, tt = ev.value, tev.val
            assert (int(t.scalar_type), list(t.sizes), list(t.dim_order)) == (int(tt.scalar_type), tt.sizes, tt.dim_order)
            assert (t.memory_id, t.memory_offset) == (tt.allocation_info.memory_id, tt.allocation_info.memory_offset_low)
        assert [d.id for d in plan.delegates] == [d.id for d in tplan.delegates]
    v = ours.vulkan
    blob = bytes(ours.read_range(v.blob))
    g = et.vk_graph(blob[v.header.flatbuffer_offset:v.header.flatbuffer_offset + v.header.flatbuffer_size])
    assert v.graph.values == [_et_value(x) for x in g.values]
    assert v.graph.chain == [vk.OperatorCall(c.node_id, c.name, tuple(c.args)) for c in g.chain]
    assert (v.graph.input_ids, v.graph.output_ids) == (list(g.input_ids), list(g.output_ids))
    assert v.graph.constants == [vk.ConstantRef(c.offset, c.length, c.named_key) for c in g.constants]
    ours.close()


def test_constant_bytes_match_between_pte_and_ptd():
    """The same seeded MLP exported with and without a .ptd has byte-identical constants."""
    with ProgramFile.open(DATA / "et_mlp.pte") as a, ProgramFile.open(DATA / "et_mlp_ext.pte") as b, \
            ExternalData.open(DATA / "et_mlp_ext.ptd") as ext:
        ra, rb = resolve_constants(a), resolve_constants(b, [ext])
        assert [a.read_range(r) for r in ra] == [ext.read_range(r) for r in rb]


@pytest.mark.parametrize("kwargs", [{}, {"layout": "legacy"}, {"ext": "ptd"}, {"ext": "safetensors"}, {"alignment": 4096}],
                         ids=["named", "legacy", "ptd", "safetensors", "align4096"])
def test_executorch_accepts_vkx_files(et, tmp_path, kwargs):
    kwargs = dict(kwargs)
    ext = kwargs.pop("ext", None)
    ext_path = tmp_path / f"w.{ext}" if ext else None
    write_tiny(tmp_path / "m.pte", external_data=ext_path, **kwargs)
    raw = (tmp_path / "m.pte").read_bytes()
    pte = et.deserialize(raw)
    plan = pte.program.execution_plan[0]
    assert plan.name == "forward" and [d.id for d in plan.delegates] == ["VulkanBackend"]
    blob = pte.program.backend_delegate_data[plan.delegates[0].processed.index].data
    graph = et.vk_graph(blob[32:32 + int.from_bytes(blob[14:18], "little")])
    assert len(graph.constants) == 3
    consts = tiny_constants()
    if kwargs.get("layout") == "legacy":
        section = blob[int.from_bytes(blob[18:22], "little"):]
        assert [bytes(section[c.offset:c.offset + c.length]) for c in graph.constants] == consts
    elif ext is None:
        stored = {k: pte.named_data.buffers[e.buffer_index] for k, e in pte.named_data.pte_data.items()}
        assert [stored[c.named_key] for c in graph.constants] == consts
    else:
        assert not pte.named_data or not pte.named_data.pte_data
    data_path = str(ext_path) if ext == "ptd" else None
    program = et.runtime.load_program(raw, verification=et.verification, data_path=data_path)
    assert "forward" in program.method_names
    if ext == "ptd":
        ft = et.flat_tensor(ext_path.read_bytes())
        # the constants, and the data digest the .pte records too (docs/format.md, "Pair identity")
        assert ft.version == 0 and sorted(n.key for n in ft.named_data) == sorted({c.named_key for c in graph.constants}
                                                                                 | {DIGEST_KEY})


def test_executorch_accepts_a_program_referencing_a_checkpoint(et, tmp_path):
    """The `vkx.metadata` compile spec is one more key/value pair to ExecuTorch: its reader and its
    runtime's verifier take the file (docs/format.md, "Program metadata")."""
    (tmp_path / "w.safetensors").write_bytes((GOLDEN / "tiny_st.safetensors").read_bytes())
    write_tiny_ref(tmp_path / "m.pte", tmp_path / "w.safetensors")
    raw = (tmp_path / "m.pte").read_bytes()
    specs = {s.key: bytes(s.value) for s in et.deserialize(raw).program.execution_plan[0].delegates[0].compile_specs}
    assert json.loads(specs["vkx.metadata"]) == {"external_files": ["w.safetensors"], "eos_token_ids": [2]}
    program = et.runtime.load_program(raw, verification=et.verification)
    assert "forward" in program.method_names
