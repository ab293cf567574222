"""validate()/describe() on real and deliberately broken files: the first problem is named precisely."""
import json
import shutil
import struct

import pytest

from .conftest import DATA, GOLDEN
from vkx.format import (BadMagicError, DuplicateKeyError, ExternalData, FormatError, InvalidValueError,
                        MissingKeyError, OutOfBoundsError, OverlapError, ProgramFile, TruncatedError, describe, validate)
from vkx.format.flatbuf import Reader


@pytest.mark.parametrize("name,ext", [("et_mlp", []), ("et_cnn", []), ("et_mlp_ext", ["et_mlp_ext.ptd"])])
def test_executorch_files_validate(name, ext):
    report = validate(DATA / f"{name}.pte", [DATA / e for e in ext])
    assert report.layout == "named" and report.constants == 4 and not report.warnings


def test_goldens_validate():
    assert validate(GOLDEN / "tiny_named.pte").constant_bytes == 60  # constant 2 shares constant 1's bytes: stored once, one device tensor
    assert validate(GOLDEN / "tiny_legacy.pte").layout == "legacy"
    validate(GOLDEN / "tiny_ext.pte", [GOLDEN / "tiny_ext.ptd"])
    validate(GOLDEN / "tiny_st.pte", [GOLDEN / "tiny_st.safetensors"])


def test_missing_external_key_names_key_and_files():
    with pytest.raises(MissingKeyError) as e:
        validate(DATA / "et_mlp_ext.pte")
    assert "e50bfd7fa718e5187b0f6efc78a5c7110572d169752ff528dd462940ef926dd7" in str(e.value)
    assert e.value.where == "vkgraph.constants[0].named_key" and "et_mlp_ext.pte" in str(e.value)


def _program(data):
    return Reader(data).root(b"ET12", "program")


def _graph(data, path):
    with ProgramFile.open(path) as pf:
        base = pf.vulkan.blob.offset + pf.vulkan.header.flatbuffer_offset
        size = pf.vulkan.header.flatbuffer_size
    return base, Reader(data, base, size).root(b"VK00", "vkgraph")


def _field(table, slot, n=4):
    return table.r.base + table._field(slot, n, "x")


def _vector_start(table, slot):
    return table.r.base + table._vector(slot, 4, "x")[0]


def _broken(tmp_path, patch, name="tiny_named.pte"):
    path = tmp_path / name
    shutil.copy(GOLDEN / name, path)
    data = bytearray(path.read_bytes())
    patch(data, path)
    path.write_bytes(data)
    return path


def _put(data, pos, fmt, value):
    struct.pack_into("<" + fmt, data, pos, value)


def test_delegate_segment_index_out_of_range(tmp_path):
    def patch(data, path):
        delegate = _program(bytes(data)).tables(1, "p")[0].tables(7, "d")[0].table(1, "processed")
        _put(data, _field(delegate, 1), "I", 7)
    with pytest.raises(OutOfBoundsError) as e:
        validate(_broken(tmp_path, patch))
    assert str(e.value).endswith("execution_plan[0].delegates[0].processed: segment index 7 out of range (4 segments)")


def test_overlapping_segments(tmp_path):
    def patch(data, path):
        segs = _program(bytes(data)).tables(4, "segments")
        _put(data, _field(segs[3], 0, 8), "Q", _program(bytes(data)).tables(4, "s")[2].scalar(0, "Q", "offset"))
    with pytest.raises(OverlapError):
        validate(_broken(tmp_path, patch))


def test_delegate_call_arg_count(tmp_path):
    def patch(data, path):
        ins = _program(bytes(data)).tables(1, "p")[0].tables(5, "c")[0].tables(2, "i")[0].table(1, "call")
        _put(data, _vector_start(ins, 1) - 4, "I", 1)
    with pytest.raises(InvalidValueError, match="1 args, the VkGraph has 1 inputs \\+ 1 outputs"):
        validate(_broken(tmp_path, patch))


def test_delegate_call_arg_out_of_range(tmp_path):
    def patch(data, path):
        ins = _program(bytes(data)).tables(1, "p")[0].tables(5, "c")[0].tables(2, "i")[0].table(1, "call")
        _put(data, _vector_start(ins, 1), "i", 99)
    with pytest.raises(OutOfBoundsError, match="value id 99 out of range"):
        validate(_broken(tmp_path, patch))


def test_arena_too_small(tmp_path):
    def patch(data, path):
        plan = _program(bytes(data)).tables(1, "p")[0]
        _put(data, _vector_start(plan, 8) + 8, "q", 4)
    with pytest.raises(OutOfBoundsError, match="allocation_info"):
        validate(_broken(tmp_path, patch))


def test_op_arg_out_of_range(tmp_path):
    def patch(data, path):
        base, g = _graph(bytes(data), path)
        _put(data, _vector_start(g.tables(1, "chain")[1], 2), "i", 1000)
    with pytest.raises(OutOfBoundsError) as e:
        validate(_broken(tmp_path, patch))
    assert e.value.where == "vkgraph.chain[1].args[0]"


def test_input_id_must_be_tensor(tmp_path):
    def patch(data, path):
        base, g = _graph(bytes(data), path)
        _put(data, _vector_start(g, 3), "I", 7)
    with pytest.raises(InvalidValueError, match="value id 7 is a Int, not a tensor"):
        validate(_broken(tmp_path, patch))


def test_bad_union_tag(tmp_path):
    def patch(data, path):
        base, g = _graph(bytes(data), path)
        _put(data, _field(g.tables(2, "values")[7], 0, 1), "B", 12)
    with pytest.raises(InvalidValueError) as e:
        ProgramFile.open(_broken(tmp_path, patch)).vulkan
    assert e.value.where == "vkgraph.values[7].value_type"


def test_duplicate_named_key(tmp_path):
    def patch(data, path):
        named = _program(bytes(data)).tables(7, "named_data")
        k0, k1 = named[0].span(0, "key"), named[1].span(0, "key")
        data[k1[0]:k1[0] + k1[1]] = data[k0[0]:k0[0] + k0[1]]
    with pytest.raises(DuplicateKeyError):
        ProgramFile.open(_broken(tmp_path, patch))


@pytest.mark.parametrize("length,error", [(31, InvalidValueError), (20, InvalidValueError)])
def test_vh00_header_length(tmp_path, length, error):
    def patch(data, path):
        with ProgramFile.open(path) as pf:
            _put(data, pf.vulkan.blob.offset + 8, "H", length)
    with pytest.raises(error):
        validate(_broken(tmp_path, patch))


def test_segment_data_size_past_end(tmp_path):
    with pytest.raises(TruncatedError):
        validate(_broken(tmp_path, lambda d, p: _put(d, 32, "Q", 10**6)))


def test_bad_identifier(tmp_path):
    with pytest.raises(BadMagicError):
        validate(_broken(tmp_path, lambda d, p: d.__setitem__(slice(4, 8), b"XX99")))


def test_wrong_delegate_id(tmp_path):
    def patch(data, path):
        delegate = _program(bytes(data)).tables(1, "p")[0].tables(7, "d")[0]
        pos, n = delegate.span(0, "id", string=True)
        data[pos + n - 1] = ord("X")
    with pytest.raises(InvalidValueError, match="is not VulkanBackend"):
        validate(_broken(tmp_path, patch))


def test_external_size_mismatch(tmp_path):
    src = (GOLDEN / "tiny_st.safetensors").read_bytes()
    n = struct.unpack_from("<Q", src)[0]
    meta = json.loads(src[8:8 + n])
    key = next(iter(meta))
    meta[key]["data_offsets"][1] -= 4
    text = json.dumps(meta).encode()
    (tmp_path / "w.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + src[8 + n:])
    with pytest.raises(InvalidValueError, match="44 bytes, the tensor needs 48"):
        validate(GOLDEN / "tiny_st.pte", [tmp_path / "w.safetensors"])


def test_duplicate_safetensors_key(tmp_path):
    """JSON keeps the last of a repeated key; a safetensors header that repeats one is refused."""
    src = (GOLDEN / "tiny_st.safetensors").read_bytes()
    n = struct.unpack_from("<Q", src)[0]
    meta = json.loads(src[8:8 + n])
    key = next(k for k in meta if k != "__metadata__")
    entry = json.dumps({key: meta[key]})[1:-1]
    text = ("{" + entry + "," + json.dumps(meta)[1:]).encode()  # the first entry twice
    (tmp_path / "w.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + src[8 + n:])
    with pytest.raises(DuplicateKeyError, match=f"key '{key}' appears twice"):
        ExternalData.open(tmp_path / "w.safetensors")
    with pytest.raises(DuplicateKeyError):
        validate(GOLDEN / "tiny_st.pte", [tmp_path / "w.safetensors"])


def test_external_files_are_searched_first():
    with ExternalData.open(GOLDEN / "tiny_ext.ptd") as e:
        assert e.kind == "ptd" and len(e.named_data) == 2
    report = validate(DATA / "et_mlp.pte", [DATA / "et_mlp_ext.ptd"])
    assert any("external copy wins" in w for w in report.warnings)


def test_describe_schema_and_totals():
    d = describe(GOLDEN / "tiny_named.pte")
    assert json.loads(json.dumps(d)) == d
    assert set(d) == {"schema", "file", "header", "program", "segments", "named_data", "tensors", "external", "delegates",
                      "methods", "states", "totals", "files", "metadata"}
    assert [m["name"] for m in d["methods"]] == ["forward"] and d["states"] == []
    assert d["metadata"] == {"external_files": [], "eos_token_ids": []}
    assert d["files"] == [{"file": "pte", "tensors": len([t for t in d["tensors"] if t["users"]]),
                           "bytes": sum(t["bytes"] for t in d["tensors"] if t["users"])}]
    assert d["schema"] == "vkx.describe/2"
    # A_live counts the input as live over the whole chain (format/liveness.py); this hand-made plan reuses it.
    # 3 constants read 2 stored tensors; IO = 16 B in + 12 B out; both tensors on 128 B: importable
    assert d["totals"] == {"constants": 2, "W": 60, "w": 48, "A": 28, "A_live": 40, "IO": 28, "state": 0,
                           "peak_eager": 2 * 60 + 28 + 28 + 48, "peak_lazy": 60 + 28 + 28,
                           "import_ready": 2, "import_ready_bytes": 60}
    assert "vulkan" not in d and d["delegates"][0]["compile_specs"] == {}
    g = d["delegates"][0]["vulkan"]["graph"]
    assert g["ops"] == {"et_vk.prepack.default": 1, "aten.linear.default": 1, "aten.relu.default": 1, "aten.add.Tensor": 1}
    assert g["inputs"] == [{"id": 3, "name": None, "dtype": "FLOAT32", "dims": [1, 4], "bytes": 16}]
    assert [c["location"] for c in g["constants"]] == ["pte"] * 3
    assert [s["used_by"] for s in d["segments"]][:2] == [["constant_segment"], ["execution_plan[0].delegates[0] (VulkanBackend)"]]
    assert all(s["offset"] % s["alignment"] == 0 for s in d["segments"])
    named = {n["key"]: n for n in d["named_data"]}
    assert sorted(len(n["constant_ids"]) for n in named.values()) == [1, 2]


def test_describe_external_locations():
    d = describe(GOLDEN / "tiny_ext.pte", [GOLDEN / "tiny_ext.ptd"])
    assert {c["location"] for c in d["delegates"][0]["vulkan"]["graph"]["constants"]} == {str(GOLDEN / "tiny_ext.ptd")}
    assert d["external"][0]["kind"] == "ptd"
    d = describe(GOLDEN / "tiny_ext.pte")
    assert {c["location"] for c in d["delegates"][0]["vulkan"]["graph"]["constants"]} == {"missing"}


def test_errors_are_vkx_errors():
    from vkx import VkxError
    assert issubclass(FormatError, VkxError)
    e = OutOfBoundsError("a.b", "bad", "f.pte")
    assert (e.where, str(e)) == ("a.b", "f.pte: a.b: bad")


def _byte(offset: int, value: int):
    """A patch setting one byte (bench/reliability.py's byte mutations of tiny_named.pte found these)."""
    def patch(data, path):
        data[offset] = value
    return patch


@pytest.mark.vulkan
def test_a_plan_output_no_instruction_writes_is_refused(tmp_path):
    """Byte 640 empties the plan's instruction list: validate said ok and `vkx run` returned whatever the
    output's memory held (-2.8e-13, 3.1e-41, ...), another answer each run."""
    from tests.cli.conftest import one_error_line, vkx
    path = _broken(tmp_path, _byte(640, 0))
    with pytest.raises(InvalidValueError, match=r"execution_plan\[0\]\.outputs\[0\]: value 1 is no input or "
                                                r"constant and no instruction writes it"):
        validate(path)
    assert "no instruction writes it" in one_error_line(vkx("run", path, "--repeat", "1"))


@pytest.mark.vulkan
def test_a_delegate_output_of_another_host_dtype_than_the_plans_is_refused(tmp_path):
    """Byte 1789 makes the graph output's staging dtype bool: validate said ok and `vkx run` returned
    [True, True, True] for a program whose plan declares a float32 output."""
    from tests.cli.conftest import one_error_line, vkx
    path = _broken(tmp_path, _byte(1789, 0))
    with pytest.raises(InvalidValueError, match="value 1 is a float32 tensor; the delegate's output "
                                                r"\(value 8\) is bool on the host"):
        validate(path)
    assert "is bool on the host" in one_error_line(vkx("run", path, "--repeat", "1"))
