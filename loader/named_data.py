"""Host copies of constants as freeable buffers over mmap'd files.

A `FreeableBuffer` is a view of one byte range of a file the format package
mapped (a `ProgramFile` or `ExternalData`, both `vkx.format.mapped.MappedFile`).
`free()` (or `free_range()` chunk by chunk) drops its pages at once with the
file's `release()` (madvise(MADV_DONTNEED) on the page-aligned interior), so
RssFile falls as the weights move to the GPU; the pages read back from the
file if touched again, so a neighbour sharing an edge page is never harmed.
In-memory constants (`load_graph`) are wrapped too; freeing one just drops
the reference.

Legacy-layout constants are views into the delegate blob: their own `free()`
does nothing, and the blob is released when prepacking ends, as the old
runtime did.
"""
from __future__ import annotations

import numpy as np

from vkx.format import FileRange
from vkx.format.mapped import MappedFile


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
        f, lo, hi = self._file, self._offset, self._offset + self._length
        if lo < 0 or self._length < 0 or hi > f.size:
            raise ValueError(f"{f.path}: range [{lo}, {hi}) outside the file ({f.size} bytes)")
        # A plain slice, not `f.view()`: that one asks the kernel to read the whole range ahead.
        return memoryview(f.buf)[lo:hi]

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
            self._file.release(FileRange(self._file.path, self._offset + lo, hi - lo))

    def free(self) -> None:
        if self.freed:
            return
        self.free_range(0, self._length)
        self.freed = True
        self._obj = None
