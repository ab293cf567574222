"""The op set: every op the contract declares, by name, assembled from the declaration modules, one
per kind of op whichever model or exporter brought it (`op_decls`: elementwise; `op_reduce`:
reductions; `op_norm`: normalisations; `op_shape`: shape and layout; `op_gather`: gathers;
`op_linalg`: matrix products; `op_conv`: convolution, pooling and resampling; `op_attention`:
attention and rotary embeddings; `op_quant`: quantized ops; `op_state`: state). Each lists its
`OpDecl`s in `DECLS`; the machinery is `vkx.format.contract`, what the rules share `op_rules`.
"""
from __future__ import annotations

from . import (op_attention, op_conv, op_decls, op_gather, op_linalg, op_norm, op_quant, op_reduce, op_shape, op_state,
               vkgraph as g)
from .contract import Call, ContractError, OpDecl, Spec, bind, check_tensor

OPS: dict[str, OpDecl] = {}
"""Every declared op by name."""


def declare(decl: OpDecl) -> OpDecl:
    """Add `decl` to the op set (a name is declared once)."""
    if decl.name in OPS:
        raise ValueError(f"op {decl.name} is declared twice")
    OPS[decl.name] = decl
    return decl


for _module in (op_decls, op_reduce, op_norm, op_shape, op_gather, op_linalg, op_conv, op_attention, op_quant,
                op_state):
    for _decl in _module.DECLS:
        declare(_decl)


def lookup(name: str) -> OpDecl | None:
    return OPS.get(name)


def check_graph(graph: g.VkGraph) -> list[Call]:
    """Bind every op of `graph` to its declaration (ContractError for the first that fails)."""
    specs: dict[int, Spec] = {}

    def make(vid: int, t: g.Tensor) -> Spec:
        if vid not in specs:
            specs[vid] = check_tensor(vid, t)
        return specs[vid]

    unknown = list(dict.fromkeys(op.name for op in graph.chain if op.name not in OPS))
    if unknown:
        raise ContractError(f"op{'s' if len(unknown) > 1 else ''} not in vkx's op contract: {', '.join(unknown)}")
    return [bind(OPS[op.name], op, graph.values, make) for op in graph.chain]
