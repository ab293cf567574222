"""fp16 GEMM: shaders/matmul_tiled.comp against shaders/matmul_coop.comp (tensor cores, where the
device has VK_NV_cooperative_matrix) and torch's fp16 product on CUDA, per Llama-3.2-1B prefill shape.

Each shape is one hand-built VkGraph of fp16 Linear nodes reading the same x[M, K] and W[N, K]:
node 0 takes the tiled kernel (its default tiling), node 1 the coop kernel's default tiling, the
next ones each of its workgroup shapes (no split); Program.profile gives each node's GPU time (a split-K node's
includes its reduce). Every output is checked against an fp64 product (max error relative to the
output's peak). torch's F.linear in fp16 is timed with CUDA events in the same run; `vs torch` is
torch's time / the kernel's.

    .venv/bin/python bench/gemm_fp16.py [--quick] [--rows 512] [--runs 10]
"""
from __future__ import annotations

import argparse
import re
import statistics
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from vkx.format import dtypes, vkgraph as g
from vkx.loader import load_graph
from vkx.loader.gpu.device import default_device
from vkx.loader.ops import gemm, gemm_coop

LLAMA_1B = [("q_proj, o_proj", 2048, 2048), ("k_proj, v_proj", 512, 2048), ("gate_proj, up_proj", 8192, 2048),
            ("down_proj", 2048, 8192), ("lm_head", 128256, 2048)]
QUICK = [("small", 256, 512), ("odd", 200, 264)]


def linear_graph(M: int, N: int, K: int, count: int) -> tuple[g.VkGraph, list[bytes], torch.Tensor, torch.Tensor]:
    """`count` fp16 Linear nodes of one input x[M, K] and one weight W[N, K]."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(M, K, generator=gen).half()
    w = (torch.randn(N, K, generator=gen) / K ** 0.5).half()
    f16 = dtypes.FLOAT16.datatype
    raw = w.numpy().tobytes()
    values: list = [g.Tensor(f16, (M, K)), g.Tensor(f16, (N, K), constant_id=0), g.Null()]
    chain, outs = [], []
    for i in range(count):
        values.append(g.Tensor(f16, (M, N)))
        chain.append(g.OperatorCall(i, "aten.linear.default", (0, 1, 2, len(values) - 1)))
        outs.append(len(values) - 1)
    graph = g.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=outs,
                      constants=[g.ConstantRef(g.NAMED_OFFSET, len(raw), "w")])
    return graph, [raw], x, w


@contextmanager
def kernels_in_order(plan: list):
    """While the graph builds, product i takes plan[i]: "tiled", "coop" (its default) or a CoopTiling."""
    use, choose = gemm.use_coop, gemm_coop.choose_coop_tiling
    asked = iter(plan)
    now = {}

    def use_in_order(*args):
        now["kernel"] = next(asked)
        return None if now["kernel"] == "tiled" else use(*args)

    gemm.use_coop = use_in_order
    gemm_coop.choose_coop_tiling = lambda *args: choose(*args) if now["kernel"] == "coop" else now["kernel"]
    try:
        yield
    finally:
        gemm.use_coop, gemm_coop.choose_coop_tiling = use, choose


def torch_seconds(x: torch.Tensor, w: torch.Tensor, runs: int) -> float | None:
    """torch's fp16 F.linear on CUDA (CUDA events, median), or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    xc, wc = x.cuda(), w.cuda()
    for _ in range(3):
        F.linear(xc, wc)
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        F.linear(xc, wc)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes (lavapipe)")
    parser.add_argument("--rows", type=int, default=512, help="M: the prefill's tokens")
    parser.add_argument("--runs", type=int, default=10, help="timestamped calls per shape (median)")
    args = parser.parse_args()
    device = default_device()
    coop = device.fp16_cooperative_matrix
    print(f"fp16 GEMM on {device.name} ({device.compute_units} compute units; fp16 cooperative matrices: "
          f"{'yes' if coop else 'no'}); torch {torch.__version__}"
          f"{' on ' + torch.cuda.get_device_name() if torch.cuda.is_available() else ' (no CUDA)'}; "
          f"M = {args.rows}, median of {args.runs} timestamped calls\n")
    print("| product | N x K | kernel | GPU ms | TFLOP/s | vs tiled | vs torch | max err |")
    print("|---|---|---|--:|--:|--:|--:|--:|")
    for name, N, K in QUICK if args.quick else LLAMA_1B:
        M = args.rows
        default = gemm_coop.choose_coop_tiling(M, N, K, 1, device.compute_units,
                                               device.limits.max_compute_shared_memory_size)
        plan = ["tiled", "coop", *gemm_coop.TILINGS] if coop else ["tiled"]
        labels = ["tiled", f"coop default: {default.bm}x{default.bn} of {default.sg_m * default.sg_n} split "
                  f"{default.split}", *(f"coop {t.bm}x{t.bn} of {t.sg_m * t.sg_n}" for t in gemm_coop.TILINGS)]
        graph, blobs, x, w = linear_graph(M, N, K, len(plan))
        with kernels_in_order(plan):
            program = load_graph(graph, blobs, device=device)
        with program:
            got = program(x)
            got = got if isinstance(got, tuple) else (got,)
            profile = program.profile(x, runs=args.runs)
        seconds: dict[int, float] = {}
        for node, _, t in profile:
            i = int(re.match(r"node (\d+)", node).group(1))
            seconds[i] = seconds.get(i, 0.0) + t
        want = F.linear(x.double(), w.double())
        peak = float(want.abs().max())
        base = torch_seconds(x, w, args.runs)
        flop = 2.0 * M * N * K
        for i, label in enumerate(labels[:len(plan)]):
            s = seconds[i]
            err = float((got[i].double() - want).abs().max()) / peak
            print(f"| {name} | {N} x {K} | {label} | {s * 1e3:.3f} | {flop / s / 1e12:.1f} | {seconds[0] / s:.2f} "
                  f"| {f'{base / s:.2f}' if base else '-'} | {err:.1e} |", flush=True)
        if base:
            print(f"| {name} | {N} x {K} | torch | {base * 1e3:.3f} | {flop / base / 1e12:.1f} | "
                  f"{seconds[0] / base:.2f} | 1.00 | |", flush=True)


if __name__ == "__main__":
    main()
