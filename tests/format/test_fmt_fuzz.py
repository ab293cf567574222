"""Hypothesis fuzzing of the checked readers: arbitrary and mutated bytes give a value or a FormatError."""
import json
import os
import struct
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import GOLDEN
from vkx.format import ExternalData, FormatError, ProgramFile
from vkx.format.encode import encode_vkgraph
from vkx.format.flatbuf import Reader
from vkx.format.program import decode_program
from vkx.format.vkgraph_decode import decode_vkgraph

PTE = (GOLDEN / "tiny_named.pte").read_bytes()
with ProgramFile.open(GOLDEN / "tiny_named.pte") as _pf:
    _v = _pf.vulkan
    _start = _v.blob.offset + _v.header.flatbuffer_offset
    VKGRAPH = PTE[_start:_start + _v.header.flatbuffer_size]
    GRAPH = _v.graph
FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


def _decodes(fn, buf):
    try:
        fn(Reader(buf, path="fuzz"))
    except FormatError:
        pass


@st.composite
def mutated(draw, base):
    b = bytearray(base)
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.integers(0, len(b) - 1))
        kind = draw(st.sampled_from(["byte", "u32", "cut"]))
        if kind == "byte":
            b[i] = draw(st.integers(0, 255))
        elif kind == "u32" and i + 4 <= len(b):
            b[i:i + 4] = struct.pack("<I", draw(st.sampled_from([0, 1, 4, 0x7FFFFFFF, 0xFFFFFFFF, len(b), i])))
        elif kind == "cut":
            b = b[:max(i, 8)]
    return bytes(b)


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes(buf):
    _decodes(decode_program, buf)
    _decodes(decode_vkgraph, buf)


@FUZZ
@given(mutated(PTE))
def test_mutated_program(buf):
    _decodes(decode_program, buf)


@FUZZ
@given(mutated(VKGRAPH))
def test_mutated_vkgraph(buf):
    _decodes(decode_vkgraph, buf)


def test_vkgraph_round_trip():
    assert decode_vkgraph(Reader(encode_vkgraph(GRAPH))) == GRAPH


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None) as d:
        yield d


json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=8),
                           lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                           max_leaves=12)


@settings(max_examples=150, deadline=2000)
@given(st.dictionaries(st.text(max_size=12), json_values, max_size=4), st.binary(max_size=64))
def test_safetensors_headers(scratch, meta, tail):
    text = json.dumps(meta).encode()
    path = os.path.join(scratch, "f.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + tail)
    try:
        ExternalData.open(path).close()
    except FormatError:
        pass
