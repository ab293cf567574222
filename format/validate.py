"""validate(): every rule of docs/format.md ("Validation"), raising the first FormatError."""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, NoReturn, Sequence

from . import contract, dtypes, opset, vkgraph as vk
from .common import FileRange
from .errors import FormatError, InvalidValueError, OutOfBoundsError, OverlapError, TruncatedError
from .et_llm import static_graph
from .external import ExternalData, constant_tensors, named_external, resolve_constants
from .headers import DELEGATE
from .memplan import check_memory_plan
from .methods import methods as methods_of, states as graph_states
from .names import io_names
from .op_state import STATE, UPDATES
from .program import DecodedProgram, EValue, ExecutionPlan
from .pte import VULKAN_BACKEND, ProgramFile, VulkanDelegate



@dataclass
class ValidationReport:
    """What validate() checked; `warnings` are legal but worth knowing."""
    path: str
    external: list[str]
    segments: int = 0
    named_data: int = 0
    constants: int = 0
    constant_bytes: int = 0
    layout: str = "none"
    delegates: int = 0
    cpu_ops: list[str] = field(default_factory=list)
    """`namespace::name.overload` of every operator the plans call on the CPU (KernelCall)."""
    warnings: list[str] = field(default_factory=list)


def validate(path: str | os.PathLike, external: Sequence[str | os.PathLike] = ()) -> ValidationReport:
    """Check a .pte (and the external data files it needs) against every rule; raise the first FormatError."""
    exts: list[ExternalData] = []
    try:
        with ProgramFile.open(path) as pf:
            for e in named_external(pf, external):
                exts.append(ExternalData.open(e))
            report = ValidationReport(pf.path, [e.path for e in exts])
            _check_container(pf, report)
            for e in exts:
                _check_no_overlap(list(e.named_data.values()), e.path, "segments", e.header.segment_base_offset if e.header else 0)
            _check_plans(pf, report)
            delegates = pf.vulkan_delegates  # none: every op is a CPU op (ExecuTorch writes such programs)
            ranges: list[FileRange] = []
            several = methods_of(pf) is not None
            for v in delegates:
                with _in_delegate(v, len(delegates) > 1):
                    _check_graph(v, pf.path)
                _check_delegate_calls(pf, v)  # the graph's own rules first: they name the op
                with _in_delegate(v, len(delegates) > 1):
                    # a byte range several constants of one delegate share is one device tensor,
                    # and so is one that several methods of one file share
                    found = set(_check_constants(pf, v, exts, report))
                    ranges += found - set(ranges) if several else found
            _check_states(pf, delegates)
            for pi, plan in enumerate(pf.program.execution_plan):
                check_outputs_written(plan, f"execution_plan[{pi}]", pf.path)
            _check_named_data_use(pf, delegates, exts, report)
            report.delegates = len(delegates)
            report.constants = sum(len(v.graph.constants) for v in delegates)
            report.constant_bytes = sum(r.size for r in ranges)  # W: what goes to the device (loader's weight_bytes)
            layouts = {v.graph.constant_layout for v in delegates} - {"none"}
            report.layout = layouts.pop() if len(layouts) == 1 else "mixed" if layouts else "none"
            return report
    finally:
        for e in exts:
            e.close()


def _fail(cls: type, where: str, detail: str, path: str) -> NoReturn:
    raise cls(where, detail, path)


@contextmanager
def _in_delegate(v: VulkanDelegate, several: bool) -> Iterator[None]:
    """With several delegates, a problem's `where` starts with the delegate it is in."""
    try:
        yield
    except FormatError as error:
        if not several:
            raise
        raise type(error)(f"execution_plan[{v.plan_index}].delegates[{v.delegate_index}].{error.where}",
                          error.detail, error.path) from None


def _check_no_overlap(ranges: list[FileRange], path: str, where: str, floor: int) -> None:
    """Non-empty ranges must not share bytes and must start at or after floor."""
    last: FileRange | None = None
    for r in sorted({r for r in ranges if r.size}, key=lambda r: (r.offset, r.size)):
        if r.offset < floor:
            _fail(OverlapError, where, f"[{r.offset}, {r.end}) starts inside the metadata (before {floor})", path)
        if last is not None and r.offset < last.end:
            _fail(OverlapError, where, f"[{r.offset}, {r.end}) overlaps [{last.offset}, {last.end})", path)
        last = r


def _check_container(pf: ProgramFile, report: ValidationReport) -> None:
    p: DecodedProgram = pf.program
    h, path = pf.header, pf.path
    if h is not None:
        if h.segment_base_offset and h.segment_base_offset < h.program_size:
            _fail(OutOfBoundsError, "header.segment_base_offset", f"{h.segment_base_offset} is inside the program ({h.program_size} bytes)", path)
        if h.segment_data_size and h.segment_base_offset + h.segment_data_size > pf.size:
            _fail(TruncatedError, "header.segment_data_size", f"segment data ends at {h.segment_base_offset + h.segment_data_size}, the file has {pf.size} bytes", path)
        for i, s in enumerate(p.segments or ()):
            if h.segment_data_size and s.offset + s.size > h.segment_data_size:
                _fail(OutOfBoundsError, f"segments[{i}]", f"ends at {s.offset + s.size}, past segment_data_size {h.segment_data_size}", path)
    _check_no_overlap(pf.segments, path, "segments", pf.header.program_size if h else 0)
    if not p.has_execution_plan or not p.execution_plan:
        _fail(InvalidValueError, "execution_plan", "missing or empty", path)
    if p.segments is None:
        _fail(InvalidValueError, "segments", "missing (write an empty vector)", path)
    if p.mutable_data_segment_count > 1:
        _fail(InvalidValueError, "mutable_data_segments", f"{p.mutable_data_segment_count} entries, at most 1 allowed", path)
    if p.constant_segment is not None and p.constant_segment[1]:
        idx, offsets = p.constant_segment
        if idx >= len(pf.segments):
            _fail(OutOfBoundsError, "constant_segment.segment_index", f"segment index {idx} out of range ({len(pf.segments)} segments)", path)
        for i, o in enumerate(offsets):
            if o > pf.segments[idx].size:
                _fail(OutOfBoundsError, f"constant_segment.offsets[{i}]", f"{o} past the segment ({pf.segments[idx].size} bytes)", path)
    report.segments, report.named_data = len(pf.segments), len(pf.named_data)


def _check_plans(pf: ProgramFile, report: ValidationReport) -> None:
    path = pf.path
    ops: dict[str, None] = {}
    for pi, plan in enumerate(pf.program.execution_plan):
        at = f"execution_plan[{pi}]"
        if plan.absent:
            _fail(InvalidValueError, f"{at}.{sorted(plan.absent)[0]}", "missing", path)
        if not plan.chains:
            _fail(InvalidValueError, f"{at}.chains", "no chain", path)
        n = len(plan.values)
        for name, ids in (("inputs", plan.inputs), ("outputs", plan.outputs)):
            for i, vid in enumerate(ids):
                if not 0 <= vid < n:
                    _fail(OutOfBoundsError, f"{at}.{name}[{i}]", f"value id {vid} out of range ({n} values)", path)
        sizes = plan.non_const_buffer_sizes
        if sizes and sizes[0] != 0:
            _fail(InvalidValueError, f"{at}.non_const_buffer_sizes[0]", f"{sizes[0]}, must be 0", path)
        for vi, ev in enumerate(plan.values):
            if ev.kind == "None":
                _fail(InvalidValueError, f"{at}.values[{vi}].val", "value of type NONE", path)
            if ev.kind in ("TensorList", "OptionalTensorList"):
                for j, x in enumerate(ev.value):
                    if not (-1 if ev.kind == "OptionalTensorList" else 0) <= x < n:
                        _fail(OutOfBoundsError, f"{at}.values[{vi}].val.items[{j}]", f"value id {x} out of range ({n} values)", path)
            if ev.kind != "Tensor":
                continue
            t = ev.value
            tw = f"{at}.values[{vi}].val"
            if any(s < 0 for s in t.sizes):
                _fail(InvalidValueError, f"{tw}.sizes", f"negative size in {list(t.sizes)}", path)
            if t.dim_order and sorted(t.dim_order) != list(range(len(t.sizes))):
                _fail(InvalidValueError, f"{tw}.dim_order", f"{list(t.dim_order)} is not a permutation of {len(t.sizes)} dims", path)
            if t.memory_id is not None and t.memory_id > 0:
                if t.memory_id >= len(sizes):
                    _fail(OutOfBoundsError, f"{tw}.allocation_info.memory_id", f"{t.memory_id} out of range ({len(sizes)} buffers)", path)
                if t.memory_offset + t.nbytes > sizes[t.memory_id]:
                    _fail(OutOfBoundsError, f"{tw}.allocation_info", f"[{t.memory_offset}, +{t.nbytes}) past buffer {t.memory_id} ({sizes[t.memory_id]} bytes)", path)
        for ci, chain in enumerate(plan.chains):
            if not chain.has_instructions:
                _fail(InvalidValueError, f"{at}.chains[{ci}].instructions", "missing", path)
            for ii, ins in enumerate(chain.instructions):
                iw = f"{at}.chains[{ci}].instructions[{ii}]"
                limit = len(plan.operators) if ins.kind == "KernelCall" else len(plan.delegates)
                if ins.kind in ("KernelCall", "DelegateCall") and not 0 <= ins.index < limit:
                    _fail(OutOfBoundsError, iw, f"{ins.kind} index {ins.index} out of range ({limit})", path)
                if ins.kind == "KernelCall":
                    name, overload = plan.operators[ins.index]
                    ops[f"{name}.{overload or 'default'}"] = None
                if ins.kind == "JumpFalseCall" and not 0 <= ins.index < len(chain.instructions):
                    _fail(OutOfBoundsError, f"{iw}.destination_instruction", f"{ins.index} out of range ({len(chain.instructions)} instructions)", path)
                for j, a in enumerate(ins.args):
                    if not 0 <= a < n:
                        _fail(OutOfBoundsError, f"{iw}.args[{j}]", f"value id {a} out of range ({n} values)", path)
        for di, d in enumerate(plan.delegates):
            if d.id != VULKAN_BACKEND:
                _fail(InvalidValueError, f"{at}.delegates[{di}].id", f"backend {d.id!r} is not {VULKAN_BACKEND}", path)
    report.cpu_ops = list(ops)


def _check_graph(v: VulkanDelegate, path: str) -> None:
    if v.header.header_length != DELEGATE.length:
        _fail(InvalidValueError, "vkgraph header_length", f"{v.header.header_length}, ExecuTorch's reader needs exactly {DELEGATE.length}", path)
    g = v.graph
    n, nc = len(g.values), len(g.constants)
    for i, op in enumerate(g.chain):
        for j, a in enumerate(op.args):
            if not 0 <= a < n:
                _fail(OutOfBoundsError, f"vkgraph.chain[{i}].args[{j}]", f"value id {a} out of range ({n} values)", path)
        if not op.args:
            _fail(InvalidValueError, f"vkgraph.chain[{i}].args", f"{op.name} has no output argument", path)
    for i, val in enumerate(g.values):
        if isinstance(val, vk.ValueList):
            for j, a in enumerate(val.items):
                if not 0 <= a < n:
                    _fail(OutOfBoundsError, f"vkgraph.values[{i}].items[{j}]", f"value id {a} out of range ({n} values)", path)
        elif isinstance(val, vk.Tensor) and val.constant_id >= nc:
            _fail(OutOfBoundsError, f"vkgraph.values[{i}].constant_id", f"{val.constant_id} out of range ({nc} constants)", path)
    for i, val in enumerate(g.values):
        if isinstance(val, vk.Tensor):
            try:
                contract.check_tensor(i, val)
            except contract.ContractError as error:
                _fail(InvalidValueError, f"vkgraph.values[{i}]", str(error).split(": ", 1)[-1], path)
    for name, ids in (("input_ids", g.input_ids), ("output_ids", g.output_ids)):
        for i, vid in enumerate(ids):
            val = g.values[vid] if vid < n else None
            if not isinstance(val, vk.Tensor):
                what = "out of range" if val is None else f"a {type(val).__name__}"
                _fail(InvalidValueError, f"vkgraph.{name}[{i}]", f"value id {vid} is {what}, not a tensor", path)
            if val.constant_id >= 0:
                _fail(InvalidValueError, f"vkgraph.{name}[{i}]", f"value id {vid} is a constant tensor", path)
    try:
        g = static_graph(g)  # a dynamic sequence length is checked as the loader builds it (vkx.format.et_llm)
    except contract.ContractError as error:
        _fail(InvalidValueError, "vkgraph.chain", str(error), path)
    _check_contract(g, path)
    check_memory_plan(g, path)


def _check_contract(g: vk.VkGraph, path: str) -> None:
    """Every op is declared in vkx's op contract and its call satisfies the declaration."""
    index = {op.node_id: i for i, op in enumerate(g.chain)}
    try:
        opset.check_graph(g)
    except contract.ContractError as error:
        text = str(error)
        where = "vkgraph.chain"
        if text.startswith("node "):
            node = text.split(" ", 2)[1]
            if node.isdigit() and int(node) in index:
                where = f"vkgraph.chain[{index[int(node)]}]"
        _fail(InvalidValueError, where, text, path)


def _check_states(pf: ProgramFile, delegates: Sequence[VulkanDelegate]) -> None:
    """A state is declared once per graph, with one dtype and shape in every method naming it, and
    an update op writes only into a state tensor (or an earlier update's output)."""
    seen: dict[str, tuple[str, vk.Tensor]] = {}
    for v in delegates:
        where = f"execution_plan[{v.plan_index}].delegates[{v.delegate_index}].vkgraph.chain"
        writable: set[int] = set()
        for i, call in enumerate(v.graph.chain):
            if call.name == STATE and call.args:
                writable.add(call.args[-1])
            elif call.name in UPDATES and call.args:
                if call.args[0] not in writable:
                    _fail(InvalidValueError, f"{where}[{i}]", f"{call.name} writes in place into value "
                          f"{call.args[0]}, which is not a state tensor", pf.path)
                writable.add(call.args[-1])
        names: set[str] = set()
        for x in graph_states(v.graph):
            if x.name in names:
                _fail(InvalidValueError, where, f"state {x.name!r} is declared twice", pf.path)
            names.add(x.name)
            plan = pf.program.execution_plan[v.plan_index].name
            first = seen.setdefault(x.name, (plan, x.tensor))
            if (first[1].datatype, first[1].dims) != (x.tensor.datatype, x.tensor.dims):
                _fail(InvalidValueError, where, f"state {x.name!r} is {x.tensor.datatype.name} {list(x.tensor.dims)} "
                      f"here and {first[1].datatype.name} {list(first[1].dims)} in method {first[0]!r}", pf.path)


def _check_delegate_calls(pf: ProgramFile, v: VulkanDelegate) -> None:
    plan = pf.program.execution_plan[v.plan_index]
    for ci, chain in enumerate(plan.chains):
        for ii, ins in enumerate(chain.instructions):
            if ins.kind == "DelegateCall" and ins.index == v.delegate_index:
                check_delegate_args(plan.values, ins.args, v.graph,
                                    f"execution_plan[{v.plan_index}].chains[{ci}].instructions[{ii}].args", pf.path)
    io_names(v.compile_specs, len(v.graph.input_ids), len(v.graph.output_ids),
             f"execution_plan[{v.plan_index}].delegates[{v.delegate_index}]", pf.path)


def check_outputs_written(plan: ExecutionPlan, at: str, path: str) -> None:
    """Each output of the plan is an input, a constant or an argument of an instruction (a run writes it)."""
    used = {a for chain in plan.chains for ins in chain.instructions for a in ins.args} | set(plan.inputs)
    for i, vid in enumerate(plan.outputs):
        ev = plan.values[vid]
        if ev.kind == "Tensor" and ev.value.data_buffer_idx == 0 and vid not in used:
            _fail(InvalidValueError, f"{at}.outputs[{i}]", f"value {vid} is no input or constant and no "
                  "instruction writes it: the output would be whatever its memory held", path)


_HOST_DTYPES = {(vk.DataType.INT64, vk.DataType.INT32)}
"""(plan tensor dtype, delegate host dtype) pairs besides equal ones: ExecuTorch's exporter gives its
delegates int32 for the program's int64 tensors (indices, argmax), and both runtimes convert."""


def check_delegate_args(values: Sequence[EValue], args: Sequence[int], graph: vk.VkGraph, where: str,
                        path: str) -> None:
    """A DelegateCall's args (plan value ids, in range) are its VkGraph's inputs then outputs: as many,
    each a tensor of the graph tensor's shape and of its host dtype (the staging dtype, else its own:
    the delegate reads from and copies into them as that dtype)."""
    ports = [*graph.input_ids, *graph.output_ids]
    if len(args) != len(ports):
        _fail(InvalidValueError, where, f"{len(args)} args, the VkGraph has {len(graph.input_ids)} inputs + "
              f"{len(graph.output_ids)} outputs", path)
    for j, (arg, vid) in enumerate(zip(args, ports)):
        ev, t = values[arg], graph.values[vid]
        sizes = tuple(ev.value.sizes) if ev.kind == "Tensor" else None
        if isinstance(t, vk.Tensor) and sizes != tuple(t.dims):
            what = f"a {ev.kind}" if sizes is None else f"a tensor of shape {list(sizes)}"
            _fail(InvalidValueError, f"{where}[{j}]", f"value {arg} is {what}; the delegate's "
                  f"{'input' if j < len(graph.input_ids) else 'output'} (value {vid}) has shape {list(t.dims)}", path)
        if isinstance(t, vk.Tensor):
            host = t.host_datatype
            declared = dtypes.of_scalar_type(ev.value.scalar_type)
            if declared is None or (declared.datatype, host) not in _HOST_DTYPES and declared.datatype != host:
                _fail(InvalidValueError, f"{where}[{j}]", f"value {arg} is a {declared or ev.value.scalar_type} "
                      f"tensor; the delegate's {'input' if j < len(graph.input_ids) else 'output'} (value {vid}) "
                      f"is {host.name.lower()} on the host", path)


def _check_constants(pf: ProgramFile, v: VulkanDelegate, exts: Sequence[ExternalData],
                     report: ValidationReport) -> list[FileRange]:
    """The delegate's constants are where they say and as large as their tensors; returns their ranges."""
    g = v.graph
    ranges = resolve_constants(pf, exts, v)  # keys resolvable, sizes exact, legacy bounds
    tensors = constant_tensors(g)
    for vi, val in enumerate(g.values):
        if isinstance(val, vk.Tensor) and val.constant_id >= 0:
            first = tensors[val.constant_id]
            if first.nbytes != val.nbytes:
                _fail(InvalidValueError, f"vkgraph.values[{vi}]", f"constant {val.constant_id} is also used with {first.nbytes} bytes", pf.path)
    for k, c in enumerate(g.constants):
        if c.offset == vk.NAMED_OFFSET and not c.named_key:
            _fail(InvalidValueError, f"vkgraph.constants[{k}].named_key", "named offset without a key", pf.path)
        if not c.is_named and c.offset > 0 and c.offset >= v.legacy_section.size:
            _fail(OutOfBoundsError, f"vkgraph.constants[{k}].offset", f"{c.offset} outside the constant section ({v.legacy_section.size} bytes)", pf.path)
        if k not in tensors:
            report.warnings.append(f"vkgraph.constants[{k}] is used by no tensor")
        elif tensors[k].nbytes == 0:
            report.warnings.append(f"vkgraph.constants[{k}] has zero bytes (the ExecuTorch runtime likely rejects it)")
    if g.constant_layout in ("legacy", "mixed"):
        report.warnings.append("legacy constants stay in the delegate blob: the runtime keeps them in CPU memory until the blob is freed")
    return ranges


def _check_named_data_use(pf: ProgramFile, delegates: Sequence[VulkanDelegate], exts: Sequence[ExternalData],
                          report: ValidationReport) -> None:
    keys = {c.named_key for v in delegates for c in v.graph.constants if c.is_named}
    for e in exts:
        for key in e.named_data:
            if key in pf.named_data:
                report.warnings.append(f"key {key!r} is in both {e.path} and the .pte; the external copy wins")
    used = {pf.named_data[key] for key in keys if key in pf.named_data}  # another name of a used tensor is used
    for key, r in pf.named_data.items():
        if r not in used:
            report.warnings.append(f"named data {key!r} is used by no constant")
