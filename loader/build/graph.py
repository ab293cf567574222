"""The runtime graph: tensors without memory, and the dispatch list the ops record.

`GraphBuilder` implements the `OpBuilder` protocol of `vkx.loader.ops`. It
looks up every op of the chain first (an unknown op fails before anything is
allocated), then runs them; each `dispatch()` is checked and appended to
`dispatches`. No Vulkan call happens here.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence, Union

from vkx.format import contract, dtypes, liveness, opset, vkgraph as g
from vkx.format.dtypes import DType
from vkx.format.errors import FormatError
from vkx.format.memplan import check_memory_plan
from vkx.loader import ops
from vkx.loader.build.chain import Fused
from vkx.loader.errors import BadProgramError, LimitError, UnsupportedOpError, as_load_error
from vkx.loader.build.fuse import fuse as fuse_chain
from vkx.loader.gpu.limits import Limits

if TYPE_CHECKING:
    from vkx.loader.gpu.memory import Buffer  # memory imports vulkan; building a graph does not


def device_dtype(vid: int, datatype: g.DataType) -> DType:
    """A tensor keeps its stored type on the device; 64-bit types never get there."""
    try:
        dtype = dtypes.of(datatype, f"vkgraph.values[{vid}].datatype")
    except FormatError as error:
        raise BadProgramError(str(error)) from None
    if not dtype.on_device:
        raise UnsupportedOpError(f"value {vid}: {dtype} tensors cannot live on a device "
                                 f"(vkx export narrows them to 32 bits)")
    return dtype


def _same_datatype(values: Sequence[g.Value], a: int, b: int) -> bool:
    """Whether values `a` and `b` are tensors of one datatype."""
    return all(0 <= v < len(values) and isinstance(values[v], g.Tensor) for v in (a, b)) \
        and values[a].datatype == values[b].datatype


@dataclass(eq=False, slots=True)
class RTensor:
    """A runtime tensor: shape and dtype now, a Buffer once memory is given (one object per tensor:
    compared and hashed by identity)."""
    arg: ops.TensorArg
    staging: DType
    """The dtype a graph input/output has on the host side (the file's `staging_datatype`, else the
    dtype the file declares, which a device without narrow storage holds wider:
    vkx.loader.ops.held_dtype)."""
    constant_id: int = -1
    mem_obj_id: int = -1
    is_temp: bool = False
    buffer: Buffer | None = field(default=None, init=False)
    state: str | None = field(default=None, init=False)
    """The name of the persistent state this tensor is (None: not state)."""

    @property
    def vid(self) -> int:
        return self.arg.vid

    @property
    def nbytes(self) -> int:
        return self.arg.nbytes

    @property
    def is_constant(self) -> bool:
        return self.constant_id >= 0


@dataclass
class Dispatch:
    shader: str
    defines: tuple
    bindings: list  # [(RTensor, offset, size)]
    push: bytes
    groups: tuple
    node: str
    spec: tuple = ()
    """Specialization constant i = spec[i]."""


class GraphBuilder:
    """Builds the dispatch list of a VkGraph (the OpBuilder the ops see)."""

    def __init__(self, graph: g.VkGraph, limits: Limits, compute_units: int = 1, is_cpu: bool = False,
                 fp16_cooperative_matrix: bool = False):
        """`limits`: what the graph is built under (`OpBuilder.limits`); the rest: the device's
        facts of the same names (vkx.loader.gpu.device.Device)."""
        self.graph = graph
        self.limits = limits
        self.compute_units = compute_units
        self.is_cpu = is_cpu
        self.fp16_cooperative_matrix = fp16_cooperative_matrix
        self.tensors: dict[int, RTensor] = {}
        self.temps: list[RTensor] = []
        self._scratch: dict[str, RTensor] = {}
        self.dispatches: list[Dispatch] = []
        self.prepack_dispatches: list[Dispatch] = []
        """Dispatches that run once at load (a weight converted to its device form)."""
        self.states: dict[str, tuple[RTensor, RTensor | None]] = {}
        """Each state's name -> its tensor and its initial value's constant (None: zeros)."""
        self._load_time = False
        self._node = "?"
        self._read: set[int] | None = None
        self._writes_by_vid: dict[int, int] | None = None  # alias_view's write counts, made on first use
        self._declared: dict[int, ops.TensorArg] = {}
        """Each tensor as the file declares it (the contract binds these; builders get `tensors`')."""
        weights = {op.args[-1] for op in graph.chain if op.name == "et_vk.prepack.default" and len(op.args) == 2
                   and _same_datatype(graph.values, *op.args)}
        """Prepacked weights that are their constant's own bytes (one converted at load is device-written)."""
        for vid, v in enumerate(graph.values):
            if isinstance(v, g.Tensor):
                try:
                    contract.check_tensor(vid, v)
                except contract.ContractError as error:
                    raise BadProgramError(str(error)) from None
                arg = ops.TensorArg(vid, tuple(int(d) for d in v.dims), device_dtype(vid, v.datatype))
                if v.constant_id >= 0 and v.constant_id >= len(graph.constants):
                    raise BadProgramError(f"value {vid}: constant_id {v.constant_id} out of range "
                                          f"({len(graph.constants)} constants)")
                self._declared[vid] = arg
                staging = device_dtype(vid, v.host_datatype) if v.constant_id < 0 else arg.dtype
                if v.constant_id < 0 and vid not in weights:  # weights stay as stored, read by words
                    arg = ops.TensorArg(vid, arg.shape, ops.held_dtype(arg.dtype, limits.features))
                self.tensors[vid] = RTensor(arg, staging, v.constant_id, v.mem_obj_id)
        for vid in [*graph.input_ids, *graph.output_ids]:
            if vid not in self.tensors:
                raise BadProgramError(f"graph input/output {vid} is not a tensor value")

    # -- build -----------------------------------------------------------------
    def build(self) -> "GraphBuilder":
        """Look every op up, bind it to its contract declaration (rule checked), then run the builders,
        a chain of ops one kernel does as one step (`vkx.loader.build.fuse`).

        Nothing is recorded until every op of the chain is known, every call
        satisfies its declaration and the memory plan is sound (vkx.format.memplan):
        a graph whose shapes disagree fails here, naming the node, before any dispatch exists.
        """
        missing: dict[str, None] = {}
        fns = []
        for op in self.graph.chain:
            try:
                fns.append(ops.lookup(op.name))
            except ops.UnsupportedOpError:
                missing.setdefault(op.name)
            if opset.lookup(op.name) is None:
                missing.setdefault(op.name)
        if missing:
            raise UnsupportedOpError(f"unsupported op{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
        bound = []
        for op in self.graph.chain:
            node = f"node {op.node_id} ({op.name})"
            try:
                call = contract.bind(opset.lookup(op.name), op, self.graph.values,
                                     lambda vid, v: self._declared[vid], node)
            except contract.ContractError as error:
                raise BadProgramError(str(error)) from None
            bound.append(call.with_tensors(lambda t: self.tensors[t.vid].arg))
        try:
            check_memory_plan(self.graph)  # what validate proves: no op reads bytes another tensor holds
        except FormatError as error:
            raise as_load_error(error) from None
        calls = {id(op): (call, fn) for op, call, fn in zip(self.graph.chain, bound, fns)}
        declared = {vid: t.arg for vid, t in self.tensors.items()}  # each value's own shape, as bound
        for step in fuse_chain(self.graph, self.limits.max_storage_buffer_range,
                               self.limits.max_per_stage_descriptor_storage_buffers):
            try:
                if isinstance(step, Fused):
                    self._node = f"nodes {', '.join(map(str, step.node_ids))} (fused {step.name})"
                    step.run(self, declared.__getitem__)
                else:
                    call, fn = calls[id(step)]
                    self._node = call.node
                    fn(self, call)
            except UnsupportedOpError:
                raise
            except ops.UnsupportedOpError as error:
                raise UnsupportedOpError(f"{self._node}: {error}") from None
        return self

    # -- the OpBuilder protocol ------------------------------------------------
    def temp(self, shape: Sequence[int], dtype: DType = dtypes.FLOAT32) -> ops.TensorArg:
        vid = len(self.graph.values) + len(self.temps)
        arg = ops.TensorArg(vid, tuple(int(d) for d in shape), dtype)
        t = RTensor(arg, dtype, is_temp=True)
        self.temps.append(t)
        self.tensors[vid] = t
        return arg

    def scratch(self, shape: int | Sequence[int], role: str = "partials",
                dtype: DType = dtypes.FLOAT32) -> ops.TensorArg:
        """A tensor of `shape` (a number: that many elements) and `dtype` at the start of the graph's
        scratch of `role`, an fp32 tensor grown to hold it.

        Every op that asks for a role shares its tensor: an op's scratch is dead once its last
        dispatch is done (the next op's writes wait behind a barrier: vkx.loader.execute.hazards). One op
        may hold two roles at once (attention's scores while a product splits K into partials).
        Bind the returned TensorArg (or SubRanges of it) right away; a later, larger request
        grows the same tensor, which still holds every range bound before.
        """
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        words = -(-math.prod(shape) * dtype.itemsize // 4)
        if role not in self._scratch:
            self.temp((words,))
            self._scratch[role] = self.temps[-1]
        t = self._scratch[role]
        if t.arg.numel < words:
            t.arg = ops.TensorArg(t.arg.vid, (words,), dtypes.FLOAT32)
        return ops.TensorArg(t.arg.vid, shape, dtype)

    def alias(self, vid: int, of: int) -> None:
        """Make tensor `vid` the very device tensor of `of` (a prepack whose weight is used as stored)."""
        self.tensors[vid] = self.tensors[of]

    def is_read(self, vid: int) -> bool:
        if self._read is None:
            self._read = set(self.graph.output_ids)
            for op in self.graph.chain:
                for arg in op.args[:-1]:
                    v = self.graph.values[arg] if 0 <= arg < len(self.graph.values) else None
                    self._read.update(v.items if isinstance(v, g.ValueList) else [arg])
        return vid in self._read

    def alias_view(self, out: ops.TensorArg, src: ops.TensorArg) -> bool:
        """Make `out` (the same bytes as `src`, another shape) `src`'s device tensor, when that is safe.

        Safe when `out` is no graph output (its io port keeps its own shape), `src` is no state
        (written in place later), and nothing can overwrite `src`'s bytes while `out` is read: `src`
        is a constant, or a tensor written once (a graph input: never) whose memory is its own or
        the very object the file's plan gave `out` (vkx plans views so: vkx.format.liveness).
        A view planned into another object stays a copy: reasoning about the other tensors of
        that object from lifetimes gave a wrong ViT output on an ExecuTorch file.
        False: the caller copies.
        """
        root = self.tensors[src.vid]
        if out.vid in self.graph.output_ids or out.nbytes != root.nbytes or out.dtype != root.arg.dtype:
            return False
        if root.state is not None:
            return False  # state is written in place after the view reads it
        if not root.is_constant:
            if root.is_temp or self._writes().get(root.vid, 0) != (0 if root.vid in self.graph.input_ids else 1):
                return False  # scratch, or written in place somewhere: a copy keeps out's bytes
            if root.mem_obj_id >= 0 and self.tensors[out.vid].mem_obj_id != root.mem_obj_id:
                return False
        self.tensors[out.vid] = root
        return True

    def _writes(self) -> dict[int, int]:
        """For alias_view (counted once): how many ops write each activation."""
        if self._writes_by_vid is None:
            writes: dict[int, int] = {}
            for op in self.graph.chain:
                for vid in liveness.activation_ids(self.graph, op.args[-1:]):
                    writes[vid] = writes.get(vid, 0) + 1
            self._writes_by_vid = writes
        return self._writes_by_vid

    def state(self, vid: int, name: str, initial: int | None) -> None:
        """Make tensor `vid` the persistent state `name`, initialised from constant `initial` (None: zeros)."""
        if name in self.states:
            raise BadProgramError(f"{self._node}: state {name!r} is declared twice")
        t = self.tensors[vid]
        init = None if initial is None else self.tensors[initial]
        if init is not None and not init.is_constant:
            raise BadProgramError(f"{self._node}: the initial value of state {name!r} is not a constant")
        declared = self._declared[vid].dtype
        if init is not None and declared != t.arg.dtype:  # held wider than its initial value's bytes
            raise UnsupportedOpError(f"{self._node}: state {name!r} of {declared} with an initial value needs "
                                     f"{ops.STORAGE_FEATURES[declared.itemsize]}, which the device or its "
                                     "profile lacks")
        t.state = name
        self.states[name] = (t, init)

    def update(self, vid: int, of: int) -> None:
        """Make tensor `vid` the state tensor `of` that an update op writes in place; refuse any
        other `of` (a file whose update writes into a weight or an input)."""
        if self.tensors[of].state is None:
            raise BadProgramError(f"{self._node}: writes in place into value {of}, which is not a state tensor")
        self.alias(vid, of)

    @contextlib.contextmanager
    def at_load(self):
        """Dispatches recorded inside run once, at load, after the weights are in."""
        self._load_time = True
        try:
            yield
        finally:
            self._load_time = False

    def dispatch(self, shader: str, bindings: Sequence[ops.Binding], push: bytes,
                 groups: tuple[int, int, int], defines: Mapping[str, Union[str, int]] | None = None,
                 spec: Sequence[int] = ()) -> None:
        resolved = []
        for i, b in enumerate(bindings):
            if isinstance(b, ops.SubRange):
                arg, offset, size = b.tensor, int(b.offset), int(b.size)
            elif isinstance(b, ops.TensorArg):
                arg, offset, size = b, 0, b.nbytes
            else:
                raise TypeError(f"{self._node}: binding {i} is {type(b).__name__}, not TensorArg/SubRange")
            t = self.tensors.get(arg.vid)
            if t is None:
                raise BadProgramError(f"{self._node}: binding {i} names unknown tensor {arg.vid}")
            limit = max(-(-t.nbytes // 4) * 4, 16)  # buffers are whole words (Allocator.create_unbound)
            if offset % self.limits.min_storage_buffer_offset_alignment:
                raise LimitError(f"{self._node}: binding {i} offset {offset} is not a multiple of "
                                 f"minStorageBufferOffsetAlignment {self.limits.min_storage_buffer_offset_alignment}")
            if offset < 0 or size < 0 or offset + size > limit:
                raise UnsupportedOpError(f"{self._node}: binding {i} range [{offset}, {offset + size}) "
                                         f"is outside tensor {arg.vid} ({t.nbytes} bytes)")
            if size > self.limits.max_storage_buffer_range:
                raise LimitError(f"{self._node}: binding {i} covers {size} bytes, over "
                                 f"maxStorageBufferRange {self.limits.max_storage_buffer_range}; bind SubRanges")
            resolved.append((t, offset, max(-(-size // 4) * 4, 4)))  # whole words: read_defines may read by words
        push = bytes(push or b"")
        if len(push) > self.limits.max_push_constants_size:
            raise LimitError(f"{self._node}: {len(push)} push-constant bytes, over maxPushConstantsSize "
                             f"{self.limits.max_push_constants_size}")
        if len(push) % 4:
            push += b"\0" * (4 - len(push) % 4)
        groups = tuple(int(x) for x in groups)
        if len(groups) != 3 or any(x < 0 for x in groups):
            raise ValueError(f"{self._node}: groups must be three counts, got {groups}")
        most = self.limits.max_compute_work_group_count
        if any(x > m for x, m in zip(groups, most)):
            raise LimitError(f"{self._node}: {groups} workgroups exceed maxComputeWorkGroupCount {most}")
        if 0 in groups:
            return  # nothing to do (an empty tensor)
        key = tuple(sorted((str(k), str(v)) for k, v in (defines or {}).items()))
        target = self.prepack_dispatches if self._load_time else self.dispatches
        target.append(Dispatch(shader, key, resolved, push, groups, self._node, tuple(int(x) for x in spec)))

    # -- what needs memory -------------------------------------------------------
    def used_tensors(self) -> list[RTensor]:
        """Tensors that are bound by some dispatch or are graph inputs/outputs, in id order."""
        seen: dict[int, RTensor] = {}
        for d in [*self.prepack_dispatches, *self.dispatches]:
            for t, _, _ in d.bindings:
                seen[t.vid] = t
        for vid in [*self.graph.input_ids, *self.graph.output_ids]:
            seen[vid] = self.tensors[vid]
        for t, init in self.states.values():
            seen[t.vid] = t
            if init is not None:
                seen[init.vid] = init
        return [seen[k] for k in sorted(seen)]
