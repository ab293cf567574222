"""The op table: how each traced ATen op becomes OperatorCalls of the op contract.

Every op emitted here is declared in the op contract (`vkx.format.opset`); `same` matches
the source op's arguments to the declaration's by name. Each `Rule.lower` talks to one of
lowering's two passes through the methods of `vkx.export.operands.Operands`. The whole rule
table is assembled in `vkx.export.rules`.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch
from torch.fx import Node

from vkx.export.operands import FORWARDED, Operands
from vkx.format import op_decls, op_gather, opset

A = torch.ops.aten
SLICE = "aten.slice_copy.Tensor"

Values = dict[str, Any]
"""One op's arguments by schema name, in schema order, defaults filled in."""


def _no_check(node: Node) -> str | None:
    return None


@dataclass(frozen=True)
class Rule:
    lower: Callable[[Operands, Node], None]
    check: Callable[[Node], str | None] = _no_check
    """Returns why this particular node cannot be lowered, or None."""


def schema_values(node: Node) -> Values:
    """The node's arguments by name in schema order, with schema defaults for those left out."""
    values: Values = {}
    for index, argument in enumerate(node.target._schema.arguments):
        if index < len(node.args) and not argument.kwarg_only:
            values[argument.name] = node.args[index]
        elif argument.name in node.kwargs:
            values[argument.name] = node.kwargs[argument.name]
        else:
            values[argument.name] = argument.default_value if argument.has_default_value() else None
    return values


def shape(value: Node) -> tuple[int, ...]:
    return tuple(int(d) for d in value.meta["val"].shape)


def _positive(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def same(name: str, *, tref: Iterable[str] = (), widen: Iterable[str] = (),
         prepare: Callable[[Node, Values], Values] | None = None, check: Callable[[Node], str | None] = _no_check) -> Rule:
    """Emit contract op `name`: the source op's arguments matched by name to the declaration's
    (one the source op lacks takes the declared default), then the output.

    `tref`: args that may stay constant tensors (the op prepacks them itself).
    `widen`: args read through an exact fp32 cast of a constant (`Operands.widened`; `_to_copy` emits
    nothing for a cast only such args read).
    `prepare`: rewrites argument values first (normalised dims, filled pool lists).
    """
    decl = opset.OPS[name]
    tref, widen = frozenset(tref), frozenset(widen)

    def lower(b: Operands, node: Node) -> None:
        values = schema_values(node)
        values.update({key: b.widened(values[key]) for key in widen})
        if prepare is not None:
            values = prepare(node, values)
        unmatched = [key for key in values if not any(a.name == key for a in decl.args)]
        unmatched += [a.name for a in decl.args if a.name not in values and a.default is ...]
        if unmatched:
            raise RuntimeError(f"internal error: {node.target} and {name} do not match on {unmatched}")
        args = [b.arg(a, values.get(a.name, a.default), tref=a.name in tref) for a in decl.args]
        b.emit(name, args + [b.outputs(node)])
    return Rule(lower, check)


# ---- argument normalisation -------------------------------------------------------------

def _softmax_dim(node: Node, values: Values) -> Values:
    values["dim"] = _positive(values["dim"], len(shape(values["self"])))
    return values


def _cat_dim(node: Node, values: Values) -> Values:
    values["dim"] = _positive(values["dim"], len(shape(node)))
    return values


def _permute_dims(node: Node, values: Values) -> Values:
    rank = len(shape(values["self"]))
    values["dims"] = [_positive(d, rank) for d in values["dims"]]
    return values


def _reduce_dims(node: Node, values: Values) -> Values:
    rank = len(shape(values["self"]))
    dims = values["dim"] if values["dim"] is not None else range(rank)
    values["dim"] = sorted(_positive(d, rank) for d in dims)
    values["dtype"] = None
    return values


def _slice_bounds(node: Node, values: Values) -> Values:
    """Positive dim; start and end as Python would clamp them (never Null)."""
    size = shape(values["self"])
    dim = _positive(values["dim"], len(size))
    length = size[dim]

    def clamp(index: int | None, default: int) -> int:
        if index is None:
            return default
        index = index + length if index < 0 else index
        return min(max(index, 0), length)
    values.update(dim=dim, start=clamp(values["start"], 0), end=clamp(values["end"], length))
    return values


def _pair(items: list[int] | int) -> list[int]:
    items = [items] if isinstance(items, int) else list(items)
    return items * 2 if len(items) == 1 else items


def _pool_lists(node: Node, values: Values) -> Values:
    """kernel_size/stride/padding/dilation as two ints each; an empty stride means kernel_size."""
    values["kernel_size"] = _pair(values["kernel_size"])
    values["stride"] = _pair(values["stride"]) if values["stride"] else values["kernel_size"]
    values["padding"] = _pair(values["padding"])
    if "dilation" in values:
        values["dilation"] = _pair(values["dilation"])
    return values


def _expand_size(node: Node, values: Values) -> Values:
    """The output's size (no -1 entries)."""
    values["size"] = list(shape(node))
    return values


def _hardtanh_bounds(node: Node, values: Values) -> Values:
    return {"self": values["self"], "min": values["min_val"], "max": values["max_val"]}


def _dim(node: Node, values: Values) -> Values:
    values["dim"] = _positive(values["dim"], max(len(shape(values["self"])), 1))
    return values


def _unfold_dim(node: Node, values: Values) -> Values:
    values["dimension"] = _positive(values["dimension"], max(len(shape(values["self"])), 1))
    return values


def _stat_dims(node: Node, values: Values) -> Values:
    """Positive dims, sorted (None and [] both mean every dim)."""
    rank = len(shape(values["self"]))
    values["dim"] = sorted(_positive(d, rank) for d in values["dim"] or ())
    return values


def _stat_dim(node: Node, values: Values) -> Values:
    if values["dim"] is not None:
        values["dim"] = _positive(values["dim"], max(len(shape(values["self"])), 1))
    return values


def _cumsum_dim(node: Node, values: Values) -> Values:
    values = _dim(node, values)
    values["dtype"] = None  # the output's dtype says it
    return values


# ---- checks -------------------------------------------------------------------------------

def _conv_1d_2d(node: Node) -> str | None:
    values = schema_values(node)
    if len(shape(values["input"])) not in (3, 4):
        return "only 1-D and 2-D convolution is supported"
    return None


def _one_by_one(node: Node) -> str | None:
    if _pair(node.args[1]) != [1, 1]:
        return "only output size 1×1 is supported"
    return None


def _no_dropout(node: Node) -> str | None:
    if schema_values(node)["dropout_p"]:
        return "dropout_p must be 0"
    return None


def _cast_only(node: Node) -> str | None:
    source, result = node.args[0], node.meta["val"]
    if not isinstance(source, Node) or tuple(source.meta["val"].shape) != tuple(result.shape):
        return "only a dtype cast is supported"
    return None


def _bool_only(node: Node) -> str | None:
    """logical and bitwise ops agree on bool tensors."""
    operands = [a for a in node.args if isinstance(a, Node)]
    if all(a.meta["val"].dtype == torch.bool for a in operands):
        return None
    return "only on bool tensors"


def _tensor_indices(node: Node) -> str | None:
    indices = node.args[1]
    if any(i is None for i in indices) or len(indices) > op_gather.MAX_INDICES:
        return f"only index tensors on the first {op_gather.MAX_INDICES} dims (no slices between them) are supported"
    if any(i.meta["val"].dtype == torch.bool for i in indices):
        return "indexing with a bool mask is not supported"
    return None


# ---- rules that do not map one to one -----------------------------------------------------

WIDENED_READERS = {A.linear.default: "weight", A.addmm.default: "mat2", A.embedding.default: "weight"}
"""Ops whose rule reads an exact fp32 cast of a constant argument as stored (`same`'s widen): a 16-bit
head's fp32 logits, a bf16 LM's matrices (vkx.export.widen)."""


def _to_copy(b: Operands, node: Node) -> None:
    """A dtype cast (the output's dtype; layout, device and memory format mean nothing on the device);
    none where only WIDENED_READERS read it through."""
    if b.widened(node) is not node and all(schema_values(user).get(WIDENED_READERS.get(user.target)) is node
                                           for user in node.users):
        return
    b.emit("aten._to_copy.default", [b.tensor(node.args[0]), b.outputs(node)])


def _view(b: Operands, node: Node) -> None:
    """view / reshape / flatten / squeeze / unsqueeze: view_copy to the output size."""
    b.emit("aten.view_copy.default", [b.tensor(node.args[0]), b.int_list(shape(node)), b.outputs(node)])


def _split(b: Operands, node: Node) -> None:
    """split / chunk: one slice_copy per piece that is used (getitem binds to it)."""
    source = node.args[0]
    dim = _positive(schema_values(node)["dim"], len(shape(source)))
    users = {user.args[1]: user for user in node.users if user.target is operator.getitem}
    start = 0
    for index, piece in enumerate(node.meta["val"]):
        end = start + int(piece.shape[dim])
        if index in users:
            args = [b.tensor(source), b.int(dim), b.int(start), b.int(end), b.int(1)]
            out = b.new_tensor(piece)
            b.emit(SLICE, args + [out])
            b.bind(users[index], out)
        start = end


def _select(b: Operands, node: Node) -> None:
    """x.select(dim, i) as a one-wide slice_copy, then view_copy without that dim."""
    source, dim, index = node.args
    size = shape(source)
    dim = _positive(dim, len(size))
    index = index + size[dim] if index < 0 else index
    args = [b.tensor(source), b.int(dim), b.int(index), b.int(index + 1), b.int(1)]
    kept = size[:dim] + (1,) + size[dim + 1:]
    piece = b.new_tensor(torch.empty(kept, dtype=node.meta["val"].dtype, device="meta"))
    b.emit(SLICE, args + [piece])
    b.emit("aten.view_copy.default", [piece, b.int_list(shape(node)), b.outputs(node)])


def _neg(b: Operands, node: Node) -> None:
    """-x as mul(x, -1), the -1 an immediate."""
    b.emit("aten.mul.Tensor", [b.tensor(node.args[0]), b.number(-1), b.outputs(node)])


def _getitem(b: Operands, node: Node) -> None:
    parent, index = node.args
    if parent.target not in SPLITS:
        b.bind(node, b.list_item(b.value_of(parent), index))


def _global_avg_pool(b: Operands, node: Node) -> None:
    """adaptive_avg_pool2d to 1×1: mean over the last two dims, keepdim."""
    rank = len(shape(node.args[0]))
    b.emit("aten.mean.dim", [b.tensor(node.args[0]), b.int_list([rank - 2, rank - 1]),
                             b.bool(True), b.null(), b.outputs(node)])


def _mean_all(b: Operands, node: Node) -> None:
    rank = len(shape(node.args[0]))
    b.emit("aten.mean.dim", [b.tensor(node.args[0]), b.int_list(list(range(rank))),
                             b.bool(False), b.null(), b.outputs(node)])


def _reciprocal(b: Operands, node: Node) -> None:
    """1 / x as div(1, x), the 1 an immediate."""
    b.emit("aten.div.Tensor", [b.number(1), b.tensor(node.args[0]), b.outputs(node)])


def _nothing(b: Operands, node: Node) -> None:
    """Forwarded or ignored: the builder resolves uses of this node to its input."""


SPLITS = frozenset({A.split_with_sizes.default, A.split.Tensor})

OP_RULES: dict[Any, Rule] = {
    # elementwise: arithmetic, unary math, comparisons and logic, selection, casts
    **{getattr(A, op).Tensor: same(f"aten.{op}.Tensor") for op in op_decls.BINARY},
    **{getattr(A, op).Scalar: same(f"aten.{op}.Tensor") for op in op_decls.BINARY},
    A.reciprocal.default: Rule(_reciprocal),
    A.neg.default: Rule(_neg),  # mul by -1 takes every dtype; aten.neg.default only floats
    **{getattr(A, op).default: same(f"aten.{op}.default") for op in (*op_decls.UNARY, "gelu") if op != "neg"},
    **{getattr(A, op).default: same(f"aten.{op}.default") for op in op_decls.EXTRA_UNARY},
    A.leaky_relu.default: same("aten.leaky_relu.default"),
    A.round.default: same("aten.round.default"),
    A.pow.Tensor_Scalar: same("aten.pow.Tensor_Scalar"),
    A.clamp.default: same("aten.clamp.default"),
    A.hardtanh.default: same("aten.clamp.default", prepare=_hardtanh_bounds),
    **{getattr(A, op).Tensor: same(f"aten.{op}.Tensor") for op in (*op_decls.COMPARE, *op_decls.LOGICAL)},
    **{getattr(A, op).Scalar: same(f"aten.{op}.Tensor") for op in (*op_decls.COMPARE, *op_decls.LOGICAL)},
    **{getattr(A, op).default: same(f"aten.{op}.default") for op in op_decls.MIN_MAX},
    A.logical_not.default: same("aten.logical_not.default"),
    A.bitwise_not.default: same("aten.logical_not.default", check=_bool_only),
    **{getattr(A, op).default: same(f"aten.{op}.default") for op in op_decls.LOGICAL_ANY},
    A.where.self: same("aten.where.self"),
    A._to_copy.default: Rule(_to_copy, _cast_only),
    # reductions and normalization
    A._softmax.default: same("aten._softmax.default", prepare=_softmax_dim),
    A._log_softmax.default: same("aten._log_softmax.default", prepare=_softmax_dim),
    A.mean.dim: same("aten.mean.dim", prepare=_reduce_dims),
    A.mean.default: Rule(_mean_all),
    A.sum.dim_IntList: same("aten.sum.dim_IntList", prepare=_reduce_dims),
    **{getattr(A, op).default: same(f"aten.{op}.default", prepare=_stat_dims) for op in ("amax", "amin")},
    **{getattr(A, op).default: same(f"aten.{op}.default", prepare=_stat_dim) for op in ("argmax", "argmin")},
    A.var.correction: same("aten.var.correction", prepare=_stat_dims),
    A.cumsum.default: same("aten.cumsum.default", prepare=_cumsum_dim),
    A.native_layer_norm.default: same("aten.native_layer_norm.default", tref={"weight", "bias"}),
    A.native_group_norm.default: same("aten.native_group_norm.default", tref={"weight", "bias"}),
    A.rms_norm.default: same("aten.rms_norm.default", tref={"weight"}),
    A._native_batch_norm_legit_no_training.default: same(
        "aten._native_batch_norm_legit_no_training.default",
        tref={"weight", "bias", "running_mean", "running_var"}),
    # shape and layout (the `_copy` forms are what a program already through ExecuTorch's edge passes holds)
    **{op: Rule(_view) for op in (A.view.default, A._unsafe_view.default, A.reshape.default, A.view_copy.default,
                                 A.unsqueeze.default, A.squeeze.default, A.squeeze.dim,
                                 A.squeeze.dims, A.flatten.using_ints)},
    **{op: same("aten.permute_copy.default", prepare=_permute_dims) for op in (A.permute.default,
                                                                             A.permute_copy.default)},
    A.flip.default: same("aten.flip.default", prepare=_permute_dims),
    **{op: same(SLICE, prepare=_slice_bounds) for op in (A.slice.Tensor, A.slice_copy.Tensor)},
    **{op: Rule(_select) for op in (A.select.int, A.select_copy.int)},
    **{op: Rule(_split) for op in SPLITS},
    operator.getitem: Rule(_getitem),
    A.cat.default: same("aten.cat.default", prepare=_cat_dim),
    A.expand.default: same("aten.expand_copy.default", prepare=_expand_size),
    A.repeat.default: same("aten.repeat.default"),
    A.constant_pad_nd.default: same("aten.constant_pad_nd.default"),
    **{op: same("aten.unfold_copy.default", prepare=_unfold_dim) for op in (A.unfold.default, A.unfold_copy.default)},
    # gathers
    A.embedding.default: same("aten.embedding.default", tref={"weight"},
                              widen={WIDENED_READERS[A.embedding.default]}),
    A.index_select.default: same("aten.index_select.default", prepare=_dim),
    A.gather.default: same("aten.gather.default", prepare=_dim),
    A.index.Tensor: same("aten.index.Tensor", check=_tensor_indices),
    # linear algebra
    A.linear.default: same("aten.linear.default", tref={"weight", "bias"}, widen={WIDENED_READERS[A.linear.default]}),
    A.addmm.default: same("aten.addmm.default", tref={"self", "mat2"}, widen={WIDENED_READERS[A.addmm.default]}),
    A.mm.default: same("aten.mm.default", tref={"mat2"}),
    A.bmm.default: same("aten.bmm.default", tref={"mat2"}),
    A.matmul.default: same("aten.matmul.default"),
    A._weight_int8pack_mm.default: same("aten._weight_int8pack_mm.default", tref=("mat2", "scales")),
    # convolution, pooling and resampling
    A.convolution.default: same("aten.convolution.default", tref={"weight", "bias"}, check=_conv_1d_2d),
    A.max_pool2d.default: same("aten.max_pool2d.default", prepare=_pool_lists),
    A.max_pool2d_with_indices.default: same("aten.max_pool2d_with_indices.default", prepare=_pool_lists),
    A.avg_pool2d.default: same("aten.avg_pool2d.default", prepare=_pool_lists),
    A.adaptive_avg_pool2d.default: Rule(_global_avg_pool, _one_by_one),
    A._adaptive_avg_pool2d.default: Rule(_global_avg_pool, _one_by_one),
    A.upsample_nearest2d.vec: same("aten.upsample_nearest2d.vec"),
    A.upsample_bilinear2d.vec: same("aten.upsample_bilinear2d.vec"),
    A.grid_sampler_2d.default: same("aten.grid_sampler_2d.default"),
    # attention
    A.scaled_dot_product_attention.default: same(
        "aten.scaled_dot_product_attention.default", check=_no_dropout),
    # forwarded or ignored
    **{op: Rule(_nothing) for op in FORWARDED},
    A._assert_tensor_metadata.default: Rule(_nothing),
}
"""Every ATen op with a rule, grouped by what it does (as the contract's `op_*` modules are); each
elementwise family is derived from its table in `op_decls`."""

OUTPUT_CLONE = "aten.clone.default"
"""Emitted when a graph output would otherwise be an input, a constant or another output."""

KEPT_WHOLE = (
    A.linear.default, A.matmul.default, A.scaled_dot_product_attention.default, A.rms_norm.default,
    A.silu.default, A.max_pool2d.default, A.adaptive_avg_pool2d.default, A.hardswish.default, A.hardsigmoid.default,
    A.upsample_nearest2d.vec, A.upsample_bilinear2d.vec,
)
"""Ops that torch.export's default decompositions would break up but the contract keeps."""


def _batch_statistics_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                           training: bool, momentum: float, eps: float) -> tuple[torch.Tensor, ...]:
    """aten._native_batch_norm_legit.no_stats as mean.dim and var.correction over every dim but the
    channels' (BiT's and ResNetV2's weight-standardized convolutions standardize their weights with it:
    a parameter's values, computed on the device, never folded into a second copy)."""
    dims = [0, *range(2, x.dim())]
    channels = [1, x.shape[1], *([1] * (x.dim() - 2))]
    mean = A.mean.dim(x, dims, True)
    rstd = A.rsqrt.default(A.var.correction(x, dims, correction=0, keepdim=True) + eps)
    out = (x - mean) * rstd
    if weight is not None:
        out = out * weight.reshape(channels)
    if bias is not None:
        out = out + bias.reshape(channels)
    return out, mean.reshape(-1), rstd.reshape(-1)


BROKEN_UP = {A._native_batch_norm_legit.no_stats: _batch_statistics_norm}
"""Ops the default decompositions keep whole that the contract has no kernel for, as ops it has."""


_tables: dict[tuple, dict] = {}
"""decomposition_table's tables by the registered ops they were built from (see there)."""


def decomposition_table() -> dict:
    """torch.export's default decompositions minus the ops the contract keeps whole.

    Building the table walks every registered op (about 0.1 s, a quarter of a small model's
    export), so it is built once per set of registered ops: the op namespaces loaded and the
    ops with composite-implicit kernels, which change when a package registers custom ops (whose
    composite forms the table decomposes)."""
    registered = (tuple(torch.ops._dir),
                  frozenset(torch._C._dispatch_get_registrations_for_dispatch_key("CompositeImplicitAutograd")))
    if registered not in _tables:
        table = torch.export.default_decompositions()
        for op in KEPT_WHOLE:
            table.pop(op, None)
        table = table.materialize()
        table.update(BROKEN_UP)
        _tables[registered] = table
    return dict(_tables[registered])
