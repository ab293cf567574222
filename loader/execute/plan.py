"""The execution plan, instruction by instruction: Vulkan delegates on the GPU, CPU kernels with torch.

A .pte whose plan is more than one delegate call from its inputs to its
outputs (several delegates, CPU ops between them, moves, jumps; no delegate at
all, when ExecuTorch's partitioner left every op on the CPU) runs here, as
ExecuTorch's `Method::execute` runs it: every chain in order, every instruction
of a chain from the first, a JumpFalseCall going to its destination when its
condition is false. The plan's values are plain per-value CPU tensors (not views
of the memory-planned arenas); each delegate is a `Method` loaded as
`load_source` loads one graph.

Everything that could refuse the file is checked before any GPU work: torch is
importable, and every KernelCall binds to a torch op (one UnsupportedOpError
lists every op that does not). The delegates are then loaded one after another
in delegate order, each with the chosen schedule, each a `Program` of its own;
the plan's load (`PlanLoad`) holds them, and closing its program closes every one.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from vkx.format import FormatError, ProgramFile
from vkx.format.program import ExecutionPlan, Instruction, TensorMeta
from vkx.format.validate import check_delegate_args, check_outputs_written
from vkx.loader.errors import (BadProgramError, FileError, InputError, LoadError, TorchMissingError,
                               UnsupportedOpError, as_load_error)
from vkx.loader.execute.kernels import Kernel, Refused, bind, op_name, static_value, torch_dtype
from vkx.loader.upload.loading import load_source
from vkx.loader.execute.method import LoadedMethod, OwnsMemory, TensorSpec
from vkx.loader.program import Program
from vkx.loader.upload.report import MemoryReport
from vkx.loader.upload.trace import Timeline

PLAN = 0
"""vkx runs the first execution plan ("forward")."""


def _cpu_ops(plan: ExecutionPlan) -> list[str]:
    return sorted({op_name(plan, i.index) for c in plan.chains for i in c.instructions if i.kind == "KernelCall"})


def load_plan(path, constants_of: Callable[[int], Any], schedule: str, device, upload: str, *, timeline: Timeline,
              on_close=None, **options) -> "PlanMethod":
    """Check and bind the plan of the .pte at `path`, then load each of its Vulkan delegates onto `device`,
    delegate i's constants from `constants_of(i)` (files opened for that delegate alone: vkx.loader.upload.files).
    `timeline`: the load's, its first phases before the delegates' own."""
    delegates: list[Program] = []
    try:
        with ProgramFile.open(path) as pf:
            plan = pf.program.execution_plan[PLAN]
            graphs = {v.delegate_index: v for v in pf.vulkan_delegates if v.plan_index == PLAN}
            _check_instructions(plan, graphs, pf.path)
            try:
                import torch  # noqa: F401
            except ImportError:
                ops = ", ".join(_cpu_ops(plan)) or "none"
                raise TorchMissingError(f"{pf.path}: its execution plan runs on the CPU with torch, which is not "
                                        f"installed (CPU ops: {ops})") from None
            kernels = _bind_kernels(plan, pf.path)
            _check_dtypes(plan, pf.path)
            constants = _constants(pf, plan)
            order = sorted(graphs)
        for di in order:
            source = constants_of(di)
            delegates.append(load_source(source.delegate.graph, source, schedule, device, upload, **options))
    except BaseException as error:
        try:
            for d in delegates:
                d.close()
        finally:
            if on_close is not None:
                on_close()
        if isinstance(error, FormatError) and not isinstance(error, LoadError):
            raise as_load_error(error) from error
        if isinstance(error, OSError):
            raise FileError(f"{error.filename or path}: {error.strerror or error}") from error
        raise
    return PlanMethod(plan, kernels, constants, dict(zip(order, delegates)), on_close, device, timeline)


def _bind_kernels(plan: ExecutionPlan, path: str) -> dict[tuple[int, int], Kernel]:
    """(chain, instruction) -> its bound Kernel; one UnsupportedOpError names every op that cannot run."""
    kernels: dict[tuple[int, int], Kernel] = {}
    refused: dict[str, None] = {}
    for ci, chain in enumerate(plan.chains):
        for ii, ins in enumerate(chain.instructions):
            if ins.kind == "KernelCall":
                try:
                    kernels[ci, ii] = bind(plan, ins.index, ins.args)
                except Refused as why:
                    refused[str(why)] = None
    if refused:
        alone = "" if plan.delegates else " (no VulkanBackend delegate: every op of the program is a CPU op)"
        raise UnsupportedOpError(f"{path}: CPU ops vkx cannot run: {', '.join(refused)}{alone}")
    return kernels


def _check_dtypes(plan: ExecutionPlan, path: str) -> None:
    """Every Tensor value has a torch dtype (the plan's values are torch tensors)."""
    bad = [f"{vid} ({ev.value.scalar_type.name})" for vid, ev in enumerate(plan.values)
           if ev.kind == "Tensor" and torch_dtype(ev.value.scalar_type) is None]
    if bad:
        raise BadProgramError(f"{path}: execution_plan[{PLAN}] tensors whose scalar type torch has no dtype for: "
                              f"values {', '.join(bad)}")


def _constants(pf: ProgramFile, plan: ExecutionPlan) -> dict[int, Any]:
    """value id -> a CPU tensor holding the plan constant's bytes (copied out of the file)."""
    import torch
    out = {}
    for vid, ev in enumerate(plan.values):
        if ev.kind == "Tensor" and ev.value.data_buffer_idx > 0 and ev.value.memory_id is None:
            t: TensorMeta = ev.value
            dtype = torch_dtype(t.scalar_type)
            data = pf.read_range(pf.constant_range(t, f"execution_plan[{PLAN}].values[{vid}].val"))
            out[vid] = torch.frombuffer(data, dtype=dtype).reshape(t.sizes) if data else torch.empty(t.sizes, dtype=dtype)
    return out


def _check_instructions(plan: ExecutionPlan, graphs: dict, path: str) -> None:
    """Every instruction's indices are in range and every delegate call fits its VkGraph (BadProgramError)."""
    n = len(plan.values)
    for vid in plan.inputs + plan.outputs:
        if not 0 <= vid < n:
            raise BadProgramError(f"{path}: execution_plan[{PLAN}]: input/output value id {vid} out of range ({n} values)")
    for vid, ev in enumerate(plan.values):
        if ev.kind in ("TensorList", "OptionalTensorList", "IntList"):
            low = -1 if ev.kind == "OptionalTensorList" else 0
            want = "Int" if ev.kind == "IntList" else "Tensor"
            if any(not (low <= i < n and (i == -1 or plan.values[i].kind == want)) for i in ev.value):
                raise BadProgramError(f"{path}: execution_plan[{PLAN}].values[{vid}]: {ev.kind} items "
                                      f"{list(ev.value)} are not all {want} value ids")
    for ci, chain in enumerate(plan.chains):
        for ii, ins in enumerate(chain.instructions):
            place = f"execution_plan[{PLAN}].chains[{ci}].instructions[{ii}]"
            where = f"{path}: {place}"
            if any(not 0 <= a < n for a in ins.args):
                raise BadProgramError(f"{where}: a value id of {list(ins.args)} is out of range ({n} values)")
            if ins.kind == "KernelCall" and not 0 <= ins.index < len(plan.operators):
                raise BadProgramError(f"{where}: operator {ins.index} out of range ({len(plan.operators)} operators)")
            if ins.kind == "JumpFalseCall" and not 0 <= ins.index < len(chain.instructions):
                raise BadProgramError(f"{where}: destination {ins.index} out of range ({len(chain.instructions)} instructions)")
            if ins.kind != "DelegateCall":
                continue
            v = graphs.get(ins.index)
            if v is None:
                raise BadProgramError(f"{where}: delegate {ins.index} is not a VulkanBackend delegate")
            try:
                check_delegate_args(plan.values, ins.args, v.graph, f"{place}.args", path)
            except FormatError as error:
                raise as_load_error(error) from None
    try:
        check_outputs_written(plan, f"execution_plan[{PLAN}]", path)
    except FormatError as error:
        raise as_load_error(error) from None


class PlanLoad(OwnsMemory):
    """The load of a plan-driven method: each delegate's `Program` (its graph loaded alone, as
    `load_source` loads one), the device and the plan's phases before theirs; `close()` closes every
    delegate. An ExecuTorch plan holds no state of vkx's (its KV caches, if any, are plan values)."""

    def __init__(self, delegates: dict[int, Program], on_close, device, timeline: Timeline):
        self.delegates = delegates
        """delegate index -> its loaded Program."""
        self.device = device
        """The Vulkan device the delegates run on."""
        self.timeline = timeline
        """The load's phases before the delegates' own (each delegate's Program has its timeline)."""
        self._on_close = on_close
        self.closed = False
        """True once `close()` has closed every delegate."""

    @property
    def weight_bytes(self) -> int:
        """Device bytes of the constants of every delegate."""
        return sum(p.weight_bytes for p in self.delegates.values())

    @property
    def schedule(self) -> str | None:
        """The load order the delegates used (None: no delegate)."""
        return next((p.schedule for p in self.delegates.values()), None)

    @property
    def upload(self) -> str | None:
        """How the first delegate's weights reached the device (None: no delegate)."""
        return next((p.upload for p in self.delegates.values()), None)

    @property
    def copies_per_weight_byte(self) -> float:
        """Bytes copied per weight byte, over every delegate's weights."""
        w = self.weight_bytes
        return sum(p.copies_per_weight_byte * p.weight_bytes for p in self.delegates.values()) / w if w else 0.0

    @property
    def weight_paths(self) -> dict[str, int]:
        """Weight bytes by the way they reached the device, over every delegate."""
        return _sums([p.weight_paths for p in self.delegates.values()])

    @property
    def states(self) -> list[str]:
        """None: the plan's values are its own."""
        return []

    def reset(self) -> None:
        """Nothing to reset: no state."""

    def state_spec(self, name: str) -> TensorSpec:
        raise InputError(f"no state {name!r} (states: none)")

    def state(self, name: str):
        raise InputError(f"no state {name!r} (states: none)")

    @property
    def memory(self) -> MemoryReport:
        """Each delegate's `Program.memory`, and totals as one sequential load sees them."""
        each = [p.memory for p in self.delegates.values()]
        resident = peak_total = 0
        for m in each:  # delegate k loads while the ones before it hold their memory
            peak_total = max(peak_total, resident + m["ledger"]["peak_total"])
            resident += m["ledger"]["total"]
        return MemoryReport({"schedule": self.schedule, "upload": self.upload,
                             "device": self.device.name, "weight_bytes": self.weight_bytes,
                             "copies_per_weight_byte": self.copies_per_weight_byte,
                             "weight_paths": self.weight_paths,
                             "ledger": {"peak": _sums([m["ledger"]["peak"] for m in each]),
                                        "peak_total": peak_total, "total": resident},
                             "phases": self.timeline.as_list() + [
                                 {**ph, "name": f"delegate {di}: {ph['name']}"}
                                 for di, m in zip(self.delegates, each) for ph in m["phases"]],
                             "delegates": each})

    def close(self) -> None:
        """Close every delegate's Program (each releases its device memory), then what the load owns."""
        if self.closed:
            return
        self.closed = True
        try:
            for p in self.delegates.values():
                p.close()
        finally:
            if self._on_close is not None:
                self._on_close()


class PlanMethod(LoadedMethod):
    """A method run by its execution plan: call it with tensors. Its delegates make its load
    (`PlanLoad`), which its program holds and closes."""

    def __init__(self, plan: ExecutionPlan, kernels: dict[tuple[int, int], Kernel], constants: dict[int, Any],
                 delegates: dict[int, Program], on_close, device, timeline: Timeline):
        self.plan = plan
        """The execution plan this method runs (vkx.format.program)."""
        self.name = plan.name
        """The method's name (its execution plan's name)."""
        self.load = PlanLoad(delegates, on_close, device, timeline)
        """The plan's load: its delegates' programs, which the program closes."""
        self.delegates = delegates
        """delegate index -> its loaded Program."""
        self._kernels, self._constants = kernels, constants
        self._initial = [None if ev.kind == "Tensor" else static_value(plan, ev) for ev in plan.values]
        self._tensors = [(vid, tuple(ev.value.sizes), torch_dtype(ev.value.scalar_type))
                         for vid, ev in enumerate(plan.values) if ev.kind == "Tensor" and vid not in constants]
        self.closed = False
        """True once `close()` has closed the method."""

    # -- signatures --------------------------------------------------------------
    def _specs(self, ids) -> list[TensorSpec]:
        out = []
        for vid in ids:
            ev = self.plan.values[vid]
            if ev.kind == "Tensor":
                dtype = str(torch_dtype(ev.value.scalar_type)).removeprefix("torch.")
                out.append(TensorSpec(tuple(ev.value.sizes), dtype))
            else:
                out.append(TensorSpec((), ev.kind))
        return out

    @property
    def input_specs(self) -> list[TensorSpec]:
        """(shape, dtype name) of each plan input, in order (a non-tensor input: ((), its EValue kind))."""
        return self._specs(self.plan.inputs)

    @property
    def output_specs(self) -> list[TensorSpec]:
        """(shape, dtype name) of each plan output, in order."""
        return self._specs(self.plan.outputs)

    # -- calling -------------------------------------------------------------------
    def __call__(self, *tensors):
        """Run the plan on torch tensors; returns a tensor, or a tuple for several outputs."""
        outs = self._run(tensors)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_numpy(self, *arrays) -> list[np.ndarray]:
        """Run on numpy arrays; returns one array per output."""
        import torch
        outs = self._run([torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a
                          for a in arrays])
        return [o.numpy() if isinstance(o, torch.Tensor) else o for o in outs]

    def _run(self, given) -> list:
        import torch
        if self.closed or self.load.closed:
            raise LoadError("program is closed")
        plan = self.plan
        if len(given) != len(plan.inputs):
            raise InputError(f"expected {len(plan.inputs)} input(s), got {len(given)}")
        values = list(self._initial)
        for vid, t in self._constants.items():
            values[vid] = t
        for vid, sizes, dtype in self._tensors:
            values[vid] = torch.empty(sizes, dtype=dtype)
        for i, (x, vid) in enumerate(zip(given, plan.inputs)):
            ev = plan.values[vid]
            if ev.kind == "Tensor":
                want = values[vid]
                if not isinstance(x, torch.Tensor):
                    raise InputError(f"input {i}: a {type(x).__name__}, expected a tensor")
                if tuple(x.shape) != tuple(want.shape) or x.dtype != want.dtype:
                    raise InputError(f"input {i}: {x.dtype} {tuple(x.shape)}, expected {want.dtype} {tuple(want.shape)}")
                values[vid] = x.detach().cpu()
            else:
                values[vid] = x
        for ci, chain in enumerate(plan.chains):
            pc = 0
            while pc < len(chain.instructions):
                pc = self._step(values, ci, pc, chain.instructions[pc])
        return [values[vid] for vid in plan.outputs]

    def _step(self, values: list, ci: int, pc: int, ins: Instruction) -> int:
        """Run one instruction; returns the index of the next."""
        if ins.kind == "KernelCall":
            kernel = self._kernels[ci, pc]
            try:
                kernel(values)
            except IndexError as error:  # torch's refusal of an index outside its tensor (an input's)
                raise InputError(f"execution_plan[{PLAN}].chains[{ci}].instructions[{pc}] ({kernel.name}): "
                                 f"{error}") from None
        elif ins.kind == "DelegateCall":
            delegate = self.delegates[ins.index]
            n = len(delegate.input_specs)
            outs = delegate(*[values[a] for a in ins.args[:n]])
            outs = outs if isinstance(outs, tuple) else (outs,)
            for vid, out in zip(ins.args[n:], outs):
                values[vid].copy_(out.reshape(values[vid].shape))
        elif ins.kind == "MoveCall":
            values[ins.args[1]] = values[ins.args[0]]
        elif ins.kind == "JumpFalseCall":
            if not _condition(values[ins.args[0]]):
                return ins.index
        elif ins.kind == "FreeCall":
            values[ins.args[0]] = None  # the tensor's memory goes; a later use is the file's error
        return pc + 1

    def close(self) -> None:
        """Refuse later calls (the delegates are the load's, which the program closes)."""
        self.closed = True


def _sums(counts: list[dict[str, int]]) -> dict[str, int]:
    """Each key's total over the delegates' counts."""
    return {k: sum(c.get(k, 0) for c in counts) for k in {k for c in counts for k in c}}


def _condition(value) -> bool:
    """A JumpFalseCall's condition: a Bool, or a bool tensor that is true when all its elements are."""
    if isinstance(value, bool):
        return value
    import torch
    if isinstance(value, torch.Tensor) and value.dtype == torch.bool:
        return bool(value.all())
    raise LoadError(f"JumpFalseCall condition is a {type(value).__name__}, not a Bool or a bool tensor")
