"""Shared CLI plumbing: one-line errors with exit code 2, the rich console, safe strings, units, the
transient status of a load, and the seconds the user has waited."""
from __future__ import annotations

import functools
import io
import os
import re
import sys
import time
import unicodedata
from contextlib import redirect_stderr
from typing import Callable, NoReturn, Optional, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn
from rich.table import Column
from rich.text import Text

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


def option_message(option: str, problem: str, allowed: Optional[str] = None) -> str:
    """A bad option value in the one form every command gives it: `--option: problem (allowed)`."""
    return f"{option}: {problem}" + (f" ({allowed})" if allowed else "")


def fail(message: str | VkxError) -> NoReturn:
    """Print `vkx: error: message` on stderr, as one line whatever it holds (a file name with a line
    break), then a typed error's `details` a line each, and exit with code 2."""
    details = message.details if isinstance(message, VkxError) else ()
    head = Exception.__str__(message) if details else str(message)
    print("\n".join([f"vkx: error: {plain(head)}", *(f"  {plain(line)}" for line in details)]), file=sys.stderr)
    raise typer.Exit(2)


def user_errors(command: F) -> F:
    """Turn vkx's typed errors and OS errors on user files into one-line exits."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except VkxError as error:
            fail(error)
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


_IMPORTED = time.monotonic()


def elapsed() -> float:
    """Seconds since this process started: what the user has waited, interpreter and imports included
    (/proc's start time; where there is none, since vkx's CLI was imported)."""
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, after the command name
        return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError):  # no /proc, or no CLOCK_BOOTTIME (not Linux)
        return time.monotonic() - _IMPORTED


class _Done(ProgressColumn):
    """How far the current step is: weight bytes uploaded, or a count; nothing while the total is unknown."""

    def render(self, task) -> Text:
        if not task.total:
            return Text("")
        if task.fields.get("weights"):
            return Text(f"weights {size(int(task.completed))} / {size(int(task.total))}")
        return Text(f"{int(task.completed)}/{int(task.total)}")


class Status:
    """What a command is doing while the user waits (loading, uploading weights, warming up), as one
    transient line on stderr, drawn on a terminal only and when `shown`: it is gone once the command has
    something to show, or an error. Notes the loader prints on stderr meanwhile (pipelines compiled) are
    held back: printed after the line on success; dropped on failure, so that the error line is all
    that is left on the screen.
    """

    def __init__(self, text: str, shown: bool):
        self._notes = io.StringIO()
        self._redirect = redirect_stderr(self._notes)
        # its own console on the stderr of now: the notes' redirection must not take the line with it
        screen = _Console(highlight=False, file=sys.stderr)
        # the text takes what the bar and the count leave of the width (a long path is cut, not the count)
        text_column = TextColumn("{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis"))
        self._bars = Progress(text_column, BarColumn(bar_width=20), _Done(), console=screen, expand=True,
                              transient=True, redirect_stderr=False, disable=not (shown and screen.is_terminal))
        self._task = self._bars.add_task(safe(text), total=None)
        self._open = False

    def __enter__(self) -> "Status":
        self._bars.start()
        self._redirect.__enter__()
        self._open = True
        return self

    def __exit__(self, kind, *_) -> None:
        self.done(ok=kind is None)

    def show(self, text: str, total: Optional[int] = None) -> None:
        """A new step: `text`, and a count up to `total` when given (`count`)."""
        self._bars.remove_task(self._task)
        self._task = self._bars.add_task(safe(text), total=total)
        self._bars.refresh()

    def count(self, done: int, total: int) -> None:
        """`done` of the step's `total` (a progress callback: the windows scored)."""
        self._bars.update(self._task, completed=done, total=total)

    def weights(self, done: int, total: int) -> None:
        """Weight bytes uploaded (`vkx.load`'s progress callback)."""
        self._bars.update(self._task, completed=done, total=total, weights=True)

    def done(self, ok: bool = True) -> None:
        """Remove the line; the notes held back are printed when `ok`."""
        if not self._open:
            return
        self._open = False
        self._redirect.__exit__(None, None, None)
        self._bars.stop()
        if ok:
            sys.stderr.write(self._notes.getvalue())
            sys.stderr.flush()
