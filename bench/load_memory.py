"""Load benchmark: peak memory and speed of every layout × schedule × upload path.

The model has 1 GiB of fp32 weights, one constant of 256 MiB among them:
12 × Linear(4096, 4096) + ReLU, then Linear(4096, 16384). It is exported four
ways (legacy layout; named data in the .pte; in a .ptd; in a .safetensors), and
each file is loaded in a fresh process with each schedule (eager: the old order;
lazy: the new one). The eager schedule always uploads through a full-size
staging buffer per tensor, as the old runtime did; the lazy one is measured with
each upload path: "auto" (what it chose is shown after the arrow: the ring on a
discrete GPU, direct writes where device memory is host memory), the staging ring
(sized to W / 100), direct writes into device-local, host-visible memory where the
device has it, and the file's pages imported in place (upload="import", where the
device has VK_EXT_external_memory_host and every weight is page-aligned; "auto"
never maps a file: docs/safety.md).

Columns: W (constant bytes), w (largest constant), A (activation bytes), S (peak
staging bytes), the peak over the pre-load baseline (host RSS, plus the ledger's
device bytes less the staging ring, which is host memory and already in the RSS,
where device memory is not host memory), peak / W, peak / (W + A), load seconds
and GiB/s (the whole load: graph build and shader compiles too), the upload's own
GiB/s (W over the weights stage alone, "prepack start" to "after prepack"), and,
measured in the same process right after the load, a plain memcpy of W bytes from
the same file into fresh memory (best of two), with upload / memcpy.

    .venv/bin/python bench/load_memory.py [--plot timeline.png] [--out DIR] [--width 4096]
                                          [--dtypes fp32,fp16,bf16]

With `--dtypes`, the same model is also exported in fp16 and bf16 (the named
layout, both schedules): the "dev/file" column is the device weight bytes (the
loader's count) over the weight bytes in the file, which is 1.00 for every dtype.

The "2 methods" row is the same model exported as two methods (batch 1 and batch 8) of one file:
W is the one-method file's, and so is the peak (A is the larger method's).

Goals: lazy/named peak / (W + A) ≤ 1.05 (also with two methods); legacy/eager ≥ 1.9; direct-path load
throughput ≥ 50% of memcpy; device weight bytes = file weight bytes; "auto" at peak ≤ 1.02 W, ≥ 0.9 × memcpy
on lavapipe and ≥ 10 GiB/s warm on an H200 (docs/architecture.md, "Upload paths").
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

GiB = 1 << 30
MiB = 1 << 20
LAYOUTS = {"legacy": ("legacy", None), "named": ("named", None), "ptd": ("named", ".ptd"),
           "safetensors": ("named", ".safetensors")}


def export_all(directory: Path, width: int, dtypes: list[str]) -> dict[tuple[str, str], tuple[Path, Path | None, dict]]:
    """(layout, dtype) -> the exported file, its external data, and W / w / A: every layout in fp32,
    the named layout in each other dtype."""
    import torch
    from torch import nn

    import vkx

    torch.manual_seed(0)
    layers = [m for _ in range(12) for m in (nn.Linear(width, width), nn.ReLU())]
    model = nn.Sequential(*layers, nn.Linear(width, 4 * width)).eval()
    files = {}
    for dtype in dtypes:
        for name, (layout, suffix) in LAYOUTS.items():
            if dtype != "fp32" and name != "named":
                continue
            path = directory / f"model-{name}-{dtype}.pte"
            external = directory / f"model-{name}-{dtype}{suffix}" if suffix else None
            report = vkx.export_model(model, (torch.randn(1, width),), path, layout=layout, external_data=external,
                                      dtype=dtype)
            item = 2 if dtype in ("fp16", "bf16") else 4
            largest = max(p.numel() for p in model.parameters()) * item
            files[name, dtype] = (path, external, {"W": report.constant_bytes, "w": largest,
                                                   "A": report.memory.total_nbytes})
    # two methods (batch 1 and batch 8) of one model in one file: the weights are stored and loaded once
    path = directory / "model-methods-fp32.pte"
    report = vkx.export_model(model, {"one": (torch.randn(1, width),), "eight": (torch.randn(8, width),)}, path)
    files["2 methods", "fp32"] = (path, None, {"W": report.constant_bytes,
                                               "w": max(p.numel() for p in model.parameters()) * 4,
                                               "A": report.memory.total_nbytes})
    return files


class MemorySampler(threading.Thread):
    """Samples VmRSS, and the device heaps' usage where the driver reports it
    (VK_EXT_memory_budget), every 2 ms while a load runs, for the timeline plot."""

    def __init__(self, device) -> None:
        super().__init__(daemon=True)
        self.device = device
        self.samples: list[tuple[float, int, int]] = []
        self.done = threading.Event()
        self.t0 = time.perf_counter()

    def device_usage(self) -> int:
        heaps = None if self.device.is_cpu else self.device.heap_budget()
        return sum(usage for _, usage in heaps) if heaps else 0

    def run(self) -> None:
        from vkx.loader.upload.trace import read_status
        while not self.done.is_set():
            self.samples.append((time.perf_counter() - self.t0, read_status()["VmRSS"], self.device_usage()))
            time.sleep(0.002)


def timed_copy(source) -> float:
    """Seconds to copy `source` into fresh memory (first touch, as a load's destination is)."""
    import numpy as np

    start = time.perf_counter()
    destination = np.empty_like(source)
    np.copyto(destination, source)
    return time.perf_counter() - start


def child(path: str, external: str | None, schedule: str, upload: str, nbytes: int) -> None:
    """Load once, run once, then memcpy the same bytes; print one JSON line."""
    import numpy as np

    from vkx.loader import load
    from vkx.loader.gpu.device import default_device
    from vkx.loader.errors import ImportRefusedError

    device = default_device()
    if upload == "direct" and not any(t.device_local and t.host_visible for t in device.memory_types):
        print(json.dumps({"skip": f"{device.name} has no host-visible device memory"}))
        return
    sampler = MemorySampler(device)
    sampler.start()
    start = time.perf_counter()
    try:
        program = load(path, [external] if external else [], schedule=schedule, upload=upload, trace_memory=True)
    except ImportRefusedError as error:
        sampler.done.set()
        sampler.join()
        print(json.dumps({"skip": str(error)}))
        return
    with program:
        seconds = time.perf_counter() - start
        sampler.done.set()
        sampler.join()
        for method in [program[name] for name in program.methods]:
            method.run_numpy(*[np.ones(shape, "float32" if dtype == "bfloat16" else dtype)
                               for shape, dtype in method.input_specs])
        report = program.memory

    with open(external or path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        source = np.frombuffer(mapped, np.uint8, count=min(nbytes, len(mapped)))
        memcpy_seconds = min(timed_copy(source) for _ in range(2))
        del source

    phases = report["phases"]
    baseline = phases[0]["rss"]
    loading = [p for p in phases[1:] if p["name"] != "after execute"]
    host_peak = max(p["peak_rss"] for p in loading) - baseline
    ledger = report["ledger"]
    # the staging ring is host memory, in VmRSS once written: on a discrete GPU only the rest is device memory
    device_peak = 0 if device.is_cpu else ledger["peak_total"] - ledger["peak"].get("staging", 0)
    print(json.dumps({
        "device": report["device"], "asked": upload, "upload": report["upload"], "seconds": seconds,
        "device_weight_bytes": report["weight_bytes"],
        "peak": host_peak + device_peak, "host_peak": host_peak, "device_peak": device_peak,
        "staging": report["ledger"]["peak"].get("staging", 0), "memcpy_seconds": memcpy_seconds,
        "phases": [(p["name"], p["seconds"], p["device"].get("total", 0)) for p in phases],
        "samples": [(t, rss - baseline, used - sampler.samples[0][2]) for t, rss, used in sampler.samples[::5]],
    }))


def measure(path: Path, external: Path | None, schedule: str, upload: str, nbytes: int) -> dict:
    command = [sys.executable, __file__, "--child", str(path), str(external or ""), schedule, upload, str(nbytes)]
    env = {**os.environ, "VKX_VALIDATION": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{path.name} {schedule}/{upload} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"Load memory and speed, {rows[0]['device']} (MiB, GiB/s; one run)")
    for column in ("layout", "dtype", "schedule", "upload", "W", "w", "A", "S", "dev/file", "peak", "peak/W",
                   "peak/(W+A)", "load s", "load GiB/s", "upload GiB/s", "memcpy GiB/s", "upload/memcpy"):
        t.add_column(column, justify="left" if column in ("layout", "dtype", "schedule", "upload") else "right")
    for r in rows:
        W, A = r["W"], r["A"]
        load_rate = W / r["seconds"] / GiB
        at = {name: t for name, t, _ in r["phases"]}
        upload_rate = W / (at["after prepack"] - at["prepack start"]) / GiB
        memcpy_rate = W / r["memcpy_seconds"] / GiB
        upload = r["upload"] if r["asked"] != "auto" else f"auto→{r['upload']}"
        t.add_row(r["layout"], r["dtype"], r["schedule"], upload, f"{W / MiB:.0f}", f"{r['w'] / MiB:.0f}",
                  f"{A / MiB:.2f}", f"{r['staging'] / MiB:.1f}", f"{r['device_weight_bytes'] / W:.2f}",
                  f"{r['peak'] / MiB:.0f}", f"{r['peak'] / W:.3f}",
                  f"{r['peak'] / (W + A):.3f}", f"{r['seconds']:.2f}", f"{load_rate:.2f}",
                  f"{upload_rate:.2f}", f"{memcpy_rate:.2f}", f"{upload_rate / memcpy_rate:.2f}")
    Console(width=200).print(t)


def plot(rows: list[dict], path: Path) -> None:
    """Host RSS and device heap usage (sampled) and the ledger (per phase) during the load, old order vs new."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lazy_upload = "direct" if any(r["upload"] == "direct" for r in rows) else "ring"
    picks = [("legacy", "eager", "eager"), ("named", "lazy", lazy_upload)]
    rows = [r for r in rows if r["dtype"] == "fp32"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, (layout, schedule, upload) in zip(axes, picks):
        r = next(r for r in rows if (r["layout"], r["schedule"], r["upload"]) == (layout, schedule, upload))
        ts, rss, heaps = zip(*r["samples"])
        ax.plot(ts, [v / MiB for v in rss], label="host RSS over baseline")
        loading = [p for p in r["phases"] if p[0] != "after execute"]
        if any(heaps):
            ax.plot(ts, [v / MiB for v in heaps], color="tab:red", label="device heap usage (driver)")
        ax.step([p[1] for p in loading], [p[2] / MiB for p in loading], where="post",
                color="tab:orange", label="device bytes (ledger, per phase)")
        ax.axhline(r["W"] / MiB, color="tab:green", ls="--", lw=0.8, label="W")
        for name, t, _ in loading[1:]:
            ax.axvline(t, color="grey", lw=0.6, ls=":")
            if name in ("after graph build", "after prepack", "after activation allocation"):
                ax.annotate(name, (t, 0), xytext=(2, 4), textcoords="offset points", rotation=90, fontsize=7)
        ax.set_title(f"{layout} / {schedule} ({upload}): peak {r['peak'] / r['W']:.2f} W")
        ax.set_xlabel("seconds since load()")
        ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylabel("MiB")
    fig.suptitle(f"Load memory timeline, {rows[0]['device']}, W = {rows[0]['W'] / MiB:.0f} MiB")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def positive(text: str) -> int:
    """An argparse type: a whole number above 0."""
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above 0")
    return int(text)


def dtype_list(text: str) -> list[str]:
    """An argparse type: comma-separated export dtypes."""
    from vkx.format.dtypes import DTYPE_CHOICES

    names = text.split(",")
    unknown = [n for n in names if n not in DTYPE_CHOICES]
    if unknown:
        raise argparse.ArgumentTypeError(f"{', '.join(unknown)}: not one of {', '.join(DTYPE_CHOICES)}")
    return names


def check_outputs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse an output that cannot be written before minutes of work, not after (one line); make
    the folders the outputs go in."""
    folders = [("--out", args.out)] if args.out else []
    for option, path in (("--plot", args.plot), ("--json", args.json)):
        if path is None:
            continue
        if path.is_dir():
            parser.error(f"{option} {path}: a folder, not a file")
        folders.append((option, path.parent))
    if args.plot:
        try:
            from matplotlib.backend_bases import FigureCanvasBase
        except ImportError:
            parser.error("--plot needs matplotlib: pip install matplotlib")
        formats = FigureCanvasBase.get_supported_filetypes()
        if args.plot.suffix[1:].lower() not in formats:
            parser.error(f"--plot {args.plot}: not a file type matplotlib writes ({', '.join(sorted(formats))})")
    for option, folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            parser.error(f"{option}: cannot make the folder {folder}: {error.strerror}")
        if not os.access(folder, os.W_OK):
            parser.error(f"{option}: the folder {folder} is not writable")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        path, external, schedule, upload, nbytes = sys.argv[2:7]
        child(path, external or None, schedule, upload, int(nbytes))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", type=Path, help="write the memory timeline PNG here")
    parser.add_argument("--out", type=Path, help="folder for the exported files (default: a temporary one)")
    parser.add_argument("--width", type=positive, default=4096, help="layer width; 4096 gives W = 1 GiB")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--dtypes", type=dtype_list, default="fp32",
                        help="comma-separated: fp32,fp16,bf16 (default fp32)")
    args = parser.parse_args()
    dtypes = args.dtypes
    check_outputs(parser, args)

    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        files = export_all(Path(tmp), args.width, dtypes)
        rows = []
        for (layout, dtype), (path, external, sizes) in files.items():
            for schedule, upload in (("eager", "auto"), ("lazy", "auto"), ("lazy", "staging"), ("lazy", "direct"),
                                     ("lazy", "import")):
                r = measure(path, external, schedule, upload, sizes["W"])
                if "skip" in r:
                    print(f"  {layout:12} {dtype:5} {schedule:6} {upload:8} skipped: {r['skip']}", file=sys.stderr)
                    continue
                rows.append({"layout": layout, "dtype": dtype, "schedule": schedule, **sizes, **r})
                print(f"  {layout:12} {dtype:5} {schedule:6} {r['upload']:8} peak {r['peak'] / MiB:7.0f} MiB"
                      f"  {r['seconds']:.2f} s", file=sys.stderr)
    table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
