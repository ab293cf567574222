"""Matrix-vector benchmark: one row of activations through [N, K] weights (LLM decode).

A chain of `--layers` linear ops x <- x @ W_i^T (no bias, N = K, distinct weights
so that no weight stays in a cache) runs as one hand-built VkGraph on the default
Vulkan device, in each float dtype, and the same chain runs in torch on the CPU
with the same weights. Columns: weight bytes per call; for vkx's matvec path,
vkx's plain tiled path (matvec switched off) and torch, the wall milliseconds
per call (best of `--repeats` after a warm-up) and GB/s of weight bytes; then
the GB of weight per CPU-second of the process (every thread: lavapipe's
workers, torch's), which a machine shared with other work does not distort;
and vkx matvec / torch in both measures.

    python bench/matvec.py [--size 4096] [--layers 4] [--repeats 5] [--dtypes float32,float16,bfloat16]
"""
from __future__ import annotations

import argparse
import time
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from vkx.format import dtypes, vkgraph as g
from vkx.loader import load_graph
from vkx.loader.ops import gemm


def chain_graph(weights: list[torch.Tensor], dtype: torch.dtype) -> tuple[g.VkGraph, list[bytes]]:
    """x -> linear(..., W_0) -> ... -> linear(..., W_last), every tensor in `dtype`."""
    datatype = dtypes.named(str(dtype).removeprefix("torch.")).datatype
    n, k = weights[0].shape
    values: list = [g.Tensor(datatype, (1, k))]
    chain, refs, blobs = [], [], []
    x = 0
    for i, w in enumerate(weights):
        raw = (w.view(torch.int16) if dtype == torch.bfloat16 else w).numpy().tobytes()
        blobs.append(raw)
        refs.append(g.ConstantRef(g.NAMED_OFFSET, len(raw), f"w{i}"))
        values += [g.Tensor(datatype, tuple(w.shape), constant_id=i), g.Null(), g.Tensor(datatype, (1, n))]
        wid, out = len(values) - 3, len(values) - 1
        chain.append(g.OperatorCall(i, "aten.linear.default", (x, wid, wid + 1, out)))
        x = out
    return g.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=[x], constants=refs), blobs


def best_seconds(fn, repeats: int) -> tuple[float, float]:
    """(wall, process CPU) seconds of one call of `fn`, each the best of `repeats` after a warm-up."""
    fn()  # warm-up (pipelines, first touch)
    wall = cpu = float("inf")
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
    return wall, cpu


@contextmanager
def plain_path():
    """Switch the matvec path off: every product takes the tiled shader."""
    use = gemm.use_matvec
    gemm.use_matvec = lambda *args: False
    try:
        yield
    finally:
        gemm.use_matvec = use


def vkx_seconds(weights, x, dtype, repeats: int, want: torch.Tensor) -> tuple[float, float]:
    graph, blobs = chain_graph(weights, dtype)
    program = load_graph(graph, blobs)
    try:
        got = program(x)
        err = float((got.double() - want.double()).abs().max() / want.double().abs().max())
        assert err < 0.05, f"vkx and torch disagree ({err:.3g} of the peak)"
        return best_seconds(lambda: program(x), repeats)
    finally:
        program.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096, help="N = K")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtypes", default="float32,float16,bfloat16")
    args = parser.parse_args()

    print(f"x[1, {args.size}] through {args.layers} weights [{args.size}, {args.size}]; "
          f"torch {torch.__version__} with {torch.get_num_threads()} threads")
    print(f"{'dtype':<10}{'MB':>7}{'ms':>8}{'GB/s':>7}{'plain ms':>10}{'GB/s':>7}{'torch ms':>10}{'GB/s':>7}"
          f"{'GB/cpu-s':>10}{'plain':>7}{'torch':>7}{'vs torch':>10}{'(cpu)':>7}")
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        gen = torch.Generator().manual_seed(0)
        weights = [(torch.randn(args.size, args.size, generator=gen) / args.size ** 0.5).to(dtype)
                   for _ in range(args.layers)]
        x = torch.randn(1, args.size, generator=gen).to(dtype)

        def run_torch():
            y = x
            for w in weights:
                y = F.linear(y, w)
            return y

        want = run_torch()
        gb = sum(w.numel() * w.element_size() for w in weights) / 1e9
        torch_t = best_seconds(run_torch, args.repeats)
        vkx_t = vkx_seconds(weights, x, dtype, args.repeats, want)
        with plain_path():
            plain_t = vkx_seconds(weights, x, dtype, max(1, args.repeats // 2), want)
        print(f"{name:<10}{gb * 1e3:>7.0f}{vkx_t[0] * 1e3:>8.0f}{gb / vkx_t[0]:>7.2f}"
              f"{plain_t[0] * 1e3:>10.0f}{gb / plain_t[0]:>7.2f}{torch_t[0] * 1e3:>10.1f}{gb / torch_t[0]:>7.2f}"
              f"{gb / vkx_t[1]:>10.2f}{gb / plain_t[1]:>7.2f}{gb / torch_t[1]:>7.2f}"
              f"{torch_t[0] / vkx_t[0]:>10.3f}{torch_t[1] / vkx_t[1]:>7.3f}")


if __name__ == "__main__":
    main()
