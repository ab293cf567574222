"""`vkx perplexity`: a causal LM program's perplexity over a text file, on the device."""
from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import List, Optional

import typer

from vkx import paths
from vkx.cmd_generate import read_tokenizer
from vkx.cmd_run import DEVICE, EXTERNAL, FILE, PROFILE, Profile, open_device
from vkx.console import Status, elapsed, note, user_errors
from vkx.format import ProgramFile

SCHEMA = "vkx.perplexity/1"


@user_errors
def perplexity(
    model: Path = FILE,
    external_data: List[Path] = EXTERNAL,
    text: Path = typer.Option(..., "--text", metavar="FILE", help="The text to score (UTF-8)."),
    tokenizer: Path = typer.Option(..., "--tokenizer", metavar="FILE.json", help="A Hugging Face tokenizer.json."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=2, metavar="N",
                                             help="Score the text's first N tokens [default: all]."),
    json: bool = typer.Option(False, "--json", help=f"One JSON object on stdout (schema {SCHEMA})."),
    device: Optional[str] = DEVICE,
    profile: Optional[Profile] = PROFILE,
) -> None:
    """The perplexity of the causal LM program FILE (exported with vkx export DIR --score) over a text: its
    tokens in windows of the export's --max-seq-len, every position's fp32 logits from one call a window."""
    external, beside = paths.loadable(model, external_data)
    for path, option in ((text, "--text"), (tokenizer, "--tokenizer")):
        if path.is_dir() or not path.exists():
            raise paths.UsageError(f"{option} {path}: no such file")
    try:
        content = text.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise paths.UsageError(f"--text {text}: not UTF-8 text ({error.reason} at byte {error.start})") from None

    from vkx.format.methods import SCORE
    from vkx.loader.lm.generate import LMShape, check_token_ids
    from vkx.loader.lm.perplexity import perplexity as scored, require_score

    with ProgramFile.open(model) as pf:  # refused before any work
        require_score([plan.name for plan in pf.program.execution_plan])
        shape = LMShape.of_file(pf)
    ids = read_tokenizer(tokenizer).encode(content).ids[:max_tokens]
    if len(ids) < 2:
        raise paths.UsageError(f"--text {text}: {len(ids)} token(s); perplexity needs at least 2")
    if shape is not None:  # a tokenizer of another model: refused before the load
        check_token_ids(ids, shape)
    dev, own = open_device("vkx perplexity", device, profile)
    if beside is not None and not json:
        note(f"using external data {beside} (found beside {model})")

    from vkx.loader import load

    try:
        with Status(f"loading {model} on {dev.name}", shown=not json) as status, \
                load(model, [str(p) for p in external], device=dev, methods=[SCORE],
                     progress=status.weights) as program:
            status.show("windows scored")
            result = scored(program, ids, status.count)
    finally:
        if own:
            dev.close()
    seconds = elapsed()
    if json:
        print(jsonlib.dumps({"schema": SCHEMA, "model": str(model), "text": str(text),
                             "perplexity": result.perplexity, "mean_nll": result.mean_nll,
                             "tokens": len(ids), "predicted_tokens": result.predicted, "window": result.window,
                             "windows": result.windows, "seconds": seconds}))
        return
    print(f"perplexity {result.perplexity:.4f} over {result.predicted:,} predicted tokens of {text.name} "
          f"({len(ids):,} tokens in {result.windows} window(s) of {result.window}), {seconds:,.2f} s in all")
