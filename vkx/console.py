"""Shared CLI plumbing: one-line errors with exit code 2, the rich console, safe strings, units."""
from __future__ import annotations

import functools
import re
import sys
from typing import Callable, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from vkx.format.errors import VkxError

F = TypeVar("F", bound=Callable)

console = Console(highlight=False)
stderr = Console(highlight=False, stderr=True)

# C0, DEL and C1: ESC starts terminal sequences, C1 0x9b is a one-byte CSI, 0x9d a one-byte OSC.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def plain(text: object) -> str:
    """`text` with every control character written as a visible `\\xNN` escape."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


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
