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


MOVES = frozenset({
    _A.view.default, _A._unsafe_view.default, _A.reshape.default, _A.unsqueeze.default, _A.squeeze.default,
    _A.squeeze.dim, _A.squeeze.dims, _A.flatten.using_ints, _A.permute.default, _A.t.default, _A.transpose.int,
    _A.slice.Tensor, _A.select.int, _A.expand.default, _A.clone.default, _A.alias.default, _A.detach.default,
    _A.lift_fresh_copy.default,
})
"""Ops that only move elements. One whose result would be stored (no folded op reads it) is not folded:
a buffer is stored as it is, never as a slice or a reshaped copy."""

UNDEFINED = frozenset({_A.empty.memory_format, _A.empty_like.default, _A.empty_strided.default})
"""Ops whose result has no defined value: never folded."""


def _pure(target: Any) -> bool:
    """Whether calling `target` once at export gives what every call would: no randomness, no writes."""
    return (isinstance(target, torch._ops.OpOverload) and target not in UNDEFINED and not target._schema.is_mutable
            and torch.Tag.nondeterministic_seeded not in target.tags)


def fold_constants(program: ExportedProgram) -> Constants:
    """The nodes that fold, each with its name and value (computed here).

    A node folds when it returns one tensor and every tensor it reads is a buffer the model does not
    mutate, a lifted constant or a folded node (ops that read no tensor, such as arange and full, fold too, and
    those that read only a shape, SHAPE_ONLY). Stored values are computed ones: the last ops of a
    folded chain that only move elements (MOVES) run on the device.
    """
    stored = {**program.state_dict, **program.constants}
    mutated = set(program.graph_signature.buffers_to_mutate.values())  # state: its value is per call
    specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs
             if spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR) and spec.target not in mutated}
    values: dict[Node, torch.Tensor] = {node: stored[specs[node.name].target]
                                        for node in program.graph.find_nodes(op="placeholder") if node.name in specs}
    folded: Constants = {}
    for node in program.graph.nodes:
        if node.op != "call_function" or not isinstance(node.meta.get("val"), torch.Tensor):
            continue
        inputs = [a for a in tree_flatten((node.args, node.kwargs))[0] if isinstance(a, Node)]
        if not _pure(node.target) or (node.target not in SHAPE_ONLY and not all(a in values for a in inputs)):
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
    for node in reversed(list(folded)):
        if node.target in MOVES and not any(user in folded for user in node.users):
            del folded[node]  # what it reads is stored instead; the move runs on the device
    return folded
