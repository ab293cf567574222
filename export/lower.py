"""An ExportedProgram → one VkGraph of contract ops (vkx.format.contract).

Lowering runs the op table twice over the FX graph. The first pass only scans:
it records which constants (parameters, buffers, lifted tensors) are used, and
whether each is consumed directly by a prepacking op ("tref") or needs an
`et_vk.prepack` ("gpu"). The second pass creates the values: used constants first,
in placeholder order, each followed by its prepack; then the user inputs; then
every op's args, lazily in the declaration's order, and its output. Python scalars
are immediates (Int/Double values) where the contract takes a number.

Every tensor has the dtype it has on the device: the traced one, 64-bit types
narrowed to 32 bits (constants checked that no value changes). Every emitted op
is bound to its `vkx.format.contract` declaration as it is emitted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx import Node

from vkx.export.dtypes import check_narrowing, on_device, supported
from vkx.export.errors import ExportError
from vkx.export.fold import fold_constants
from vkx.export.ops import FORWARDED, OUTPUT_CLONE, RULES
from vkx.export.support import check_supported, op_name, source_line
from vkx.format import contract
from vkx.format.contract import Arg, ContractError, Kind
from vkx.format.liveness import PREPACK  # the name by which the plan knows weights' dedicated memory
from vkx.format.op_state import COPY, STATE
from vkx.format.vkgraph import (Bool, Double, DoubleList, Int, IntList, MemoryLayout, Null, OperatorCall, StorageType, String,
                                Tensor, Value, ValueList, VkGraph)

_NOT_TENSORS = (torch.dtype, torch.memory_format, torch.layout, torch.device)
INT32 = torch.iinfo(torch.int32)


@dataclass(frozen=True)
class ConstantSource:
    """One constant_id's tensor as the model holds it (constants.py converts and hashes it)."""
    name: str
    tensor: torch.Tensor


@dataclass(frozen=True)
class IOTensor:
    dtype: torch.dtype
    sizes: tuple[int, ...]


@dataclass
class Lowered:
    graph: VkGraph
    constants: list[ConstantSource]
    inputs: list[IOTensor]
    outputs: list[IOTensor]


def lower(program: ExportedProgram, states: frozenset[str] = frozenset()) -> Lowered:
    """Check every op first (UnsupportedOpsError lists them all), then build the graph.

    `states`: buffers that are state though this program only reads them (another method of
    the file mutates them); the buffers it mutates are state in any case."""
    folded = fold_constants(program, states)  # never a state: its value changes between calls
    check_supported(program, folded)
    user_inputs, constant_nodes, state_nodes = classify_placeholders(program, states)
    placeholders = user_inputs, {**constant_nodes, **folded}, state_nodes
    scan = GraphBuilder(program, placeholders, uses=None)
    scan.build()
    builder = GraphBuilder(program, placeholders, uses=scan.uses)
    builder.build()
    return Lowered(builder.graph, builder.sources, builder.io_inputs, builder.io_outputs)


Placeholders = tuple[list[Node], dict[Node, tuple[str, torch.Tensor]], dict[Node, tuple[str, torch.Tensor]]]
"""The user input nodes; each constant node with its name and tensor; each state node (a buffer
the model mutates) with its name and initial value."""


def mutated_buffers(program: ExportedProgram) -> set[str]:
    """The names of the buffers the program updates."""
    return set(program.graph_signature.buffers_to_mutate.values())


def classify_placeholders(program: ExportedProgram, states: frozenset[str] = frozenset()) -> Placeholders:
    """Sort the placeholders into user inputs (checked), constants and state; refuse any other kind."""
    specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
    stored = {**program.state_dict, **program.constants}
    mutated = mutated_buffers(program) | states
    if program.graph_signature.user_inputs_to_mutate or program.graph_signature.parameters_to_mutate:
        raise ExportError("the model mutates an input or a parameter; only buffers can be state")
    user_inputs: list[Node] = []
    constant_nodes: dict[Node, tuple[str, torch.Tensor]] = {}
    state_nodes: dict[Node, tuple[str, torch.Tensor]] = {}
    for node in program.graph.find_nodes(op="placeholder"):
        spec = specs[node.name]
        if spec.kind == InputKind.USER_INPUT:
            if not isinstance(node.meta.get("val"), torch.Tensor):
                raise ExportError(f"model input {node.name} is not a tensor")
            if not supported(node.meta["val"].dtype):
                raise ExportError(f"model input {node.name} has dtype {node.meta['val'].dtype}, not supported")
            user_inputs.append(node)
        elif spec.kind == InputKind.BUFFER and spec.target in mutated:
            state_nodes[node] = (spec.target, stored[spec.target])
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            constant_nodes[node] = (spec.target, stored[spec.target])
        else:
            raise ExportError(f"model input {node.name} of kind {spec.kind.name} is not supported")
    return user_inputs, constant_nodes, state_nodes


class GraphBuilder:
    """Creates values and OperatorCalls; with `uses=None` it only scans constant uses."""

    def __init__(self, program: ExportedProgram, placeholders: Placeholders, uses: dict[Node, set[str]] | None):
        self.program = program
        self.scanning = uses is None
        self.uses: dict[Node, set[str]] = {} if uses is None else uses
        self.graph = VkGraph()
        self.sources: list[ConstantSource] = []
        self.io_inputs: list[IOTensor] = []
        self.io_outputs: list[IOTensor] = []
        self.node: Node | None = None
        self._ids: dict[Node, int] = {}
        self._scalar_ids: dict[tuple, int] = {}
        self._tref_ids: dict[Node, int] = {}
        self._gpu_ids: dict[Node, int] = {}
        self.user_inputs, self.constant_nodes, self.state_nodes = placeholders
        self._state_of: dict[int, str] = {}
        """Value id of a state tensor or of an update of it -> the state's name."""
        self._latest: dict[str, int] = {}
        """Each state's newest version (what a read of the buffer now sees)."""

    # ---- the pass ---------------------------------------------------------------------------

    def build(self) -> None:
        if not self.scanning:
            self._emit_constants()
            self._emit_states()
        for node in self.user_inputs:
            fake = node.meta["val"]
            self.graph.input_ids.append(self.new_tensor(fake))
            self.bind(node, self.graph.input_ids[-1])
            self.io_inputs.append(IOTensor(fake.dtype, tuple(fake.shape)))
        for node in self.program.graph.nodes:
            if node.op == "call_function" and node not in self.constant_nodes:
                self.node = node
                RULES[node.target].lower(self, node)
        self._emit_outputs()

    def _emit_constants(self) -> None:
        for node, (name, tensor) in self.constant_nodes.items():
            if node not in self.uses:
                continue
            if tensor.numel() == 0:
                raise ExportError(f"constant {name} has no elements")
            if not supported(tensor.dtype):
                raise ExportError(f"constant {name} has dtype {tensor.dtype}, not supported")
            self._tref_ids[node] = self._tref(name, tensor)
            if "gpu" in self.uses[node]:
                self._gpu_ids[node] = self.new_tensor(tensor)
                self.emit(PREPACK, [self._tref_ids[node], self._gpu_ids[node]])

    def _emit_states(self) -> None:
        """One `vkx.state` per mutated buffer at the head of the chain: its initial value is
        Null for zeros, else a constant."""
        for node, (name, tensor) in self.state_nodes.items():
            if not supported(tensor.dtype):
                raise ExportError(f"state {name} has dtype {tensor.dtype}, not supported")
            initial = self._tref(name, tensor) if bool(tensor.any()) else self.null()
            value_id = self.new_tensor(tensor)
            self.emit(STATE, [self._add(String(name)), initial, value_id])
            self.bind(node, value_id)
            self._latest[name] = value_id
            self._state_of[value_id] = name

    def state_of(self, value: Node) -> str | None:
        """The name of the state `value` is the current content of (None: not state)."""
        if self.scanning or self.resolve(value) in self.constant_nodes:
            return None
        value_id = self.value_of(value)
        name = self._state_of.get(value_id)
        return name if name is not None and self._latest[name] == value_id else None

    def update(self, name: str, node: Node, args: list[int]) -> None:
        """Emit update op `name` writing into the state that is `node`'s first argument, in place."""
        if self.scanning:
            self.emit(name, args + [-1])
            return
        state = self.state_of(node.args[0])
        if state is None:
            raise ExportError(f"{op_name(node)}: vkx updates model state (a buffer the model mutates) in place; "
                              f"this one writes into another tensor at {source_line(node)}")
        out = self.outputs(node)
        self.emit(name, args + [out])
        self._state_of[out] = state
        self._latest[state] = out

    def _emit_outputs(self) -> None:
        output = next(node for node in self.program.graph.nodes if node.op == "output")
        specs = self.program.graph_signature.output_specs
        user_items = []
        for spec, item in zip(specs, output.args[0]):
            if spec.kind == OutputKind.USER_OUTPUT:
                user_items.append(item)
            elif spec.kind == OutputKind.BUFFER_MUTATION and not self.scanning:
                self._write_state(spec.target, item)
            elif spec.kind != OutputKind.BUFFER_MUTATION:
                raise ExportError(f"model output of kind {spec.kind.name} is not supported")
        seen: set[Node] = set()
        for item in user_items:
            if not isinstance(item, Node) or not isinstance(item.meta.get("val"), torch.Tensor):
                raise ExportError(f"model output {item!r} is not a tensor")
            node = self.resolve(item)
            fake = node.meta["val"]
            if node in self.constant_nodes or node in self.user_inputs or node in seen:
                self.node = item
                args = [self.tensor(node), self.null()]
                value_id = self.new_tensor(fake)
                self.emit(OUTPUT_CLONE, args + [value_id])
            else:
                self.node = item
                value_id = self.tensor(node)  # refuses the old content of an updated state
            seen.add(node)
            self.graph.output_ids.append(value_id)
            self.io_outputs.append(IOTensor(fake.dtype, tuple(fake.shape)))

    def _write_state(self, name: str, item: Node) -> None:
        """The buffer's new content is `item`: nothing to do when an update wrote it in place,
        else a `vkx.copy` into the state at the end of the chain."""
        value_id = self.value_of(item)
        if self._latest[name] == value_id:
            return
        self.node = item
        state = self._latest[name]
        out = self.new_tensor(self.resolve(item).meta["val"])
        self.emit(COPY, [state, value_id, out])
        self._state_of[out] = name
        self._latest[name] = out

    # ---- what rules call ----------------------------------------------------------------------

    def resolve(self, node: Node) -> Node:
        """Follow ops that only forward their input (alias, clone, detach, lift_fresh_copy)."""
        while node.op == "call_function" and node.target in FORWARDED:
            node = node.args[0]
        return node

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
            return self._add(ValueList(tuple(self.tensor(item) for item in value)))
        if kind is Kind.INTS and isinstance(value, (list, tuple)):
            return self.int_list(value)
        if kind is Kind.DOUBLES and isinstance(value, (list, tuple)):
            return self._add(DoubleList(tuple(float(x) for x in value)))
        if kind is Kind.BOOL and isinstance(value, bool):
            return self.bool(value)
        if kind is Kind.INT and isinstance(value, int) and not isinstance(value, bool):
            return self.int(value)
        if kind is Kind.NUMBER and isinstance(value, (int, float)) and not isinstance(value, bool):
            return self.int(value) if isinstance(value, int) else self.double(value)
        if kind is Kind.STRING and isinstance(value, str):
            return self._add(String(value))
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

    def tensor(self, value: Node, *, tref: bool = False) -> int:
        """A tensor operand: a node's value, or a constant (direct if `tref`, else prepacked)."""
        node = self.resolve(value)
        if node not in self.constant_nodes:
            value_id = self.value_of(node)
            name = None if self.scanning else self._state_of.get(value_id)
            if name is not None and self._latest[name] != value_id:
                raise ExportError(f"{op_name(self.node)} reads the old content of state {name} after it was "
                                  f"updated in place at {source_line(self.node)}")
            return value_id
        if self.scanning:
            self.uses.setdefault(node, set()).add("tref" if tref else "gpu")
            return -1
        return self._tref_ids[node] if tref else self._gpu_ids[node]

    def constant(self, name: str, tensor: torch.Tensor) -> int:
        """A tensor the lowering computed (an arange, positions) as a constant, prepacked."""
        if self.scanning:
            return -1
        tref = self._tref(name, tensor)
        value_id = self.new_tensor(tensor)
        self.emit(PREPACK, [tref, value_id])
        return value_id

    def _tref(self, name: str, tensor: torch.Tensor) -> int:
        """A constant tensor value (the next constant_id), its bytes those of `tensor` (checked to narrow)."""
        check_narrowing(name, tensor)
        datatype = on_device(tensor.dtype).datatype
        self.sources.append(ConstantSource(name, tensor))
        return self._add(Tensor(datatype, tuple(tensor.shape), constant_id=len(self.sources) - 1,
                                staging_datatype=datatype))

    def int(self, value: int) -> int:
        return self._scalar(Int(value))

    def double(self, value: float) -> int:
        return self._scalar(Double(value))

    def bool(self, value: bool) -> int:
        return self._scalar(Bool(value))

    def null(self) -> int:
        return self._add(Null())

    def int_list(self, items: Any) -> int:
        return self._add(IntList(tuple(int(i) for i in items)))

    def new_tensor(self, fake: torch.Tensor) -> int:
        """A new non-constant tensor (memory planned later), in its device dtype (inputs and outputs stage in it)."""
        datatype = on_device(fake.dtype).datatype
        return self._add(Tensor(datatype, tuple(int(d) for d in fake.shape),
                                storage_type=StorageType.BUFFER, memory_layout=MemoryLayout.WIDTH_PACKED,
                                staging_datatype=datatype))

    def outputs(self, node: Node) -> int:
        """New values for the node's result (a ValueList for several) bound to the node."""
        result = node.meta["val"]
        if isinstance(result, (tuple, list)):
            value_id = self._add(ValueList(tuple(self.new_tensor(fake) for fake in result)))
        else:
            value_id = self.new_tensor(result)
        self.bind(node, value_id)
        return value_id

    def emit(self, name: str, args: list[int]) -> None:
        """Append a call of contract op `name` (every argument, then the output), bound to its declaration."""
        decl = contract.lookup(name)
        if decl is None:
            raise RuntimeError(f"internal error: the exporter emitted {name}, which the op contract does not declare")
        if len(args) != len(decl.args) + 1:
            raise RuntimeError(f"internal error: {name} emitted with {len(args) - 1} arguments, "
                               f"the contract declares {len(decl.args)}")
        if self.scanning:
            return
        call = OperatorCall(len(self.graph.chain), name, tuple(args))
        try:
            contract.bind(decl, call, self.graph.values, contract.check_tensor)
        except ContractError as error:
            where = f" ({op_name(self.node)} at {source_line(self.node)})" if self.node is not None else ""
            raise ExportError(f"cannot lower{where}: {error}") from None
        self.graph.chain.append(call)

    def bind(self, node: Node, value_id: int) -> None:
        if not self.scanning:
            self._ids[node] = value_id

    def value_of(self, node: Node) -> int:
        return -1 if self.scanning else self._ids[self.resolve(node)]

    def list_item(self, value_id: int, index: int) -> int:
        return -1 if self.scanning else self.graph.values[value_id].items[index]

    # ---- values -------------------------------------------------------------------------------

    def _add(self, value: Value) -> int:
        if self.scanning:
            return -1
        self.graph.values.append(value)
        return len(self.graph.values) - 1

    def _scalar(self, value: Int | Double | Bool) -> int:
        """Int, Double and Bool values are shared (keyed by type and repr: -0.0 is not 0.0)."""
        key = (type(value), repr(value.value))
        if key not in self._scalar_ids:
            self._scalar_ids[key] = self._add(value)
        return self._scalar_ids[key]
