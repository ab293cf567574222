"""Inference benchmark: vkx against torch on the same models, in one run.

Each case is exported by vkx (fp32 unless --dtype), loaded on the default Vulkan device and
called; torch runs the same module on the same inputs, on CUDA when torch has it (TF32 off:
fp32 against fp32), else on the CPU. Columns: the median wall milliseconds per call of each
(vkx's call writes the inputs, submits the recorded command buffer, waits on its fence and
reads the outputs; torch's synchronises), vkx's GPU milliseconds (the sum of its dispatches,
timestamp queries: loader/execute/record.py), and torch / vkx for both. `--profile` prints each
case's GPU time per op and shader.

Cases: the example model files (examples/*.py, get_model()), a transformer encoder block
(d 1024, 16 heads, MLP 4096, seq 512: examples/transformer.py's block at that size) and
8 × Linear(4096, 4096) (no bias) at batch 1 and 64, and row reductions over [8192, 4096]
(layer_norm, rms_norm, softmax, sum over the last dim), for which a second table gives the
bytes moved (input read + output written) per second of GPU time.

    .venv/bin/python bench/infer.py [--cases all|NAME,...] [--runs 20] [--dtype fp32] [--profile]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ("mlp", "cnn", "transformer", "llama_block")
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def linear_stack(batch: int, width: int = 4096, layers: int = 8):
    torch.manual_seed(0)
    module = nn.Sequential(*(nn.Linear(width, width, bias=False) for _ in range(layers))).eval()
    with torch.no_grad():  # outputs of real magnitude through the whole stack
        for layer in module:
            layer.weight.normal_(0, width ** -0.5)
    return module, (torch.randn(batch, width),)


def transformer_block():
    from vkx.export.model_file import load_model_file
    module, _ = load_model_file(ROOT / "examples" / "transformer.py")
    block = type(module)(width=1024, heads=16, hidden=4096)
    torch.manual_seed(0)
    return block.eval(), (torch.randn(1, 512, 1024),)


ROWS = (8192, 4096)


class _Sum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(-1)


ROW_OPS = {"layer_norm": lambda: nn.LayerNorm(ROWS[1]), "rms_norm": lambda: nn.RMSNorm(ROWS[1]),
           "softmax": lambda: nn.Softmax(-1), "sum": _Sum}


def row_op(kind: str):
    torch.manual_seed(0)
    return ROW_OPS[kind]().eval(), (torch.randn(*ROWS),)


def example(name: str):
    from vkx.export.model_file import load_model_file
    return lambda: load_model_file(ROOT / "examples" / f"{name}.py")


CASES = {**{name: example(name) for name in EXAMPLES},
         "transformer-d1024-s512": transformer_block,
         "linear8x4096-b1": lambda: linear_stack(1),
         "linear8x4096-b64": lambda: linear_stack(64),
         **{f"rows-{kind}": (lambda kind=kind: row_op(kind)) for kind in ROW_OPS}}


def median_seconds(fn, runs: int, warmup: int = 1) -> float:
    """The median wall time of `runs` calls of `fn`, after `warmup` calls (pipelines, first touch,
    torch's kernels); bench/quant.py times with it too."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def torch_seconds(module: nn.Module, inputs, dtype: torch.dtype, runs: int) -> tuple[float, str]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    module = module.to(device, dtype)
    xs = [x.to(device, dtype) if x.is_floating_point() else x.to(device) for x in inputs]

    def call():
        with torch.no_grad():
            module(*xs)
        if device == "cuda":
            torch.cuda.synchronize()

    return median_seconds(call, runs), device


def measure(name: str, dtype: str, runs: int, profile: bool, folder: Path) -> dict:
    import vkx

    module, inputs = CASES[name]()
    tdtype = TORCH_DTYPES[dtype]
    xs = tuple(x.to(tdtype) if x.is_floating_point() else x for x in inputs)
    path = folder / f"{name}.pte"
    vkx.export_model(module, inputs, path, dtype=dtype)
    with torch.no_grad():
        want = module.to(tdtype)(*xs)
    with vkx.load(path) as program:
        got = program(*xs)
        got, want = (got[0], want[0]) if isinstance(want, tuple) else (got, want)
        err = float((got.double() - want.double()).abs().max() / want.double().abs().max().clamp_min(1e-30))
        if err > (1e-3 if dtype == "fp32" else 5e-2):
            raise SystemExit(f"{name}: vkx and torch disagree ({err:.3g} of the peak)")
        vkx_s = median_seconds(lambda: program(*xs), runs)
        ops = program.profile(*xs, runs=max(3, runs // 2))
        dispatches = program.dispatch_count
    torch_s, device = torch_seconds(module, inputs, tdtype, runs)
    moved = sum(x.numel() * x.element_size() for x in xs) + want.numel() * want.element_size()
    return {"name": name, "moved": moved, "vkx": vkx_s, "gpu": sum(t for _, _, t in ops), "torch": torch_s,
            "device": device, "ops": ops if profile else None, "dispatches": dispatches, "err": err}


def op_table(ops: list[tuple[str, str, float]]) -> str:
    """GPU time per (op, shader), largest first."""
    total = sum(t for _, _, t in ops) or 1.0
    rows: dict[tuple[str, str], list] = {}
    for node, shader, t in ops:
        op = node.split("(", 1)[-1].rstrip(")")
        row = rows.setdefault((op, shader), [0, 0.0])
        row[0] += 1
        row[1] += t
    lines = ["  | op | shader | dispatches | GPU ms | share |", "  |---|---|--:|--:|--:|"]
    for (op, shader), (n, t) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"  | {op} | {shader} | {n} | {t * 1e3:.3f} | {100 * t / total:.1f}% |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="all", help=f"comma-separated, of: {', '.join(CASES)}")
    parser.add_argument("--runs", type=int, default=20, help="timed calls per case (after one warm-up)")
    parser.add_argument("--dtype", default="fp32", choices=list(TORCH_DTYPES))
    parser.add_argument("--profile", action="store_true", help="print GPU time per op for each case")
    args = parser.parse_args()
    names = list(CASES) if args.cases == "all" else args.cases.split(",")
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s): {', '.join(unknown)}")
    from vkx.loader.gpu.device import default_device

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            results.append(measure(name, args.dtype, args.runs, args.profile, Path(tmp)))
            print(f"  {name}: done", file=sys.stderr)
    device = results[0]["device"]
    print(f"vkx on {default_device().name}, torch {torch.__version__} on {device}"
          f"{'' if device == 'cuda' else f' ({torch.get_num_threads()} threads)'}, {args.dtype}, "
          f"median of {args.runs} calls\n")
    print("| case | dispatches | vkx ms | vkx GPU ms | torch ms | torch / vkx | torch / vkx GPU |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    for r in results:
        print(f"| {r['name']} | {r['dispatches']} | {r['vkx'] * 1e3:.3f} | {r['gpu'] * 1e3:.3f} "
              f"| {r['torch'] * 1e3:.3f} | {r['torch'] / r['vkx']:.3f} | {r['torch'] / r['gpu']:.3f} |")
    rows = [r for r in results if r["name"].startswith("rows-")]
    if rows:
        print("\n| row reduction | MB moved | vkx GPU ms | vkx GB/s | torch ms | torch GB/s |")
        print("|---|--:|--:|--:|--:|--:|")
        for r in rows:
            print(f"| {r['name'][5:]} | {r['moved'] / 1e6:.0f} | {r['gpu'] * 1e3:.3f} | {r['moved'] / r['gpu'] / 1e9:.1f} "
                  f"| {r['torch'] * 1e3:.3f} | {r['moved'] / r['torch'] / 1e9:.1f} |")
    for r in results:
        if r["ops"] is not None:
            print(f"\n{r['name']}: GPU time per op\n\n{op_table(r['ops'])}")


if __name__ == "__main__":
    main()
