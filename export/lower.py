"""An ExportedProgram → one VkGraph of contract ops (vkx.format.contract).

Lowering runs the rule table (export/rules.py) twice over the FX graph. The first pass
(export/uses.py) records which constants (parameters, buffers, lifted tensors) are used, and
whether each is consumed directly by a prepacking op ("tref") or needs an `et_vk.prepack`
("gpu"). The second, `Lowering`, creates the values: used constants first, in placeholder
order, each followed by its prepack; then the user inputs; then every op's args, lazily in
the declaration's order, and its output. Python scalars are immediates (Int/Double values)
where the contract takes a number.

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
from vkx.export.operands import Operands, Placeholders
from vkx.export.ops import OUTPUT_CLONE
from vkx.export.rules import RULES
from vkx.export.support import check_supported, op_name, source_line
from vkx.export.uses import constant_uses
from vkx.format import contract, opset
from vkx.format.contract import ContractError
from vkx.format.liveness import PREPACK  # the name by which the plan knows weights' dedicated memory
from vkx.format.op_state import COPY, STATE
from vkx.format.vkgraph import (Bool, Double, DoubleList, Int, IntList, MemoryLayout, Null, OperatorCall, StorageType, String,
                                Tensor, Value, ValueList, VkGraph)

@dataclass(frozen=True)
class ConstantSource:
    """One constant_id's tensor as the model holds it (constants.py converts and hashes it)."""
    name: str
    tensor: torch.Tensor


@dataclass(frozen=True)
class LoweredIO:
    dtype: torch.dtype
    sizes: tuple[int, ...]


@dataclass
class Lowered:
    graph: VkGraph
    constants: list[ConstantSource]
    inputs: list[LoweredIO]
    outputs: list[LoweredIO]


def lower(program: ExportedProgram, states: frozenset[str] = frozenset()) -> Lowered:
    """Check every op first (UnsupportedOpsError lists them all), then build the graph.

    `states`: buffers that are state though this program only reads them (another method of
    the file mutates them); the buffers it mutates are state in any case."""
    folded = fold_constants(program, states)  # never a state: its value changes between calls
    check_supported(program, RULES, folded)
    user_inputs, constant_nodes, state_nodes = classify_placeholders(program, states)
    placeholders = user_inputs, {**constant_nodes, **folded}, state_nodes
    lowering = Lowering(program, placeholders, constant_uses(program, placeholders, RULES))
    lowering.build()
    return Lowered(lowering.graph, lowering.sources, lowering.io_inputs, lowering.io_outputs)


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


def _zeros(tensor: torch.Tensor) -> bool:
    """Whether every byte of `tensor` is zero. numpy's test: torch's `any()` took 35 ms on a KV-cache
    layer of [1, 4, 512, 64] on a 2-core machine (numpy 0.3 ms), 1.8 s of a 32-layer model's export."""
    data = tensor.detach().cpu().contiguous().reshape(-1)
    return not data.view(torch.uint8).numpy().any()


class Lowering(Operands):
    """Lowering's second pass: creates the values and OperatorCalls, given each constant's uses."""

    def __init__(self, program: ExportedProgram, placeholders: Placeholders, uses: dict[Node, set[str]]):
        super().__init__(program, placeholders)
        self.uses = uses
        self.graph = VkGraph()
        self.sources: list[ConstantSource] = []
        self.io_inputs: list[LoweredIO] = []
        self.io_outputs: list[LoweredIO] = []
        self._ids: dict[Node, int] = {}
        self._scalar_ids: dict[tuple, int] = {}
        self._tref_ids: dict[Node, int] = {}
        self._gpu_ids: dict[Node, int] = {}
        self._state_of: dict[int, str] = {}
        """Value id of a state tensor or of an update of it -> the state's name."""
        self._latest: dict[str, int] = {}
        """Each state's newest version (what a read of the buffer now sees)."""

    # ---- the pass ---------------------------------------------------------------------------

    def build(self) -> None:
        self._emit_constants()
        self._emit_states()
        for node in self.user_inputs:
            fake = node.meta["val"]
            self.graph.input_ids.append(self.new_tensor(fake))
            self.bind(node, self.graph.input_ids[-1])
            self.io_inputs.append(LoweredIO(fake.dtype, tuple(fake.shape)))
        self.run(RULES)
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
            initial = self.null() if _zeros(tensor) else self._tref(name, tensor)
            value_id = self.new_tensor(tensor)
            self.emit(STATE, [self.string(name), initial, value_id])
            self.bind(node, value_id)
            self._latest[name] = value_id
            self._state_of[value_id] = name

    def state_of(self, value: Node) -> str | None:
        """The name of the state `value` is the current content of (None: not state)."""
        if self.resolve(value) in self.constant_nodes:
            return None
        value_id = self.value_of(value)
        name = self._state_of.get(value_id)
        return name if name is not None and self._latest[name] == value_id else None

    def update(self, name: str, node: Node, args: list[int]) -> None:
        """Emit update op `name` writing into the state that is `node`'s first argument, in place."""
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
            elif spec.kind == OutputKind.BUFFER_MUTATION:
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
            self.io_outputs.append(LoweredIO(fake.dtype, tuple(fake.shape)))

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

    def tensor(self, value: Node, *, tref: bool = False) -> int:
        """A tensor operand: a node's value, or a constant (direct if `tref`, else prepacked)."""
        node = self.resolve(value)
        if node not in self.constant_nodes:
            value_id = self.value_of(node)
            name = self._state_of.get(value_id)
            if name is not None and self._latest[name] != value_id:
                raise ExportError(f"{op_name(self.node)} reads the old content of state {name} after it was "
                                  f"updated in place at {source_line(self.node)}")
            return value_id
        return self._tref_ids[node] if tref else self._gpu_ids[node]

    def constant(self, name: str, tensor: torch.Tensor) -> int:
        """A tensor the lowering computed (an arange, positions) as a constant, prepacked."""
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

    def string(self, value: str) -> int:
        return self._add(String(value))

    def null(self) -> int:
        return self._add(Null())

    def value_list(self, items: list[int]) -> int:
        return self._add(ValueList(tuple(items)))

    def int_list(self, items: Any) -> int:
        return self._add(IntList(tuple(int(i) for i in items)))

    def double_list(self, items: Any) -> int:
        return self._add(DoubleList(tuple(float(x) for x in items)))

    def new_tensor(self, fake: torch.Tensor) -> int:
        """A new non-constant tensor (memory planned later), in its device dtype (inputs and outputs stage in it)."""
        datatype = on_device(fake.dtype).datatype
        return self._add(Tensor(datatype, tuple(int(d) for d in fake.shape),
                                storage_type=StorageType.BUFFER, memory_layout=MemoryLayout.TENSOR_WIDTH_PACKED,
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
        decl = opset.lookup(name)
        if decl is None:
            raise RuntimeError(f"internal error: the exporter emitted {name}, which the op contract does not declare")
        if len(args) != len(decl.args) + 1:
            raise RuntimeError(f"internal error: {name} emitted with {len(args) - 1} arguments, "
                               f"the contract declares {len(decl.args)}")
        call = OperatorCall(len(self.graph.chain), name, tuple(args))
        try:
            contract.bind(decl, call, self.graph.values, contract.check_tensor)
        except ContractError as error:
            where = f" ({op_name(self.node)} at {source_line(self.node)})" if self.node is not None else ""
            raise ExportError(f"cannot lower{where}: {error}") from None
        self.graph.chain.append(call)

    def bind(self, node: Node, value_id: int) -> None:
        self._ids[node] = value_id

    def value_of(self, node: Node) -> int:
        return self._ids[self.resolve(node)]

    def list_item(self, value_id: int, index: int) -> int:
        return self.graph.values[value_id].items[index]

    # ---- values -------------------------------------------------------------------------------

    def _add(self, value: Value) -> int:
        self.graph.values.append(value)
        return len(self.graph.values) - 1

    def _scalar(self, value: Int | Double | Bool) -> int:
        """Int, Double and Bool values are shared (keyed by type and repr: -0.0 is not 0.0)."""
        key = (type(value), repr(value.value))
        if key not in self._scalar_ids:
            self._scalar_ids[key] = self._add(value)
        return self._scalar_ids[key]
