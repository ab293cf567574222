"""What each device profile costs decode on this device: a Llama-shaped LM's decode tokens/s under every
profile of vkx.loader.gpu.limits.PROFILES against the same file unprofiled, same process, same device.

For each dtype (bf16, and bf16 with int4 weights) the file is exported once; then, for no profile and
each profile in turn, it is loaded on a device of its own, one generation warms it (pipelines, caches),
and --runs generations of --new-tokens greedy tokens from an 8-token prompt are timed. Printed: the
median decode tokens/s with its range, the ratio of medians to the unprofiled run, the dispatches of a
decode call, and whether the greedy tokens equal the unprofiled ones (docs/profiles.md).

    .venv/bin/python bench/profile_decode.py [--size small|1b] [--layers N] [--new-tokens 32] [--runs 10]
                                          [--profiles none,android-baseline-2022,...]
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
from pathlib import Path

import vkx
from vkx.export import hf
from vkx.loader.gpu.device import Device
from vkx.loader.errors import LoadError
from vkx.loader.lm.decoders import ProgramDecoder
from vkx.loader.lm.generate import Timings, generate
from vkx.loader.gpu.limits import PROFILES

_spec = importlib.util.spec_from_file_location("llama_load", Path(__file__).with_name("llama_load.py"))
llama_load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(llama_load)
PROMPT = list(range(3, 11))


def decode_rates(pte: Path, profile: str | None, new_tokens: int, runs: int) -> tuple[list[float], list[int], int]:
    """Decode tokens/s of `runs` generations after a warm-up one, their greedy tokens, and the
    dispatches of one decode call."""
    dev = Device(profile=profile) if profile else Device()
    try:
        with vkx.load(pte, device=dev) as program:
            decoder = ProgramDecoder(program)
            tokens = list(generate(decoder, PROMPT, new_tokens, decoder.shape))
            rates = []
            for _ in range(runs):
                timings = Timings()
                list(generate(decoder, PROMPT, new_tokens, decoder.shape, timings=timings))
                rates.append(timings.decode_tokens_per_s)
            return rates, tokens, len(program["decode"]._executor.dispatches)
    finally:
        dev.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=llama_load.SIZES, default="small")
    parser.add_argument("--layers", type=int, help="decoder layers (default: the size's)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--profiles", default=",".join(["none", *PROFILES]),
                        help="comma-separated, `none` for the unprofiled run (the ratios' base: list it first)")
    args = parser.parse_args()
    profiles = [None if p == "none" else p for p in args.profiles.split(",")]
    config = dict(llama_load.SIZES[args.size])
    if args.layers:
        config["num_hidden_layers"] = args.layers
    print(f"device: {Device().name}; Llama-shaped {args.size}, {config['num_hidden_layers']} layers; "
          f"{args.new_tokens} new tokens, median of {args.runs} runs after a warm-up")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "model"
        llama_load.write_folder(folder, config)
        for dtype, options in (("bf16", {}), ("bf16 + int4", {"quantize": "int4"})):
            pte = Path(scratch) / "lm.pte"
            hf.export_folder(folder, pte, max_seq_len=128, prefill_len=8, dtype="bf16", **options)
            base: float | None = None
            base_tokens: list[int] = []
            for profile in profiles:
                try:
                    rates, tokens, dispatches = decode_rates(pte, profile, args.new_tokens, args.runs)
                except LoadError as error:
                    print(f"{dtype:12} {profile}: refused: {error}")
                    continue
                median = statistics.median(rates)
                if base is None:
                    base, base_tokens = median, tokens
                same = "equal" if tokens == base_tokens else "DIFFER"
                print(f"{dtype:12} {profile or 'none':22} {median:9.1f} tok/s (range {min(rates):.1f}-{max(rates):.1f}) "
                      f"{median / base:5.2f}x  {dispatches} dispatches a decode call  greedy tokens {same}")
            pte.unlink()


if __name__ == "__main__":
    main()
