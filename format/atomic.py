"""Write a file atomically: a temp file in the same folder, fsync, rename."""
from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Callable


class AtomicFile:
    """Context manager; call commit() before leaving, or nothing is left behind."""

    def __init__(self, path: str | os.PathLike, on_bytes: Callable[[int], None] | None = None):
        self.path = Path(path)
        self.on_bytes = on_bytes
        self.pos = 0
        self._committed = False
        self.tmp = str(self.path.parent / f".{self.path.name}.{secrets.token_hex(4)}.tmp")
        # os.open (not mkstemp) so the file gets the usual umask-based mode, not 0600
        self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)

    def write(self, data) -> None:
        mv = memoryview(data).cast("B")
        done = 0
        while done < mv.nbytes:
            done += os.write(self.fd, mv[done:])
        self.pos += mv.nbytes
        if self.on_bytes is not None and mv.nbytes:
            self.on_bytes(mv.nbytes)

    def pad_to(self, offset: int) -> None:
        if offset < self.pos:
            raise AssertionError(f"writer moved backwards: {offset} < {self.pos}")
        if offset > self.pos:
            self.write(bytes(offset - self.pos))

    def commit(self) -> None:
        """fsync and rename into place."""
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        os.replace(self.tmp, self.path)
        self._committed = True
        try:
            dfd = os.open(self.path.parent, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)

    def uncommit(self) -> None:
        """Remove a committed file again (a later step of the same write failed)."""
        if self._committed:
            self.path.unlink(missing_ok=True)
            self._committed = False

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if not self._committed:
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass
