"""Mutation sweep: every byte of small golden files set to 0x00, 0xFF and one bit flipped, and every
truncation; each case ends in success or a FormatError (nothing else), within a time bound."""
import os
import tempfile
import time
from pathlib import Path

import pytest

from .conftest import GOLDEN
from vkx.format import ExternalData, FormatError, describe, validate

CASE_SECONDS = 2.0


def _mutations(data: bytes):
    for i in range(len(data)):
        for value in (0x00, 0xFF, data[i] ^ (1 << (i % 8))):
            if value != data[i]:
                b = bytearray(data)
                b[i] = value
                yield f"byte {i} = {value:#04x}", bytes(b)
    for n in range(len(data)):
        yield f"truncated to {n}", data[:n]


@pytest.fixture
def scratch():
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=base) as d:  # tmpfs: thousands of rewrites stay fast
        yield Path(d)


def _sweep(src: Path, target: Path, checks):
    for label, data in _mutations(src.read_bytes()):
        if not data:
            continue  # an empty file is covered in test_empty_files
        target.write_bytes(data)
        for check in checks:
            start = time.perf_counter()
            try:
                check(target)
            except FormatError:
                pass
            except Exception as e:  # pragma: no cover - the failure message is the point
                pytest.fail(f"{src.name}, {label}: {check.__name__} raised {type(e).__name__}: {e}")
            assert time.perf_counter() - start < CASE_SECONDS, f"{src.name}, {label}: {check.__name__} too slow"


def test_mutation_sweep_pte(scratch):
    _sweep(GOLDEN / "tiny_named.pte", scratch / "m.pte", [validate, describe])


def _open_external(path):
    ExternalData.open(path).close()


@pytest.mark.parametrize("name", ["tiny_ext.ptd", "tiny_st.safetensors"])
def test_mutation_sweep_external(scratch, name):
    _sweep(GOLDEN / name, scratch / name, [_open_external])


def test_empty_files(scratch):
    for name in ("e.pte", "e.ptd", "e.safetensors"):
        (scratch / name).write_bytes(b"")
    with pytest.raises(FormatError):
        validate(scratch / "e.pte")
    for name in ("e.ptd", "e.safetensors"):
        with pytest.raises(FormatError):
            ExternalData.open(scratch / name)
