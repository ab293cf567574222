"""Device profiles on this device: does each model load and run under a profile, does it match the
unprofiled run, and which kernels changed (docs/profiles.md, docs/benchmarks.md).

Models: examples/cnn.py and examples/transformer.py (fp32, one forward on random inputs), a
block whose kernels the profiles change (a [64, 1024] x [1024, 1024] linear, softmax and layer
norm over rows of 1024), and a
Llama-shaped causal LM with random weights (bench/llama_load.py's `small` or `1b` config) in
fp32, bf16 and bf16 with int4 weights (greedy tokens; decode tokens/s, W and A, each against the
unprofiled run: the cost of a profile on this device). Each is run without a profile, then under
every profile of vkx.loader.gpu.limits.PROFILES on a device of its own; a refusal prints its one-line
reason.

    .venv/bin/python bench/device_profiles.py [--size small|1b] [--new-tokens 8]
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import vkx
from vkx.export import hf
from vkx.loader.gpu.device import Device
from vkx.loader.errors import LoadError
from vkx.loader.lm.decoders import ProgramDecoder
from vkx.loader.lm.generate import Timings, generate
from vkx.loader.gpu.limits import PROFILES
from vkx.loader.gpu.shaders import pipelines_for

_spec = importlib.util.spec_from_file_location("llama_load", Path(__file__).with_name("llama_load.py"))
llama_load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(llama_load)
ROOT = Path(__file__).resolve().parent.parent
def kernels(dev: Device) -> set[str]:
    """Each pipeline made on `dev` as `shader(spec)`: its kernel choices (workgroup sizes, tiles, rows)
    are its specialization constants."""
    return {f"{name}({','.join(map(str, spec))})" if spec else name
            for name, _, _, spec in pipelines_for(dev)._pipelines}


def run_forward(pte: Path, profile: str | None):
    dev = Device(profile=profile) if profile else Device()
    try:
        began = time.perf_counter()
        with vkx.load(pte, device=dev) as program:
            xs = [np.random.default_rng(0).standard_normal(s.shape).astype(s.dtype) for s in program.input_specs]
            out = program.run_numpy(*xs)
        return out, time.perf_counter() - began, kernels(dev), {}
    finally:
        dev.close()


def run_lm(pte: Path, profile: str | None, new_tokens: int):
    dev = Device(profile=profile) if profile else Device()
    try:
        began = time.perf_counter()
        with vkx.load(pte, device=dev) as program:
            decoder = ProgramDecoder(program)
            prompt = list(range(3, 11))
            timings = Timings()
            tokens = list(generate(decoder, prompt, new_tokens, decoder.shape, timings=timings))
            figures = {"decode tokens/s": timings.decode_tokens_per_s, "W MiB": program.memory.W / 2**20,
                       "A MiB": program.memory.A / 2**20}
        return tokens, time.perf_counter() - began, kernels(dev), figures
    finally:
        dev.close()


def compare(name: str, pte: Path, run, same) -> None:
    base, seconds, base_kernels, base_figures = run(pte, None)
    print(f"{name}: unprofiled {seconds:.1f} s" + "".join(f", {k} {v:,.1f}" for k, v in base_figures.items()))
    for profile in PROFILES:
        try:
            got, seconds, used, figures = run(pte, profile)
        except LoadError as error:
            print(f"  {profile}: refused: {error}")
            continue
        ratios = "".join(f", {k} {v:,.1f} ({v / base_figures[k]:.2f}x)" for k, v in figures.items())
        print(f"  {profile}: {seconds:.1f} s, {same(got, base)}{ratios}")
        print(f"    kernels only unprofiled: {', '.join(sorted(base_kernels - used)) or 'none'}")
        print(f"    kernels only under {profile}: {', '.join(sorted(used - base_kernels)) or 'none'}")


class Block(torch.nn.Module):
    """Shapes whose kernels depend on the workgroup limit: M, N >= 32 (gemm) and rows >= 1024."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(1024, 1024)
        self.norm = torch.nn.LayerNorm(1024)

    def forward(self, x):
        return self.norm(torch.softmax(self.linear(x), -1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=llama_load.SIZES, default="small")
    parser.add_argument("--new-tokens", type=int, default=8)
    args = parser.parse_args()

    def outputs_equal(got, base) -> str:
        err = max(float(np.max(np.abs(g.astype(np.float64) - b))) for g, b in zip(got, base))
        return f"max |difference| from unprofiled {err:.3g}"

    def tokens_equal(got, base) -> str:
        return f"greedy tokens {'equal' if got == base else 'DIFFER'} ({len(got)})"

    with tempfile.TemporaryDirectory() as scratch:
        for example in ("cnn", "transformer"):
            pte = Path(scratch) / f"{example}.pte"
            subprocess.run([sys.executable, "-m", "vkx", "export", str(ROOT / "examples" / f"{example}.py"),
                            "-o", str(pte)], check=True, capture_output=True)
            compare(f"examples/{example}.py fp32", pte, run_forward, outputs_equal)
        block = Path(scratch) / "block.pte"
        vkx.export_model(Block().eval(), (torch.randn(64, 1024),), block)
        compare("linear + softmax + layer norm over rows of 1024, fp32", block, run_forward, outputs_equal)
        folder = Path(scratch) / "model"
        llama_load.write_folder(folder, llama_load.SIZES[args.size])
        for dtype, options in (("fp32", {}), ("bf16", {}), ("bf16 + int4", {"quantize": "int4"})):
            pte = Path(scratch) / "lm.pte"
            hf.export_folder(folder, pte, max_seq_len=64, prefill_len=8, dtype=dtype.split()[0], **options)
            compare(f"Llama-shaped ({args.size}) {dtype}", pte,
                    lambda p, prof: run_lm(p, prof, args.new_tokens), tokens_equal)
            pte.unlink()


if __name__ == "__main__":
    main()
