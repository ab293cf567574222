"""Trace what repeats once: a model whose layers run one after another is traced with only the
first few of them run, and each later layer's part of the graph is the traced one of a layer of
its kind, stamped with the later layer's own tensors.

Tracing costs torch.export about the same time per layer; stamping copies nodes. A layer's *kind*
is everything about it but its tensors' values and its `layer_idx`: its modules' types and plain
attributes, its tensors' names, dtypes and shapes. The template (`template_length`: at least two
layers, every kind seen after it at an index >= 1) runs with every layer's tensors registered, so
its inputs are the whole model's. Stamping checks the template's shape first (`Template.of`: the
prefix, one contiguous run of nodes per layer, the suffix; each layer reads only its own tensors,
what the prefix made and the previous layer's one output) and that two template layers of one kind
made the same nodes; a template that fails a check is not stamped (`trace_repeated` then traces the
whole model). tests/export/test_export_stamp.py proves the file equal, byte for byte, to the full
trace's for every family vkx exports.
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch import fx, nn
from torch.export import ExportedProgram
from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec,
                                          TensorArgument)

from vkx.export.trace import to_eval, trace

_PLAIN = (bool, int, float, str, type(None))


@dataclass(frozen=True)
class Repeated:
    """The layers of a module that run one after another: the `nn.ModuleList` named `layers`, and
    `state(i)`: the names of the module's buffers outside the layer that layer i alone reads and
    writes (a causal LM's KV cache), in the same order for every layer."""

    layers: str
    state: Callable[[int], tuple[str, ...]] = lambda i: ()

    def tensors(self, module: nn.Module, i: int) -> list[tuple[str, torch.Tensor]]:
        """Layer i's own parameters and buffers by name, as torch.export lists them (duplicates kept)."""
        layer = module.get_submodule(self.layers)[i]
        return [(f"{self.layers}.{i}.{name}", t) for name, t in
                (*layer.named_parameters(remove_duplicate=False), *layer.named_buffers(remove_duplicate=False))]

    def own(self, module: nn.Module, i: int) -> list[str]:
        """Everything layer i alone reads, by name, in an order alike for every layer of one kind."""
        return [name for name, _ in self.tensors(module, i)] + list(self.state(i))


def layer_kind(layer: nn.Module) -> tuple:
    """What makes two layers trace alike but for their tensors: module types, plain attributes
    (`layer_idx` aside: the state it selects is `Repeated.state`), tensor names, dtypes and shapes."""
    modules = tuple((name, type(m), tuple(sorted((k, v) for k, v in vars(m).items()
                                                 if not k.startswith("_") and k != "layer_idx"
                                                 and isinstance(v, _PLAIN))))
                    for name, m in layer.named_modules())
    tensors = tuple((name, type(t), t.dtype, tuple(t.shape)) for name, t in
                    (*layer.named_parameters(remove_duplicate=False), *layer.named_buffers(remove_duplicate=False)))
    return modules, tensors


def template_length(kinds: list[tuple]) -> int:
    """How many leading layers to trace: at least two, and every later layer's kind among layers 1.. of them
    (a stamped layer's template has a previous layer, whose output it reads)."""
    count = min(2, len(kinds))
    while count < len(kinds) and any(kind not in kinds[1:count] for kind in kinds[count:]):
        count += 1
    return count


def trace_repeated(module: nn.Module, example_inputs: tuple[torch.Tensor, ...], repeated: Repeated) -> ExportedProgram:
    """`trace(module, example_inputs)`, with each layer after the template stamped rather than traced."""
    to_eval(module)  # all of it: the trace reaches only the template's layers
    layers = module.get_submodule(repeated.layers)
    kinds = [layer_kind(layer) for layer in layers]
    count = template_length(kinds)
    if count == len(kinds):
        return trace(module, example_inputs)
    with running_first(module, repeated.layers, count):
        template = trace(module, example_inputs)
    program = stamp(template, module, repeated, kinds, count)
    return program if program is not None else trace(module, example_inputs)


@contextlib.contextmanager
def running_first(module: nn.Module, layers: str, count: int) -> Iterator[None]:
    """`module` has only the first `count` of its layers (the ModuleList named `layers`) while inside."""
    parent_name, _, name = layers.rpartition(".")
    parent = module.get_submodule(parent_name)
    full = parent._modules[name]
    parent._modules[name] = nn.ModuleList(list(full)[:count])
    try:
        yield
    finally:
        parent._modules[name] = full


@dataclass
class Template:
    """A traced template's nodes: prefix, one run of nodes per layer, suffix; what each layer reads from
    before it (`hidden`: the previous layer's output, None for the first layer) and gives after it."""

    prefix: list[fx.Node]
    bodies: list[list[fx.Node]]
    suffix: list[fx.Node]
    hidden: list[fx.Node | None]
    outputs: list[fx.Node]

    @classmethod
    def of(cls, program: ExportedProgram, layers: str, count: int) -> "Template | None":
        """The template's parts, or None where it is not a prefix, `count` layers in a row and a suffix."""
        pattern = re.compile(rf"^{re.escape(layers)}\.(\d+)(\.|$)")

        def layer_of(node: fx.Node) -> int | None:
            for path, _ in (node.meta.get("nn_module_stack") or {}).values():
                match = pattern.match(path)
                if match:
                    return int(match.group(1))
            return None
        parts: list[list[fx.Node]] = [[] for _ in range(count + 2)]  # prefix, bodies, suffix
        at = 0
        for node in program.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            if node.op != "call_function":
                return None
            layer = layer_of(node)
            part = count + 1 if layer is None and at > 0 else 0 if layer is None else layer + 1
            if part < at:
                return None  # a layer's nodes not in one run, or a layer after the suffix began
            at = part
            parts[part].append(node)
        if any(not body for body in parts[1:count + 1]):
            return None
        prefix, bodies, suffix = parts[0], parts[1:count + 1], parts[count + 1]
        where = {node: i for i, body in enumerate(bodies) for node in body}
        inside_prefix = set(prefix)
        hidden: list[fx.Node | None] = []
        outputs: list[fx.Node] = []
        for i, body in enumerate(bodies):
            read = {a for node in body for a in node.all_input_nodes if where.get(a) != i}
            before = {a for a in read if a.op != "placeholder" and a not in inside_prefix}
            if any(where.get(a) != i - 1 for a in before) or len(before) > (i > 0):
                return None  # reads from a layer other than the one before it, or more than one of its nodes
            hidden.append(next(iter(before), None))
            given = {node for node in body for user in node.users
                     if user.op != "output" and where.get(user) != i}
            if len(given) != 1:
                return None
            outputs.append(next(iter(given)))
        for i in range(1, count):
            if hidden[i] is not outputs[i - 1]:
                return None
        if any(where.get(a) not in (None, count - 1) or (a in where and a is not outputs[-1])
               for node in suffix for a in node.all_input_nodes):
            return None
        return cls(prefix, bodies, suffix, hidden, outputs)


def stamp(template: ExportedProgram, module: nn.Module, repeated: Repeated, kinds: list[tuple],
          count: int) -> ExportedProgram | None:
    """The program the whole `module` traces to, from `template` (its first `count` layers traced);
    None where the template's shape does not allow it (Template.of) or two template layers of one kind
    made different nodes (the layer's index matters)."""
    parts = Template.of(template, repeated.layers, count)
    if parts is None:
        return None
    signature = template.graph_signature
    placeholders = {node.name: node for node in template.graph.find_nodes(op="placeholder")}
    by_target = {spec.target: placeholders[spec.arg.name] for spec in signature.input_specs if spec.target is not None}
    own = [repeated.own(module, i) for i in range(len(kinds))]
    if any(name not in by_target for names in own[:count] for name in names):
        return None
    mutated = {node: target for target, node in _mutations(template).items()}
    output = next(iter(template.graph.find_nodes(op="output")))
    body_of = {node: i for i, body in enumerate(parts.bodies) for node in body}
    if any(target not in own[body_of[node]] for node, target in mutated.items() if node in body_of) or any(
            item in body_of and spec.kind == OutputKind.USER_OUTPUT
            for spec, item in zip(signature.output_specs, output.args[0])):
        return None  # a layer that writes another's state, or whose value is an output of the model
    tensors = {by_target[name]: (i, k) for i, names in enumerate(own[:count]) for k, name in enumerate(names)}
    shapes = [_shape(parts, i, tensors) for i in range(count)]
    if any(s is None for s in shapes) or not _alike(parts, shapes, kinds[:count], tensors):
        return None
    template_of = [j if j < count else max(i for i in range(1, count) if kinds[i] == kinds[j])
                   for j in range(len(kinds))]
    stand_in = {name: own[template_of[j]][k] for j in range(count, len(kinds)) for k, name in enumerate(own[j])}
    """A stamped layer's tensor -> the template's tensor in its place."""
    added = _added_inputs(template, module, repeated, count, len(kinds))
    if added is None:
        return None
    input_specs, state_dict, constants = added

    graph = fx.Graph()
    made: dict[fx.Node, fx.Node] = {}
    """The template's nodes' copies (each stamped layer's own in `local` below)."""
    inputs: dict[str, fx.Node] = {}
    """Each input's placeholder, by the tensor's name (a user input's: its own)."""
    for spec in input_specs:
        node = inputs[spec.target or spec.arg.name] = graph.placeholder(spec.arg.name)
        if node.name != spec.arg.name:
            return None
        old = placeholders.get(spec.arg.name)
        node.meta = dict((old if old is not None else by_target[stand_in[spec.target]]).meta)
        if old is not None:
            made[old] = node
    new_mutations: dict[str, fx.Node] = {}

    def copy(node: fx.Node, mapping: Callable[[fx.Node], fx.Node], state: Callable[[str], str] = str) -> fx.Node:
        args, kwargs = fx.node.map_arg((node.args, node.kwargs), mapping)
        new = graph.create_node(node.op, node.target, args, kwargs, name=_base(node.name))
        new.meta = dict(node.meta)
        if node in mutated:
            new_mutations[state(mutated[node])] = new
        return new

    for node in parts.prefix:
        made[node] = copy(node, made.__getitem__)
    last = None
    for j in range(len(kinds)):
        t = template_of[j]
        local: dict[fx.Node, fx.Node] = {by_target[name]: inputs[own[j][k]] for k, name in enumerate(own[t])}
        if last is not None and parts.hidden[t] is not None:
            local[parts.hidden[t]] = last

        def mapping(a: fx.Node) -> fx.Node:
            return local[a] if a in local else made[a]

        def state(name: str) -> str:
            return own[j][own[t].index(name)]
        for node in parts.bodies[t]:
            local[node] = copy(node, mapping, state)
        last = local[parts.outputs[t]]
    made[parts.outputs[-1]] = last
    for node in parts.suffix:
        made[node] = copy(node, made.__getitem__)
    user = [(spec, fx.node.map_arg(item, made.__getitem__)) for spec, item in zip(signature.output_specs, output.args[0])
            if spec.kind == OutputKind.USER_OUTPUT]
    states = [spec.target for spec in input_specs if spec.kind == InputKind.BUFFER and spec.target in new_mutations]
    graph.output(tuple([new_mutations[s] for s in states] + [item for _, item in user]))
    output_specs = [OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument(new_mutations[s].name), s) for s in states]
    output_specs += [OutputSpec(spec.kind, TensorArgument(item.name) if isinstance(item, fx.Node) else spec.arg,
                                spec.target) for spec, item in user]
    return ExportedProgram(
        root=template.graph_module, graph=graph,
        graph_signature=ExportGraphSignature(input_specs, output_specs), state_dict=state_dict,
        range_constraints=template.range_constraints, module_call_graph=template.module_call_graph,
        example_inputs=template.example_inputs, constants=constants)


def _added_inputs(template: ExportedProgram, module: nn.Module, repeated: Repeated, count: int,
                  total: int) -> tuple[list[InputSpec], dict, dict] | None:
    """The whole module's input specs, state dict and constants: the template's, with the tensors of
    layers `count`.. after the last template layer's parameters and buffers, as torch.export orders
    them (None where that layer has no parameter to follow)."""
    specs = list(template.graph_signature.input_specs)
    state_dict, constants = dict(template.state_dict), dict(template.constants)
    prefix = f"{repeated.layers}.{count - 1}."
    new: dict[InputKind, list[InputSpec]] = {InputKind.PARAMETER: [], InputKind.BUFFER: []}
    persistent = {f"{repeated.layers}.{j}.{name}" for j in range(count, total)
                  for name in module.get_submodule(repeated.layers)[j].state_dict(keep_vars=True)}
    for j in range(count, total):
        for name, tensor in repeated.tensors(module, j):
            if isinstance(tensor, nn.Parameter):
                new[InputKind.PARAMETER].append(InputSpec(InputKind.PARAMETER, TensorArgument(_placeholder("p", name)),
                                                          name))
                state_dict[name] = tensor
            else:
                kept = name in persistent
                new[InputKind.BUFFER].append(InputSpec(InputKind.BUFFER, TensorArgument(_placeholder("b", name)),
                                                       name, kept))
                (state_dict if kept else constants)[name] = tensor
    for kind, added in new.items():
        if not added:
            continue
        at = [i for i, spec in enumerate(specs) if spec.kind == kind and spec.target.startswith(prefix)]
        if not at:
            return None
        specs[at[-1] + 1:at[-1] + 1] = added
    return specs, state_dict, constants


def _placeholder(prefix: str, name: str) -> str:
    """torch.export's placeholder name of a parameter ("p") or buffer ("b") `name`."""
    return f"{prefix}_{re.sub(r'[^a-zA-Z0-9]', '_', name)}"


def _shape(parts: Template, i: int, tensors: dict[fx.Node, tuple[int, int]],
           hidden: fx.Node | None = None) -> list | None:
    """Template layer i's nodes in terms alike for every layer of one kind (its own nodes by position, its
    own tensors by their place in `Repeated.own`, the previous layer's output as "hidden"); None where it
    reads another layer's tensor. `hidden`: what stands for the previous layer's output where the template
    does not say (the first layer's input, made by the prefix)."""
    hidden = parts.hidden[i] or hidden
    body = {node: n for n, node in enumerate(parts.bodies[i])}

    def key(node: fx.Node) -> Any:
        if node in body:
            return "body", body[node]
        if node is hidden:
            return "hidden"
        if node in tensors:
            layer, k = tensors[node]
            return ("own", k) if layer == i else ("other",)
        return "shared", node.name
    shape = []
    for node in parts.bodies[i]:
        args, kwargs = fx.node.map_arg((node.args, node.kwargs), key)
        shape.append((node.target, args, tuple(kwargs.items()), _meta_key(node.meta.get("val"))))
    return None if ("other",) in (key(a) for node in parts.bodies[i] for a in node.all_input_nodes) else shape


def _alike(parts: Template, shapes: list, kinds: list[tuple], tensors: dict[fx.Node, tuple[int, int]]) -> bool:
    """Whether template layers of one kind made the same nodes. The first layer's input comes from the
    prefix: it is the prefix node that, taken as "hidden", makes it match a later layer of its kind."""
    for i in range(1, len(kinds)):
        later = [j for j in range(i + 1, len(kinds)) if kinds[j] == kinds[i]]
        if any(shapes[j] != shapes[i] for j in later):
            return False
    if kinds[0] not in kinds[1:]:
        return True
    match = shapes[kinds.index(kinds[0], 1)]
    prefix = set(parts.prefix)
    candidates = {a for node in parts.bodies[0] for a in node.all_input_nodes if a in prefix}
    return any(_shape(parts, 0, tensors, hidden=c) == match for c in candidates)


def _mutations(program: ExportedProgram) -> dict[str, fx.Node]:
    """Each mutated buffer's new value, by buffer name."""
    output = next(iter(program.graph.find_nodes(op="output")))
    return {spec.target: item for spec, item in zip(program.graph_signature.output_specs, output.args[0])
            if spec.kind == OutputKind.BUFFER_MUTATION}


def _meta_key(val: Any) -> Any:
    if isinstance(val, torch.Tensor):
        return val.dtype, tuple(val.shape)
    if isinstance(val, (list, tuple)):
        return tuple(_meta_key(v) for v in val)
    return repr(val)


def _base(name: str) -> str:
    """A node name without FX's numbering: the new graph numbers its nodes as a trace would."""
    return re.sub(r"_\d+$", "", name)
