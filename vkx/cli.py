"""The `vkx` command line. Each command lives in its own `cmd_*` module and
imports heavy packages (torch, the Vulkan binding) only inside the command.

Usage errors (an unknown option, a bad value, a missing argument) print one
`vkx: error:` line and exit with code 2, like every other bad input.
"""
from __future__ import annotations

import sys
from typing import Optional, Sequence

import typer

import vkx
from vkx import cmd_devices, cmd_export, cmd_generate, cmd_inspect, cmd_perplexity, cmd_run
from vkx.console import plain, reader_gone

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


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Run the command line (`argv` defaults to sys.argv[1:]) and exit with its code."""
    try:
        code = app(args=argv, prog_name="vkx", standalone_mode=False)
        sys.stdout.flush()  # here, not at exit: a reader that has gone is handled below
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
    sys.exit(code if isinstance(code, int) else 0)
