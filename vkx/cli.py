"""The `vkx` command line. Each command lives in its own `cmd_*` module and
imports heavy packages (torch, the Vulkan binding) only inside the command.

Usage errors (an unknown option, a bad value, a missing argument) print one
`vkx: error:` line and exit with code 2, like every other bad input.
"""
from __future__ import annotations

import atexit
import logging
import os
import sys
from enum import Enum
from typing import Optional, Sequence

import typer

import vkx
from vkx import cmd_devices, cmd_export, cmd_generate, cmd_inspect, cmd_perplexity, cmd_run
from vkx.console import option_message, plain, reader_gone

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help text: no boxes, no type placeholders
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Ship PyTorch models to Vulkan GPUs with the least memory at load time.",
)
app.command("export", short_help="Export a model file to a Vulkan .pte.")(cmd_export.export)
app.command("inspect", short_help="Show what is inside a .pte (no torch, no Vulkan).")(cmd_inspect.inspect)
app.command("validate", short_help="Check a .pte and its external data (no torch, no Vulkan).")(cmd_inspect.validate)
app.command("run", short_help="Load a .pte onto a Vulkan device and run it.")(cmd_run.run)
app.command("generate", short_help="Generate text with a causal LM .pte on a Vulkan device.")(cmd_generate.generate)
app.command("perplexity", short_help="A causal LM .pte's perplexity over a text, on a Vulkan device.")(
    cmd_perplexity.perplexity)
app.command("devices", short_help="List the Vulkan devices.")(cmd_devices.devices)


def _version(value: bool) -> None:
    if value:
        print(f"vkx {vkx.__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _options(ctx: typer.Context,
             version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")) -> None:
    if ctx.invoked_subcommand is None:  # plain `vkx`: the help, as a usage error
        print(ctx.get_help())
        raise typer.Exit(2)


def _number(text: str) -> str:
    """A bound as typed: 0, not 0.0."""
    return text[:-2] if text.endswith(".0") else text


def _bad_value(error: typer.BadParameter) -> str:
    """A value typer refused, in vkx's words (`--option: what is wrong (what is allowed)`), not pydantic's
    ("Input should be greater than or equal to 0"): the option's own choices and bounds say what is allowed."""
    if type(error) is not typer.BadParameter:  # a subclass: click's "Missing argument 'FILE'" says it well
        return error.format_message()
    param = error.param
    name = max(param.opts, key=len) if param.opts else param.human_readable_name
    # typer (0.29, pyproject's floor) validates values with pydantic, whose ValidationError says what failed;
    # any other cause is a command's own check (a callback), in its own words
    if type(error.__cause__).__name__ != "ValidationError":
        return option_message(name, error.message)
    problem = error.__cause__.errors()[0]
    value = str(problem["input"])
    shown = value if value and value == value.strip() else repr(value)
    described = param.type_descriptor
    if described.choices is not None:
        values = [c.value if isinstance(c, Enum) else str(c) for c in described.choices]
        return option_message(name, f"{shown} is not one of {', '.join(values)}")
    kind = "an integer" if described.annotation is int else "a number"
    low, high = (None if b is None else _number(str(b)) for b in (param.min, param.max))
    allowed = (f"{kind} from {low} to {high}" if low is not None and high is not None else
               f"{kind}, {low} or more" if low is not None else f"{kind}, {high} or less" if high is not None else
               None)
    bound = problem.get("ctx", {})
    if value.strip().lower() == "nan" or not bound:  # NaN fails the bound check: it is no number at all
        return option_message(name, f"{shown} is not {kind}", allowed)
    below = "ge" in bound or "gt" in bound
    return option_message(name, f"{shown} is {'less' if below else 'more'} than {low if below else high}", allowed)


_code = 1
"""The console script's exit code, for `_end` (1 until the command has returned or failed as vkx says)."""


def _end() -> None:
    """The console script's last exit function: the others have run (the device's close keeps the pipeline
    cache), and the process ends without the interpreter's teardown (every object freed, the Vulkan driver
    unloaded: 0.15 s on lavapipe, after the command printed its total), so that the seconds a command
    prints are the seconds its user waits."""
    logging.shutdown()  # registered before this function, so it would not run
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a reader that has gone: nothing is left to tell it
            pass
    os._exit(_code)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Run the command line (`argv` defaults to sys.argv[1:]) and exit with its code."""
    global _code
    if argv is None:  # the console script: this process ends with the command
        atexit.register(_end)  # first registered, so it runs last
    try:
        code = app(args=argv, prog_name="vkx", standalone_mode=False)
        sys.stdout.flush()  # here, not at exit: a reader that has gone is handled below
    except SystemExit as done:  # rich's own exit once stdout's reader has gone (console.py)
        code = done.code
    except typer.BadParameter as error:  # a value the option does not take
        print(f"vkx: error: {plain(_bad_value(error))}", file=sys.stderr)
        code = 2
    except typer.TyperException as error:  # click's usage errors: bad option, value or argument
        message = error.format_message() if hasattr(error, "format_message") else str(error)
        print(f"vkx: error: {plain(message)}", file=sys.stderr)
        code = 2
    except typer.Abort:
        print("vkx: error: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:
        reader_gone()  # `vkx ... | head`: the reader has what it wanted
        code = 0
    _code = code if isinstance(code, int) else 0
    sys.exit(_code)
