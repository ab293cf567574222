"""`FreeableBuffer.read_ahead`: the next weight's file range is read into the page cache ahead of its copy."""
from __future__ import annotations

import ctypes
import mmap
import os
import time

import numpy as np
import pytest

from vkx.format.infile import InputFile
from vkx.loader.upload.named_data import FreeableBuffer

MiB = 1 << 20


def resident(path) -> float:
    """The share of the file's pages that are in the page cache (mincore over a private mapping)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as m:
        pages = -(-len(m) // mmap.PAGESIZE)
        vec = (ctypes.c_ubyte * pages)()
        pin = ctypes.c_char.from_buffer(m)
        try:
            if libc.mincore(ctypes.addressof(pin), len(m), vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            del pin  # the export must go before the mapping closes
        return sum(v & 1 for v in vec) / pages


def test_read_ahead_brings_the_range_into_the_page_cache(tmp_path):
    path = tmp_path / "weights.bin"
    n = 16 * MiB
    with open(path, "wb") as f:
        f.write(np.random.default_rng(0).integers(0, 255, n, dtype=np.uint8).tobytes())
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if resident(path) > 0.5:
        pytest.skip("this file system keeps the file's pages in memory (tmpfs or no eviction)")
    with InputFile(str(path)) as f:
        FreeableBuffer(f, 0, n).read_ahead()  # returns at once: a background thread asks the kernel
        deadline = time.monotonic() + 10
        while resident(path) < 0.99 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert resident(path) >= 0.99
