"""Which ops of an ExportedProgram the op contract lacks, each with the source lines that use it:
checked before lowering builds anything, so one error lists them all."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Container, Mapping

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from vkx.export.dtypes import supported
from vkx.export.errors import UnsupportedOpsError

_TORCH_DIR = os.path.join(os.path.dirname(torch.__file__), "")  # the separator: not torchvision, torchao
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*\n[ \t]*([^\n]*)')


def source_line(node: Node) -> str:
    """`file.py:LINE: code` of the innermost user frame (outside torch) the node came from."""
    frames = [m for m in _FRAME.finditer(node.meta.get("stack_trace") or "")
              if not m.group(1).startswith(_TORCH_DIR)]
    if not frames:
        return "an unknown source line"
    file, line, code = frames[-1].groups()
    return f"{Path(file).name}:{line}: {code.strip()}"


def op_name(node: Node) -> str:
    if isinstance(node.target, torch._ops.OpOverload):
        return str(node.target)
    return getattr(node.target, "__name__", str(node.target))


def _fakes(node: Node) -> list[Any]:
    value = node.meta.get("val")
    return list(value) if isinstance(value, (tuple, list)) else [value]


def check_supported(program: ExportedProgram, rules: Mapping[Any, Any], folded: Container[Node] = ()) -> None:
    """Raise UnsupportedOpsError naming each distinct op that has no rule in `rules` (or whose rule
    refuses it) with the source lines that use it (ops folded at export, `folded`, run on no device)."""
    uses: dict[str, list[str]] = {}
    for node in program.graph.nodes:
        if node.op != "call_function" or node in folded:
            continue
        rule = rules.get(node.target)
        reason = "not supported" if rule is None else rule.check(node)
        if reason is None:
            dtypes = {f.dtype for f in _fakes(node) if isinstance(f, torch.Tensor) and not supported(f.dtype)}
            reason = f"dtype {sorted(map(str, dtypes))[0]} is not supported" if dtypes else None
        if reason is not None:
            lines = uses.setdefault(f"{op_name(node)} ({reason})", [])
            if source_line(node) not in lines:
                lines.append(source_line(node))
    if uses:
        raise UnsupportedOpsError([f"{op} at {_some(lines)}" for op, lines in uses.items()])


def _some(lines: list[str], shown: int = 3) -> str:
    more = f"; and {len(lines) - shown} more" if len(lines) > shown else ""
    return "; ".join(lines[:shown]) + more
