"""write_program: golden bytes, round trips, alignment policy, streaming and atomicity."""
import hashlib
import os
import shutil

import pytest

from .conftest import GOLDEN
from .fmt_tiny import GOLDENS, tiny_constants, tiny_graph, tiny_payloads, write_tiny, write_tiny_ref
from vkx.format import (ConstantPayload, DuplicateKeyError, ExternalData, InvalidValueError, IOSpec, ProgramFile,
                        ScalarType, resolve_constants, validate, write_program)
from vkx.format import vkgraph as vk
from vkx.format.common import FileRange
from vkx.format.describe import IMPORT_ALIGNMENT, describe


def _constants(pf, exts=()):
    out = []
    for r in resolve_constants(pf, exts):
        src = pf if r.path == pf.path else next(e for e in exts if e.path == r.path)
        out.append(bytes(src.read_range(r)))
    return out


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_golden_bytes(tmp_path, name):
    """Exact bytes; after a deliberate format change run `python tests/format/fmt_tiny.py`."""
    write_tiny(tmp_path / name, **GOLDENS[name])
    assert (tmp_path / name).read_bytes() == (GOLDEN / name).read_bytes()


@pytest.mark.parametrize("ext", ["ptd", "safetensors"])
def test_golden_external_bytes(tmp_path, ext):
    stem = "tiny_ext" if ext == "ptd" else "tiny_st"  # the .pte records its external file's name
    write_tiny(tmp_path / f"{stem}.pte", external_data=tmp_path / f"{stem}.{ext}")
    assert (tmp_path / f"{stem}.pte").read_bytes() == (GOLDEN / f"{stem}.pte").read_bytes()
    assert (tmp_path / f"{stem}.{ext}").read_bytes() == (GOLDEN / f"{stem}.{ext}").read_bytes()


def test_golden_reference_bytes(tmp_path):
    """A program whose constants stay in a safetensors file beside it: the file's name relative to the .pte
    and the EOS ids in the `vkx.metadata` compile spec, no named data of its own."""
    shutil.copy(GOLDEN / "tiny_st.safetensors", tmp_path / "tiny_st.safetensors")
    report = write_tiny_ref(tmp_path / "tiny_ref.pte", tmp_path / "tiny_st.safetensors")
    data = (tmp_path / "tiny_ref.pte").read_bytes()
    assert data == (GOLDEN / "tiny_ref.pte").read_bytes()
    assert b'{"external_files":["tiny_st.safetensors"],"eos_token_ids":[2]}' in data
    assert (report.constant_bytes, report.named_data_entries, report.referenced_bytes) == (0, 0, 60)
    # read where it lies, without being told: the recorded file beside it
    assert validate(GOLDEN / "tiny_ref.pte").external == [str(GOLDEN / "tiny_st.safetensors")]
    with ProgramFile.open(GOLDEN / "tiny_ref.pte") as pf:
        assert pf.named_data == {} and pf.metadata.eos_token_ids == (2,)
        with ExternalData.open(GOLDEN / "tiny_st.safetensors") as st:
            assert _constants(pf, [st]) == tiny_constants()


@pytest.mark.parametrize("layout,ext", [("named", None), ("legacy", None), ("named", "ptd"), ("named", "safetensors")])
def test_round_trip(tmp_path, layout, ext):
    ext_path = tmp_path / f"w.{ext}" if ext else None
    calls = []
    g = tiny_graph()
    report = write_program(tmp_path / "m.pte", g, tiny_payloads(calls), [IOSpec(ScalarType.FLOAT, (1, 4))],
                           [IOSpec(ScalarType.FLOAT, (1, 3))], layout=layout, external_data=ext_path)
    assert len(calls) == 2, "each distinct key is read exactly once"
    assert report.constant_bytes == 60 and report.file_bytes == os.path.getsize(tmp_path / "m.pte")
    assert report.external_path == (str(ext_path) if ext else None)
    exts = [ExternalData.open(ext_path)] if ext else []
    with ProgramFile.open(tmp_path / "m.pte") as pf:
        assert pf.vulkan.graph == g
        assert _constants(pf, exts) == tiny_constants()
        if ext:
            assert pf.program.named_data is None and len(pf.segments) == 2
        if layout == "named" and not ext:
            assert len(pf.named_data) == 2 and len(pf.segments) == 4
        if layout == "legacy":
            assert pf.vulkan.header.bytes_size == 48 + 16 and all(c.named_key == "" for c in g.constants)
    validate(tmp_path / "m.pte", [ext_path] if ext else [])
    for e in exts:
        e.close()


def _zeros_graph(sizes):
    values = [vk.Tensor(vk.DataType.FLOAT32, (1,), mem_obj_id=0)]
    for i, n in enumerate(sizes):
        values.append(vk.Tensor(vk.DataType.UINT8, (n,), constant_id=i))
    return vk.VkGraph(values=values, input_ids=[0], output_ids=[0])


def _zero_payloads(sizes):
    return [ConstantPayload(f"k{i}", n, lambda n=n: memoryview(bytes(n))) for i, n in enumerate(sizes)]


def _write_sizes(path, sizes, **kw):
    io = [IOSpec(ScalarType.FLOAT, (1,))]
    return write_program(path, _zeros_graph(sizes), _zero_payloads(sizes), io, io, **kw)


def test_default_alignment_policy(tmp_path):
    sizes = [100, 2 * 1024 * 1024, 3000, 2 * 1024 * 1024 + 5, 512 * 1024 + 4, 5000]
    _write_sizes(tmp_path / "a.pte", sizes)
    with ProgramFile.open(tmp_path / "a.pte") as pf:
        named = [pf.named_data[f"k{i}"] for i in range(len(sizes))]
        assert named[1].offset % 16384 == 0 and named[3].offset % 16384 == 0
        assert named[4].offset % 4096 == 0  # import-ready: a page of its own
        assert named[0].offset % 128 == 0 and named[2].offset % 128 == 0 and named[5].offset % 128 == 0
        assert named[5].offset - named[4].end < 128  # a small one is not pushed onto a page
        waste = pf.size - sum(sizes)
        assert waste < 0.01 * pf.size + 2 * 16384  # docs/format.md: padding is < 1% for big weights
    validate(tmp_path / "a.pte")
    ready = [i for i, r in enumerate(named) if r.offset % IMPORT_ALIGNMENT == 0]  # the loader imports these
    assert ready == list(range(len(sizes)))  # every named constant is at least 128-aligned
    totals = describe(tmp_path / "a.pte")["totals"]
    assert (totals["import_ready"], totals["import_ready_bytes"]) == (len(ready), sum(sizes[i] for i in ready))


@pytest.mark.parametrize("alignment,expect", [(16, 128), (4096, 4096), (96, 384)])
def test_explicit_alignment(tmp_path, alignment, expect):
    _write_sizes(tmp_path / "a.pte", [10, 20, 30], alignment=alignment, external_data=tmp_path / "a.ptd")
    with ExternalData.open(tmp_path / "a.ptd") as ext:
        assert all(r.offset % expect == 0 for r in ext.named_data.values())


def test_on_bytes_counts_every_byte(tmp_path):
    seen = []
    _write_sizes(tmp_path / "a.pte", [1000, 20000], on_bytes=seen.append, external_data=tmp_path / "a.ptd")
    assert sum(seen) == os.path.getsize(tmp_path / "a.pte") + os.path.getsize(tmp_path / "a.ptd")


def test_duplicate_key_with_other_size_is_rejected(tmp_path):
    io = [IOSpec(ScalarType.FLOAT, (1,))]
    payloads = [ConstantPayload("same", 4, lambda: bytes(4)), ConstantPayload("same", 8, lambda: bytes(8))]
    graph = vk.VkGraph(values=[vk.Tensor(vk.DataType.FLOAT32, (1,)), vk.Tensor(vk.DataType.FLOAT32, (1,), constant_id=0),
                               vk.Tensor(vk.DataType.FLOAT32, (2,), constant_id=1)], input_ids=[0], output_ids=[0])
    with pytest.raises(DuplicateKeyError):
        write_program(tmp_path / "a.pte", graph, payloads, io, io)
    assert os.listdir(tmp_path) == []


def test_payload_size_must_match_tensor(tmp_path):
    payloads = tiny_payloads()
    payloads[0] = ConstantPayload("x", 44, lambda: bytes(44))
    with pytest.raises(InvalidValueError, match="payloads\\[0\\]"):
        write_program(tmp_path / "a.pte", tiny_graph(), payloads, [IOSpec(ScalarType.FLOAT, (1, 4))],
                      [IOSpec(ScalarType.FLOAT, (1, 3))])


class Boom(Exception):
    pass


@pytest.mark.parametrize("ext", [None, "ptd", "safetensors"])
@pytest.mark.parametrize("fail_at", [0, 1, 2])
def test_failure_mid_write_leaves_nothing(tmp_path, ext, fail_at):
    count = [0]

    def read(n):
        if count[0] == fail_at:
            raise Boom()
        count[0] += 1
        return bytes(n)

    payloads = [ConstantPayload(f"k{i}", 4096, lambda: read(4096)) for i in range(3)]
    io = [IOSpec(ScalarType.FLOAT, (1,))]
    ext_path = tmp_path / f"w.{ext}" if ext else None
    with pytest.raises(Boom):
        write_program(tmp_path / "m.pte", _zeros_graph([4096] * 3), payloads, io, io, external_data=ext_path)
    assert os.listdir(tmp_path) == []


def test_wrong_payload_length_leaves_nothing_and_keeps_old_file(tmp_path):
    (tmp_path / "m.pte").write_bytes(b"old")
    payloads = [ConstantPayload("k0", 16, lambda: bytes(15))]
    io = [IOSpec(ScalarType.FLOAT, (1,))]
    with pytest.raises(InvalidValueError, match="15 bytes, declared 16"):
        write_program(tmp_path / "m.pte", _zeros_graph([16]), payloads, io, io)
    assert os.listdir(tmp_path) == ["m.pte"] and (tmp_path / "m.pte").read_bytes() == b"old"


def test_pte_commit_failure_removes_external(tmp_path, monkeypatch):
    from vkx.format import atomic
    real = atomic.os.replace

    def replace(src, dst):
        if str(dst).endswith(".pte"):
            raise OSError("disk gone")
        return real(src, dst)
    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(OSError):
        _write_sizes(tmp_path / "m.pte", [64], external_data=tmp_path / "m.ptd")
    assert os.listdir(tmp_path) == []


def test_payloads_are_written_without_intermediate_copies(tmp_path):
    """Large payloads go to os.write as views of the caller's buffer (the one copy is into the file)."""
    from vkx.format import atomic
    big = bytearray(20 * 1024 * 1024)
    written_from = []
    real = atomic.os.write

    def write(fd, data):
        if isinstance(data, memoryview) and data.nbytes > 1024 * 1024:
            written_from.append(data.obj is big or (hasattr(data.obj, "obj") and data.obj.obj is big))
        return real(fd, data)
    atomic.os.write = write
    try:
        io = [IOSpec(ScalarType.FLOAT, (1,))]
        write_program(tmp_path / "m.pte", _zeros_graph([len(big)]), [ConstantPayload("k0", len(big), lambda: big)], io, io)
    finally:
        atomic.os.write = real
    assert written_from and all(written_from)


def test_read_range_is_checked(tmp_path):
    write_tiny(tmp_path / "m.pte")
    with ProgramFile.open(tmp_path / "m.pte") as pf:
        r = resolve_constants(pf)[0]
        assert len(pf.read_range(r)) == 48
        with pytest.raises(ValueError):
            pf.read_range(FileRange("other.pte", 0, 1))
        with pytest.raises(ValueError):
            pf.read_range(FileRange(pf.path, pf.size - 1, 2))


def test_keys_are_sha256_friendly(tmp_path):
    data = tiny_constants()
    assert tiny_payloads()[0].key == hashlib.sha256(data[0]).hexdigest()


def test_a_reference_that_does_not_fit_its_file_is_refused_before_writing(tmp_path):
    from vkx.format import MethodSpec, write_methods
    from vkx.format.errors import MismatchError, MissingKeyError

    shutil.copy(GOLDEN / "tiny_st.safetensors", tmp_path / "w.safetensors")
    good = tiny_payloads()

    def write(payloads, graph=None):
        method = MethodSpec("forward", graph or tiny_graph(), payloads, [IOSpec(ScalarType.FLOAT, (1, 4))],
                            [IOSpec(ScalarType.FLOAT, (1, 3))])
        return write_methods(tmp_path / "m.pte", [method])

    renamed = [ConstantPayload("no such key", good[0].nbytes, None, stored_in=str(tmp_path / "w.safetensors"))]
    with pytest.raises(MissingKeyError, match="is not in"):
        write(renamed + good[1:])
    # the bias as a [1, 3] tensor: its bytes, but not the [3] its entry says
    graph = tiny_graph()
    graph.values[1] = vk.Tensor(vk.DataType.FLOAT32, (1, 3), constant_id=1, staging_datatype=vk.DataType.FLOAT32)
    referenced = [ConstantPayload(p.key, p.nbytes, None, stored_in=str(tmp_path / "w.safetensors")) for p in good]
    with pytest.raises(MismatchError, match=r"is F32 \[3\] in .*needs F32 \[1, 3\]"):
        write(referenced, graph)
    assert not (tmp_path / "m.pte").exists()


@pytest.mark.parametrize("value, match", [
    (b"[1]", "is not a JSON object"), (b'{"external_files": ["/abs/w.safetensors"]}', "relative paths"),
    (b'{"eos_token_ids": [-1]}', "eos_token_ids must be"), (b'{"eos_token_ids": 2}', "eos_token_ids must be")])
def test_bad_metadata_is_a_format_error(value, match):
    from vkx.format.metadata import read_metadata

    with pytest.raises(InvalidValueError, match=match):
        read_metadata([("vkx.metadata", value)], "execution_plan[0].delegates[0]", "m.pte")
