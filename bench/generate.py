"""Prefill and decode tokens/s: vkx on the Vulkan device against torch eager, same model, same dtype, one run.

The model is a Hugging Face folder (DIR), or, without one, a Llama-shaped config with random
weights (`--size small`: 4 layers of width 512, vocabulary 32000; `--size 1b`: Llama 3.2 1B).
Three measurements of the same greedy generation:
  vkx            the exported program (prefill + decode methods, KV cache on the device), twice:
                 the second generation shows what the first one's one-off costs were;
  torch wrapper  the very module vkx exported (vkx.export.hf.CausalLM) run eagerly by torch,
                 through the same generation loop (loader/lm/generate.py): the same work, op for op;
  transformers   `model.generate(do_sample=False)` with its own cache (decode tokens/s from the
                 whole call minus one forward of the prompt).
Torch runs on CUDA where it is available, else on the CPU. Then vkx's greedy bursts: the wall time
of a submission and of each decode step chained in it (`GreedyChain`). Then vkx's decode call itself: its
dispatches and barriers per token (and per decoder layer), its GPU time per token as a call runs
(timestamps), and the per-shader table of one serialised, timestamped decode call; then the same
for one prefill call (a whole chunk of --prefill-len tokens).

    .venv/bin/python bench/generate.py [DIR] [--size small|1b] [--dtype fp32|bf16|fp16] [--prompt-len 32]
                                       [--new-tokens 64] [--max-seq-len 256] [--prefill-len 32]
                                       [--quantize int4|int8]
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import vkx
from vkx.export import hf
from vkx.loader.lm.decoders import ProgramDecoder
from vkx.loader.lm.generate import BURST, LMShape, Timings, generate, greedy_by_calls
from vkx.loader.lm.greedy import GreedyChain, chains

_spec = importlib.util.spec_from_file_location("llama_load", Path(__file__).with_name("llama_load.py"))
llama_load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(llama_load)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class TorchDecoder:
    """loader/lm/generate.py's Decoder over hf.CausalLM in torch eager."""

    def __init__(self, lm: hf.CausalLM, device: str):
        self.lm, self.device = lm.to(device), device

    def _logits(self, input_ids: np.ndarray, cache_position: np.ndarray) -> torch.Tensor:
        with torch.no_grad():
            return self.lm(torch.from_numpy(input_ids).to(self.device), torch.from_numpy(cache_position).to(self.device))

    def prefill(self, input_ids: np.ndarray, cache_position: np.ndarray) -> np.ndarray:
        return self._logits(input_ids, cache_position).float().cpu().numpy()

    decode = prefill

    def prefill_argmax(self, input_ids: np.ndarray, cache_position: np.ndarray) -> np.ndarray:
        return self.prefill(input_ids, cache_position).argmax(-1)

    def decode_greedy(self, input_ids: np.ndarray, cache_position: np.ndarray, steps: int) -> np.ndarray:
        return greedy_by_calls(self.prefill_argmax, input_ids, cache_position, steps)

    def reset(self) -> None:
        self.lm.reset()


def progress(began: float, what: str) -> None:
    """A line on stderr as each stage ends (a 1B run takes minutes)."""
    print(f"[{time.perf_counter() - began:7.1f} s] {what}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path)
    parser.add_argument("--size", choices=llama_load.SIZES, default="small")
    parser.add_argument("--dtype", choices=DTYPES, default="fp32")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--max-seq-len", type=int, default=256)
    parser.add_argument("--prefill-len", type=int, default=32)
    parser.add_argument("--quantize", choices=["int4", "int8"], help="vkx's weights only (torch runs the 16-bit model)")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.folder
        if folder is None:
            folder = Path(scratch) / "model"
            llama_load.write_folder(folder, llama_load.SIZES[args.size])
        pte = Path(scratch) / "model.pte"
        hf.export_folder(folder, pte, max_seq_len=args.max_seq_len, prefill_len=args.prefill_len, dtype=args.dtype,
                         quantize=args.quantize)
        progress(began, "exported")
        model = hf.build_model(hf.read_folder(folder), DTYPES[args.dtype]).to(DTYPES[args.dtype])
        hf.fp32_rotary(model, model.config)  # as export_folder and transformers' own 16-bit models
        prompt = np.random.default_rng(0).integers(0, model.config.vocab_size, args.prompt_len).tolist()
        rows = []
        with vkx.load(pte) as program:
            decoder = ProgramDecoder(program)
            gc.collect()  # the export's garbage, not collected inside a timed generation
            timings = Timings()
            ours = list(generate(decoder, prompt, args.new_tokens, decoder.shape, timings=timings))
            rows.append(("vkx", timings))
            timings = Timings()
            list(generate(decoder, prompt, args.new_tokens, decoder.shape, timings=timings))
            rows.append(("vkx, a second generation", timings))
            step = (np.array([[ours[-1]]], np.int64), np.array([len(prompt) + len(ours) - 1], np.int64))
            bursts = burst_report(program["decode"], step)
            call = call_report(program["decode"], step)
            chunk = (np.array([prompt[:args.prefill_len] + [0] * (args.prefill_len - len(prompt))], np.int64),
                     np.arange(args.prefill_len, dtype=np.int64))
            prefill_call = call_report(program["prefill"], chunk)
        progress(began, "vkx generated")
        shape = LMShape(args.prefill_len, args.max_seq_len, model.config.vocab_size)
        wrapper = TorchDecoder(hf.CausalLM(model, args.max_seq_len), device)
        list(generate(wrapper, prompt, 2, shape))  # warm-up
        timings = Timings()
        theirs = list(generate(wrapper, prompt, args.new_tokens, shape, timings=timings))
        rows.append((f"torch wrapper ({device})", timings))
        progress(began, "torch wrapper generated")
        model = model.to(device)
        ids = torch.tensor([prompt], device=device)
        with torch.no_grad():
            model(ids)  # warm-up
            began = time.perf_counter()
            model(ids)
            prefill = time.perf_counter() - began
            began = time.perf_counter()
            model.generate(ids, max_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0, eos_token_id=None)
            whole = time.perf_counter() - began
        hf_timings = Timings(prompt_tokens=len(prompt), prefill_seconds=prefill, first_token_seconds=prefill,
                             decode_tokens=args.new_tokens - 1, decode_seconds=max(whole - prefill, 1e-9))
        rows.append((f"transformers generate ({device})", hf_timings))
    if args.quantize is None:
        same = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), len(ours))
        tokens = f"vkx's greedy tokens equal the torch wrapper's for the first {same} of {len(ours)}"
    else:
        tokens = f"vkx's {args.quantize} tokens not compared (torch runs the 16-bit model)"
    print(f"{args.size if args.folder is None else args.folder}, {args.dtype}, prompt {len(prompt)} tokens, "
          f"{args.new_tokens} new; {tokens}")
    print(f"  {'':<30} {'prefill tok/s':>14} {'decode tok/s':>13} {'first token ms':>15}")
    for name, t in rows:
        print(f"  {name:<30} {t.prefill_tokens_per_s:14,.1f} {t.decode_tokens_per_s:13,.1f} "
              f"{t.first_token_seconds * 1e3:15,.1f}")
    warm, base = rows[1][1], rows[2][1]  # both after a first generation
    print(f"  vkx (second generation) / torch wrapper: prefill {warm.prefill_tokens_per_s / base.prefill_tokens_per_s:.2f}x, "
          f"decode {warm.decode_tokens_per_s / base.decode_tokens_per_s:.2f}x")
    layers = hf.load_config(hf.read_folder(folder)).get_text_config().num_hidden_layers if args.folder else \
        llama_load.SIZES[args.size]["num_hidden_layers"]
    if bursts is not None:
        fixed, each = bursts
        print(f"vkx greedy bursts (wall): {fixed * 1e3:.2f} ms a submission + {each * 1e3:.3f} ms a chained step "
              f"({BURST / (fixed + BURST * each):,.0f} tokens/s at {BURST} steps a submission)")
    print_call_report("decode", call, layers, 1)
    print_call_report("prefill", prefill_call, layers, args.prefill_len)


def burst_report(method, inputs) -> tuple[float, float] | None:
    """(host seconds a submission, seconds a chained step) of greedy steps chained on the device (`GreedyChain`):
    the wall time of 1 and of BURST steps in one submission (medians of 5), split by a straight line;
    None where it cannot chain."""
    if not chains(method):
        return None
    chain = GreedyChain(method)
    median = {}
    for n in (1, BURST):
        samples = []
        for _ in range(5):
            began = time.perf_counter()
            chain(*inputs, n)
            samples.append(time.perf_counter() - began)
        median[n] = sorted(samples)[2]
    each = (median[BURST] - median[1]) / (BURST - 1)
    return median[1] - each, each


def call_report(method, inputs) -> dict:
    """One call's dispatches, barriers, GPU time as a call runs, and per-shader GPU time."""
    report = {"dispatches": method.dispatch_count, "barriers": method.barrier_count, "gpu_s": None, "shaders": {}}
    if not method.has_timestamps:
        return report
    report["gpu_s"] = method.gpu_seconds(*inputs, runs=10)
    for _, shader, seconds in method.profile(*inputs, runs=5):
        count, total = report["shaders"].get(shader, (0, 0.0))
        report["shaders"][shader] = (count + 1, total + seconds)
    return report


def print_call_report(name: str, report: dict, layers: int, tokens: int) -> None:
    """The report of one call of `tokens` tokens."""
    print(f"vkx {name} call: {report['dispatches']} dispatches ({report['dispatches'] / layers:.1f} per decoder "
          f"layer of {layers}), {report['barriers']} barriers", end="")
    if report["gpu_s"] is None:
        print("; the device has no timestamps")
        return
    serial = sum(t for _, t in report["shaders"].values())
    print(f"; GPU {report['gpu_s'] * 1e3:.3f} ms a call as it runs ({tokens / report['gpu_s']:,.0f} tokens/s), "
          f"{serial * 1e3:.3f} ms serialised")
    print(f"  {'shader':<22} {'dispatches':>10} {'GPU ms':>9} {'share':>6} {'us each':>8}")
    for shader, (count, total) in sorted(report["shaders"].items(), key=lambda kv: -kv[1][1]):
        print(f"  {shader:<22} {count:10d} {total * 1e3:9.3f} {total / serial:6.1%} {total / count * 1e6:8.1f}")


if __name__ == "__main__":
    main()
