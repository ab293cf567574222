"""vkx against llama.cpp's Vulkan backend on the same random Llama folder, measured so that it cannot
flatter vkx: docs/benchmarks.md's table "vkx and llama.cpp, honestly measured" is this script's output.

    python3 bench/llamacpp.py LLAMACPP_DIR [--preset 1b] [--runs 10] [--work DIR] [--markdown FILE]

LLAMACPP_DIR is the workplace's llama.cpp kit (docs/benchmarks.md, "vkx and llama.cpp, honestly
measured": bin.tar.xz with llama-bench and llama-quantize, convert/convert_hf_to_gguf.py with its gguf
wheel in whl/, make_model.py). The folder
(make_model.py's preset, bf16, seed 0) is converted to GGUF f16 and quantized to Q4_0 once; `--work`
keeps them, and vkx's fp16 and int4 exports of the same folder, between runs.

* llama.cpp at its best: the GPU warmed first (one discarded llama-bench), then `llama-bench -r RUNS`
  with flash attention off and on, prompt processing of 512 tokens at depth 0 and 128 generated tokens
  at depths 0 and 512 (vkx decodes after a 512-token prompt: depth 512 is the like-for-like figure).
  Each configuration's median and range of its RUNS samples; the better flash-attention setting's
  median is the peer.
* vkx as a user runs it: `vkx generate --json` of a 512-token prompt and 128 new tokens, one process a
  run, RUNS processes per file after one discarded (the driver compiles the pipelines on a fresh
  machine's first run), greedy and, for fp16, sampled (temperature 0.8, top-k 40, top-p 0.95).
  Medians and ranges of the prefill and decode tokens/s each process reports.

Every target of issue 40 is printed met or missed, with the figures it compares.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

PROMPT, NEW, DEPTH = 512, 128, 512
SAMPLED = ["--temperature", "0.8", "--top-k", "40", "--top-p", "0.95", "--seed", "0"]


@dataclass(frozen=True)
class Stat:
    """A median and the range of the samples it is taken over."""
    median: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, samples: list[float]) -> "Stat":
        return cls(statistics.median(samples), min(samples), max(samples), len(samples))

    def __str__(self) -> str:
        return f"{self.median:,.0f} ({self.low:,.0f}–{self.high:,.0f}, n={self.count})"


def run(command: list, log: Path, env: dict | None = None) -> str:
    """`command`'s stdout; its stderr to `log`; SystemExit naming the log when it fails."""
    with open(log, "a") as err:
        done = subprocess.run([str(c) for c in command], stdout=subprocess.PIPE, stderr=err, text=True,
                              env={**os.environ, **(env or {})})
    if done.returncode:
        sys.exit(f"{Path(str(command[0])).name} failed (rc {done.returncode}): see {log}")
    return done.stdout


def prepare(kit: Path, work: Path, preset: str, log: Path) -> tuple[Path, Path, dict[str, Path], dict]:
    """The model folder, llama-bench, the GGUF files by type and the environment llama.cpp's tools need."""
    bins, site, folder = work / "bin", work / "site", work / "model"
    if not (bins / "llama-bench").exists():
        with tarfile.open(kit / "bin.tar.xz") as archive:
            archive.extractall(bins)
        for tool in bins.iterdir():
            tool.chmod(0o755)
    env = {}
    if "not found" in subprocess.run(["ldd", bins / "llama-bench"], capture_output=True, text=True).stdout:
        env["LD_LIBRARY_PATH"] = f"{kit / 'lib'}:{os.environ.get('LD_LIBRARY_PATH', '')}"
    ggufs = {"f16": work / "model-f16.gguf", "Q4_0": work / "model-q4_0.gguf"}
    if all(p.exists() for p in ggufs.values()) and (folder / "config.json").exists():
        return folder, bins / "llama-bench", ggufs, env
    run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", site,
         *sorted((kit / "whl").glob("*.whl"))], log)
    stub = work / "stub"  # the converter imports sentencepiece before it looks for a tokenizer.model
    stub.mkdir(exist_ok=True)
    (stub / "sentencepiece.py").write_text("class SentencePieceProcessor: pass\n")
    run([sys.executable, kit / "make_model.py", folder, "--preset", preset, "--dtype", "bf16"], log)
    convert_env = {"NO_LOCAL_GGUF": "1", "PYTHONPATH": f"{site}:{stub}"}
    run([sys.executable, kit / "convert" / "convert_hf_to_gguf.py", folder, "--outtype", "f16",
         "--outfile", ggufs["f16"]], log, convert_env)
    run([bins / "llama-quantize", ggufs["f16"], ggufs["Q4_0"], "q4_0"], log, env)
    return folder, bins / "llama-bench", ggufs, env


def llama_bench(bench: Path, ggufs: dict[str, Path], runs: int, env: dict, log: Path) -> dict[tuple, Stat]:
    """(type, "prefill" | "decode", depth, flash attention) -> tokens/s over `runs` samples."""
    run([bench, "-m", ggufs["f16"], "-p", PROMPT, "-n", 32, "-ngl", 99, "-r", 3, "-o", "json"], log, env)  # warm-up
    stats = {}
    for kind, path in ggufs.items():
        rows = json.loads(run([bench, "-m", path, "-p", PROMPT, "-n", NEW, "-d", f"0,{DEPTH}", "-fa", "off,on",
                               "-ngl", 99, "-r", runs, "-o", "json"], log, env))
        for row in rows:
            phase = "prefill" if row["n_prompt"] else "decode"
            stats[kind, phase, row["n_depth"], bool(row["flash_attn"])] = Stat.of(row["samples_ts"])
    return stats


def vkx_runs(folder: Path, work: Path, runs: int, log: Path) -> dict[str, dict[str, Stat]]:
    """"fp16", "int4", "fp16 sampled" -> {"prefill", "decode", "dispatches"} over `runs` processes."""
    ids = ",".join(str(random.Random(0).randrange(3, 32000)) for _ in range(PROMPT))
    stats = {}
    for name, options, extra in (("fp16", [], []), ("int4", ["--quantize", "int4"], []),
                                 ("fp16 sampled", [], SAMPLED)):
        pte = work / f"vkx-{name.split()[0]}.pte"
        if not pte.exists():
            began = time.perf_counter()
            run([sys.executable, "-m", "vkx", "export", folder, "-o", pte, "--dtype", "fp16", *options,
                 "--max-seq-len", PROMPT + NEW, "--prefill-len", PROMPT, "-q"], log)
            print(f"vkx export {name}: {time.perf_counter() - began:.1f} s", flush=True)
        reports = []
        for i in range(runs + 1):
            out = run([sys.executable, "-m", "vkx", "generate", pte, "--prompt-ids", ids, "--max-new-tokens", NEW,
                       "--json", *extra], log)
            if i:  # the first process is the warm-up
                reports.append(json.loads(out))
        short = [len(r["tokens"]) for r in reports if len(r["tokens"]) < NEW]
        if short:
            print(f"note: {len(short)} {name} runs stopped at an EOS token early ({short} tokens)")
        stats[name] = {"prefill": Stat.of([r["prefill_tokens_per_s"] for r in reports]),
                       "decode": Stat.of([r["decode_tokens_per_s"] for r in reports]),
                       "dispatches": Stat.of([r["dispatches_per_token"] for r in reports])}
    return stats


def best(peer: dict[tuple, Stat], kind: str, phase: str, depth: int) -> tuple[Stat, str]:
    """llama.cpp's better flash-attention setting for one test, by median."""
    fa = max((False, True), key=lambda on: peer[kind, phase, depth, on].median)
    return peer[kind, phase, depth, fa], f"fa {'on' if fa else 'off'}"


def report(peer: dict[tuple, Stat], ours: dict[str, dict[str, Stat]]) -> str:
    """The markdown of the comparison and of issue 40's targets."""
    lines = ["| test | vkx median (range, n) | llama.cpp best median (range, n) | vkx ÷ llama.cpp |",
             "|---|--:|--:|--:|"]
    rows = [("fp16 prefill 512", "fp16", "prefill", "f16", "prefill", 0),
            ("int4 prefill 512 (Q4_0)", "int4", "prefill", "Q4_0", "prefill", 0),
            (f"fp16 decode at depth {DEPTH}", "fp16", "decode", "f16", "decode", DEPTH),
            (f"int4 decode at depth {DEPTH} (Q4_0)", "int4", "decode", "Q4_0", "decode", DEPTH),
            (f"fp16 sampled decode at depth {DEPTH}", "fp16 sampled", "decode", "f16", "decode", DEPTH)]
    ratio = {}
    for label, name, key, kind, phase, depth in rows:
        theirs, setting = best(peer, kind, phase, depth)
        ratio[label] = ours[name][key].median / theirs.median
        lines.append(f"| {label} | {ours[name][key]} | {theirs} ({setting}) | {ratio[label]:.2f}× |")
    lines += ["", "llama.cpp, every configuration (tokens/s, median and range):", "",
              "| type | test | depth | flash attention off | on |", "|---|---|--:|--:|--:|"]
    for kind in ("f16", "Q4_0"):
        for phase, depth in (("prefill", 0), ("decode", 0), ("decode", DEPTH)):
            lines.append(f"| {kind} | {phase} | {depth} | {peer[kind, phase, depth, False]} | "
                         f"{peer[kind, phase, depth, True]} |")
    fp16, int4 = ours["fp16"]["decode"].median, ours["int4"]["decode"].median
    sampled = ours["fp16 sampled"]["decode"].median
    targets = [
        ("fp16 prefill ≥ 1.1× llama.cpp f16", ratio["fp16 prefill 512"] >= 1.1, f"{ratio['fp16 prefill 512']:.2f}×"),
        ("int4 prefill ≥ 1.1× Q4_0", ratio["int4 prefill 512 (Q4_0)"] >= 1.1,
         f"{ratio['int4 prefill 512 (Q4_0)']:.2f}×"),
        ("fp16 decode ≥ 1,000 tok/s and ≥ 1.4× f16", fp16 >= 1000 and ratio[rows[2][0]] >= 1.4,
         f"{fp16:,.0f} tok/s, {ratio[rows[2][0]]:.2f}×"),
        ("int4 decode ≥ 1,500 tok/s and ≥ 1.8× Q4_0", int4 >= 1500 and ratio[rows[3][0]] >= 1.8,
         f"{int4:,.0f} tok/s, {ratio[rows[3][0]]:.2f}×"),
        ("sampled decode within 5% of greedy", sampled >= 0.95 * fp16, f"{sampled / fp16:.2f}× greedy"),
    ]
    lines += ["", "| issue 40 target | | measured |", "|---|---|--:|"]
    lines += [f"| {what} | {'met' if ok else '**missed**'} | {measured} |" for what, ok, measured in targets]
    dispatches = {name: ours[name]["dispatches"].median for name in ("fp16", "int4")}
    lines += ["", f"vkx dispatches a decode call: fp16 {dispatches['fp16']:.0f}, int4 {dispatches['int4']:.0f}."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kit", type=Path, help="the llama.cpp kit (docs/benchmarks.md)")
    parser.add_argument("--preset", default="1b", choices=("1b", "small", "tiny"))
    parser.add_argument("--runs", type=int, default=10, help="samples per figure, each side (default 10)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/vkx-llamacpp"), help="kept between runs")
    parser.add_argument("--markdown", type=Path, help="also write the tables here")
    args = parser.parse_args()
    if not (args.kit / "bin.tar.xz").is_file():
        parser.error(f"{args.kit} is not the llama.cpp kit: it has no bin.tar.xz")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.markdown and not args.markdown.parent.is_dir():
        parser.error(f"--markdown: no folder {args.markdown.parent}")
    args.work.mkdir(parents=True, exist_ok=True)
    log = args.work / "log.txt"
    began = time.perf_counter()
    folder, bench, ggufs, env = prepare(args.kit, args.work, args.preset, log)
    print(f"prepared in {time.perf_counter() - began:.0f} s", flush=True)
    peer = llama_bench(bench, ggufs, args.runs, env, log)
    print(f"llama.cpp done at {time.perf_counter() - began:.0f} s", flush=True)
    ours = vkx_runs(folder, args.work, args.runs, log)
    text = report(peer, ours)
    print(text)
    print(f"total {time.perf_counter() - began:.0f} s")
    if args.markdown:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
