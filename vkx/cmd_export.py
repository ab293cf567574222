"""`vkx export model.py`: lower a model file to a Vulkan-delegated `.pte`."""
from __future__ import annotations

import json
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.filesize import decimal
from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from vkx.console import console, user_errors

if TYPE_CHECKING:
    from vkx.export import ExportReport


class Layout(str, Enum):
    named = "named"
    legacy = "legacy"


class Dtype(str, Enum):
    keep = "keep"
    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"


class _Bytes(ProgressColumn):
    """Bytes done / total, for stages that move bytes."""

    def render(self, task) -> Text:
        if not task.total or task.total <= 1:
            return Text("")
        return Text(f"{decimal(int(task.completed))} / {decimal(int(task.total))}")


class _Display:
    """One progress row per stage (load, torch.export, lower, plan, write)."""

    def __init__(self, bars: Progress):
        self.bars = bars
        self.task = None
        self.total = 0

    def stage(self, name: str, total_bytes: int = 0) -> None:
        self.done()
        self.task = self.bars.add_task(name, total=total_bytes or None)
        self.total = total_bytes or 1

    def advance(self, nbytes: int) -> None:
        self.bars.advance(self.task, nbytes)

    def done(self) -> None:
        """Show the current stage as finished."""
        if self.task is not None:
            self.bars.update(self.task, total=self.total, completed=self.total)
            self.task = None


@user_errors
def export(
    model: Path = typer.Argument(..., help="Python file whose get_model() returns (module, example_inputs)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="The .pte to write [default: beside model]."),
    layout: Layout = typer.Option(Layout.named, help="Where constants go: named data, or inside the delegate blob."),
    external_data: Optional[Path] = typer.Option(
        None, "--external-data", help="Write the weights to this .ptd or .safetensors instead of the .pte."),
    dtype: Dtype = typer.Option(
        Dtype.keep, help="Floating type of weights, activations, inputs and outputs (keep: the model's own)."),
    weights: Optional[Path] = typer.Option(None, help="Load this safetensors state dict into the model first."),
    alignment: Optional[int] = typer.Option(None, help="Alignment of each constant's bytes in the file."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print one line instead of the progress display."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as one JSON object instead."),
) -> None:
    """Export a PyTorch model to a Vulkan .pte (ExecuTorch 1.5.1 compatible)."""
    from vkx.export import ExportError, export_model, load_model_file, load_weights
    from vkx.export.api import check_options

    if not model.is_file():
        raise ExportError(f"model file not found: {model}")
    if weights is not None and not weights.is_file():
        raise ExportError(f"weights file not found: {weights}")
    output = output or model.with_suffix(".pte")
    check_options(output, layout=layout.value, external_data=external_data, dtype=dtype.value, alignment=alignment)
    bars = Progress(SpinnerColumn(), TextColumn("{task.description:<13}"), BarColumn(), _Bytes(),
                    TimeElapsedColumn(), console=console, disable=quiet or json_out)
    started = time.perf_counter()
    with bars:
        display = _Display(bars)
        display.stage("load")
        module, example_inputs = load_model_file(model)
        if weights is not None:
            load_weights(module, weights)
        report = export_model(module, example_inputs, output, layout=layout.value, external_data=external_data,
                              dtype=dtype.value, alignment=alignment, progress=display)
        display.done()
    seconds = time.perf_counter() - started
    print(json.dumps(as_json(report, seconds)) if json_out else summary(report, seconds))


def as_json(report: ExportReport, seconds: float) -> dict:
    """The report for scripts: sizes in bytes, times in seconds."""
    memory = report.memory
    return {"path": report.path, "external_path": report.external_path, "file_bytes": report.file_bytes,
            "external_bytes": report.external_bytes, "constant_bytes": report.constant_bytes,
            "constants": report.constants, "distinct_constants": report.distinct_constants,
            "operators": report.operators,
            "activations": {"bytes": memory.total_nbytes, "objects": len(memory.object_nbytes),
                            "peak_live_bytes": memory.peak_live_nbytes},
            "stage_seconds": report.seconds, "seconds": seconds}


def summary(report: ExportReport, seconds: float) -> str:
    """One line: what was written, how big, and the activation plan."""
    where = report.path + (f" + {report.external_path} ({decimal(report.external_bytes)})"
                           if report.external_path else "")
    memory = report.memory
    return (f"wrote {where}: {decimal(report.file_bytes)}, {report.operators} ops, "
            f"{report.distinct_constants} constants ({decimal(report.constant_bytes)}), "
            f"activations {decimal(memory.total_nbytes)} in {len(memory.object_nbytes)} objects "
            f"(peak live {decimal(memory.peak_live_nbytes)}), {seconds:.2f} s")
