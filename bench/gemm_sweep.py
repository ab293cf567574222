"""GEMM sweep: shaders/matmul_tiled.comp's tilings (tile RT x CT, BK, split-K) per product shape.

Each shape is one hand-built VkGraph of one fp32 product node per tiling, all reading the same
input and weight; vkx.loader.ops.gemm_tiled.choose_tiling is replaced while the graph builds so
that node i takes tiling i (the default's tiling is added where the grid lacks it). Program.profile gives each dispatch's GPU time (timestamp queries:
loader/execute/record.py); a split-K node's time includes its reduce dispatch. Every node's output is
checked against torch (max error relative to the output's peak). Where torch has CUDA, torch's
own product (TF32 off) is timed in the same run with CUDA events, and `vs torch` is
torch's time / vkx's. `*` marks the tiling the default heuristic (choose_tiling) picks.

Shapes: Linear(4096, 4096) (x[M, 4096] @ W[4096, 4096]^T, W k-contiguous) at M = 64, 256, 512,
2048, and square mm (B n-contiguous) at 1024, 2048, 4096; `--quick`: small ones for lavapipe.

    .venv/bin/python bench/gemm_sweep.py [--quick] [--runs 10]
"""
from __future__ import annotations

import argparse
import itertools
import re
import statistics
import time
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from vkx.format import dtypes, vkgraph as g
from vkx.loader import load_graph
from vkx.loader.gpu.device import default_device
from vkx.loader.ops import gemm_tiled
from vkx.loader.ops.gemm_tiled import Tiling

FULL = [("linear", 64, 4096, 4096), ("linear", 256, 4096, 4096), ("linear", 512, 4096, 4096),
        ("linear", 2048, 4096, 4096), ("mm", 1024, 1024, 1024), ("mm", 2048, 2048, 2048),
        ("mm", 4096, 4096, 4096)]
QUICK = [("linear", 64, 512, 384), ("linear", 200, 256, 300), ("mm", 256, 256, 256)]
TILES = [(4, 4), (8, 4), (4, 8), (8, 8)]
BKS = [8, 16, 32]
SPLITS = [1, 2, 4, 8, 16]


def variants(M: int, N: int, K: int, units: int, shared: int) -> list[Tiling]:
    """The tilings worth timing: every tile and BK that fits shared memory; split-K only with
    BK >= 16, while the unsplit tiles are fewer than 4 per compute unit, with at least 128 of K
    per split."""
    out = []
    for (rt, ct), bk, split in itertools.product(TILES, BKS, SPLITS):
        t = Tiling(rt, ct, bk, split)
        if t.shared_bytes > shared:
            continue
        if split > 1 and (bk < 16 or gemm_tiled.tiles(t.bm, t.bn, M, N, 1) >= 4 * units or K // split < 128):
            continue
        out.append(t)
    return out


def shape_graph(kind: str, M: int, N: int, K: int, count: int) -> tuple[g.VkGraph, list[bytes], torch.Tensor, torch.Tensor]:
    """`count` product nodes of one input x[M, K] and one constant (W[N, K], or B[K, N] for mm)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(M, K, generator=gen)
    w = torch.randn((N, K) if kind == "linear" else (K, N), generator=gen) / K ** 0.5
    f32 = dtypes.FLOAT32.datatype
    raw = w.numpy().tobytes()
    values: list = [g.Tensor(f32, (M, K)), g.Tensor(f32, tuple(w.shape), constant_id=0), g.Null()]
    chain, outs = [], []
    for i in range(count):
        values.append(g.Tensor(f32, (M, N)))
        out = len(values) - 1
        args = (0, 1, 2, out) if kind == "linear" else (0, 1, out)
        chain.append(g.OperatorCall(i, "aten.linear.default" if kind == "linear" else "aten.mm.default", args))
        outs.append(out)
    graph = g.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=outs,
                      constants=[g.ConstantRef(g.NAMED_OFFSET, len(raw), "w")])
    return graph, [raw], x, w


@contextmanager
def tilings_in_order(tilings: list[Tiling]):
    """While the graph builds, the i-th tiled product (node i: one product each) takes tilings[i]."""
    choose = gemm_tiled.choose_tiling
    asked = iter(tilings)
    gemm_tiled.choose_tiling = lambda *args: next(asked)
    try:
        yield
    finally:
        gemm_tiled.choose_tiling = choose
    if next(asked, None) is not None:
        raise SystemExit("the graph recorded fewer tiled products than it has nodes")


def torch_seconds(kind: str, x: torch.Tensor, w: torch.Tensor, runs: int) -> float | None:
    """torch's GPU seconds per product on CUDA (TF32 off, CUDA events, median), or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    xc, wc = x.cuda(), w.cuda()
    fn = (lambda: F.linear(xc, wc)) if kind == "linear" else (lambda: xc @ wc)
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times)


def sweep(kind: str, M: int, N: int, K: int, runs: int, device) -> tuple[list[str], str]:
    """Markdown rows for one shape, fastest tiling first, and its row of the summary."""
    shared = device.limits.max_compute_shared_memory_size
    tilings = variants(M, N, K, device.compute_units, shared)
    chosen = gemm_tiled.choose_tiling(M, N, K, 1, device.compute_units, shared, device.is_cpu)
    if chosen not in tilings:
        tilings.append(chosen)
    graph, blobs, x, w = shape_graph(kind, M, N, K, len(tilings))
    ref = "cuda" if torch.cuda.is_available() else "cpu"  # fp64 reference
    xd, wd = x.to(ref, torch.float64), w.to(ref, torch.float64)
    want = (F.linear(xd, wd) if kind == "linear" else xd @ wd).cpu()
    with tilings_in_order(tilings):
        program = load_graph(graph, blobs, device=device)
    with program:
        got = program(x)
        got = got if isinstance(got, tuple) else (got,)
        profile = program.profile(x, runs=runs)
    seconds: dict[int, float] = {}
    for node, _, t in profile:
        i = int(re.match(r"node (\d+)", node).group(1))
        seconds[i] = seconds.get(i, 0.0) + t
    peak = float(want.abs().max())
    errors = [float((o.double() - want).abs().max()) / peak for o in got]
    flop = 2.0 * M * N * K
    base = torch_seconds(kind, x, w, runs)
    head = f"{kind} M={M} N={N} K={K}"
    rows = [f"### {head}" + (f": torch {base * 1e3:.3f} ms, {flop / base / 1e12:.1f} TFLOP/s" if base else ""),
            "", "| tiling | BM x BN | BK | split | GPU ms | TFLOP/s | vs torch | max err |",
            "|---|---|--:|--:|--:|--:|--:|--:|"]
    for i in sorted(seconds, key=seconds.get):
        t, s = tilings[i], seconds[i]
        mark = "*" if t == chosen else ""
        ratio = f"{base / s:.2f}" if base else "-"
        rows.append(f"| {mark}{t.rt}x{t.ct} | {t.bm}x{t.bn} | {t.bk} | {t.split} | {s * 1e3:.3f} "
                    f"| {flop / s / 1e12:.3g} | {ratio} | {errors[i]:.1e} |")
    bad = [tilings[i] for i, e in enumerate(errors) if e > 1e-4]
    if bad:
        rows.append(f"\nWRONG RESULTS (error > 1e-4 of the peak): {bad}")
    best = min(seconds, key=seconds.get)
    mine = seconds[tilings.index(chosen)]

    def cell(t: Tiling, s: float) -> str:
        return f"{t.rt}x{t.ct} BK {t.bk} S {t.split} | {flop / s / 1e12:.3g} | " + (f"{base / s:.2f}" if base else "-")

    summary = (f"| {head} | {flop / base / 1e12:.3g} | " if base else f"| {head} | - | ") + \
        f"{cell(tilings[best], seconds[best])} | {cell(chosen, mine)} |"
    return rows + [""], summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes (lavapipe)")
    parser.add_argument("--runs", type=int, default=10, help="timestamped calls per shape (median)")
    args = parser.parse_args()
    device = default_device()
    print(f"vkx gemm sweep on {device.name}: {device.compute_units} compute units, "
          f"{device.limits.max_compute_shared_memory_size} bytes of shared memory; torch {torch.__version__}"
          f"{' on ' + torch.cuda.get_device_name() if torch.cuda.is_available() else ' (no CUDA: no baseline)'}; "
          f"fp32, median of {args.runs} timestamped calls\n")
    start = time.perf_counter()
    summary = []
    for kind, M, N, K in QUICK if args.quick else FULL:
        rows, line = sweep(kind, M, N, K, args.runs, device)
        print("\n".join(rows), flush=True)
        summary.append(line)
    print("### summary\n\n| shape | torch TFLOP/s | best tiling | TFLOP/s | vs torch "
          "| default tiling | TFLOP/s | vs torch |\n|---|--:|---|--:|--:|---|--:|--:|")
    print("\n".join(summary))
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
