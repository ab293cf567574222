"""Input files read with positioned reads (pread), shared by the .pte, .ptd and .safetensors readers.

Nothing is memory-mapped: a mapped page of a file that shrinks kills the process with SIGBUS,
while a read past the new end is just short. Metadata is read into private memory once, when
the file is opened; weight bytes are read straight into their destination (`read_into`). A
short read, or a size or modification time that differs from what `open()` saw
(`check_unchanged`), raises `FileChangedError`. Only regular files are opened for reading: a
FIFO would block and a device has no size, so both are a `NotRegularFileError`.
"""
from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Iterator, TypeVar

from .common import FileRange
from .errors import FileChangedError, NotRegularFileError, TruncatedError

F = TypeVar("F", bound="InputFile")
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a directory", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    """What a rewrite in place changes: the size, the modification time and the inode's change time,
    which a write also sets and which, unlike the mtime, no call can put back."""
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


class InputFile:
    """A regular file open for positioned reads; remembers its size and times at open."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(self._fd)
            if not stat.S_ISREG(st.st_mode):
                kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
                raise NotRegularFileError("file", f"is {kind}; vkx reads regular files only", self.path)
            self.size = st.st_size
            self._identity = _identity(st)
            if self.size == 0:
                raise TruncatedError("file", "empty file", self.path)
        except BaseException:
            fd, self._fd = self._fd, -1  # or __del__ would close the number again, maybe another file's by then
            os.close(fd)
            raise

    @classmethod
    def open(cls: type[F], path: str | os.PathLike) -> F:
        """Open the file and check its metadata (`_load`); raises FormatError subclasses."""
        f = cls(path)
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
    def fd(self) -> int:
        if self._fd < 0:
            raise ValueError(f"{self.path} is closed")
        return self._fd

    @contextlib.contextmanager
    def metadata_reads(self) -> Iterator[None]:
        """No readahead inside the block, so decoding metadata reads only the pages it asks for,
        never megabytes of neighbouring weights (kernel readahead is often 128 KiB to 8 MiB)."""
        advise = getattr(os, "posix_fadvise", None)
        if advise is None:
            yield
            return
        advise(self.fd, 0, 0, os.POSIX_FADV_RANDOM)
        try:
            yield
        finally:
            if self._fd >= 0:
                advise(self._fd, 0, 0, os.POSIX_FADV_NORMAL)

    def read(self, offset: int, size: int) -> bytearray:
        """`size` bytes at `offset` (inside the size seen at open), as a private copy."""
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ValueError(f"range [{offset}, {offset + size}) outside {self.path} ({self.size} bytes)")
        out = bytearray(size)
        self.read_into(offset, out)
        return out

    def read_range(self, r: FileRange) -> bytearray:
        """The bytes of `r`, a range of this file."""
        if r.path != self.path:
            raise ValueError(f"range of {r.path} asked from {self.path}")
        return self.read(r.offset, r.size)

    def read_into(self, offset: int, dst) -> None:
        """Fill the writable buffer `dst` with the bytes at `offset`; FileChangedError when the file
        has become shorter than that."""
        mv = memoryview(dst).cast("B")
        done = 0
        while done < mv.nbytes:
            got = os.preadv(self.fd, [mv[done:]], offset + done)
            if got == 0:
                raise FileChangedError("file", f"ends before byte {offset + mv.nbytes} (it had {self.size} "
                                       "bytes when opened): truncated while being read", self.path)
            done += got

    def check_unchanged(self) -> None:
        """FileChangedError if the file's size or times differ from those seen at open (it was rewritten
        in place; a file renamed over it is not seen, and needs no check)."""
        st = os.fstat(self.fd)
        now = _identity(st)
        # unlinking (a file renamed over this one) sets the change time too: the bytes are as they were
        if now != self._identity and not (st.st_nlink == 0 and now[:2] == self._identity[:2]):
            raise FileChangedError("file", f"changed while being read (now {st.st_size} bytes, "
                                   f"{self.size} when opened)", self.path)

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({Path(self.path).name!r}, {self.size} bytes)"
