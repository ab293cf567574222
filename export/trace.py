"""Module → ExportedProgram: the module converted to `--dtype`, torch.export, then the
decompositions that fit the op contract."""
from __future__ import annotations

import copy
import itertools
import warnings

import torch
from torch import nn
from torch.export import ExportedProgram

from vkx.export.dtypes import torch_dtype
from vkx.export.errors import ExportError
from vkx.export.ops import decomposition_table
from vkx.export.parallel import each
from vkx.export.rules import RULES
from vkx.format.dtypes import DType


def convert_inputs(inputs: tuple[torch.Tensor, ...], target: DType | None) -> tuple[torch.Tensor, ...]:
    """The inputs with every floating tensor in `target` (None: as they are)."""
    if target is None:
        return inputs
    want = torch_dtype(target)
    return tuple(t.to(want) if t.is_floating_point() and t.dtype != want else t for t in inputs)


def convert(module: nn.Module, inputs: tuple[torch.Tensor, ...],
            target: DType | None) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The module and inputs with every floating tensor in `target` (None: as they are), so that
    the trace computes in `target` as torch would run `module.to(target)`.

    The caller's module is left as it is: a shallow copy of its module tree gets a converted
    copy of each floating parameter and buffer not yet in `target` (the one copy of those bytes:
    the file is written from it). Tensors already in `target` are shared, so a module wholly in
    `target` is returned itself; tied tensors stay tied.
    """
    if target is None:
        return module, inputs
    want = torch_dtype(target)

    def stale(t: torch.Tensor | None) -> bool:
        return t is not None and t.is_floating_point() and t.dtype != want

    inputs = convert_inputs(inputs, target)
    originals = {id(t): t for t in itertools.chain(module.parameters(), module.buffers()) if stale(t)}
    if not originals:
        return module, inputs
    casts = dict(zip(originals, each(lambda t: t.detach().to(want), originals.values())))
    tensors = {key: nn.Parameter(casts[key], t.requires_grad) if isinstance(t, nn.Parameter) else casts[key]
               for key, t in originals.items()}
    modules: dict[int, nn.Module] = {}

    def cast(t: torch.Tensor | None) -> torch.Tensor | None:
        return tensors.get(id(t), t) if stale(t) else t

    def tree(m: nn.Module) -> nn.Module:
        if id(m) not in modules:
            c = modules[id(m)] = copy.copy(m)  # a new __dict__; its tensor and module dicts are replaced below
            c._parameters = {name: cast(t) for name, t in m._parameters.items()}
            c._buffers = {name: cast(t) for name, t in m._buffers.items()}
            c._modules = {name: None if child is None else tree(child) for name, child in m._modules.items()}
        return modules[id(m)]
    return tree(module), inputs


def to_eval(module: torch.nn.Module) -> None:
    """Put `module` in eval mode; ExportError for a module that has none (a PT2E-quantized
    GraphModule: torchao's convert_pt2e output refuses eval())."""
    try:
        module.eval()
    except NotImplementedError:
        raise ExportError(f"{type(module).__name__} is a PT2E-quantized graph (torchao convert_pt2e), which vkx "
                          "does not export: export the float module with quantize='int8' or 'int4', or lower the "
                          "PT2E graph with ExecuTorch's VulkanPartitioner and run that .pte on vkx") from None


def trace(module: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...]) -> ExportedProgram:
    """Export `module` (put in eval mode) with static shapes and decompose to contract-sized ops."""
    to_eval(module)
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
