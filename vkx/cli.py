"""The `vkx` command line. Each command lives in its own `cmd_*` module and
imports heavy packages (torch, the Vulkan binding) only inside the command."""
from __future__ import annotations

import typer

from vkx import cmd_export, cmd_inspect, cmd_run

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Ship PyTorch models to Vulkan GPUs with the least memory at load time.",
)
app.command("export")(cmd_export.export)
app.command("inspect")(cmd_inspect.inspect)
app.command("validate")(cmd_inspect.validate)
app.command("run")(cmd_run.run)


def main() -> None:
    app()
