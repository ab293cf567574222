"""Zero copies: weights used in place from the mapped file (upload="import") against the
direct and staged copies.

The model is a plain torch stack, LAYERS × (Linear(WIDTH, WIDTH) + ReLU), exported with vkx
(default 8 × 4096², fp32: W = 512 MiB). Each upload path loads it in a fresh process whose
device exists before the baseline, with the file's page cache dropped first (cold: every
path reads the weights from disk once: the copies during the load, the import on the first
run, when the device first touches the pages). Measured per path:

    load s, load peak (the highest VmHWM of the load's phases over the pre-load RSS), RssAnon
    and RssFile after the load,
    first run (imported pages fault in), steady run (median of --runs), RssAnon / RssFile
    and the peak after the runs;
    reclaim: every mapping of 32 MiB or more is paged out (MADV_PAGEOUT), which is what
    memory pressure does to it: the RSS that goes is what the kernel can take back without
    killing the process (no swap here: anonymous memory cannot go), then one more run, which
    must give the same output (imported pages are read back from the file).

    python bench/zero_copy.py [--layers 8] [--width 4096] [--dtype fp32|fp16] [--runs 5]
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

MiB = 1 << 20
PATHS = (("direct", "direct"), ("ring", "staging"), ("import", "import"))
RECLAIM_MIN = 32 * MiB
MADV_PAGEOUT = 21  # <linux/mman.h>; Python's mmap module does not export it


def export(path: Path, layers: int, width: int, dtype: str) -> int:
    import torch
    from torch import nn

    import vkx

    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())]).eval()
    return vkx.export_model(model, (torch.randn(1, width),), path, dtype=dtype).constant_bytes


def drop_page_cache(path: str) -> None:
    with open(path, "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def page_out_large_mappings() -> None:
    """MADV_PAGEOUT on every mapping of RECLAIM_MIN bytes or more (the weights' memory, either kind)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    with open("/proc/self/maps") as f:
        spans = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in f]
    for lo, hi in spans:
        if hi - lo >= RECLAIM_MIN:
            libc.madvise(lo, hi - lo, MADV_PAGEOUT)


def child(path: str, upload: str, runs: int) -> None:
    import numpy as np

    from vkx.loader import load
    from vkx.loader.gpu.device import default_device
    from vkx.loader.upload.trace import read_status

    default_device()
    drop_page_cache(path)
    base = read_status()
    t0 = time.perf_counter()
    with load(path, upload=upload) as program:
        load_s = time.perf_counter() - t0
        loaded = read_status()
        x = np.random.default_rng(0).standard_normal(program.input_specs[0][0]).astype(np.float32)
        t0 = time.perf_counter()
        out, = program.run_numpy(x)
        first_s = time.perf_counter() - t0
        steady = []
        for _ in range(runs):
            t0 = time.perf_counter()
            program.run_numpy(x)
            steady.append(time.perf_counter() - t0)
        ran = read_status()
        page_out_large_mappings()
        reclaimed = read_status()
        t0 = time.perf_counter()
        again, = program.run_numpy(x)
        again_s = time.perf_counter() - t0
        memory = program.memory
    loading = [p for p in memory["phases"] if p["name"] != "after execute"]
    print(json.dumps({
        "device": memory["device"], "paths": memory["weight_paths"],
        "copies": memory["copies_per_weight_byte"], "load_s": load_s, "first_s": first_s,
        "steady_s": sorted(steady)[len(steady) // 2], "again_s": again_s,
        # the load's timeline resets VmHWM at each phase: its phases hold the peaks up to the first run
        "load_peak": max(p["peak_rss"] for p in loading) - base["VmRSS"],
        "run_peak": max([ran["VmHWM"]] + [p["peak_rss"] for p in memory["phases"]]) - base["VmRSS"],
        "load_anon": loaded["RssAnon"] - base["RssAnon"], "load_file": loaded["RssFile"] - base["RssFile"],
        "run_anon": ran["RssAnon"] - base["RssAnon"], "run_file": ran["RssFile"] - base["RssFile"],
        "reclaimable": ran["VmRSS"] - reclaimed["VmRSS"],
        "same_after_reclaim": bool(np.array_equal(out.view(np.uint32), again.view(np.uint32))),
        "out_sha256": hashlib.sha256(out.tobytes()).hexdigest(),
    }))


def measure(path: Path, upload: str, runs: int) -> dict:
    env = {**os.environ, "VKX_VALIDATION": "0"}
    done = subprocess.run([sys.executable, __file__, "--child", str(path), upload, str(runs)],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"upload={upload} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def table(rows: dict[str, dict], W: int, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    ref = rows["direct"]
    mib = lambda v: f"{v / MiB:.0f}"  # noqa: E731

    def vs(key: str, fmt: str) -> Callable[[dict], str]:
        return lambda r: f"{fmt.format(r[key])} ({r[key] / ref[key]:.2f}×)" if ref[key] else fmt.format(r[key])

    columns = [
        ("copies/B", lambda r: f"{r['copies']:.0f}"),
        ("load s", vs("load_s", "{:.2f}")),
        ("load peak", lambda r: f"{mib(r['load_peak'])} ({r['load_peak'] / ref['load_peak']:.2f}×)"),
        ("anon / file after load", lambda r: f"{mib(r['load_anon'])} / {mib(r['load_file'])}"),
        ("first run ms", lambda r: f"{r['first_s'] * 1e3:.0f} ({r['first_s'] / ref['first_s']:.2f}×)"),
        ("steady ms", lambda r: f"{r['steady_s'] * 1e3:.0f} ({r['steady_s'] / ref['steady_s']:.2f}×)"),
        ("anon / file after runs", lambda r: f"{mib(r['run_anon'])} / {mib(r['run_file'])}"),
        ("peak with runs", lambda r: f"{mib(r['run_peak'])} ({r['run_peak'] / ref['run_peak']:.2f}×)"),
        ("reclaimable", lambda r: mib(r["reclaimable"])),
        ("run after reclaim ms", lambda r: f"{r['again_s'] * 1e3:.0f}" + ("" if r["same_after_reclaim"] else " DIFF")),
    ]
    t = Table(title=title)
    t.add_column("path")
    for name, _ in columns:
        t.add_column(name, justify="right")
    for name, r in rows.items():
        t.add_row(name, *(f(r) for _, f in columns))
    Console(width=200).print(t)
    print(f"MiB; W = {W / MiB:.0f} MiB; ratios (×) to the direct path; RSS columns over the pre-load baseline")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32")
    parser.add_argument("--runs", type=int, default=5, help="steady runs after the first")
    parser.add_argument("--out", type=Path, help="folder for the exported file (default: a temporary one)")
    args = parser.parse_args()
    for name, value in (('--layers', args.layers), ('--width', args.width), ('--runs', args.runs)):
        if value < 1:
            parser.error(f"{name} must be at least 1, not {value}")
    if args.out is not None and not Path(args.out).is_dir():
        parser.error(f"--out {args.out}: no such folder")
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        path = Path(tmp) / "stack.pte"
        W = export(path, args.layers, args.width, args.dtype)
        rows = {}
        for name, upload in PATHS:
            rows[name] = r = measure(path, upload, args.runs)
            print(f"  {name:7} load {r['load_s']:.2f} s  first {r['first_s'] * 1e3:.0f} ms", file=sys.stderr)
    if len({r["out_sha256"] for r in rows.values()}) != 1:
        raise SystemExit("the paths' outputs differ")
    title = (f"Zero copies, {rows['direct']['device']}: {args.layers} × Linear({args.width}, {args.width}) "
             f"{args.dtype}, cold page cache")
    table(rows, W, title)
    print("outputs bit-identical across paths: yes")


if __name__ == "__main__":
    main()
