"""vkx's loader on files for each target: `--target vkx` (the default) vs `--target executorch`.

Each example model, and the transformer and Llama blocks at width 256 over 128 tokens, is exported
both ways and loaded once per target; the two programs then run alternately (--runs times each)
and each one's median run time is shown, with the op count, the planned activation bytes (A) and
the largest error relative to torch's output.

    python bench/target.py [--runs 15]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import vkx
from vkx.export import load_model_file

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TARGETS = ("vkx", "executorch")


def models() -> dict:
    sys.path.insert(0, str(EXAMPLES))
    import llama_block
    import transformer
    found = {name: (lambda name=name: load_model_file(EXAMPLES / f"{name}.py"))
             for name in ("mlp", "cnn", "transformer", "llama_block")}

    def wide(make, **sizes):
        def build():
            torch.manual_seed(0)
            return make(**sizes).eval(), (torch.randn(1, 128, 256),)
        return build

    found["transformer 256×128"] = wide(transformer.EncoderBlock, width=256, heads=8, hidden=1024)
    found["llama_block 256×128"] = wide(llama_block.DecoderBlock, width=256, heads=8, kv_heads=2, hidden=688,
                                        max_tokens=128)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    print("| model | target | ops | A | max rel. error | median run |")
    print("|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for name, build in models().items():
            module, inputs = build()
            with torch.no_grad():
                want = module(*inputs)
            programs, rows = {}, {}
            for target in TARGETS:
                path = Path(folder) / f"m.{target}.pte"
                report = vkx.export_model(module, inputs, path, target=target)
                programs[target] = vkx.load(path)
                error = float((programs[target](*inputs) - want).abs().max() / want.abs().max())
                rows[target] = (report.operators, report.memory.total_nbytes, error, [])
            for _ in range(args.runs):
                for target in TARGETS:
                    began = time.perf_counter()
                    programs[target](*inputs)
                    rows[target][3].append(time.perf_counter() - began)
            for target, (ops, activations, error, times) in rows.items():
                print(f"| {name} | {target} | {ops} | {activations:,} B | {error:.1e} | "
                      f"{statistics.median(times) * 1e3:.2f} ms |")
                programs[target].close()


if __name__ == "__main__":
    main()
