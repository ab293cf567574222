"""How much of a .pte does `vkx inspect` read? Writes files of growing size with the same graph
(N constants, each 1/N of the file) and measures describe()/validate() on a cold page cache.

    python bench/inspect_speed.py [--sizes 64M,1G] [--constants 64] [--dir /tmp]

Columns: wall time (cold cache, then warm), bytes read from disk (/proc/self/io read_bytes,
includes kernel readahead) and bytes of the file resident afterwards (mincore).
"""
from __future__ import annotations

import sys

if sys.path and sys.path[0].endswith("bench"):
    sys.path.pop(0)  # this file's name would shadow the stdlib `inspect` module

import argparse
import ctypes
import mmap
import os
import tempfile
import time
from pathlib import Path

from vkx.format import ConstantPayload, IOSpec, ScalarType, describe, validate, write_program
from vkx.format import vkgraph as vk
from vkx.format.errors import VkxError

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(s: str) -> int:
    return int(float(s[:-1]) * UNITS[s[-1].upper()]) if s[-1].upper() in UNITS else int(s)


def size_list(text: str) -> list[int]:
    """An argparse type: comma-separated sizes (64M, 1G, 4096)."""
    try:
        sizes = [parse_size(s) for s in text.split(",")]
    except (ValueError, IndexError, OverflowError):
        sizes = []
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: not sizes such as 64M,1G")
    return sizes


def positive(text: str) -> int:
    """An argparse type: a whole number above 0."""
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above 0")
    return int(text)


def folder(text: str) -> str:
    """An argparse type: an existing folder."""
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text}: no such folder")
    return text


def make(path: Path, total: int, n: int) -> None:
    each = total // n // 4 * 4
    zeros = memoryview(bytes(each))
    # each add broadcasts a constant over an activation of its width: a graph the validator accepts
    act = dict(storage_type=vk.StorageType.TEXTURE_3D, memory_layout=vk.MemoryLayout.TENSOR_WIDTH_PACKED)
    values: list[vk.Value] = [vk.Tensor(vk.DataType.FLOAT32, (1, each // 4), mem_obj_id=0, **act)]
    chain = []
    for i in range(n):
        values.append(vk.Tensor(vk.DataType.FLOAT32, (each // 4,), constant_id=i))
        values.append(vk.Tensor(vk.DataType.FLOAT32, (1, each // 4), mem_obj_id=(i + 1) % 2, **act))
        chain.append(vk.OperatorCall(i, "aten.add.Tensor", (len(values) - 3 if i else 0, len(values) - 2, len(values) - 1)))
    graph = vk.VkGraph(values=values, chain=chain, input_ids=[0], output_ids=[len(values) - 1])
    payloads = [ConstantPayload(f"w{i}", each, lambda: zeros) for i in range(n)]
    io = [IOSpec(ScalarType.FLOAT, (1, each // 4))]
    write_program(path, graph, payloads, io, io)


def read_bytes() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("read_bytes"))


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident(path: Path) -> int:
    """Bytes of the file in the page cache (mincore over a fresh private mapping)."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = path.stat().st_size
    pages = -(-size // mmap.PAGESIZE)
    vec = (ctypes.c_ubyte * pages)()
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # writable, so ctypes can take its address
    anchor = ctypes.c_char.from_buffer(mm)
    try:
        if libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size), vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
    finally:
        del anchor
        mm.close()
    return sum(v & 1 for v in vec) * mmap.PAGESIZE


def measure(path: Path, fn) -> tuple[float, int, int, float]:
    evict(path)
    before = read_bytes()
    t = time.perf_counter()
    fn(path)
    cold = time.perf_counter() - t
    got = read_bytes() - before
    res = resident(path)
    t = time.perf_counter()
    fn(path)
    warm = time.perf_counter() - t
    return cold, got, res, warm


def measure_all(sizes: list[int], constants: int, directory: str | None) -> list[tuple]:
    """A row per file size and call: (file bytes, call, write seconds, *measure())."""
    with tempfile.TemporaryDirectory(dir=directory) as d:
        warmup = Path(d) / "warmup.pte"
        make(warmup, max(1 << 20, 4 * constants), constants)
        describe(warmup), validate(warmup)  # imports and first-call costs out of the way
        rows = []
        for size in sizes:
            path = Path(d) / f"m{size}.pte"
            t = time.perf_counter()
            make(path, size, constants)
            made = time.perf_counter() - t
            for name, fn in (("describe", describe), ("validate", validate)):
                rows.append((path.stat().st_size, name, made, *measure(path, fn)))
            path.unlink()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=size_list, default="64M,1G")
    ap.add_argument("--constants", type=positive, default=64)
    ap.add_argument("--dir", type=folder, default=None)
    args = ap.parse_args()
    if min(args.sizes) < 4 * args.constants:  # a float a constant
        ap.error(f"--sizes: {min(args.sizes):,} bytes cannot hold {args.constants} constants of 4 bytes")
    try:
        rows = measure_all(args.sizes, args.constants, args.dir)
    except (VkxError, OSError) as error:  # a file the validator refuses, a full disk: one line
        ap.exit(2, f"{ap.prog}: error: {error}\n")
    print(f"{'file':>12} {'call':>9} {'write s':>8} {'cold ms':>8} {'warm ms':>8} {'read from disk':>15} {'resident':>10}")
    for size, name, made, cold, got, res, warm in rows:
        print(f"{size:>12,} {name:>9} {made:>8.2f} {cold * 1e3:>8.1f} {warm * 1e3:>8.1f} {got:>15,} {res:>10,}")
    for name in ("describe", "validate"):
        r = [x for x in rows if x[1] == name]
        if len(r) >= 2:
            a, b = r[0], r[-1]
            print(f"{name}: file x{b[0] / a[0]:.1f} -> cold time x{b[3] / a[3]:.2f}, "
                  f"warm time x{b[6] / a[6]:.2f}, bytes read x{(b[4] or 1) / (a[4] or 1):.2f}")


if __name__ == "__main__":
    main()
