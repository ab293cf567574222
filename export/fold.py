"""Constant folding: ops whose result depends only on shapes, buffers and constants run once, at export.

Hugging Face models build their attention masks (arange, cumsum, comparisons, index), their
rotary tables (inv_freq @ positions, cos, sin) and their position ids from the input's shape and
from buffers alone. Each such op is evaluated here with torch and its result becomes a constant of
the graph: the masks and tables are then read, not computed, on the device. Values derived from a
parameter stay on the device (a weight is uploaded once, as stored, never as a folded copy).
"""
from __future__ import annotations

from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx import Node
from torch.utils._pytree import tree_flatten, tree_map

Constants = dict[Node, tuple[str, torch.Tensor]]
_A = torch.ops.aten
SHAPE_ONLY = frozenset({_A.full_like.default, _A.zeros_like.default, _A.ones_like.default})
"""Ops whose result depends on their tensor argument's shape and dtype only: they always fold."""


def fold_constants(program: ExportedProgram, constants: Constants) -> Constants:
    """The nodes that fold, each with its name and value (computed here), after `constants`.

    A node folds when it returns one tensor and every tensor it reads is a buffer, a lifted
    constant or a folded node (ops that read no tensor, such as arange and full, fold too, and
    those that read only a shape, SHAPE_ONLY).
    """
    kinds = {spec.arg.name: spec.kind for spec in program.graph_signature.input_specs}
    values: dict[Node, torch.Tensor] = {node: tensor for node, (_, tensor) in constants.items()
                                        if kinds[node.name] != InputKind.PARAMETER}
    folded: Constants = {}
    for node in program.graph.nodes:
        if node.op != "call_function" or not isinstance(node.meta.get("val"), torch.Tensor):
            continue
        inputs = [a for a in tree_flatten((node.args, node.kwargs))[0] if isinstance(a, Node)]
        shape_only = node.target in SHAPE_ONLY
        if not shape_only and not all(a in values for a in inputs):
            continue

        def real(a: Any) -> Any:
            if not isinstance(a, Node):
                return a
            if a in values:
                return values[a]
            return torch.zeros(a.meta["val"].shape, dtype=a.meta["val"].dtype)  # only its shape is read
        with torch.no_grad():
            result = node.target(*tree_map(real, node.args), **tree_map(real, node.kwargs))
        values[node] = result
        folded[node] = (f"folded.{node.name}", result.contiguous())
    return folded
