"""Make tests/data/et_op_cases/<case>-<dtype>.pte: each case of et_op_cases.py exported by ExecuTorch
1.5.1's own Vulkan partitioner (run with executorch==1.5.1, torch 2.13).

    python tests/data/make_et_op_cases.py [name ...]

A case ExecuTorch itself cannot export is listed in et_op_cases/refused.txt with its one-line reason.
ExecuTorch's partitioner rebuilds its fusion patterns (about a minute on a small CPU) for every
program; they depend on no program, so this script builds them once.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch
from executorch.backends.vulkan import patterns

from et_lower import vulkan_program
from et_op_cases import runs

OUT = Path(__file__).resolve().parent / "et_op_cases"


def main(names: list[str]) -> None:
    for entry in patterns.fusable_patterns.values():
        if entry.get_graphs_fn is not None:
            entry.get_graphs_fn = functools.cache(entry.get_graphs_fn)
    OUT.mkdir(exist_ok=True)
    refused_file = OUT / "refused.txt"
    refused = dict(line.split(" ", 1) for line in refused_file.read_text().splitlines()) if refused_file.exists() else {}
    for run_id, (case, dtype) in runs().items():
        if names and case.name not in names:
            continue
        try:
            program = vulkan_program(case.module(dtype), case.example(dtype))
        except Exception as error:  # ExecuTorch's own refusal: recorded, the case is skipped on that path
            refused[run_id] = f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"
            print(run_id, "refused:", refused[run_id], flush=True)
            continue
        refused.pop(run_id, None)
        (OUT / f"{run_id}.pte").write_bytes(program.buffer)
        print(run_id, len(program.buffer), flush=True)
    refused_file.write_text("".join(f"{k} {v}\n" for k, v in sorted(refused.items())))


if __name__ == "__main__":
    main(sys.argv[1:])
