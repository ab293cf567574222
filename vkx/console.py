"""Shared CLI plumbing: one-line errors with exit code 2, the rich console, safe strings, units."""
from __future__ import annotations

import functools
import os
import re
import sys
import unicodedata
from typing import Callable, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from vkx.format.errors import VkxError

F = TypeVar("F", bound=Callable)



def reader_gone() -> None:
    """stdout's reader has gone (`vkx ... | head` has its lines): what is still buffered goes nowhere."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """`vkx ... | head`: done, exit code 0 (rich's own exits with 1)."""
        reader_gone()
        raise SystemExit(0)


# Piped output is for grep and scripts: as wide as its lines, so no name or line is cut or wrapped.
PIPE_WIDTH = 1 << 16
console = _Console(highlight=False, width=None if sys.stdout.isatty() else PIPE_WIDTH)
stderr = _Console(highlight=False, stderr=True)

# Written as escapes: control characters (Cc: C0, DEL and C1; ESC starts terminal sequences, C1 0x9b
# is a one-byte CSI), format characters (Cf: U+202E RIGHT-TO-LEFT OVERRIDE and the other bidirectional
# controls, zero-width characters, U+FEFF) and the line and paragraph separators: they run, reorder
# or hide text.
HIDDEN = ("Cc", "Cf", "Zl", "Zp")
_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def plain(text: object) -> str:
    """`text` with every control, format or separator character written as a visible escape
    (`\\xNN`, `\\uNNNN`)."""
    s = str(text)
    if s.isascii():
        return _ASCII_CONTROL.sub(lambda m: _escape(m.group()), s)
    return "".join(_escape(c) if unicodedata.category(c) in HIDDEN else c for c in s)


def plain_lines(text: str) -> str:
    """`plain()` for each line: the line breaks stay, every other control character is escaped."""
    return "\n".join(plain(line) for line in text.split("\n"))


def safe(text: object) -> str:
    """A string from a file or a user, ready for rich: control characters and markup escaped."""
    return escape(plain(text))


def note(message: str) -> None:
    """Tell the user something on stderr, as one unwrapped `vkx: message` line (control characters escaped)."""
    print(f"vkx: {plain(message)}", file=sys.stderr)


def fail(message: str) -> NoReturn:
    """Print `vkx: error: message` on stderr and exit with code 2.

    Control characters are escaped line by line: a message that lists problems
    (the unsupported ops) keeps its lines, nothing else reaches the terminal raw.
    """
    print(f"vkx: error: {plain_lines(message)}", file=sys.stderr)
    raise typer.Exit(2)


def user_errors(command: F) -> F:
    """Turn vkx's typed errors and OS errors on user files into one-line exits."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except VkxError as error:
            fail(str(error))
        except BrokenPipeError:  # before OSError: the reader of stdout went away, not a user's file
            reader_gone()
            raise typer.Exit(0)
        except OSError as error:
            where = f" {error.filename}" if error.filename else ""
            fail(f"{error.strerror or error}{':' + where if where else ''}")
    return wrapper  # type: ignore[return-value]


MiB = 1 << 20


def size(n: int) -> str:
    """Bytes for people, in binary units (B, KiB, MiB, GiB), one decimal."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n} B"
