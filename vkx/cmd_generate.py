"""`vkx generate`: load a causal LM program (prefill, decode, KV cache) and generate tokens on the device."""
from __future__ import annotations

import json as jsonlib
import sys
from pathlib import Path
from typing import List, Optional

import typer

from vkx import paths
from vkx.cmd_run import DEVICE, EXTERNAL, FILE, PROFILE, Profile, open_device
from vkx.console import Status, elapsed, note, option_message, plain_lines, size, user_errors
from vkx.format import ProgramFile
from vkx.format.et_llm import llm_info

SCHEMA = "vkx.generate/1"
IDS = "comma-separated token ids, such as 1,2,3"


def _prompt_ids(text: str) -> list[int]:
    ids = []
    for part in (part.strip() for part in text.split(",")):
        try:
            ids += [int(part)] if part else []
        except ValueError:
            raise paths.UsageError(option_message("--prompt-ids", f"{part!r} is not a token id",
                                                  f"expected {IDS}")) from None
    if not ids:
        raise paths.UsageError(option_message("--prompt-ids", f"{text!r} has no token ids", IDS))
    return ids


def _peak_rss() -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


class _Stream:
    """Writes the text of the tokens so far as it grows (a piece that ends inside a character waits)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.shown = 0

    def add(self, token: int) -> None:
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=False)
        if not text.endswith("\ufffd"):
            sys.stdout.write(plain_lines(text[self.shown:]))
            sys.stdout.flush()
            self.shown = len(text)


@user_errors
def generate(
    model: Path = FILE,
    external_data: List[Path] = EXTERNAL,
    prompt: Optional[str] = typer.Option(None, "--prompt", metavar="TEXT", help="The prompt (needs --tokenizer)."),
    prompt_ids: Optional[str] = typer.Option(None, "--prompt-ids", metavar="IDS",
                                             help="The prompt as comma-separated token ids, such as 1,2,3."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", metavar="FILE.json",
                                             help="A Hugging Face tokenizer.json."),
    max_new_tokens: int = typer.Option(32, "--max-new-tokens", min=1, metavar="N", help="Tokens to generate."),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0, metavar="T", show_default=False,
                                      help="Sample at this temperature [default: 0, greedy]."),
    top_k: Optional[int] = typer.Option(None, "--top-k", min=1, metavar="K",
                                        help="Sample among the K most likely tokens (needs --temperature)."),
    top_p: Optional[float] = typer.Option(None, "--top-p", min=0.0, max=1.0, metavar="P",
                                          help="Sample among the most likely tokens holding probability P "
                                               "(needs --temperature)."),
    seed: Optional[int] = typer.Option(None, "--seed", min=0, metavar="N",
                                       help="Seed of the sampling: the same tokens for the same seed "
                                            "[default: one drawn for each run]."),
    json: bool = typer.Option(False, "--json", help=f"One JSON object on stdout (schema {SCHEMA})."),
    device: Optional[str] = DEVICE,
    profile: Optional[Profile] = PROFILE,
) -> None:
    """Generate text with the causal LM program FILE (exported from a Hugging Face folder), streaming it,
    until --max-new-tokens or an EOS token of the model."""
    external, beside = paths.loadable(model, external_data)
    if (prompt is None) == (prompt_ids is None):
        raise paths.UsageError("give the prompt as --prompt TEXT (with --tokenizer) or as --prompt-ids IDS")
    if tokenizer is not None and (tokenizer.is_dir() or not tokenizer.exists()):
        raise paths.UsageError(f"--tokenizer {tokenizer}: no such file (a tokenizer.json)")
    if prompt is not None and tokenizer is None:
        raise paths.UsageError("--prompt needs --tokenizer FILE.json (or give --prompt-ids)")
    if top_p == 0:  # typer's bounds are closed: 0 passes them
        raise paths.UsageError(option_message("--top-p", "0 keeps no token", "a number more than 0, at most 1"))
    if temperature == 0 and (top_k, top_p) != (None, None):
        raise paths.UsageError(option_message("--top-k" if top_k is not None else "--top-p",
                                              "sampling options need a temperature",
                                              "add --temperature T; without one, decoding is greedy"))

    from vkx.format.methods import SCORE
    from vkx.loader.lm.decoders import require_lm_methods
    from vkx.loader.lm.generate import LMShape, Sampling, check_request

    with ProgramFile.open(model) as pf:  # refused before any work: no pipeline is compiled for it
        names = [plan.name for plan in pf.program.execution_plan]
        if llm_info(pf.program) is None:
            require_lm_methods(names)
        shape = LMShape.of_file(pf)
    # a score method (vkx export --score) plans a whole window's activations: generation never calls it
    wanted = [name for name in names if name != SCORE] if SCORE in names else None
    Sampling(temperature, top_k, top_p, seed).check()  # before the load, as the options were
    text_tokenizer = read_tokenizer(tokenizer) if tokenizer is not None else None
    ids = _prompt_ids(prompt_ids) if prompt_ids is not None else text_tokenizer.encode(prompt).ids
    if not ids:
        raise paths.UsageError(option_message("--prompt", f"{prompt!r} has no tokens", "a text of one token or more"))
    if shape is not None:
        check_request(ids, max_new_tokens, shape)
    dev, own = open_device("vkx generate", device, profile)
    if beside is not None and not json:
        note(f"using external data {beside} (found beside {model})")

    import numpy as np

    from vkx.loader import load
    from vkx.loader.lm.generate import Timings

    timings = Timings()
    try:
        with Status(f"loading {model} on {dev.name}", shown=not json) as status, \
                load(model, [str(p) for p in external], device=dev, sequence_length=1, methods=wanted,
                     progress=status.weights) as program:
            status.show("warming up")
            # Program.generate's one path: the decoder is built and warmed up here (a program that is not
            # a causal LM is refused), the tokens come as the loop asks for them
            generated = program.generate(ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                                         seed=seed, timings=timings)
            status.show(f"prefill of {len(ids)} prompt tokens")
            stream = _Stream(text_tokenizer) if text_tokenizer is not None and not json else None
            tokens = []
            for token in generated:
                status.done()  # the first token is here: the line goes before the text comes
                tokens.append(token)
                if stream is not None:
                    stream.add(token)
                elif not json:
                    print(token, end=" ", flush=True)
            device_peak = program.memory["ledger"]["peak_total"]
            decode = program["decode"] if program.llm is None else program.only
            gpu_ms = None
            if decode.has_timestamps and len(tokens) > 1:  # a decode call on the last token, timed
                gpu_ms = 1e3 * decode.gpu_seconds(np.array([[tokens[-1]]], np.int64),
                                                  np.array([len(ids) + len(tokens) - 1], np.int64), runs=5)
    finally:
        if own:
            dev.close()
    stopped = "eos" if tokens[-1] in program.eos_token_ids else "max_new_tokens"
    report = {"schema": SCHEMA, "model": str(model), "prompt_tokens": len(ids), "tokens": tokens, "stop": stopped,
              # as streamed (_Stream): special tokens kept
              "text": text_tokenizer.decode(tokens, skip_special_tokens=False) if text_tokenizer is not None else None,
              "prefill_seconds": timings.prefill_seconds, "prefill_tokens_per_s": timings.prefill_tokens_per_s,
              "time_to_first_token_seconds": timings.first_token_seconds,
              "decode_seconds": timings.decode_seconds, "decode_tokens_per_s": timings.decode_tokens_per_s,
              "peak_rss_bytes": _peak_rss(), "device_peak_bytes": device_peak,
              "dispatches_per_token": decode.dispatch_count, "barriers_per_token": decode.barrier_count,
              "gpu_ms_per_token": gpu_ms, "seconds": elapsed()}
    if json:
        print(jsonlib.dumps(report))
        return
    print()
    print(f"prefill {report['prefill_tokens_per_s']:,.1f} tokens/s ({len(ids)} tokens), "
          f"decode {report['decode_tokens_per_s']:,.1f} tokens/s, "
          f"time to first token {report['time_to_first_token_seconds'] * 1e3:,.1f} ms, "
          f"peak RSS {size(report['peak_rss_bytes'])}, device {size(device_peak)}, {report['seconds']:,.2f} s in all")


def read_tokenizer(path: Path):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise paths.UsageError("--tokenizer needs the tokenizers package: pip install 'vkx[tokenizer]'") from None
    try:
        return Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises a bare Exception for a file it cannot read
        raise paths.UsageError(f"--tokenizer {path}: not a tokenizer.json ({' '.join(str(error).split())})") \
            from error
