"""A small bounds-checked FlatBuffer reader.

Every position, offset, vector length, string and union tag is checked against
the buffer before use, and a decode budget (proportional to the buffer size)
stops aliased vectors from multiplying work. Problems raise FormatError
subclasses naming the field path, never IndexError/struct.error.
"""
from __future__ import annotations

import struct
from typing import Any, Container, NoReturn

from .errors import BadMagicError, InvalidValueError, OutOfBoundsError, TruncatedError

_SCALARS = {  # struct code -> size
    "b": 1, "B": 1, "?": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "Q": 8, "d": 8,
}
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")


class Reader:
    """Checked access to `buf[base : base + size]` (positions are relative to base)."""

    __slots__ = ("buf", "base", "size", "path", "budget")

    def __init__(self, buf: Any, base: int = 0, size: int | None = None, path: str | None = None):
        total = len(buf)
        if size is None:
            size = total - base
        if base < 0 or size < 0 or base + size > total:
            raise OutOfBoundsError("flatbuffer", f"region [{base}, +{size}) outside {total} bytes", path)
        self.buf, self.base, self.size, self.path = buf, base, size, path
        self.budget = 64 + 8 * size

    def fail(self, cls: type, where: str, detail: str) -> NoReturn:
        raise cls(where, detail, self.path)

    def check(self, pos: int, n: int, where: str) -> None:
        if pos < 0 or n < 0 or pos + n > self.size:
            if pos >= 0 and pos <= self.size:
                self.fail(TruncatedError, where, f"{n} bytes at offset {pos} run past the end ({self.size} bytes)")
            self.fail(OutOfBoundsError, where, f"offset {pos} outside the buffer ({self.size} bytes)")

    def charge(self, n: int, where: str) -> None:
        self.budget -= n
        if self.budget < 0:
            self.fail(InvalidValueError, where, "too many elements decoded for the buffer size (aliased vectors?)")

    def scalar(self, code: str, pos: int, where: str) -> Any:
        self.check(pos, _SCALARS[code], where)
        return struct.unpack_from("<" + code, self.buf, self.base + pos)[0]

    def deref(self, pos: int, where: str) -> int:
        """Follow the uoffset stored at pos."""
        self.check(pos, 4, where)
        target = pos + _U32.unpack_from(self.buf, self.base + pos)[0]
        self.check(target, 4, where)
        return target

    def root(self, identifier: bytes | None, where: str, table_where: str = "") -> "Table":
        """The root table; `where` names the buffer in errors, `table_where` prefixes field paths."""
        self.check(0, 8, where)
        if identifier is not None:
            got = bytes(self.buf[self.base + 4:self.base + 8])
            if got != identifier:
                self.fail(BadMagicError, where, f"file identifier {got!r}, expected {identifier!r}")
        return Table(self, self.deref(0, where), table_where)


class Table:
    """One table: checked field access by slot number (declaration order)."""

    __slots__ = ("r", "pos", "vt", "vtlen", "tlen", "where")

    def __init__(self, r: Reader, pos: int, where: str):
        w = where or "root"
        r.charge(1, w)
        r.check(pos, 4, w)
        vt = pos - _I32.unpack_from(r.buf, r.base + pos)[0]
        r.check(vt, 4, w + " (vtable)")
        vtlen, tlen = struct.unpack_from("<HH", r.buf, r.base + vt)
        if vtlen < 4 or vtlen % 2:
            r.fail(InvalidValueError, w, f"vtable length {vtlen} is invalid")
        r.check(vt, vtlen, w + " (vtable)")
        if tlen < 4:
            r.fail(InvalidValueError, w, f"table length {tlen} is invalid")
        r.check(pos, tlen, w)
        self.r, self.pos, self.vt, self.vtlen, self.tlen, self.where = r, pos, vt, vtlen, tlen, where

    def at(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def _offset(self, slot: int) -> int:
        """The field's offset inside the table as the vtable gives it; 0 if absent."""
        entry = 4 + 2 * slot
        if entry + 2 > self.vtlen:
            return 0
        return _U16.unpack_from(self.r.buf, self.r.base + self.vt + entry)[0]

    def _field(self, slot: int, n: int, name: str) -> int:
        """Absolute position of the field's n bytes, or 0 if absent."""
        off = self._offset(slot)
        if off == 0:
            return 0
        if off < 4 or off + n > self.tlen:
            self.r.fail(OutOfBoundsError, self.at(name), f"field offset {off} outside the table ({self.tlen} bytes)")
        return self.pos + off

    def has(self, slot: int) -> bool:
        return self._offset(slot) != 0

    def scalar(self, slot: int, code: str, name: str, default: Any = 0) -> Any:
        p = self._field(slot, _SCALARS[code], name)
        return default if p == 0 else self.r.scalar(code, p, self.at(name))

    def enum(self, slot: int, code: str, name: str, allowed: Container[int], default: int = 0) -> int:
        """A scalar that must be one of `allowed`."""
        v = self.scalar(slot, code, name, default)
        if v not in allowed:
            self.r.fail(InvalidValueError, self.at(name), f"invalid value {v}")
        return v

    def _target(self, slot: int, name: str) -> int:
        p = self._field(slot, 4, name)
        return 0 if p == 0 else self.r.deref(p, self.at(name))

    def table(self, slot: int, name: str) -> Table | None:
        t = self._target(slot, name)
        return None if t == 0 else Table(self.r, t, self.at(name))

    def _vector(self, slot: int, elem: int, name: str) -> tuple[int, int] | None:
        """(position of the first element, length) of a vector field."""
        v = self._target(slot, name)
        if v == 0:
            return None
        where = self.at(name)
        n = self.r.scalar("I", v, where)
        if n * elem > self.r.size - v - 4:
            self.r.fail(TruncatedError, where, f"vector of {n} elements runs past the end of the buffer")
        self.r.charge(n, where)
        return v + 4, n

    def string(self, slot: int, name: str) -> str | None:
        raw = self.raw(slot, name, string=True)
        if raw is None:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self.r.fail(InvalidValueError, self.at(name), f"string is not UTF-8 ({e.reason})")

    def raw(self, slot: int, name: str, string: bool = False) -> bytes | None:
        vec = self.span(slot, name, string)
        return None if vec is None else bytes(self.r.buf[self.r.base + vec[0]:self.r.base + vec[0] + vec[1]])

    def span(self, slot: int, name: str, string: bool = False) -> tuple[int, int] | None:
        """(buffer-relative position, length) of a byte vector or string."""
        vec = self._vector(slot, 1, name)
        if vec is None:
            return None
        if string:
            self.r.check(vec[0], vec[1] + 1, self.at(name))  # trailing NUL
        return vec

    def scalars(self, slot: int, code: str, name: str) -> tuple | None:
        vec = self._vector(slot, _SCALARS[code], name)
        if vec is None:
            return None
        pos, n = vec
        return struct.unpack_from(f"<{n}{code}", self.r.buf, self.r.base + pos)

    def tables(self, slot: int, name: str) -> list[Table] | None:
        vec = self._vector(slot, 4, name)
        if vec is None:
            return None
        pos, n = vec
        r = self.r
        return [Table(r, r.deref(pos + 4 * i, f"{self.at(name)}[{i}]"), f"{self.at(name)}[{i}]")
                for i in range(n)]

    def union(self, type_slot: int, name: str, members: int) -> tuple[int, Table | None]:
        """(tag, member table) of a union whose `_type` field is at type_slot."""
        tag = self.scalar(type_slot, "B", name + "_type")
        if tag > members:
            self.r.fail(InvalidValueError, self.at(name + "_type"), f"union tag {tag} out of range (1..{members})")
        if tag == 0:
            return 0, None
        t = self.table(type_slot + 1, name)
        if t is None:
            self.r.fail(InvalidValueError, self.at(name), f"union tag {tag} but no value")
        return tag, t
