"""`vkx export model.py`: lower a model file to a Vulkan-delegated `.pte`."""
from __future__ import annotations

import io
import json
import logging
import os
import sys
import time
import traceback
import warnings
from contextlib import contextmanager, redirect_stderr
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

import typer
from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from vkx import paths
from vkx.console import console, elapsed, fail, plain, plain_lines, size, user_errors
from vkx.format import ProgramFile
from vkx.format.describe import owns_external
from vkx.format.dtypes import DTYPE_CHOICES
from vkx.format.external import EXTERNAL_SUFFIXES
from vkx.format.errors import FormatError, VkxError
from vkx.format.metadata import written_at

if TYPE_CHECKING:
    from vkx.export import ExportReport

SCHEMA = "vkx.export/2"


Layout = paths.choices("Layout", ("named", "legacy"))
Dtype = paths.choices("Dtype", DTYPE_CHOICES)
"""`--dtype`: the library's choices (vkx.format.dtypes.DTYPE_CHOICES)."""
Target = paths.choices("Target", ("vkx", "executorch"))
Quantize = paths.choices("Quantize", ("int8", "int4"))
TableQuantize = paths.choices("TableQuantize", ("int8", "int4", "none"))
"""The token embedding's and the head's scheme (none: kept as they are)."""


GROUP_SIZES = (32, 64, 128, 256)


def _floating_type(value: str) -> str:
    """--dtype's value, checked: integer types are --quantize's, and the message says so."""
    if value in (q.value for q in Quantize):
        raise typer.BadParameter(f"{value} is not a floating type: for {value} weights use --quantize {value}")
    if value not in (d.value for d in Dtype):
        raise typer.BadParameter(f"{value} is not one of {', '.join(d.value for d in Dtype)}")
    return value


class _Bytes(ProgressColumn):
    """Bytes done / total, for stages that move bytes."""

    def render(self, task) -> Text:
        if not task.total or task.total <= 1:
            return Text("")
        return Text(f"{size(int(task.completed))} / {size(int(task.total))}")


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


@contextmanager
def _quiet_torch(verbose: bool) -> Iterator[None]:
    """Hold back what torch.export writes on its own: log records, warnings, and the graph it
    prints to stderr when it fails (20+ lines); vkx's one error line says what failed."""
    if verbose:
        yield
        return
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def _print_user_traceback(error: BaseException, model: Path) -> None:
    """The traceback of an error raised by the model file's own code, from its first frame in that file."""
    cause = error.__cause__
    if cause is None:
        return
    frames = traceback.extract_tb(cause.__traceback__)
    mine = [i for i, f in enumerate(frames) if paths.is_same_file(Path(f.filename), model)]
    if not mine:
        return
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames[mine[0]:]),
             *traceback.format_exception_only(cause)]
    print(plain_lines("".join(lines)), end="", file=sys.stderr)


def _is_folder(model: Path, weights: Optional[Path], lengths: tuple[Optional[int], Optional[int]]) -> bool:
    """Whether MODEL is a Hugging Face model folder (a directory with a config.json), and the
    options that go with one only (--max-seq-len, --prefill-len) or with a model file only (--weights)."""
    folder = model.is_dir() and (model / "config.json").is_file()
    if model.is_dir() and not folder:
        raise paths.UsageError(f"{model} is a folder without config.json: vkx export takes a .py file defining "
                               "get_model() or a Hugging Face model folder")
    if folder and weights is not None:
        raise paths.UsageError("--weights is for a model file: a model folder's weights are its safetensors files")
    if not folder and lengths != (None, None):
        raise paths.UsageError("--max-seq-len and --prefill-len are for a Hugging Face model folder")
    return folder


def _check_paths(model: Path, output: Optional[Path], external_data: Optional[Path], weights: Optional[Path],
                 layout: Layout, alignment: Optional[int], quantize: Optional["Quantize"],
                 group_size: Optional[int], tables: dict[str, Optional["TableQuantize"]], folder: bool,
                 force: bool) -> Path:
    """Every path and option checked before torch is imported; the .pte path to write."""
    if not folder:
        paths.model_file(model)
        if model.suffix.lower() != ".py":  # else its default output, MODEL.pte, could be another model's
            raise paths.UsageError(f"{model} is not a Python file: vkx export takes a .py file defining get_model(), "
                                   "or a Hugging Face model folder")
    inputs = [model]
    if weights is not None:
        if weights.is_dir() or not weights.exists():
            raise paths.UsageError(f"--weights {weights}: weights file not found (a .safetensors state dict)")
        inputs.append(weights)
    default = model.parent / f"{model.name}.pte" if folder else model.with_suffix(".pte")
    given = output
    output = paths.output_file(output or default, "-o", "the output (a program)", (".pte",),
                               inputs)
    if given is None and os.path.lexists(output) and not _exported_from(output, model):
        raise paths.UsageError(f"{output} exists and was not exported from {model}: pass -o {output} to replace it")
    if external_data is not None:
        if layout == Layout.legacy:
            raise paths.UsageError("--external-data: external data needs the named layout "
                                   "(--layout legacy keeps weights in the delegate blob)")
        if not folder:  # a folder's export tells its checkpoint (weights by reference) from a file to write
            paths.output_file(external_data, "--external-data", "external data", EXTERNAL_SUFFIXES, inputs)
            if external_data.exists() and not force and not owns_external(output, external_data):
                raise paths.UsageError(f"--external-data {external_data} exists and {output} was not written with "
                                       "it (another program's weights, or a file of your own): --force replaces it")
        if paths.is_same_file(external_data, output):
            raise paths.UsageError(f"--external-data {external_data} is the output .pte")
    if alignment is not None and (alignment <= 0 or alignment & (alignment - 1)):
        raise paths.UsageError(f"--alignment must be a positive power of two, not {alignment}")
    if group_size is not None and (quantize is None or group_size not in GROUP_SIZES):
        raise paths.UsageError(f"--group-size {group_size}: needs --quantize, and one of "
                               f"{', '.join(map(str, GROUP_SIZES))}")
    for option, value in tables.items():
        if value is not None and quantize is None:
            raise paths.UsageError(f"{option} needs --quantize")
    return output


def _exported_from(program: Path, source: Path) -> bool:
    """Whether the .pte at `program` records that vkx exported it from `source` (docs/format.md,
    "Program metadata"): the one kind of file a default output replaces."""
    try:
        with ProgramFile.open(program) as pf:
            recorded = pf.metadata.source
        return recorded is not None and paths.is_same_file(written_at(program).parent / recorded, source)
    except (FormatError, OSError):  # not a program, not vkx's, unreadable
        return False


@user_errors
def export(
    model: Path = typer.Argument(..., metavar="MODEL", hidden=True),  # the docstring says what it is
    output: Optional[Path] = typer.Option(
        None, "-o", "--output", metavar="FILE.pte",
        help="The .pte to write, replacing any file there [default: MODEL.pte beside the model, which replaces "
             "only a program exported from MODEL]."),
    layout: Layout = typer.Option(Layout.named, help="Where constants go: named data, or inside the delegate blob."),
    external_data: Optional[Path] = typer.Option(
        None, "--external-data", metavar="FILE",
        help="Write the weights to this .ptd or .safetensors instead of the .pte. For a model folder, naming "
             "its checkpoint (the folder, its model.safetensors, index or shards) references the weights in it."),
    dtype: str = typer.Option(
        Dtype.keep.value, metavar="keep|fp32|fp16|bf16", callback=_floating_type,
        help="Floating type of weights, activations, inputs and outputs (keep: the model's own)."),
    weights: Optional[Path] = typer.Option(None, metavar="FILE.safetensors",
                                           help="Load this safetensors state dict into the model first."),
    alignment: Optional[int] = typer.Option(None, metavar="BYTES",
                                            help="Alignment of each constant's bytes in the file (a power of two)."),
    quantize: Optional[Quantize] = typer.Option(
        None, help="Weight-only quantization of every Linear weight: int4 affine (scale and offset a group), int8 "
                   "symmetric; fp16 scales (bf16 for a bf16 model)."),
    group_size: Optional[int] = typer.Option(
        None, metavar="N", help="Values per scale: 32, 64, 128 or 256 [default: int4 32, int8 one per row]."),
    quantize_embedding: Optional[TableQuantize] = typer.Option(
        None, "--quantize-embedding", help="The token embeddings' quantization, or none [default: int8, one scale "
                                           "a row]."),
    quantize_head: Optional[TableQuantize] = typer.Option(
        None, "--quantize-head", help="Model folder: the output projection's (lm_head) quantization, or none; a head "
                                      "tied to the embedding follows --quantize-embedding [default: int8]."),
    score: bool = typer.Option(False, "--score", help="Model folder: also export method score, every position's "
                                                      "logits of a --max-seq-len window (for vkx perplexity)."),
    target: Target = typer.Option(Target.vkx, help="The runtime the graph is for: vkx's loader, or ExecuTorch's "
                                                 "C++ Vulkan runtime (vkx's loader runs both)."),
    max_seq_len: Optional[int] = typer.Option(
        None, "--max-seq-len", min=1, metavar="N",
        help="Model folder: positions of the KV cache (prompt + new tokens) [default: 512, or the model's positions].", show_default=False),
    prefill_len: Optional[int] = typer.Option(
        None, "--prefill-len", min=1, metavar="N",
        help="Model folder: tokens per prefill call (longer prompts take several) [default: 32].",
        show_default=False),
    force: bool = typer.Option(False, "--force", help="Replace an --external-data file that the output .pte was "
                                                      "not written with."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print one line instead of the progress display."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as one JSON object (schema vkx.export/2)."),
    verbose: bool = typer.Option(False, "--verbose", "-v",
                                 help="On failure, show the model code's traceback and torch's own messages."),
) -> None:
    """Export MODEL to a Vulkan .pte (ExecuTorch 1.5.1 compatible). MODEL is a Python file whose get_model()
    returns (module, example_inputs), or a Hugging Face causal LM folder (config.json, safetensors weights or
    none for random ones), exported as methods prefill and decode with a KV cache."""
    folder = _is_folder(model, weights, (max_seq_len, prefill_len))
    if not folder and (score or quantize_head is not None):
        raise paths.UsageError(f"{'--score' if score else '--quantize-head'} is for a Hugging Face model folder")
    tables = {"--quantize-embedding": quantize_embedding, "--quantize-head": quantize_head}
    output = _check_paths(model, output, external_data, weights, layout, alignment, quantize, group_size, tables,
                          folder, force)
    paths.check_address_space("vkx export", "torch")
    existing = [str(p) for p in (output, external_data) if p is not None and p.exists()]
    bars = Progress(SpinnerColumn(), TextColumn("{task.description:<13}"), BarColumn(), _Bytes(),
                    TimeElapsedColumn(), console=console, disable=quiet or json_out)
    console_was_quiet = console.quiet
    try:
        with bars:
            try:
                display = _Display(bars)
                display.stage("import torch")  # seconds of its own: shown, and counted in the total
                t0 = time.perf_counter()
                with _quiet_torch(verbose):  # transformers warns about configs on stderr
                    from vkx.export import export_model, load_model_file, load_weights
                    if folder:
                        from vkx.export.hf import check_lengths, checkpoint_files, export_folder, read_folder
                        max_seq_len, prefill_len = check_lengths(model, max_seq_len, prefill_len)
                        if external_data is not None:
                            checkpoint_files(read_folder(model), external_data)
                import_seconds = time.perf_counter() - t0
                display.stage("load")
                options = dict(layout=layout.value, external_data=external_data, dtype=dtype, alignment=alignment,
                               quantize=quantize.value if quantize else None, group_size=group_size,
                               quantize_embedding=quantize_embedding.value if quantize_embedding else None,
                               progress=display, source=model)
                if folder:
                    with _quiet_torch(verbose):
                        report = export_folder(model, output, max_seq_len=max_seq_len, prefill_len=prefill_len,
                                               target=target.value, score=score,
                                               quantize_head=quantize_head.value if quantize_head else None,
                                               **options)
                else:
                    module, example_inputs = load_model_file(model)
                    if weights is not None:
                        load_weights(module, weights)
                    with _quiet_torch(verbose):
                        report = export_model(module, example_inputs, output, target=target.value, **options)
                display.done()
            except BaseException:
                # a failed export leaves no progress rows, its error line says it all: erased from a
                # terminal, and never written to a pipe or file (rich writes a final render, or a newline)
                bars.live.transient = True
                console.quiet = not console.is_terminal
                raise
    except VkxError as error:
        if verbose:
            _print_user_traceback(error, model)
        fail(error)
    finally:  # the console outlives this call where the CLI runs in-process (tests, scripts)
        console.quiet = console_was_quiet
    seconds = elapsed()  # since the process started: importing Python, vkx and torch included, as the user waits
    replaced = [p for p in existing if p in (report.path, report.external_path)]  # not a referenced checkpoint
    stage_seconds = {"import": import_seconds, **report.seconds}
    print(json.dumps(as_json(report, stage_seconds, seconds, replaced)) if json_out
          else summary(report, seconds, replaced))


def as_json(report: ExportReport, stage_seconds: dict[str, float], seconds: float, replaced: list[str]) -> dict:
    """The report for scripts (schema vkx.export/2): sizes in bytes, times in seconds."""
    memory = report.memory
    return {"schema": SCHEMA, "path": report.path, "replaced": replaced,
            "external_path": report.external_path, "file_bytes": report.file_bytes,
            "external_bytes": report.external_bytes, "constant_bytes": report.constant_bytes,
            "constants": report.distinct_constants, "constant_references": report.constants,
            "operators": report.operators, "methods": report.methods,
            "referenced_files": report.referenced_files, "referenced_bytes": report.referenced_bytes,
            "activations": {"bytes": memory.total_nbytes, "objects": len(memory.object_nbytes),
                            "peak_live_bytes": memory.peak_live_nbytes},
            "stage_seconds": stage_seconds, "seconds": seconds}


def summary(report: ExportReport, seconds: float, replaced: list[str]) -> str:
    """One line: what was written (and which existing files that replaced), how big, the activation plan."""
    def named(path: str) -> str:
        return path + (" (replaced the existing file)" if path in replaced else "")

    where = named(report.path) + (f" + {named(report.external_path)} ({size(report.external_bytes)})"
                                  if report.external_path else "")
    if report.referenced_files:
        shown = ", ".join(Path(f).name for f in report.referenced_files[:2])
        more = f" and {len(report.referenced_files) - 2} more" if len(report.referenced_files) > 2 else ""
        where += f" (referencing {size(report.referenced_bytes)} of weights in {shown}{more})"
    memory = report.memory
    methods = f"{len(report.methods)} methods ({', '.join(report.methods)}), " if len(report.methods) > 1 else ""
    line = (f"wrote {where}: {size(report.file_bytes)}, {methods}{report.operators} ops, "
            f"{report.distinct_constants} constants ({size(report.constant_bytes)}), "
            f"activations {size(memory.total_nbytes)} in {len(memory.object_nbytes)} objects "
            f"(peak live {size(memory.peak_live_nbytes)}), {seconds:.2f} s")
    return plain(line)
