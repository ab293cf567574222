"""Shared CLI plumbing: one-line errors with exit code 2, and the rich console."""
from __future__ import annotations

import functools
import sys
from typing import Callable, TypeVar

import typer
from rich.console import Console

from vkx.format.errors import VkxError

F = TypeVar("F", bound=Callable)

console = Console(highlight=False)


def fail(message: str) -> None:
    """Print `vkx: error: message` on stderr and exit with code 2."""
    print(f"vkx: error: {message}", file=sys.stderr)
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
