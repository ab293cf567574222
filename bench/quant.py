"""Quantization benchmark: size, load memory and batch-1 decode speed of one model in four dtypes.

The model is `--layers` × Linear(`--width`, `--width`) (default 4 × 2048: 64 MiB of fp32 weights;
16 × 4096 is 1 GiB, large enough that a GPU's per-call cost does not hide the weight bytes), exported by vkx in fp32,
fp16 (`dtype="fp16"`) and with vkx's own weight-only quantization in int8, int4 (groups
of 32, fp16 scales and offsets: vkx.export.quantize) and int4 with scales alone (int4-symmetric). For each file, measured in one run:

* file bytes and device bytes (the loader's `weight_bytes`), each over fp32's;
* the load's peak over W + A (W = device weight bytes, A = activations), measured in a fresh
  process from /proc as tests/memory does (`python -m tests.memory.peak_child`);
* batch-1 decode latency on this device (median of timed calls after warm-up) and the
  weight bytes it streams per second, also as a fraction of the copy bandwidth (bytes read and
  written per second by a 1 GiB tensor copy in torch on the same device) and of torch's own
  weight bandwidth; torch runs the same weights dequantized to fp32 (`F.linear`) on CUDA when
  torch has it (TF32 off), else on the CPU (its default threads), in the same run.

    .venv/bin/python bench/quant.py [--runs 50] [--width 2048] [--layers 4]

A dtype that fails to export or load gets a row saying why (the others still run).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from infer import median_seconds  # bench/ is this script's directory: sys.path[0]

ROOT = Path(__file__).resolve().parents[1]
DTYPES = ("fp32", "fp16", "int8", "int4", "int4-symmetric")
"""int4 is vkx's affine groups (a scale and an offset); int4-symmetric the scale alone (vkx's int4 until
issue 39, still what torchao and ExecuTorch files carry): the offset's cost in the kernels."""
GROUP = 32
MiB = 1 << 20


@dataclass
class Row:
    dtype: str
    file_bytes: int = 0
    device_bytes: int = 0
    peak_ratio: float = 0.0
    vkx_seconds: float = 0.0
    gpu_seconds: float = 0.0
    """The dispatches' own time (timestamps): a call less its fixed submit-and-wait cost."""
    torch_seconds: float = 0.0
    error: str = ""


def model(width: int, layers: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*(nn.Linear(width, width, bias=False) for _ in range(layers))).eval()


TORCH_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def synchronize() -> None:
    if TORCH_DEVICE == "cuda":
        torch.cuda.synchronize()


def copy_bandwidth(runs: int) -> float:
    """Bytes read + written per second by a 1 GiB copy in torch on TORCH_DEVICE."""
    src = torch.empty(1 << 28, dtype=torch.float32, device=TORCH_DEVICE).fill_(1.0)
    dst = torch.empty_like(src)

    def copy():
        dst.copy_(src)
        synchronize()

    seconds = median_seconds(copy, max(5, runs // 5), warmup=3)
    return 2 * src.numel() * 4 / seconds


def variant(base: nn.Module, dtype: str) -> tuple[nn.Module, str, list[torch.Tensor]]:
    """(module to export, export dtype, the fp32 weights it computes with)."""
    from vkx.export.quantize import QuantLinear, dequantize, quantize_module, quantize_weight

    if dtype in ("fp32", "fp16"):
        weights = [layer.weight.detach() for layer in base]
        if dtype == "fp16":
            weights = [w.half().float() for w in weights]
        return base, dtype, weights
    if dtype == "int4-symmetric":
        quantized = nn.Sequential(*(QuantLinear(layer, *quantize_weight(layer.weight, 4, GROUP), 4, GROUP)
                                    for layer in base))
    else:
        quantized = quantize_module(base, dtype, GROUP)
    bits = 8 if dtype == "int8" else 4
    return quantized, "fp32", [dequantize(layer.weight_q, layer.scales, bits, GROUP) for layer in quantized]


class LoadFailed(Exception):
    """The measuring child could not load or run the file (its last error line)."""


def peak_over_baseline(path: Path) -> dict:
    """tests/memory's child: a fresh process loads `path`, runs it once, reports /proc peaks as JSON."""
    env = {**os.environ, "VKX_VALIDATION": "0"}
    done = subprocess.run([sys.executable, "-m", "tests.memory.peak_child", str(path), "lazy"], cwd=ROOT,
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise LoadFailed(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "the child failed")
    return json.loads(done.stdout.splitlines()[-1])


def measure(base: nn.Module, dtype: str, folder: Path, runs: int) -> Row:
    import vkx

    row = Row(dtype)
    module, export_dtype, weights = variant(base, dtype)
    x = torch.randn(1, base[0].in_features)
    on = [w.to(TORCH_DEVICE) for w in weights]
    x_on = x.to(TORCH_DEVICE)
    row.torch_seconds = median_seconds(lambda: _torch_decode(x_on, on), runs, warmup=3)
    del on
    path = folder / f"linears-{dtype}.pte"
    try:
        report = vkx.export_model(module, (x,), path, dtype=export_dtype)
        child = peak_over_baseline(path)
        xin = x.half() if export_dtype == "fp16" else x  # an fp16 program takes fp16 inputs
        with vkx.load(path) as program:
            row.vkx_seconds = median_seconds(lambda: program(xin), runs, warmup=3)
            row.gpu_seconds = sum(t for _, _, t in program.profile(xin, runs=runs))
    except Exception as error:  # the row says why; the other dtypes still run
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        row.error = f"not run: {first}" if isinstance(error, LoadFailed) else f"{type(error).__name__}: {first}"
        return row
    row.file_bytes = path.stat().st_size
    row.device_bytes = child["weight_bytes"]
    row.peak_ratio = child["peak"] / (child["weight_bytes"] + report.memory.total_nbytes)
    return row


def _torch_decode(x: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        for w in weights:
            x = F.linear(x, w)
    synchronize()
    return x


def table(rows: list[Row], device: str, width: int, layers: int, copy: float) -> str:
    fp32 = next(r for r in rows if r.dtype == "fp32")
    fp32_weights = layers * width * width * 4
    where = "CUDA, TF32 off" if TORCH_DEVICE == "cuda" else f"the CPU, {torch.get_num_threads()} threads"
    lines = [f"{layers} × Linear({width}, {width}), batch 1, {device}; torch on {where}, the same weights "
             f"dequantized to fp32; copy bandwidth (torch, 1 GiB copy, read + write) {copy / 1e9:.0f} GB/s", "",
             "| dtype | file MiB | file / fp32 | device MiB | device / fp32 | load peak / (W+A) "
             "| vkx ms/token | vkx weight GB/s | / copy | / torch | vkx GPU ms | GPU GB/s | torch ms/token | torch GB/s |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        torch_bw = fp32_weights / r.torch_seconds
        torch_cells = f"{r.torch_seconds * 1e3:.3f} | {torch_bw / 1e9:.1f}"
        if r.error:
            lines.append(f"| {r.dtype} | {r.error} | | | | | | | | | | | {torch_cells} |")
            continue
        bw = r.device_bytes / r.vkx_seconds
        lines.append(
            f"| {r.dtype} | {r.file_bytes / MiB:.2f} | {r.file_bytes / fp32.file_bytes:.3f} "
            f"| {r.device_bytes / MiB:.2f} | {r.device_bytes / fp32.device_bytes:.3f} | {r.peak_ratio:.3f} "
            f"| {r.vkx_seconds * 1e3:.3f} | {bw / 1e9:.1f} | {bw / copy:.3f} | {bw / torch_bw:.3f} "
            f"| {r.gpu_seconds * 1e3:.3f} | {r.device_bytes / r.gpu_seconds / 1e9:.1f} | {torch_cells} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="timed calls per dtype (after 3 warm-up calls)")
    parser.add_argument("--width", type=int, default=2048, help="in = out features of each layer")
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    from vkx.loader.gpu.device import default_device

    base = model(args.width, args.layers)
    copy = copy_bandwidth(args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for dtype in DTYPES:
            rows.append(measure(base, dtype, Path(tmp), args.runs))
            print(f"  {dtype}: {rows[-1].error or 'done'}", file=sys.stderr)
    if rows[0].error:
        raise SystemExit(f"fp32, the reference row, failed: {rows[0].error}")
    print(table(rows, default_device().name, args.width, args.layers, copy))


if __name__ == "__main__":
    main()
