"""Module → ExportedProgram: torch.export, then the decompositions that fit the op contract."""
from __future__ import annotations

import warnings

import torch
from torch.export import ExportedProgram

from vkx.export.errors import ExportError
from vkx.export.ops import RULES, decomposition_table


def trace(module: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...]) -> ExportedProgram:
    """Export `module` (put in eval mode) with static shapes and decompose to contract-sized ops."""
    module.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.export's own deprecations
            program = torch.export.export(module, example_inputs)
            table = decomposition_table()
            if _lowerable_as_is(program, table):  # the retrace would change nothing; it costs time and memory
                return program
            return program.run_decompositions(table)
    except Exception as error:
        first = next((line for line in str(error).splitlines() if line.strip()), "")
        raise ExportError(f"torch.export failed: {type(error).__name__}: {first.strip()}") from error


def _lowerable_as_is(program: ExportedProgram, table: dict) -> bool:
    """Whether every op already has a lowering rule (forwarded ops have one too) and none is in `table`."""
    targets = {node.target for node in program.graph.nodes if node.op == "call_function"}
    return all(target in RULES and target not in table for target in targets)
