"""Matrix-vector sweep: each weight-product kernel of LLM decode at the Llama-3.2-1B shapes, in
each weight dtype and workgroup shape, against a same-run device copy of the same bytes.

For every dtype (fp32, fp16, bf16: shaders/matvec.comp; int4, int8 with fp16 scales in groups of 32:
shaders/matvec_q.comp) and weight shape [N, K], a hand-built VkGraph applies L distinct weights to
one activation row (L such that the weights fill at least `--min-mb`, so that no weight is read from
a cache), once per workgroup shape (rows per workgroup x invocations, and for int4/int8 the words an
invocation reads a step: `vkx.loader.ops.gemm.MATVEC_SHAPES` set for the device's class). The time
of one product is the median GPU time of its dispatches (timestamps, `Program.profile`); GB/s counts
the weight bytes read (int4/int8: packed weights and scales). The baseline is a device copy of the
same bytes in the same run (L fp32 tensors of those bytes each read and written once: `copy_graph`),
so "/ copy" is the product's read bandwidth over the copy's bandwidth. Per dtype, the last lines
rank the shapes by the time of one decode token of the 1B model (its 16 layers' q, k, v, o, gate,
up, down and the lm_head): the defaults in MATVEC_SHAPES come from these.

    python bench/matvec.py [--dtypes fp16,bf16,int4,int8] [--shapes 2048x2048,...] [--rows 1,2,4,8,16]
                           [--invocations 64,128,256] [--spans 4,1] [--min-mb 256] [--runs 5]
"""
from __future__ import annotations

import argparse
import math
from collections import defaultdict

import torch

from vkx.format import dtypes, vkgraph as g
from vkx.loader import load_graph
from vkx.loader.ops import gemm

SHAPES_1B = {(2048, 2048): 32, (512, 2048): 32, (8192, 2048): 32, (2048, 8192): 16, (128256, 2048): 1}
"""The 1B model's weight shapes [N, K] and how many products of each one decode token makes
(16 layers: q and o, k and v, gate and up, down; the lm_head)."""
GROUP = 32
QUANT_BITS = {"int4": 4, "int8": 8}
FLOATS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _datatype(dtype: torch.dtype) -> int:
    return dtypes.named(str(dtype).removeprefix("torch.")).datatype


def _bytes(t: torch.Tensor) -> bytes:
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).contiguous().numpy().tobytes()


def weights(kind: str, n: int, k: int, count: int, seed: int) -> list[list[torch.Tensor]]:
    """`count` random weights [N, K] of `kind`: [w] for a float kind, [packed, scales] quantized."""
    gen = torch.Generator().manual_seed(seed)
    if kind in FLOATS:
        return [[(torch.randn(n, k, generator=gen) / math.sqrt(k)).to(FLOATS[kind])] for _ in range(count)]
    bits = QUANT_BITS[kind]
    stored = k * bits // 8
    return [[torch.randint(0, 256, (n, stored), generator=gen, dtype=torch.uint8).view(
                torch.int8 if bits == 8 else torch.uint8),
             (torch.rand(n, k // GROUP, generator=gen) * 0.02 + 0.001).to(torch.float16)] for _ in range(count)]


def product_graph(kind: str, ws: list[list[torch.Tensor]], act: torch.dtype) -> tuple[g.VkGraph, list[bytes]]:
    """out_i = x @ W_i^T for every weight, all from one input row x."""
    n, k = ws[0][0].shape[0], ws[0][-1].shape[1] * GROUP if kind in QUANT_BITS else ws[0][0].shape[1]
    values: list = [g.Tensor(_datatype(act), (1, k))]
    chain, refs, blobs, outs = [], [], [], []
    for i, parts in enumerate(ws):
        ids = []
        for t in parts:
            raw = _bytes(t)
            blobs.append(raw)
            refs.append(g.ConstantRef(g.NAMED_OFFSET, len(raw), f"c{len(refs)}"))
            values.append(g.Tensor(_datatype(t.dtype), tuple(t.shape), constant_id=len(refs) - 1))
            ids.append(len(values) - 1)
        values.append(g.Null())
        null = len(values) - 1
        values.append(g.Tensor(_datatype(act), (1, n)))
        out = len(values) - 1
        if kind in QUANT_BITS:
            values += [g.Int(QUANT_BITS[kind]), g.Int(GROUP)]
            call = g.OperatorCall(i, "vkx.linear_q.default", (0, ids[0], ids[1], null, len(values) - 2,
                                                              len(values) - 1, out))
        else:
            call = g.OperatorCall(i, "aten.linear.default", (0, ids[0], null, out))
        chain.append(call)
        outs.append(out)
    return g.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=outs, constants=refs), blobs


def copy_graph(nbytes: int, count: int) -> tuple[g.VkGraph, list[bytes]]:
    """`count` copies of distinct fp32 constants of `nbytes` each: relu, which unary.comp streams in
    16-byte loads and stores (a clone takes copy_strided.comp, an element at a time)."""
    numel = nbytes // 4
    values: list = [g.Tensor(_datatype(torch.float32), (1,))]
    chain, refs, blobs, outs = [], [], [], []
    zeros = bytes(numel * 4)
    for i in range(count):
        blobs.append(zeros)
        refs.append(g.ConstantRef(g.NAMED_OFFSET, len(zeros), f"c{i}"))
        values += [g.Tensor(_datatype(torch.float32), (numel,), constant_id=i),
                   g.Tensor(_datatype(torch.float32), (numel,))]
        chain.append(g.OperatorCall(i, "aten.relu.default", (len(values) - 2, len(values) - 1)))
        outs.append(len(values) - 1)
    return g.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=outs, constants=refs), blobs


def median_op_seconds(graph: g.VkGraph, blobs: list[bytes], x: torch.Tensor, runs: int, shader: str) -> float:
    """The median over the graph's ops of an op's GPU seconds in `shader` dispatches."""
    program = load_graph(graph, blobs)
    try:
        times = program.profile(x, runs=runs)
        per_op: dict[str, float] = defaultdict(float)
        for node, name, t in times:
            if name == shader:
                per_op[node] += t
        ops = sorted(per_op.values())
        return ops[len(ops) // 2]
    finally:
        program.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="fp16,bf16,int4,int8")
    parser.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES_1B))
    parser.add_argument("--rows", default="1,2,4,8,16")
    parser.add_argument("--invocations", default="64,128,256")
    parser.add_argument("--spans", default="4,1", help="words a quantized product's invocation reads a step")
    parser.add_argument("--min-mb", type=float, default=256.0, help="weight bytes of each graph, at least")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--activations", default="bf16", help="the activation dtype of the quantized products")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    settings = [gemm.MatvecShape(r, i, sp) for r in map(int, args.rows.split(","))
                for i in map(int, args.invocations.split(",")) for sp in map(int, args.spans.split(","))]

    probe = load_graph(*copy_graph(4096, 1))
    device = probe.device
    cls = gemm.device_class(device.is_cpu, device.limits.features, device.limits.max_compute_work_group_invocations)
    probe.close()
    print(f"device: {device.name}; class {cls}; defaults "
          + ", ".join(f"{k}: {s.rows} rows x {s.invocations}" for (c, k), s in gemm.MATVEC_SHAPES.items() if c == cls))
    print(f"{'dtype':<6}{'N x K':>14}{'L':>4}{'MB':>8}{'copy GB/s':>11}{'rows':>6}{'inv':>5}{'span':>5}{'us':>9}"
          f"{'GB/s':>8}{'/ copy':>8}")
    token: dict[tuple[str, int, int, int], float] = defaultdict(float)  # (dtype, rows, invocations, span)
    best_token: dict[str, dict] = {}
    for kind in args.dtypes.split(","):
        kernel = "matvec_q" if kind in QUANT_BITS else "matvec"
        act = FLOATS[args.activations] if kind in QUANT_BITS else FLOATS[kind]
        for si, (n, k) in enumerate(shapes):
            one = weights(kind, n, k, 1, seed=si)
            nbytes = sum(t.numel() * t.element_size() for t in one[0])
            count = max(1, min(64, math.ceil(args.min_mb * 1e6 / nbytes)))
            ws = one + weights(kind, n, k, count - 1, seed=1000 + si) if count > 1 else one
            x = torch.randn(1, k).to(act)
            copy_t = median_op_seconds(*copy_graph(nbytes, count), torch.zeros(1), args.runs, "unary")
            copy_gbs = 2 * nbytes / copy_t / 1e9
            graph, blobs = product_graph(kind, ws, act)
            saved = dict(gemm.MATVEC_SHAPES)
            for shape in settings:
                if -(-n // shape.rows) > 65535 or shape.rows * shape.invocations > 2048 \
                        or (kind in FLOATS and shape.span != 4):
                    continue
                gemm.MATVEC_SHAPES[(cls, kernel)] = shape
                try:
                    t = median_op_seconds(graph, blobs, x, args.runs, kernel)
                finally:
                    gemm.MATVEC_SHAPES.clear()
                    gemm.MATVEC_SHAPES.update(saved)
                gbs = nbytes / t / 1e9
                print(f"{kind:<6}{f'{n} x {k}':>14}{count:>4}{nbytes / 1e6:>8.1f}{copy_gbs:>11.0f}{shape.rows:>6}"
                      f"{shape.invocations:>5}{shape.span:>5}{t * 1e6:>9.1f}{gbs:>8.1f}{gbs / copy_gbs:>8.2f}", flush=True)
                token[(kind, shape.rows, shape.invocations, shape.span)] += SHAPES_1B.get((n, k), 1) * t
        ranked = sorted((t, r, i, sp) for (kd, r, i, sp), t in token.items() if kd == kind)
        if ranked:
            t, r, i, sp = ranked[0]
            best_token[kind] = {"rows": r, "invocations": i, "span": sp, "ms": t * 1e3}
            print(f"{kind}: one decode token's products (16 layers + lm_head), ms, best first: "
                  + ", ".join(f"{r}x{i}/{sp} {t * 1e3:.3f}" for t, r, i, sp in ranked[:8]), flush=True)
    print("best:", best_token)


if __name__ == "__main__":
    main()
