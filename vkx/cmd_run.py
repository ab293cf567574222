"""`vkx run`: load a .pte onto the Vulkan device, run it, report time and memory."""
from __future__ import annotations

import json as jsonlib
import statistics
import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from vkx.console import console, fail, user_errors

MiB = 1 << 20
FILE = typer.Argument(..., help="The .pte file.", dir_okay=False)
EXTERNAL = typer.Option([], "--external-data", help="A .ptd or .safetensors file with named data (repeatable).")


def _mib(n: int) -> str:
    return f"{n / MiB:,.1f}"


def _random_inputs(specs, seed: int):
    import numpy as np
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in specs:
        dt = np.dtype(dtype)
        if dt.kind == "f":
            out.append(rng.standard_normal(shape).astype(dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, shape).astype(bool))
        else:
            out.append(rng.integers(0, 4, shape).astype(dt))  # small: safe as indices
    return out


def _read_inputs(path: Path, specs):
    from safetensors.numpy import load_file
    tensors = load_file(str(path))
    names = [f"input_{i}" for i in range(len(specs))]
    if all(n in tensors for n in names):
        return [tensors[n] for n in names]
    if len(tensors) == len(specs):
        return [tensors[k] for k in sorted(tensors)]
    fail(f"{path}: expected tensors input_0..input_{len(specs) - 1} (or exactly {len(specs)} tensors), "
         f"found {sorted(tensors)}")


def _phase_table(memory: dict) -> Table:
    t = Table(title="Memory by phase (MiB; peak = VmHWM since the previous phase)", title_justify="left",
              show_edge=False, header_style="bold")
    t.add_column("phase", no_wrap=True)
    for c in ("t (s)", "VmRSS", "peak", "RssAnon", "RssFile", "weights", "activ.", "staging", "io"):
        t.add_column(c, justify="right", no_wrap=True)
    for p in memory["phases"]:
        d = p["device"]
        t.add_row(p["name"], f"{p['seconds']:.3f}", _mib(p["rss"]), _mib(p["peak_rss"]), _mib(p["rss_anon"]),
                  _mib(p["rss_file"]), *(_mib(d.get(k, 0)) for k in ("weights", "activations", "staging", "io")))
    return t


@user_errors
def run(
    model: Path = FILE,
    external_data: List[Path] = EXTERNAL,
    inputs: Optional[Path] = typer.Option(None, "--inputs", help="safetensors with input_0, input_1, ... "
                                          "(default: random inputs of the right shapes)."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write outputs here (output_0, ...)."),
    schedule: str = typer.Option("lazy", "--schedule", help="lazy (the new order) or eager (the old one)."),
    upload: str = typer.Option("auto", "--upload", help="auto, staging (ring) or direct (mapped device memory)."),
    trace_memory: bool = typer.Option(False, "--trace-memory", help="Print host RSS and device bytes per phase."),
    repeat: int = typer.Option(10, "--repeat", min=1, help="Steady-state runs after the first."),
    json: bool = typer.Option(False, "--json", help="One JSON object on stdout instead of tables."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
    device: Optional[str] = typer.Option(None, "--device", help="Device index or name substring (else VKX_DEVICE)."),
) -> None:
    """Load MODEL on the Vulkan device and run it."""
    if schedule not in ("lazy", "eager"):
        fail(f"--schedule must be lazy or eager, not {schedule!r}")
    if upload not in ("auto", "staging", "direct", "import"):
        fail(f"--upload must be auto, staging, direct or import, not {upload!r}")
    import numpy as np

    from vkx.loader import load
    from vkx.loader.device import Device, default_device
    dev = Device(device) if device is not None else default_device()
    try:
        t0 = time.perf_counter()
        program = load(model, [str(p) for p in external_data], schedule=schedule, device=dev, upload=upload)
        load_s = time.perf_counter() - t0
        with program:
            specs = program.input_specs
            xs = _read_inputs(inputs, specs) if inputs else _random_inputs(specs, seed)
            t1 = time.perf_counter()
            outs = program.run_numpy(*xs)
            first_s = time.perf_counter() - t1
            times = []
            for _ in range(repeat):
                t1 = time.perf_counter()
                program.run_numpy(*xs)
                times.append(time.perf_counter() - t1)
            memory = program.memory
        if output:
            from safetensors.numpy import save_file
            save_file({f"output_{i}": np.ascontiguousarray(o) for i, o in enumerate(outs)}, str(output))
    finally:
        if device is not None:
            dev.close()
    phases = memory["phases"]
    base = phases[0]["rss"]
    report = {
        "model": str(model), "device": memory["device"], "schedule": schedule, "upload": memory["upload"],
        "load_seconds": load_s, "first_run_seconds": first_s,
        "steady_run_seconds": {"median": statistics.median(times), "mean": statistics.fmean(times),
                               "min": min(times), "runs": len(times)},
        "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outs],
        "weight_bytes": memory["weight_bytes"], "copies_per_weight_byte": memory["copies_per_weight_byte"],
        "load_peak_rss_over_baseline": max([p["peak_rss"] for p in phases[1:] if p["name"] != "after execute"],
                                           default=base) - base,
        "peak_rss_over_baseline": max([p["peak_rss"] for p in phases[1:]], default=base) - base,
        "device_peak_bytes": memory["ledger"]["peak"], "device_peak_total": memory["ledger"]["peak_total"],
    }
    if trace_memory:
        report["phases"] = phases
    if json:
        print(jsonlib.dumps(report, indent=1))
        return
    console.print(f"[bold]{model}[/] on {report['device']}  schedule={schedule} upload={report['upload']}")
    st = report["steady_run_seconds"]
    console.print(f"load {load_s * 1e3:,.1f} ms   first run {first_s * 1e3:,.2f} ms   "
                  f"steady {st['median'] * 1e3:,.2f} ms (median of {st['runs']})")
    t = Table(show_edge=False, header_style="bold")
    for c in ("output", "shape", "dtype"):
        t.add_column(c)
    for i, o in enumerate(report["outputs"]):
        t.add_row(str(i), "×".join(map(str, o["shape"])) or "scalar", o["dtype"])
    console.print(t)
    if trace_memory:
        from rich.console import Console
        Console(highlight=False, width=max(console.width, 120)).print(_phase_table(memory))
        peaks = report["device_peak_bytes"]
        console.print(f"peak RSS over baseline: load {_mib(report['load_peak_rss_over_baseline'])} MiB, "
                      f"with the first run {_mib(report['peak_rss_over_baseline'])} MiB; "
                      f"weights {_mib(report['weight_bytes'])} MiB copied "
                      f"{report['copies_per_weight_byte']:.1f}x; device peak "
                      + ", ".join(f"{k} {_mib(v)}" for k, v in peaks.items() if v) + " MiB")
    if output:
        console.print(f"wrote {output}")
