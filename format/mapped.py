"""Read-only memory-mapped files shared by the .pte, .ptd and .safetensors readers."""
from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
from pathlib import Path
from typing import Iterator, TypeVar

from .common import FileRange
from .errors import TruncatedError

M = TypeVar("M", bound="MappedFile")


class MappedFile:
    """A file mapped read-only; `view()` hands out zero-copy slices.

    `private=True` maps it MAP_PRIVATE instead of MAP_SHARED read-only, the kind of
    mapping a Vulkan driver can import as device memory (NVIDIA refuses a shared
    read-only one). vkx never writes it, so its pages stay clean, file-backed page cache.
    """

    def __init__(self, path: str | os.PathLike, private: bool = False):
        self.path = os.fspath(path)
        self.private = private
        self._pin: ctypes.Array | None = None
        with open(self.path, "rb") as f:
            self.size = os.fstat(f.fileno()).st_size
            if self.size == 0:
                raise TruncatedError("file", "empty file", self.path)
            access = mmap.ACCESS_COPY if private else mmap.ACCESS_READ
            self._mm: mmap.mmap | None = mmap.mmap(f.fileno(), 0, access=access)

    @classmethod
    def open(cls: type[M], path: str | os.PathLike, private: bool = False) -> M:
        """Map the file and check its metadata (`_load`); raises FormatError subclasses."""
        f = cls(path, private)
        try:
            with f.metadata_reads():
                f._load()
        except BaseException:
            f.close()
            raise
        return f

    def _load(self) -> None:
        """Decode and check the metadata (subclasses)."""

    @property
    def buf(self) -> mmap.mmap:
        if self._mm is None:
            raise ValueError(f"{self.path} is closed")
        return self._mm

    @property
    def address(self) -> int:
        """Start address of a private mapping (for a driver to import); the mapping stays until `close()`."""
        if not self.private:
            raise ValueError(f"{self.path} is mapped shared read-only: it has no importable address")
        if self._pin is None:
            # The ctypes view holds an export of the mmap, so it cannot be unmapped under the device.
            self._pin = (ctypes.c_char * self.size).from_buffer(self.buf)
        return ctypes.addressof(self._pin)

    @contextlib.contextmanager
    def metadata_reads(self) -> Iterator[None]:
        """No readahead around page faults inside the block, so decoding metadata reads only the
        pages it touches, never megabytes of neighbouring weights (kernel readahead is often 8 MiB)."""
        mm = self.buf
        if not hasattr(mmap, "MADV_RANDOM"):
            yield
            return
        mm.madvise(mmap.MADV_RANDOM)
        try:
            yield
        finally:
            if self._mm is not None:
                mm.madvise(mmap.MADV_NORMAL)

    def view(self, r: FileRange) -> memoryview:
        """Zero-copy view of the range (which must belong to this file); starts reading it in."""
        if r.path != self.path:
            raise ValueError(f"range of {r.path} asked from {self.path}")
        if r.offset < 0 or r.size < 0 or r.end > self.size:
            raise ValueError(f"range [{r.offset}, {r.end}) outside {self.path} ({self.size} bytes)")
        if r.size and hasattr(mmap, "MADV_WILLNEED"):
            start = r.offset - r.offset % mmap.PAGESIZE
            self.buf.madvise(mmap.MADV_WILLNEED, start, r.end - start)
        return memoryview(self.buf)[r.offset:r.end]

    def release(self, r: FileRange) -> None:
        """Drop the page-cache mapping of the whole pages inside r (MADV_DONTNEED).

        Bytes stay readable (they are read again from the file if touched).
        """
        page = mmap.PAGESIZE
        start = -(-r.offset // page) * page
        end = (r.end // page) * page
        if end > start and hasattr(mmap, "MADV_DONTNEED"):
            self.buf.madvise(mmap.MADV_DONTNEED, start, end - start)

    def close(self) -> None:
        """Unmap. Views still held keep the mapping alive until they are released."""
        self._pin = None
        mm, self._mm = self._mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # exported views exist; the mapping goes when the last one does

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({Path(self.path).name!r}, {self.size} bytes)"
