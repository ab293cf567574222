"""`export_model`: check everything up front, then trace, lower, plan and write one .pte."""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Mapping, Protocol

import torch
from torch.export.graph_signature import InputKind
from torch.utils._pytree import treespec_dumps

from vkx.export.constants import KeyCache, Names, Reference, identity, make_payloads, state_names, stored_nbytes
from vkx.export.dtypes import of
from vkx.export.errors import ExportError
from vkx.export.lower import lower, mutated_buffers
from vkx.export.model_file import check_methods, method_module
from vkx.export.plan import MemoryPlan, plan_memory
from vkx.export.quantize import quantize_module
from vkx.export.stamp import Repeated, trace_repeated
from vkx.export.target_executorch import for_executorch
from vkx.export.trace import convert, convert_inputs, to_eval, trace
from vkx.format import IOSpec, MethodSpec, WriteReport, dtypes, write_methods
from vkx.format.dtypes import DType
from vkx.format.external import EXTERNAL_SUFFIXES
from vkx.format.metadata import ProgramMetadata, relative_to



class Progress(Protocol):
    """What export reports while it works (the CLI draws it)."""

    def stage(self, name: str, total_bytes: int = 0) -> None: ...

    def advance(self, nbytes: int) -> None: ...


class _Silent:
    def stage(self, name: str, total_bytes: int = 0) -> None:
        pass

    def advance(self, nbytes: int) -> None:
        pass


class _Stages:
    """Announces each stage and measures how long it took."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.seconds: dict[str, float] = {}
        self._current: tuple[str, float] | None = None

    def start(self, name: str, total_bytes: int = 0) -> None:
        self.finish()
        self.progress.stage(name, total_bytes)
        self._current = (name, time.perf_counter())

    def finish(self) -> dict[str, float]:
        if self._current is not None:
            name, began = self._current
            self.seconds[name] = time.perf_counter() - began
            self._current = None
        return self.seconds


@dataclass
class ExportReport:
    path: str
    external_path: str | None
    file_bytes: int
    external_bytes: int
    constant_bytes: int
    """Weight bytes written, each distinct tensor once."""
    constants: int
    distinct_constants: int
    operators: int
    memory: MemoryPlan
    """The plan of the method with the most activation bytes."""
    seconds: dict[str, float] = field(default_factory=dict)
    methods: list[str] = field(default_factory=lambda: ["forward"])
    referenced_bytes: int = 0
    """Weight bytes the program references in a checkpoint (not written)."""
    referenced_files: list[str] = field(default_factory=list)


def export_model(module: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...] | dict, path: str | os.PathLike, *,
                 layout: Literal["named", "legacy"] = "named", external_data: str | os.PathLike | None = None,
                 dtype: Literal["keep", "fp32", "fp16", "bf16"] = "keep", alignment: int | None = None,
                 quantize: Literal["int8", "int4"] | None = None, group_size: int | None = None,
                 quantize_embedding: Literal["int8", "int4", "none"] | None = None,
                 quantize_head: Literal["int8", "int4", "none"] | None = None,
                 target: Literal["vkx", "executorch"] = "vkx", progress: Progress | None = None,
                 references: Mapping[tuple, Reference] | None = None,
                 metadata: ProgramMetadata = ProgramMetadata(),
                 source: str | os.PathLike | None = None, repeated: Repeated | None = None) -> ExportReport:
    """Export `module` (put in eval mode) to a Vulkan-delegated `.pte` at `path`.

    `dtype`: the floating type of every parameter, buffer, activation, input and output
    (the module runs as `module.to(dtype)` would; the caller's module is not changed);
    `keep` (the default): each keeps the dtype it has. 64-bit tensors are narrowed to 32 bits.
    `quantize`: weight-only int8 (symmetric, per output channel by default) or int4 (affine, groups
    of 32 by default; `group_size` 32, 64, 128 or 256) for every Linear weight; the Embedding weights
    (`quantize_embedding`) and the language-model head (`quantize_head`: the module that the
    module's `head_name` attribute names) int8 per row unless told int4 or "none"
    (vkx.export.quantize). A model already quantized with torchao exports as it is.
    `target`: "executorch" rewrites the graph for ExecuTorch's C++ Vulkan runtime
    (vkx.export.target_executorch); vkx's loader runs both.

    Several methods: `example_inputs` a dict of method name -> example inputs (each calls
    `module`), or -> `(callable, inputs)` for a method that is another function of `module`
    (a bound method, or a function of the inputs that calls it). Every method is one
    execution plan of the file; a buffer the methods mutate is state they share; each weight
    is stored once (docs/format.md, "Methods" and "State").

    `references` (vkx.export.hf does this for a checkpoint folder): the module's tensors that are
    a safetensors checkpoint's own bytes, by `constants.identity`; those the program uses as they
    are stay there, referenced by name (docs/format.md, "Weights by reference"). `metadata`: what
    the file records besides (a causal LM's EOS token ids). `source`: the model file or folder the
    module came from, recorded relative to the .pte (`vkx export` replaces a default output only
    when it records the same source). `repeated`: the module's layers that run one after another
    (vkx.export.hf names a decoder's): each method traces a few of them and stamps the rest
    (vkx.export.stamp), the same program in less time.

    Raises ExportError, before anything is written, for a bad option, an unwritable
    destination, an op outside the contract or a constant that narrowing would change.
    """
    progress = progress or _Silent()
    check_options(path, layout=layout, external_data=external_data, dtype=dtype, alignment=alignment, target=target)
    methods = check_methods(module, example_inputs, where="export_model()")
    if len(methods) > 1 and layout == "legacy":
        raise ExportError("several methods share their weights through named data; the legacy layout cannot")
    stages = _Stages(progress)
    to_eval(module)
    stored = dtypes.DTYPE_CHOICES[dtype]
    converted, _ = convert(module, (), stored)
    if quantize is not None:
        converted = quantize_module(converted, quantize, group_size, embedding=quantize_embedding,
                                    head=quantize_head, head_name=getattr(module, "head_name", None))
    elif group_size is not None or quantize_embedding is not None or quantize_head is not None:
        raise ExportError("group_size, quantize_embedding and quantize_head need quantize='int8' or 'int4'")

    keys = KeyCache()
    references = references or {}
    keys.start(t for t in converted.state_dict().values() if identity(t) not in references)
    names, taken = state_names(converted), Names(ref.key for ref in references.values())
    specs, memories, sources, programs = [], [], 0, {}
    try:
        for name, (fn, inputs) in methods.items():
            stages.start("torch.export" if len(methods) == 1 else f"torch.export {name}")
            traced, inputs = method_module(converted, fn), convert_inputs(inputs, stored)
            programs[name] = trace(traced, inputs) if repeated is None else trace_repeated(traced, inputs, repeated)
        # a buffer any method updates is state in every method, also where it is only read
        states = frozenset(set().union(*map(mutated_buffers, programs.values())))
        for name, program in programs.items():
            stages.start("lower" if len(methods) == 1 else f"lower {name}")
            lowered = lower(program, states)
            if target == "executorch":
                lowered = for_executorch(lowered)
            stages.start("plan", sum(stored_nbytes(source.tensor) for source in lowered.constants))
            memories.append(plan_memory(lowered.graph))
            payloads = make_payloads(lowered.constants, keys, names, progress.advance, references, taken)
            sources += len(payloads)
            specs.append(MethodSpec(
                name, lowered.graph, payloads,
                [IOSpec(of(t.dtype).scalar_type, t.sizes, n) for t, n in zip(lowered.inputs, input_names(program))],
                [IOSpec(of(t.dtype).scalar_type, t.sizes, n)
                 for t, n in zip(lowered.outputs, output_names(program, len(lowered.outputs)))],
                treespec_dumps(program.call_spec.in_spec), treespec_dumps(program.call_spec.out_spec)))
    finally:
        keys.stop()
    distinct = {p.key: p for spec in specs for p in spec.payloads}
    stages.start("write", sum(p.nbytes for p in distinct.values() if p.stored_in is None))
    if source is not None:
        metadata = replace(metadata, source=relative_to(path, [source])[0])
    written: WriteReport = write_methods(path, specs, layout=layout, external_data=external_data,
                                         alignment=alignment, on_bytes=progress.advance, metadata=metadata)
    return ExportReport(
        path=str(path), external_path=written.external_path, file_bytes=written.file_bytes,
        external_bytes=written.external_bytes, constant_bytes=written.constant_bytes,
        constants=sources, distinct_constants=len(distinct),
        operators=sum(len(spec.graph.chain) for spec in specs), memory=max(memories, key=lambda m: m.total_nbytes),
        seconds=stages.finish(), methods=[spec.name for spec in specs],
        referenced_bytes=written.referenced_bytes, referenced_files=list(written.referenced_files))


def input_names(program: torch.export.ExportedProgram) -> list[str]:
    """The forward's argument name of each user input, in order."""
    return [spec.arg.name for spec in program.graph_signature.input_specs if spec.kind == InputKind.USER_INPUT]


def output_names(program: torch.export.ExportedProgram, count: int) -> list[str | None]:
    """The keys of a forward that returns a dict (or a ModelOutput) of tensors; None for other outputs."""
    spec = program.call_spec.out_spec
    keys = spec.context if isinstance(spec.context, (list, tuple)) else None
    if keys is None or not len(keys) == spec.num_leaves == count or not all(isinstance(k, str) for k in keys):
        return [None] * count
    return list(keys)


def check_options(path: str | os.PathLike, *, layout: str, external_data: str | os.PathLike | None,
                  dtype: str, alignment: int | None, target: str) -> None:
    """Reject bad options and unwritable destinations before any work is done."""
    if target not in ("vkx", "executorch"):
        raise ExportError(f"target must be vkx or executorch, not {target!r}")
    if layout not in ("named", "legacy"):
        raise ExportError(f"layout must be named or legacy, not {layout!r}")
    check_dtype(dtype)
    if alignment is not None and (alignment <= 0 or alignment & (alignment - 1)):
        raise ExportError(f"alignment must be a positive power of two, not {alignment}")
    if external_data is not None:
        if layout == "legacy":
            raise ExportError("external data needs the named layout (legacy keeps weights in the delegate blob)")
        if Path(external_data).suffix not in EXTERNAL_SUFFIXES:
            raise ExportError(f"external data must be a .ptd or .safetensors file: {external_data}")
        if Path(external_data).resolve() == Path(path).resolve():
            raise ExportError(f"external data and the program are the same file: {path}")
        check_writable(external_data)
    check_writable(path)


def check_dtype(dtype: str) -> DType | None:
    """The dtype `dtype` names (None: keep); ExportError for a name that is none of the choices."""
    if dtype not in dtypes.DTYPE_CHOICES:
        raise ExportError(f"dtype must be {', '.join(dtypes.DTYPE_CHOICES)}, not {dtype!r}")
    return dtypes.DTYPE_CHOICES[dtype]


def check_writable(path: str | os.PathLike) -> None:
    """Fail unless a file can be created beside `path` (tried with a temporary file)."""
    target = Path(path)
    if target.is_dir():
        raise ExportError(f"output is a directory: {target}")
    folder = target.parent
    if not folder.is_dir():
        raise ExportError(f"output directory does not exist: {folder}")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ExportError(f"cannot write to {folder}: {error.strerror or error}") from error
