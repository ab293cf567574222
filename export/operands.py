"""What a lowering rule talks to: `Operands`, the base of lowering's two passes.

Lowering runs the rule table (export/rules.py) twice over the FX graph: `uses.ConstantUses`
records what each constant is used as, then `lower.Lowering` creates the values and calls, its
constants first, each prepacked only where some op needs it so. A rule is written once against
the methods here (`arg`, `tensor`, `number`, `int`, `int_list`, `bool`, `null`, `outputs`,
`new_tensor`, `emit`, `bind`, `value_of`, `list_item`, `update`, `state_of`, `constant`); each
pass gives them its meaning.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from vkx.export.errors import ExportError
from vkx.export.support import op_name, source_line
from vkx.format.contract import Arg, Kind

A = torch.ops.aten
FORWARDED = frozenset({A.alias.default, A.clone.default, A.detach.default, A.lift_fresh_copy.default})
"""Ops that copy or alias their first input: their value is the input's value."""

_NOT_TENSORS = (torch.dtype, torch.memory_format, torch.layout, torch.device)
INT32 = torch.iinfo(torch.int32)

Placeholders = tuple[list[Node], dict[Node, tuple[str, torch.Tensor]], dict[Node, tuple[str, torch.Tensor]]]
"""The user input nodes; each constant node with its name and tensor; each state node (a buffer
the model mutates) with its name and initial value."""


class Operands:
    """The methods a rule calls, common to both passes; value ids are the pass's own."""

    def __init__(self, program: ExportedProgram, placeholders: Placeholders):
        self.program = program
        self.user_inputs, self.constant_nodes, self.state_nodes = placeholders
        self.node: Node | None = None
        """The node whose rule runs (what an error names)."""

    def run(self, rules: Mapping[Any, Any]) -> None:
        """Every op's rule, in graph order."""
        for node in self.program.graph.nodes:
            if node.op == "call_function" and node not in self.constant_nodes:
                self.node = node
                rules[node.target].lower(self, node)

    def resolve(self, node: Node) -> Node:
        """Follow ops that only forward their input (FORWARDED)."""
        while node.op == "call_function" and node.target in FORWARDED:
            node = node.args[0]
        return node

    def widened(self, value: Any) -> Any:
        """The stored constant that `value` casts exactly to fp32 (a 16-bit weight widened for an fp32
        product), else `value`: a matrix product of the op contract reads any float dtype as stored, so
        the cast is read through, never computed, and the weight is on the device once."""
        if not isinstance(value, Node) or value.target is not torch.ops.aten._to_copy.default:
            return value
        source = self.resolve(value.args[0])
        wide, stored = value.meta["val"].dtype, source.meta["val"].dtype
        exact = wide == torch.float32 and stored in (torch.float16, torch.bfloat16, torch.float32)
        return source if exact and source in self.constant_nodes else value

    def arg(self, argument: Arg, value: Any, *, tref: bool = False) -> int:
        """The value id of `value` as `argument` of a contract op (None, dtypes and memory formats: Null)."""
        kind = argument.kind
        if isinstance(value, Node) and kind in (Kind.TENSOR, Kind.SCALAR_OR_TENSOR):
            return self.tensor(value, tref=tref)
        if value is None or isinstance(value, _NOT_TENSORS):
            return self.null()
        if kind is Kind.SCALAR_OR_TENSOR and isinstance(value, (int, float)):
            return self.number(value)
        if kind is Kind.TENSORS and isinstance(value, (list, tuple)):
            return self.value_list([self.tensor(item) for item in value])
        if kind is Kind.INTS and isinstance(value, (list, tuple)):
            return self.int_list(value)
        if kind is Kind.DOUBLES and isinstance(value, (list, tuple)):
            return self.double_list(value)
        if kind is Kind.BOOL and isinstance(value, bool):
            return self.bool(value)
        if kind is Kind.INT and isinstance(value, int) and not isinstance(value, bool):
            return self.int(value)
        if kind is Kind.NUMBER and isinstance(value, (int, float)) and not isinstance(value, bool):
            return self.int(value) if isinstance(value, int) else self.double(value)
        if kind is Kind.STRING and isinstance(value, str):
            return self.string(value)
        raise ExportError(f"{op_name(self.node)}: cannot lower argument {argument.name}={value!r} "
                          f"(the contract takes {kind.value}) at {source_line(self.node)}")

    def number(self, value: int | float | bool) -> int:
        """A Python scalar operand as an immediate. A float is always a Double: its type is the
        value's, not the result's (`x < 2.5` has a bool result and must compare with 2.5, not 2).
        An integer is a Double for an op with a floating result, else an Int (checked to fit
        the int32 that integer tensors hold)."""
        if isinstance(value, float) or self.node.meta["val"].dtype.is_floating_point:
            return self.double(float(value))
        if not INT32.min <= int(value) <= INT32.max:
            raise ExportError(f"{op_name(self.node)}: the scalar {value} does not fit an int32 "
                              f"at {source_line(self.node)}")
        return self.int(int(value))

    # ---- each pass's own ------------------------------------------------------------------------
    tensor: Callable[..., int]
    """`tensor(node, tref=False)`: a tensor operand: a node's value, or a constant (direct if `tref`,
    else prepacked)."""
    constant: Callable[[str, torch.Tensor], int]
    """`constant(name, tensor)`: a tensor the lowering computed (an arange, positions), prepacked."""
    int: Callable[[int], int]
    double: Callable[[float], int]
    bool: Callable[[bool], int]
    string: Callable[[str], int]
    null: Callable[[], int]
    int_list: Callable[[Any], int]
    double_list: Callable[[Any], int]
    value_list: Callable[[list[int]], int]
    new_tensor: Callable[[torch.Tensor], int]
    """`new_tensor(fake)`: a new non-constant tensor in its device dtype."""
    outputs: Callable[[Node], int]
    """`outputs(node)`: new values for the node's result (a ValueList for several) bound to the node."""
    emit: Callable[[str, list[int]], None]
    """`emit(name, args)`: a call of contract op `name` (every argument, then the output)."""
    bind: Callable[[Node, int], None]
    value_of: Callable[[Node], int]
    list_item: Callable[[int, int], int]
    update: Callable[[str, Node, list[int]], None]
    """`update(name, node, args)`: update op `name` writing in place into the state that is `node`'s first argument."""
    state_of: Callable[[Node], "str | None"]
    """`state_of(node)`: the name of the state `node` is the current content of (None: not state)."""
