"""What reading weights costs: load time and peak RSS of a chain model, and the bare host copy.

Each load runs in a fresh process on a warm page cache (the file is read once first), three
times per path; the table shows the best time and the largest peak. `copy` is the host copy of
all weight bytes alone, without the loader: from a mmap with numpy (what the loader did before
it read with pread) and with os.preadv straight into the destination (what it does now).

    python bench/load_read.py [--layers 8] [--mib 64] [--dir /tmp]
    python bench/load_read.py --copy-only FILE   # the copy rows alone (needs numpy only)
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20
PATHS = [("lazy", "direct"), ("lazy", "staging"), ("eager", "auto")]

CHILD = r"""
import json, sys, time
import numpy as np
from vkx.loader import load
from vkx.loader.gpu.device import default_device
path, schedule, upload = sys.argv[1:4]
default_device()
t0 = time.perf_counter()
with load(path, schedule=schedule, upload=upload, trace_memory=True) as p:
    seconds = time.perf_counter() - t0
    phases = p.memory["phases"]
    mode = p.upload
base = phases[0]["rss"]
print(json.dumps({"seconds": seconds, "peak": max(ph["peak_rss"] for ph in phases[1:]) - base,
                  "rss_file": max(ph["rss_file"] for ph in phases) - phases[0]["rss_file"], "mode": mode}))
"""


def copies(path: Path, nbytes: int) -> dict[str, float]:
    """Seconds (best of 3) to copy nbytes of the file into fresh memory, on 1 and 4 threads (the
    loader's split), from a fresh mmap with numpy and with os.preadv."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    def split(copy, threads: int) -> None:
        step = -(-nbytes // threads)
        with ThreadPoolExecutor(threads) as pool:
            for f in [pool.submit(copy, lo, min(nbytes, lo + step)) for lo in range(0, nbytes, step)]:
                f.result()

    def preadv(fd: int, dst: np.ndarray, lo: int, hi: int) -> None:
        done = lo
        while done < hi:
            done += os.preadv(fd, [memoryview(dst)[done:hi]], done)

    best: dict[str, float] = {}
    for threads in (1, 4):
        for how in ("mmap + numpy", "preadv"):
            name = f"{how}, {threads} thread{'s' if threads > 1 else ''}"
            for _ in range(3):
                fd = os.open(path, os.O_RDONLY)
                m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
                src = np.frombuffer(m, np.uint8, count=nbytes)
                dst = np.empty(nbytes, np.uint8)
                t = time.perf_counter()
                if how == "preadv":
                    split(lambda lo, hi: preadv(fd, dst, lo, hi), threads)
                else:
                    split(lambda lo, hi: np.copyto(dst[lo:hi], src[lo:hi]), threads)
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - t)
                del src
                m.close()
                os.close(fd)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--mib", type=int, default=64, help="MiB per constant")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--copy-only", metavar="FILE", help="only time the bare copies of FILE's bytes")
    args = ap.parse_args()
    for name, value in (('--layers', args.layers), ('--mib', args.mib)):
        if value < 1:
            ap.error(f"{name} must be at least 1, not {value}")
    if args.dir is not None and not Path(args.dir).is_dir():
        ap.error(f"--dir {args.dir}: no such folder")
    if args.copy_only:
        size = os.path.getsize(args.copy_only)
        for how, s in copies(Path(args.copy_only), size).items():
            print(f"copy: {how:24} {s:8.3f} {size / s / (1 << 30):7.2f}")
        return
    sys.path.insert(0, str(ROOT))
    from tests.memory.chain_model import write_chain
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        path = Path(d) / "chain.pte"
        write_chain(str(path), args.layers, args.mib * MiB // 4)
        W = args.layers * args.mib * MiB
        path.read_bytes()  # warm the page cache
        env = {**os.environ, "VKX_VALIDATION": "0"}
        print(f"W = {W / MiB:.0f} MiB ({args.layers} x {args.mib} MiB)")
        print(f"{'path':16} {'load s':>8} {'GiB/s':>7} {'peak MiB':>9} {'RssFile MiB':>12}")
        for schedule, upload in PATHS:
            runs = []
            for _ in range(3):
                out = subprocess.run([sys.executable, "-c", CHILD, str(path), schedule, upload], cwd=ROOT,
                                     env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    raise SystemExit(out.stderr[-2000:])
                runs.append(json.loads(out.stdout.splitlines()[-1]))
            s = min(r["seconds"] for r in runs)
            name = f"{schedule}/{runs[0]['mode']}"
            print(f"{name:16} {s:8.3f} {W / s / (1 << 30):7.2f} {max(r['peak'] for r in runs) / MiB:9.0f} "
                  f"{max(r['rss_file'] for r in runs) / MiB:12.0f}")
        for how, s in copies(path, W).items():
            print(f"copy: {how:24} {s:8.3f} {W / s / (1 << 30):7.2f}")


if __name__ == "__main__":
    main()
