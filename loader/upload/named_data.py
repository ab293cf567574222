"""Constants' bytes as freeable buffers: a range of an input file, or bytes in memory.

A `FreeableBuffer` over a file (a `ProgramFile` or `ExternalData`, both
`vkx.format.infile.InputFile`) holds no host copy: `read_into()` reads its
bytes with pread straight into their destination (mapped device memory or a
staging chunk), so no file page is ever mapped into the process (RssFile
stays flat, and a file truncated meanwhile gives `BadFileError`, not SIGBUS).
`hold()` reads them into private memory once and keeps them until `free()`,
as the old runtime kept its host copies (the eager schedule). In-memory
constants (`load_graph`) are wrapped too; freeing one drops the reference.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from vkx.format.errors import FormatError
from vkx.format.infile import InputFile
from vkx.loader.upload.copy import copy_cast, parallel
from vkx.loader.errors import FileError, OutOfHostMemoryError, as_load_error


_READ_AHEAD_STEP = 128 << 10
"""Bytes per POSIX_FADV_WILLNEED: Linux reads at most max(read_ahead_kb, max_sectors_kb) of a
call's range, and 128 KiB is the default read_ahead_kb (a warm 256 MiB costs the thread ~19 ms)."""
_reader: ThreadPoolExecutor | None = None


def read_ahead(fd: int, offset: int, length: int) -> None:
    """Ask the kernel, from a background thread, to read [offset, offset + length) of the file
    into the page cache: POSIX_FADV_WILLNEED, which for a file read with pread is what
    MADV_WILLNEED is for a mapping. It is not free where it runs (it submits the reads, and
    looks up every page of a warm file: ~0.3 ms per 16 MiB), so the caller does not wait for
    it. The thread reads through its own duplicate of `fd`, which the caller may close."""
    global _reader
    if _reader is None:
        _reader = ThreadPoolExecutor(1, thread_name_prefix="vkx-readahead")
    _reader.submit(_advise, os.dup(fd), offset, length)


def _advise(fd: int, offset: int, length: int) -> None:
    try:
        for lo in range(offset, offset + length, _READ_AHEAD_STEP):
            os.posix_fadvise(fd, lo, min(_READ_AHEAD_STEP, offset + length - lo), os.POSIX_FADV_WILLNEED)
    except OSError:
        pass  # only a hint: a file system that takes none reads as before
    finally:
        os.close(fd)


class FreeableBuffer:
    """Bytes of one constant; `read_into()` copies them out, `free()` drops what is held."""
    __slots__ = ("_file", "_offset", "_length", "_obj", "freed")

    def __init__(self, file: InputFile | None, offset: int, length: int, obj=None):
        self._file, self._offset, self._length, self._obj = file, offset, length, obj
        self.freed = False

    @classmethod
    def in_memory(cls, data) -> "FreeableBuffer":
        mv = memoryview(data).cast("B")
        return cls(None, 0, mv.nbytes, obj=mv)

    @property
    def nbytes(self) -> int:
        return self._length

    def hold(self) -> bool:
        """Keep a private host copy from now until `free()`; True when that took a read of the file."""
        if self._obj is not None or self.freed:
            return False
        try:
            data = np.empty(self._length, np.uint8)
        except MemoryError:
            raise OutOfHostMemoryError(f"out of host memory holding a copy of a {self._length}-byte weight "
                                       "(the eager schedule holds every weight twice)") from None
        self.read_into(0, data)
        self._obj = memoryview(data)
        return True

    def read_ahead(self) -> None:
        """Have the kernel read this constant's file range into the page cache, on a
        background thread (`read_ahead`), so that a later `read_into` copies from memory
        instead of waiting on the disk."""
        if self._file is not None and not self.freed and self._length:
            read_ahead(self._file.fd, self._offset, self._length)

    def read_into(self, lo: int, dst) -> None:
        """Copy bytes [lo, lo + len(dst)) of the constant into the writable buffer `dst`."""
        if self.freed:
            raise ValueError("buffer already freed")
        out = np.frombuffer(dst, np.uint8)
        if lo < 0 or lo + out.size > self._length:
            raise ValueError(f"bytes [{lo}, {lo + out.size}) outside a constant of {self._length} bytes")
        if self._obj is not None:
            copy_cast(out, np.frombuffer(self._obj, np.uint8, count=out.size, offset=lo))
            return
        f, start = self._file, self._offset + lo
        try:
            parallel(lambda a, b: f.read_into(start + a, out[a:b]), out.size)
        except FormatError as error:
            raise as_load_error(error) from error
        except OSError as error:
            raise FileError(f"{f.path}: {error.strerror or error}") from error

    def free(self) -> None:
        self.freed = True
        self._obj = None
