"""Host copies of constants as freeable buffers over mmap'd files.

A `FreeableBuffer` is a view of one byte range of a read-only file mapping.
`free()` (or `free_range()` chunk by chunk) drops its pages at once with
madvise(MADV_DONTNEED) on the page-aligned interior, so RssFile falls as the
weights move to the GPU; the pages read back from the file if touched again,
so a neighbour sharing an edge page is never harmed. In-memory constants
(`load_graph`) are wrapped too; freeing one just drops the reference.

Legacy-layout constants are views into the delegate blob: their own `free()`
does nothing, and the blob (a `FreeableBuffer` too) is freed when prepacking
ends, as the old runtime did.
"""
from __future__ import annotations

import mmap
import os

import numpy as np

PAGE = mmap.PAGESIZE


class MappedFile:
    """A read-only mmap of a whole file, shared by the buffers cut from it."""

    def __init__(self, path):
        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        self.size = size
        self.dropped = 0
        self.owned = True

    @classmethod
    def wrap(cls, path, mm: mmap.mmap) -> "MappedFile":
        """Use a mapping someone else owns (the format package's); `close()` leaves it open."""
        self = cls.__new__(cls)
        self.path, self.mm, self.size, self.dropped, self.owned = os.fspath(path), mm, len(mm), 0, False
        return self

    def view(self, offset: int, length: int) -> memoryview:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ValueError(f"{self.path}: range [{offset}, {offset + length}) outside the file ({self.size} bytes)")
        if self.mm is None:
            return memoryview(b"")
        return memoryview(self.mm)[offset:offset + length]

    def drop(self, offset: int, length: int) -> int:
        """madvise(MADV_DONTNEED) the whole pages inside [offset, offset+length); bytes dropped."""
        if self.mm is None:
            return 0
        lo = -(-offset // PAGE) * PAGE
        hi = ((offset + length) // PAGE) * PAGE
        if hi <= lo:
            return 0
        self.mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        self.dropped += hi - lo
        return hi - lo

    def close(self) -> None:
        if self.mm is not None and not self.owned:
            self.mm = None
        if self.mm is not None:
            try:
                self.mm.close()
            except BufferError:  # a view is still exported; the GC closes it later
                pass
            self.mm = None


class FreeableBuffer:
    """Bytes of one constant; `free()` releases them as soon as they are staged."""
    __slots__ = ("_file", "_offset", "_length", "_obj", "freed", "owns_pages")

    def __init__(self, file: MappedFile | None, offset: int, length: int, obj=None, owns_pages: bool = True):
        self._file, self._offset, self._length, self._obj = file, offset, length, obj
        self.owns_pages = owns_pages
        self.freed = False

    @classmethod
    def in_memory(cls, data) -> "FreeableBuffer":
        mv = memoryview(data).cast("B")
        return cls(None, 0, mv.nbytes, obj=mv)

    @classmethod
    def borrowed(cls, file: MappedFile, offset: int, length: int) -> "FreeableBuffer":
        """A view whose pages belong to something freed later (the legacy blob)."""
        return cls(file, offset, length, owns_pages=False)

    @property
    def nbytes(self) -> int:
        return self._length

    def view(self) -> memoryview:
        if self.freed:
            raise ValueError("buffer already freed")
        if self._file is None:
            return self._obj
        return self._file.view(self._offset, self._length)

    def array(self, dtype) -> np.ndarray:
        """A read-only 1-D numpy view (no copy)."""
        dtype = np.dtype(dtype)
        mv = self.view()
        if mv.nbytes % dtype.itemsize:
            raise ValueError(f"{mv.nbytes} bytes is not a whole number of {dtype} items")
        return np.frombuffer(mv, dtype)

    def free_range(self, lo: int, hi: int) -> None:
        """Release the pages of bytes [lo, hi) of this buffer (already copied)."""
        if self._file is not None and self.owns_pages and not self.freed:
            self._file.drop(self._offset + lo, hi - lo)

    def free(self) -> None:
        if self.freed:
            return
        self.free_range(0, self._length)
        self.freed = True
        self._obj = None
