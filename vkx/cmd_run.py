"""`vkx run`: load a .pte onto the Vulkan device, run it, report time and memory."""
from __future__ import annotations

import json as jsonlib
import statistics
import time
from pathlib import Path
from typing import Collection, List, Optional, Sequence

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from vkx import paths
from vkx.console import (MiB, Status, console, elapsed, fail, note, option_message, plain_lines, safe,
                         size, stderr, user_errors)
from vkx.format import ExternalData, FormatError, dtypes
from vkx.format.atomic import AtomicFile
from vkx.format.headers import safetensors_header
from vkx.loader.gpu.limits import PROFILES
from vkx.loader.upload.options import SCHEDULES, UPLOADS

SCHEMA = "vkx.run/2"
FILE = typer.Argument(..., metavar="FILE", hidden=True)  # each command's docstring says what it is
EXTERNAL = typer.Option([], "--external-data", metavar="FILE",
                        help="A .ptd or .safetensors file with named data (repeatable) "
                             "[default: FILE's same-stem .ptd/.safetensors when FILE needs one].")
DEVICE = typer.Option(None, "--device", metavar="INDEX|NAME",
                      help="Device index or name substring, as vkx devices lists them "
                           "[default: VKX_DEVICE, else the first GPU].")
Profile = paths.choices("Profile", PROFILES)
"""`--profile`: the device profiles vkx.loader.gpu.limits knows."""
PROFILE = typer.Option(None, "--profile", metavar="NAME",
                       help=f"Use a device profile's limits and features where lower than the device's: "
                            f"{', '.join(PROFILES)} (vkx devices --profile NAME lists them) "
                            "[default: VKX_DEVICE_PROFILE].")
"""The options of every command that opens a device (run, generate, perplexity)."""
SEED = typer.Option(0, "--seed", min=0, metavar="N", help="Seed of the random inputs.")


Schedule = paths.choices("Schedule", SCHEDULES)
Upload = paths.choices("Upload", UPLOADS)


def _random_inputs(specs, seed: int):
    import numpy as np
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in specs:
        dt = np.dtype("float32" if dtype == "bfloat16" else dtype)  # numpy has no bfloat16: run_numpy rounds
        if dt.kind == "f":
            out.append(rng.standard_normal(shape).astype(dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, shape).astype(bool))
        else:  # zeros: a token id, a position and an index every program takes (a call checks their range)
            out.append(np.zeros(shape, dt))
    return out


def _check_inputs_file(path: Path) -> None:
    """--inputs must be a readable safetensors file (checked before the device is touched)."""
    if path.is_dir() or not path.exists():
        raise paths.UsageError(f"--inputs {path}: no such file (a .safetensors with input_0, input_1, ...)")
    try:
        with ExternalData.open(path) as f:
            kind = f.kind
    except FormatError as error:
        raise paths.UsageError(f"--inputs {path} is not a safetensors file ({error.detail})") from error
    if kind != "safetensors":
        raise paths.UsageError(f"--inputs {path} is a .{kind}, not a safetensors file")


def _input_keys(path: Path, found: Collection[str], names: Sequence[str | None]) -> list[str]:
    """The --inputs tensors for inputs named `names` (None: unnamed), in input order: the model's input
    names, else input_0, input_1, ..., else all of `found` by name where it holds exactly as many."""
    numbered = [f"input_{i}" for i in range(len(names))]
    for keys in ([n for n in names if n is not None], numbered):
        if len(keys) == len(names) and all(k in found for k in keys):
            return keys
    if len(found) == len(names):
        return sorted(found)
    if all(names):
        wanted = ", ".join(n for n in names if n)
    else:
        wanted = ", ".join(numbered) if len(names) < 4 else f"input_0..input_{len(names) - 1}"
    raise paths.UsageError(f"--inputs {path}: expected tensors {wanted} (or exactly {len(names)} tensors), "
                           f"found {sorted(found)}")


def _check_inputs(path: Path, model: Path, method: str) -> None:
    """The --inputs tensors against `method`'s inputs as the file declares them, before anything is
    loaded (a large model's load is minutes): the ones _input_keys picks, each of the input's shape and
    of a dtype it takes. A plan whose inputs the header does not give (an ExecuTorch plan with CPU ops)
    is checked after its load, by _read_inputs."""
    declared = paths.method_inputs(model, method)
    if declared is None:
        return
    from safetensors import SafetensorError, safe_open
    found: dict[str, tuple[str, tuple[int, ...]]] = {}
    try:  # safetensors' own reading of the header, as the read after the load sees it (no vkx aliases)
        with safe_open(str(path), framework="numpy") as f:
            for key in f.keys():
                entry = f.get_slice(key)
                found[key] = (entry.get_dtype(), tuple(entry.get_shape()))
    except SafetensorError as error:
        raise paths.UsageError(f"--inputs {path}: {error}") from None
    keys = _input_keys(path, found, [x.name for x in declared])
    for i, (key, want) in enumerate(zip(keys, declared)):
        code, shape = found[key]
        what = f"--inputs {path}: tensor {key!r} (input {i} of {method})"
        if shape != want.shape:
            raise paths.UsageError(f"{what} has shape {list(shape)}, expected {list(want.shape)}")
        try:
            dtype: dtypes.DType | None = dtypes.by_safetensors(code)
        except ValueError:  # a type vkx does not know (F8_E4M3, ...): no input takes it
            dtype = None
        takes = dtypes.numpy_takes(want.dtype)
        if dtype not in takes:
            why = " (a bfloat16 input is given as float32)" if want.dtype is dtypes.BFLOAT16 else ""
            raise paths.UsageError(f"{what} is {dtype or code}, expected {' or '.join(sorted(map(str, takes)))}{why}")


def _read_inputs(path: Path, specs: list) -> list:
    """The --inputs tensors for `specs` (the loaded method's inputs), in input order."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file
    try:
        tensors = load_file(str(path))
    except SafetensorError as error:
        fail(f"--inputs {path}: {error}")
    except TypeError:  # safetensors.numpy cannot hold BF16
        fail(f"--inputs {path}: holds a BF16 tensor, which numpy cannot read (give bfloat16 inputs as float32)")
    return [tensors[k] for k in _input_keys(path, tensors, [getattr(s, "name", None) for s in specs])]


def _run_bar(quiet: bool) -> Progress:
    """Runs done of --repeat, on stderr like the upload bar (a 1 GiB model runs 2 s each on lavapipe)."""
    return Progress(TextColumn("runs"), BarColumn(), MofNCompleteColumn(), console=stderr, transient=True,
                    disable=quiet or not stderr.is_terminal)


def _write_outputs(path: Path, outputs: list, specs: list) -> None:
    """The outputs as output_0, ... in a safetensors file, each in its dtype as stored (bfloat16 as
    BF16). Written to a temporary file and renamed: a failed write (a full disk) leaves nothing."""
    import numpy as np

    header, blobs, pos = {}, [], 0
    for i, (o, spec) in enumerate(zip(outputs, specs)):
        dtype = dtypes.named(spec.dtype)
        if dtype is dtypes.BFLOAT16:  # run_numpy gives float32 holding bfloat16 values: their upper halves
            data = (np.ascontiguousarray(o, np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
        else:
            data = np.ascontiguousarray(o).tobytes()
        header[f"output_{i}"] = {"dtype": dtype.safetensors, "shape": list(o.shape),
                                 "data_offsets": [pos, pos + len(data)]}
        blobs.append(data)
        pos += len(data)
    with AtomicFile(path) as out:
        out.write(safetensors_header(jsonlib.dumps(header, separators=(",", ":")).encode()))
        for data in blobs:
            out.write(data)
        out.commit()


@user_errors
def run(
    model: Path = FILE,
    external_data: List[Path] = EXTERNAL,
    inputs: Optional[Path] = typer.Option(None, "--inputs", metavar="FILE.safetensors",
                                          help="Inputs by the model's input names (or input_0, input_1, ...) "
                                               "[default: random inputs of the right shapes]."),
    output: Optional[Path] = typer.Option(None, "--output", metavar="FILE.safetensors",
                                          help="Write the first run's outputs here (output_0, ...; "
                                              "each in its dtype as stored)."),
    schedule: Schedule = typer.Option(Schedule.lazy, "--schedule",
                                      help="lazy: the new load order; eager: the old one, for comparison."),
    upload: Upload = typer.Option(Upload.auto, "--upload",
                                  help="staging: through a ring of host buffers; direct: into mapped device "
                                       "memory; import: the file's own pages as device memory (no copy); "
                                       "auto: direct where device memory is host memory, else staging (never maps a file)."),
    trace_memory: bool = typer.Option(False, "--trace-memory", help="Print host RSS and device bytes per phase."),
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="FILE.png",
                                        help="Draw the load's memory timeline (host RSS and device bytes per "
                                             "phase) into this PNG (needs matplotlib)."),
    repeat: int = typer.Option(10, "--repeat", min=0, metavar="N",
                               help="Run N times (0: load only); the first run is timed on its own."),
    json: bool = typer.Option(False, "--json",
                              help=f"One JSON object on stdout (schema {SCHEMA}) instead of tables."),
    seed: int = SEED,
    device: Optional[str] = DEVICE,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No loading line or progress bars on stderr."),
    profile: Optional[Profile] = PROFILE,
    method: Optional[str] = typer.Option(None, "--method", metavar="NAME",
                                         help="The method to run, in a file of several (vkx inspect lists them)."),
) -> None:
    """Load the .pte FILE onto the Vulkan device and run it (one method of a file of several)."""
    external, beside = paths.loadable(model, external_data)
    name = _method(paths.method_names(model), method)
    if inputs is not None:
        _check_inputs_file(inputs)
        if repeat:  # --repeat 0 reads no inputs
            _check_inputs(inputs, model, name)
    if output is not None:
        if repeat == 0:
            raise paths.UsageError("--output needs a run: --repeat 0 only loads")
        paths.output_file(output, "--output", "the outputs file", (".safetensors",),
                          [model, *external, *([inputs] if inputs else [])])
    if plot is not None:
        paths.output_file(plot, "--plot", "the plot", (".png",), [model, *external, *([inputs] if inputs else [])])
        plotting = _pyplot()
    dev, own = open_device("vkx run", device, profile)
    if beside is not None:
        note(f"using external data {beside} (found beside {model})")
    from vkx.loader import load
    try:
        t0 = time.perf_counter()
        with Status(f"loading {model} on {dev.name} ({schedule.value} schedule)", shown=not quiet) as status:
            program = load(model, [str(p) for p in external], schedule=schedule.value, device=dev,
                           upload=upload.value, trace_memory=trace_memory, progress=status.weights)
        load_s = time.perf_counter() - t0
        outs, first_s, times = [], None, []
        with program:
            target = program[name]
            if repeat:
                specs = target.input_specs
                xs = _read_inputs(inputs, specs) if inputs else _random_inputs(specs, seed)
                with _run_bar(quiet) as runs:
                    task = runs.add_task("runs", total=repeat)
                    t1 = time.perf_counter()
                    outs = target.run_numpy(*xs)
                    first_s = time.perf_counter() - t1
                    runs.advance(task)
                    for _ in range(repeat - 1):
                        t1 = time.perf_counter()
                        target.run_numpy(*xs)
                        times.append(time.perf_counter() - t1)
                        runs.advance(task)
            memory = program.memory
            out_specs = target.output_specs
        if output:
            _write_outputs(output, outs, out_specs)
        if plot is not None:
            _plot(plotting, memory, model, plot)
    finally:
        if own:
            dev.close()
    report = _report(model, schedule.value, memory, load_s, first_s, times, outs, out_specs, trace_memory)
    report["method"] = name
    report["seconds"] = elapsed()
    if json:
        print(jsonlib.dumps(report))
        return
    _print(report, model, memory, trace_memory, output, plot)


def open_device(command: str, device: Optional[str], profile: Optional[Profile]):
    """The device `--device` and `--profile` name (the Device, and whether the command owns it and closes
    it), else the default one; refused in one line where the address space is too small for the driver."""
    paths.check_address_space(command, "the Vulkan driver")
    from vkx.loader.gpu.device import Device, default_device
    if device is None and profile is None:
        return default_device(), False
    return Device(device, profile=profile.value if profile else None), True


def _method(methods: list[str], name: Optional[str]) -> str:
    """The method to run, checked against the file's `methods` before anything is loaded: the one
    `--method` names; a file of several needs it."""
    if name is None:
        if len(methods) > 1:
            raise paths.UsageError(f"the file has methods {', '.join(methods)}: pass --method NAME")
        return methods[0]
    if name not in methods:
        raise paths.UsageError(option_message("--method", f"no method {name!r}", f"methods: {', '.join(methods)}"))
    return name


def _pyplot():
    """matplotlib's pyplot, drawing to files only; one line of what to do where it is missing."""
    try:
        import matplotlib
    except ImportError:
        raise paths.UsageError("--plot needs matplotlib, which is not installed: pip install matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _plot(plt, memory, model: Path, path: Path) -> None:
    """The load's memory timeline: host RSS and its peak, and device bytes by kind, at each phase."""
    from vkx.loader.upload.report import DEVICE_KINDS

    phases = list(memory.phases.values())
    t = [p.seconds for p in phases]
    fig, (host, device) = plt.subplots(1, 2, figsize=(12, 4.5), sharex=True)
    host.plot(t, [p.rss / MiB for p in phases], marker="o", label="VmRSS")
    host.plot(t, [p.peak_rss / MiB for p in phases], marker="x", linestyle="--", label="peak since previous phase")
    host.set_title("host memory")
    kinds = [k for k in DEVICE_KINDS if any(p.device.get(k, 0) for p in phases)]
    if kinds:
        device.stackplot(t, *[[p.device.get(k, 0) / MiB for p in phases] for k in kinds], labels=kinds,
                         step="post")
    device.set_title("device memory (allocated)")
    for ax in (host, device):
        ax.set_xlabel("seconds since the load started")
        ax.set_ylabel("MiB")
        ax.legend(loc="upper left")
    fig.suptitle(f"{model.name}: {memory['schedule']} schedule, upload {memory['upload']}, on {memory['device']}")
    fig.tight_layout()
    try:
        fig.savefig(path)
    finally:
        plt.close(fig)


def _report(model: Path, schedule: str, memory, load_s: float, first_s: float | None, times: list[float],
            outs: list, out_specs: list, trace_memory: bool) -> dict:
    """The run for scripts (schema SCHEMA): bytes exact, times in seconds, dtypes as stored."""
    phases = memory["phases"]
    base = phases[0]["rss"]
    report = {
        "schema": SCHEMA, "model": str(model), "device": memory["device"], "schedule": schedule,
        "upload": memory["upload"], "load_seconds": load_s, "first_run_seconds": first_s,
        "steady_run_seconds": None if not times else {
            "median": statistics.median(times), "mean": statistics.fmean(times), "min": min(times),
            "runs": len(times)},
        "outputs": [{"shape": list(o.shape), "dtype": spec.dtype} for o, spec in zip(outs, out_specs)],
        "weight_bytes": memory["weight_bytes"], "weight_paths": memory["weight_paths"],
        "copies_per_weight_byte": memory["copies_per_weight_byte"],
        "load_peak_rss_over_baseline": max([p["peak_rss"] for p in phases[1:] if p["name"] != "after execute"],
                                           default=base) - base,
        "peak_rss_over_baseline": max([p["peak_rss"] for p in phases[1:]], default=base) - base,
        "device_peak_bytes": memory["ledger"]["peak"], "device_peak_total": memory["ledger"]["peak_total"],
    }
    if trace_memory:
        report["phases"] = phases
    return report


def _print(report: dict, model: Path, memory, trace_memory: bool, output: Optional[Path],
           plot: Optional[Path]) -> None:
    console.print(f"[bold]{safe(model)}[/] on {safe(report['device'])}  schedule={report['schedule']} "
                  f"upload={safe(report['upload'])}")
    timing = f"load {report['load_seconds'] * 1e3:,.1f} ms"
    if report["first_run_seconds"] is not None:
        timing += f"   first run {report['first_run_seconds'] * 1e3:,.2f} ms"
    st = report["steady_run_seconds"]
    if st is not None:
        timing += f"   steady {st['median'] * 1e3:,.2f} ms (median of {st['runs']})"
    console.print(f"{timing}   {report['seconds']:,.2f} s in all")
    if report["outputs"]:
        t = Table(show_edge=False, header_style="bold")
        for c in ("output", "shape", "dtype"):
            t.add_column(c)
        for i, o in enumerate(report["outputs"]):
            t.add_row(str(i), "×".join(map(str, o["shape"])) or "scalar", o["dtype"])
        console.print(t)
    if trace_memory:
        # the tables `print(program.memory)` shows in Python; on a terminal, a line longer than its width (the
        # footnote) wraps at it
        console.print(Text(plain_lines(str(memory))))
        peaks = report["device_peak_bytes"]
        console.print(f"peak RSS over baseline: load {size(report['load_peak_rss_over_baseline'])}, "
                      f"with the first run {size(report['peak_rss_over_baseline'])}; "
                      f"weights {size(report['weight_bytes'])} copied {report['copies_per_weight_byte']:.1f}x; "
                      "device peak " + ", ".join(f"{k} {size(v)}" for k, v in peaks.items() if v))
    for path in (output, plot):
        if path:
            console.print(f"wrote {safe(path)}")
