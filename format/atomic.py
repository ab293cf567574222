"""Write a file atomically: a temp file in the target's folder, fsync, rename over the target.

Where the filesystem allows it (Linux `O_TMPFILE`), the temp file has no name while it is
written, so a writer that dies mid-write, even by SIGKILL, leaves nothing behind; it is linked
as `.NAME.<hex>.tmp` only for the instant before the rename. Elsewhere it is written under
that name. Either way its writer holds an `flock` on it, and every new write of the same
target first removes the `.NAME.<hex>.tmp` files whose lock is free (their writer is gone).
The same holds for `.NAME.<hex>.old`, the second name a write of a .pte + .ptd pair keeps of the
.ptd it replaces until the .pte is in place: a writer killed between the two renames leaves it,
and the next write of that target removes it.

Renames are made under `folder_lock`, an `flock` on the target's folder: the writer of a .pte +
.ptd pair holds it across both renames, so that two writes of one pair cannot interleave theirs.

Errors are `WriteError`s naming the target, never the hidden temp file.
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterator

from .errors import WriteError

try:
    import fcntl
except ImportError:  # no flock (Windows): temp files of dead writers cannot be told apart
    fcntl = None  # type: ignore[assignment]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# what open(O_TMPFILE) gives where the filesystem or kernel does not support it
_NO_TMPFILE = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL)


def _side(path: Path, kind: str) -> Path:
    """A fresh `.NAME.<hex>.KIND` beside `path` (KIND: tmp or old). Its 14 more bytes must fit the
    folder's name limit: a longer NAME is replaced by its digest there (a 255-byte target name, which
    the filesystem takes, made a temp name it refused)."""
    return path.parent / f".{_stem(path)}.{secrets.token_hex(4)}.{kind}"


def _stem(path: Path) -> str:
    name = os.fsencode(path.name)
    try:
        limit = os.pathconf(path.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    return path.name if len(name) + 14 <= limit else hashlib.sha256(name).hexdigest()[:32]


def temp_name(path: Path) -> Path:
    """A fresh `.NAME.<hex>.tmp` beside `path`."""
    return _side(path, "tmp")


def remove_stale(path: Path) -> list[str]:
    """Remove the temp files and kept old files of `path` left by writers that died (lock free);
    returns their names."""
    if fcntl is None:
        return []
    pattern = re.compile(re.escape(f".{_stem(path)}.") + r"[0-9a-f]{8}\.(tmp|old)")
    removed = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return []
    for entry in entries:
        if not pattern.fullmatch(entry.name) or not entry.is_file(follow_symlinks=False):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a live writer: BlockingIOError
            if os.path.samestat(os.fstat(fd), os.lstat(entry.path)):
                os.unlink(entry.path)
                removed.append(entry.name)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


@contextmanager
def folder_lock(*paths: str | os.PathLike) -> Iterator[None]:
    """Hold an `flock` on the folder of each path (each folder once, in one order, so two writers
    cannot deadlock) until the block ends. A folder that cannot be opened for reading (mode -wx) or
    locked (some network filesystems) is written unlocked, as before locks were taken."""
    folders = sorted({os.path.realpath(Path(p).absolute().parent) for p in paths})
    with ExitStack() as held:
        for folder in folders:
            try:
                fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
            except OSError:
                continue
            held.callback(os.close, fd)
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)  # released by the close, also when the process dies
                except OSError:
                    pass
        yield


class AtomicFile:
    """Context manager; call commit() before leaving, or nothing is left behind.

    With `digest`, every byte `write()` passes on is hashed too (sha256: `self.sha`); bytes
    `write_at()` patches in are not.
    """

    def __init__(self, path: str | os.PathLike, on_bytes: Callable[[int], None] | None = None,
                 digest: bool = False):
        self.path = Path(path)
        self.on_bytes = on_bytes
        self.sha = hashlib.sha256() if digest else None
        self.pos = 0
        self._committed = False
        self._old: Path | None = None  # a link to the file commit(keep_old=True) replaced
        self._old_fd = -1  # holds the flock that tells remove_stale the old file's writer is alive
        self.tmp = temp_name(self.path)
        remove_stale(self.path)
        try:
            self.fd, self._named = self._create()
        except OSError as error:
            raise WriteError(self.path, error) from error

    def _create(self) -> tuple[int, bool]:
        """(fd, whether the temp file has a name); the file is locked against remove_stale."""
        flags = os.O_WRONLY | _CLOEXEC
        fd, named = -1, True
        if hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd"):
            try:
                # the mode is 0o666 less the umask, as for any new file (mkstemp would give 0o600)
                fd, named = os.open(self.path.parent, flags | os.O_TMPFILE, 0o666), False
            except OSError as error:
                if error.errno not in _NO_TMPFILE:
                    raise
        if fd < 0:
            fd = os.open(self.tmp, flags | os.O_CREAT | os.O_EXCL, 0o666)
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        return fd, named

    def write(self, data) -> None:
        mv = memoryview(data).cast("B")
        done = 0
        try:
            while done < mv.nbytes:
                done += os.write(self.fd, mv[done:])
        except OSError as error:
            raise WriteError(self.path, error) from error
        if self.sha is not None:
            self.sha.update(mv)
        self.pos += mv.nbytes
        if self.on_bytes is not None and mv.nbytes:
            self.on_bytes(mv.nbytes)

    def write_at(self, offset: int, data: bytes) -> None:
        """Overwrite bytes already written (a field whose value is known only at the end)."""
        if offset + len(data) > self.pos:
            raise AssertionError(f"write_at past the bytes written: {offset} + {len(data)} > {self.pos}")
        done = 0
        try:
            while done < len(data):
                done += os.pwrite(self.fd, data[done:], offset + done)
        except OSError as error:
            raise WriteError(self.path, error) from error

    def pad_to(self, offset: int) -> None:
        if offset < self.pos:
            raise AssertionError(f"writer moved backwards: {offset} < {self.pos}")
        if offset > self.pos:
            self.write(bytes(offset - self.pos))

    def commit(self, keep_old: bool = False) -> None:
        """fsync and rename into place; with `keep_old`, uncommit() can bring back the file replaced."""
        try:
            os.fsync(self.fd)
            if not self._named:
                # linkat(AT_SYMLINK_FOLLOW) through /proc names an O_TMPFILE inode (src_dir_fd makes
                # os.link use linkat; the path is absolute, so the fd itself is not used)
                dfd = os.open(self.path.parent, os.O_RDONLY | _CLOEXEC)
                try:
                    os.link(f"/proc/self/fd/{self.fd}", self.tmp, src_dir_fd=dfd, follow_symlinks=True)
                finally:
                    os.close(dfd)
                self._named = True
            if keep_old and self.path.is_file():
                self._old = self._keep_old()
            os.replace(self.tmp, self.path)
        except OSError as error:
            self._drop_old()
            raise WriteError(self.path, error) from error
        self._committed = True
        os.close(self.fd)
        self.fd = -1
        _fsync_folder(self.path.parent)

    def _keep_old(self) -> Path:
        """A second name for the file at `path`, so that it survives the rename over it; locked
        (as a temp file is) for as long as this writer may need it."""
        old = _side(self.path, "old")
        try:
            os.link(self.path, old)
        except OSError:  # no hard links on this filesystem: move it (the path is briefly absent)
            os.rename(self.path, old)
        if fcntl is not None:
            try:
                self._old_fd = os.open(old, os.O_RDONLY | os.O_NOFOLLOW | _CLOEXEC)
                fcntl.flock(self._old_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # unreadable, or locked by someone else: remove_stale leaves it alone too
                pass
        return old

    def _release_old(self) -> None:
        if self._old_fd >= 0:
            os.close(self._old_fd)
            self._old_fd = -1
        self._old = None

    def _drop_old(self) -> None:
        """The rename did not happen: the old file keeps (or gets back) its name alone."""
        if self._old is None:
            return
        if self.path.exists():
            self._old.unlink(missing_ok=True)
        else:
            os.replace(self._old, self.path)
        self._release_old()

    def uncommit(self) -> None:
        """Undo commit() (a later step of the same write failed): bring back the old file, or remove."""
        if not self._committed:
            return
        self._committed = False
        try:
            if self._old is not None:
                os.replace(self._old, self.path)
                self._release_old()
            else:
                self.path.unlink(missing_ok=True)
        except OSError as error:
            raise WriteError(self.path, error) from error
        _fsync_folder(self.path.parent)

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self._named and not self._committed:
            self.tmp.unlink(missing_ok=True)
        if self._old is not None and self._committed:
            self._old.unlink(missing_ok=True)
        self._release_old()


def _fsync_folder(folder: Path) -> None:
    """Make a rename durable (best effort: some filesystems cannot fsync a folder)."""
    try:
        dfd = os.open(folder, os.O_RDONLY | _CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
