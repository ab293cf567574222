"""ExecuTorch PR #13501's case: a Llama 3.2 1B-shaped model loaded in the old order and the new one.

The PR's arithmetic (docs/memory.md): the old order holds the delegate blob (W) while it
prepacks every weight into device memory (W) through a full-size staging buffer (w), so the
load peaks near 2W + A + w; the new order reads each weight once into its device buffer, W + A.

Steps: a model folder with the Llama 3.2 1B config (hidden 2048, 16 layers, 32 heads, 8 KV
heads, intermediate 8192, vocab 128256, tied embeddings, rope_theta 500000, llama3 rope
scaling) and no weights, so vkx export builds it with random bf16 weights (W ≈ 2.47 GB); the
new file (named data, methods prefill and decode, KV cache as state) and the old one (legacy
layout: weights in the delegate blob, the decode method alone, since a legacy blob cannot be
shared between methods); `vkx inspect`; each file loaded in a fresh process (old: legacy +
eager schedule; new: named + lazy) with the PR's phase table (VmRSS and device bytes at:
before load, after graph build, prepack start, after prepack, before execute, after execute);
then tokens generated with the new file. `--cap F` runs each load under RLIMIT_DATA of the
process's data size once the device is up + F × W (the S24 blackout as an error instead).

    .venv/bin/python bench/llama_load.py                       # the 1B model (about 3 GB of disk, 8 GB RAM)
    .venv/bin/python bench/llama_load.py --size small --cap 1.5  # a 4-layer stand-in, in a minute
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20

LLAMA_3_2_1B = dict(
    architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=2048, num_hidden_layers=16,
    num_attention_heads=32, num_key_value_heads=8, head_dim=64, intermediate_size=8192, vocab_size=128256,
    tie_word_embeddings=True, rope_theta=500000.0, max_position_embeddings=131072, rms_norm_eps=1e-5,
    hidden_act="silu", torch_dtype="bfloat16", bos_token_id=128000, eos_token_id=128001,
    rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=8192))
# The same architecture, small enough for CI: 4 layers of width 512, a 32000-token vocabulary.
SMALL = {**LLAMA_3_2_1B, "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 2, "intermediate_size": 2048, "vocab_size": 32000, "bos_token_id": 1, "eos_token_id": 2}
SIZES = {"1b": LLAMA_3_2_1B, "small": SMALL}


def write_folder(folder: Path, config: dict) -> None:
    """A model folder with only a config.json: vkx export gives it random weights."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))


def export_both(folder: Path, out: Path, max_seq_len: int, prefill_len: int) -> tuple[Path, Path, int]:
    """The new file (named, prefill + decode), the old one (legacy, decode only), and W; files an
    earlier run left in `out` for the same config are used again (a 1B export takes minutes)."""
    import torch

    from vkx.export import export_model
    from vkx.export import hf
    from vkx.format.describe import describe

    new, old = out / "llama.pte", out / "llama_legacy.pte"
    stamp = out / "exported-config.json"
    wanted = json.dumps({"config": json.loads((folder / "config.json").read_text()),
                         "max_seq_len": max_seq_len, "prefill_len": prefill_len}, sort_keys=True)
    if new.exists() and old.exists() and stamp.exists() and stamp.read_text() == wanted:
        return new, old, describe(new)["totals"]["W"]
    weights = hf.export_folder(folder, new, max_seq_len=max_seq_len, prefill_len=prefill_len).constant_bytes
    lm = hf.CausalLM(hf.build_model(hf.read_folder(folder)), max_seq_len)
    export_model(lm, {"decode": (torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, dtype=torch.long))}, old,
                 layout="legacy")
    stamp.write_text(wanted)
    return new, old, weights


def _data_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmData in /proc/self/status")


def child(path: str, schedule: str, cap_bytes: int, new_tokens: int) -> dict:
    """In a fresh process: load `path` (under RLIMIT_DATA = data now + cap_bytes when given), run
    one decode step (and `new_tokens` of generation when the file has prefill), report."""
    import numpy as np

    import vkx
    from vkx.format.errors import VkxError
    from vkx.loader.gpu.device import default_device
    from vkx.loader.lm.decoders import ProgramDecoder
    from vkx.loader.lm.generate import Timings, generate

    device = default_device()  # the driver's own memory is not the load's: the cap counts from here
    if cap_bytes > 0:
        limit = _data_bytes() + cap_bytes
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    report: dict = {"path": path, "schedule": schedule, "cap_bytes": cap_bytes}
    began = time.perf_counter()
    try:
        program = vkx.load(path, schedule=schedule, device=device, trace_memory=True)
    except VkxError as error:
        report.update(error=f"{type(error).__name__}: {error}")
        return report
    with program:
        report["load_seconds"] = time.perf_counter() - began
        decode = program["decode"] if hasattr(program, "methods") else program
        decode.run_numpy(np.zeros((1, 1), np.int64), np.zeros(1, np.int64))
        report["phases"] = program.memory["phases"]
        if new_tokens and "prefill" in getattr(program, "methods", ()):
            decoder = ProgramDecoder(program)
            timings = Timings()
            report["tokens"] = list(generate(decoder, [1, 2, 3, 4], new_tokens, decoder.shape, timings=timings))
            report.update(prefill_tokens_per_s=timings.prefill_tokens_per_s,
                          decode_tokens_per_s=timings.decode_tokens_per_s,
                          time_to_first_token_seconds=timings.first_token_seconds)
    return report


def run_child(path: Path, schedule: str, cap_bytes: int, new_tokens: int) -> dict:
    """`child` in a fresh process (its memory is the load's alone)."""
    done = subprocess.run([sys.executable, __file__, "child", str(path), schedule, str(cap_bytes), str(new_tokens)],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        return {"path": str(path), "schedule": schedule, "error": done.stderr.strip().splitlines()[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def phase_table(report: dict) -> str:
    """The PR's table: VmRSS (and its peak since the previous phase) and device bytes at each phase
    boundary the loader marks (MiB); its "after activation allocation" is the PR's "before execute"."""
    rows = [f"  {'phase':<28} {'VmRSS':>9} {'peak':>9} {'device':>9}"]
    for phase in report["phases"]:
        rows.append(f"  {phase['name']:<28} {phase['rss'] / MiB:9,.1f} {phase['peak_rss'] / MiB:9,.1f} "
                    f"{phase['device'].get('total', sum(phase['device'].values())) / MiB:9,.1f}")
    return "\n".join(rows)


def main() -> None:
    if sys.argv[1:2] == ["child"]:
        path, schedule, cap_bytes, new_tokens = sys.argv[2:6]
        print(json.dumps(child(path, schedule, int(cap_bytes), int(new_tokens))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="1b")
    parser.add_argument("--out", type=Path, help="Keep the folder and files here [default: a temporary folder].")
    parser.add_argument("--cap", type=float, default=0.0, metavar="F", help="Load under RLIMIT_DATA of F × W more.")
    parser.add_argument("--max-seq-len", type=int, default=256)
    parser.add_argument("--prefill-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        write_folder(out / "model", SIZES[args.size])
        began = time.perf_counter()
        new, old, weights = export_both(out / "model", out, args.max_seq_len, args.prefill_len)
        print(f"exported {new} and {old} (W = {weights / MiB:,.1f} MiB) in {time.perf_counter() - began:.1f} s")
        subprocess.run([sys.executable, "-m", "vkx", "inspect", str(new)], cwd=ROOT, check=False)
        for label, path, schedule, tokens in (("old order (legacy layout, eager)", old, "eager", 0),
                                              ("new order (named data, lazy)", new, "lazy", args.new_tokens)):
            report = run_child(path, schedule, int(args.cap * weights), tokens)
            print(f"\n{label}: {path.name}" + (f", under RLIMIT_DATA of {args.cap} W more" if args.cap else ""))
            if "error" in report:
                print(f"  failed: {report['error']}")
                continue
            print(f"  load {report['load_seconds']:.2f} s")
            print(phase_table(report))
            if "tokens" in report:
                print(f"  generated {len(report['tokens'])} tokens: prefill {report['prefill_tokens_per_s']:,.1f} "
                      f"tokens/s, decode {report['decode_tokens_per_s']:,.1f} tokens/s, time to first token "
                      f"{report['time_to_first_token_seconds'] * 1e3:,.0f} ms")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
