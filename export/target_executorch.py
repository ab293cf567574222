"""`target="executorch"`: a lowered VkGraph rewritten for ExecuTorch's C++ Vulkan runtime.

That runtime takes each tensor's storage type and memory layout as written, implements each op
for some of them only, and lacks some of vkx's ops. The pass runs in two steps over the chain:

1. Decompose what the runtime lacks into ops it has (and vkx's loader runs): SDPA into
   view/permute/bmm/mul/add/softmax with a prepacked additive causal mask, SiLU into
   `x * sigmoid(x)`, RMSNorm into mul/mean/add/rsqrt/mul, matmul into mm/bmm; binary ops'
   scalar operands become prepacked one-element constants (the runtime reads both as tensors);
   layer and batch norm without weight or bias get ones and zeros (the runtime requires both).
2. Tag every activation (docs/format.md, "Storage and layout"): conv, batch-norm and pooling take
   channels-packed 3-D textures, 2-D reductions a texture packed along a kept dim, elementwise ops
   the representation of their inputs, everything else a width-packed buffer. Where an op needs
   another representation than its input has, an `aten.clone.default` transition is inserted (one per
   tensor and representation). Graph inputs and prepacked constants take their first user's. A copy
   from a buffer into a buffer is a `view_copy` (the runtime's clone has no such path).

The lowered graph is rewritten in place.

A model the runtime cannot run is refused with one ExportError naming every op and the reason.
What the runtime implements is the installed ExecuTorch's `backends/vulkan/op_registry.py`;
tests/export/test_target_executorch.py checks every written file against it.
"""
from __future__ import annotations

import math
from dataclasses import replace

import torch

from vkx.export.dtypes import torch_dtype
from vkx.export.errors import ExportError
from vkx.export.et_runtime import (BATCH_NORM, BUFFER, CHANNELS, CLONE, LAYER_NORM, PACKED_BY_WHCN, RUNTIME,
                                   TEXTURE_LIMITS, Repr, Implementation, fits_texture)
from vkx.export.lower import ConstantSource, Lowered
from vkx.format import contract, dtypes, opset
from vkx.format.contract import Call
from vkx.format.liveness import PREPACK
from vkx.format.vkgraph import Bool, Double, Int, IntList, Null, OperatorCall, StorageType, Tensor, Value, ValueList

class RuntimeRefused(Exception):
    """One op the runtime cannot run (collected, then reported in one ExportError)."""


def for_executorch(lowered: Lowered) -> Lowered:
    """`lowered` rewritten so that ExecuTorch's Vulkan runtime runs it (ExportError if it cannot)."""
    rewrite = _Rewrite(lowered)
    rewrite.run(rewrite.decompose)
    rewrite.run(rewrite.tag)
    return Lowered(rewrite.graph, rewrite.constants, lowered.inputs, lowered.outputs)


class _Rewrite:
    def __init__(self, lowered: Lowered):
        self.graph = lowered.graph
        self.constants = list(lowered.constants)
        self.chain: list[OperatorCall] = []
        self._scalars: dict[tuple, int] = {}
        self._prepacked: dict[int, int] = {}
        self._transitions: dict[tuple[int, Repr], int] = {}
        self.weights = {op.args[-1]: op.args[0] for op in self.graph.chain if op.name == PREPACK}
        """Each prepacked constant's constant."""
        self.open = set(self.graph.input_ids) | set(self.weights)
        """Tensors whose representation their first user picks (graph inputs, prepacked constants)."""

    def run(self, step) -> None:
        """Apply `step` to every call of the chain; refuse once, listing every op that failed."""
        calls = opset.check_graph(self.graph)
        problems: list[str] = []
        for op, call in zip(list(self.graph.chain), calls):
            try:
                step(op, call)
            except RuntimeRefused as refused:
                if str(refused) not in problems:
                    problems.append(str(refused))
        if problems:
            raise ExportError(f"ExecuTorch's Vulkan runtime cannot run {len(problems)} op(s): {'; '.join(problems)}")
        self.graph.chain, self.chain = [OperatorCall(i, op.name, op.args) for i, op in enumerate(self.chain)], []

    # ---- building -------------------------------------------------------------------------------

    def value(self, value: Value) -> int:
        self.graph.values.append(value)
        return len(self.graph.values) - 1

    def tensor(self, like: int, dims) -> int:
        """A new activation with the dtype of tensor `like`."""
        t = self.graph.values[like]
        return self.value(Tensor(t.datatype, tuple(int(d) for d in dims), staging_datatype=t.datatype,
                                 storage_type=BUFFER[0], memory_layout=BUFFER[1]))

    def emit(self, name: str, *args: int) -> int:
        """Append `name(*args)` (its output last) to the new chain; returns the output id."""
        op = OperatorCall(len(self.chain), name, args)
        contract.bind(opset.OPS[name], op, self.graph.values, contract.check_tensor)
        self.chain.append(op)
        return args[-1]

    def op(self, name: str, like: int, dims, *args: int) -> int:
        return self.emit(name, *args, self.tensor(like, dims))

    def tref(self, data: torch.Tensor, like: int) -> int:
        """A new constant holding `data` in the dtype of tensor `like`."""
        datatype = self.graph.values[like].datatype
        self.constants.append(ConstantSource(f"executorch_target.{len(self.constants)}",
                                             data.to(torch_dtype(dtypes.of(datatype)))))
        return self.value(Tensor(datatype, tuple(data.shape), constant_id=len(self.constants) - 1,
                                 staging_datatype=datatype))

    def constant(self, data: torch.Tensor, like: int) -> int:
        """A prepacked constant holding `data` in the dtype of tensor `like` (one per dtype and value)."""
        datatype = self.graph.values[like].datatype
        key = (datatype, tuple(data.shape), bytes(data.to(torch_dtype(dtypes.of(datatype))).contiguous()
                                                  .view(torch.uint8).numpy()))
        if key not in self._scalars:
            self._scalars[key] = self._prepack(self.tref(data, like))
        return self._scalars[key]

    def _prepack(self, tref: int) -> int:
        out = self.emit(PREPACK, tref, self.tensor(tref, self.graph.values[tref].dims))
        self.weights[out] = tref
        self.open.add(out)
        return out

    def prepacked(self, vid: int) -> int:
        """Tensor `vid` as an op reads it: a constant through `et_vk.prepack` (the weight of a decomposed op)."""
        if self.graph.values[vid].constant_id < 0:
            return vid
        if vid not in self._prepacked:
            self._prepacked[vid] = self._prepack(vid)
        return self._prepacked[vid]

    def ints(self, items) -> int:
        return self.value(IntList(tuple(int(i) for i in items)))

    def view(self, vid: int, dims) -> int:
        if self.graph.values[vid].dims == tuple(dims):
            return vid
        return self.op("aten.view_copy.default", vid, dims, vid, self.ints(dims))

    # ---- step 1: decompose ----------------------------------------------------------------------

    def decompose(self, op: OperatorCall, call: Call) -> None:
        if op.name == "aten.scaled_dot_product_attention.default":
            self._sdpa(call)
        elif op.name == "aten.silu.default":
            x = call.vid("self")
            self.emit("aten.mul.Tensor", x, self.op("aten.sigmoid.default", x, call.out.shape, x), op.args[-1])
        elif op.name == "aten.rms_norm.default":
            self._rms_norm(call)
        elif op.name == "aten.matmul.default":
            self._matmul(call)
        elif op.name in ("aten.add.Tensor", "aten.sub.Tensor", "aten.mul.Tensor", "aten.div.Tensor"):
            operands = [self._operand(vid, op.args[-1]) for vid in op.args[:2]]
            self.emit(op.name, *operands, *op.args[2:])
        elif op.name in (LAYER_NORM, BATCH_NORM):
            self._norm(op, call)
        elif op.name in RUNTIME:
            self.chain.append(op)
        else:
            raise RuntimeRefused(f"{op.name} (not in the runtime)")

    def _norm(self, op: OperatorCall, call: Call) -> None:
        """Layer and batch norm as the runtime takes them: over one dim or of 4-D input, with weight and bias."""
        x = call.tensor("input").shape
        if op.name == LAYER_NORM and len(call["normalized_shape"]) != 1:
            raise RuntimeRefused(f"{op.name} (over {len(call['normalized_shape'])} dims; the runtime normalizes one)")
        if op.name == BATCH_NORM and len(x) != 4:
            raise RuntimeRefused(f"{op.name} (of a {len(x)}-D input; the runtime takes 4-D)")
        features = x[-1] if op.name == LAYER_NORM else x[1]
        args = list(op.args)
        for name, fill in (("weight", torch.ones(features)), ("bias", torch.zeros(features))):
            if call[name] is None:
                args[[a.name for a in call.decl.args].index(name)] = self.tref(fill, call.vid("input"))
        self.emit(op.name, *args)

    def _operand(self, vid: int, out: int) -> int:
        """A binary op's operand as a tensor: a scalar becomes a one-element constant of the output's dtype."""
        value = self.graph.values[vid]
        return self.constant(torch.tensor([value.value]), out) if isinstance(value, (Int, Double, Bool)) else vid

    def _sdpa(self, call: Call) -> None:
        q, k, v = (call.tensor(name).shape for name in ("query", "key", "value"))
        tokens, width, keys = q[-2], q[-1], k[-2]
        group = q[-3] // k[-3] if call["enable_gqa"] and len(q) >= 3 else 1
        kv_batch = (*q[:-3], q[-3] // group) if len(q) >= 3 else ()
        if tuple(k[:-2]) != kv_batch or tuple(v[:-2]) != kv_batch:
            raise RuntimeRefused(f"{call.decl.name} (key/value batch dims {list(k[:-2])} broadcast against the query's)")
        batches = math.prod(k[:-2])
        q3 = self.view(call.vid("query"), (batches, group * tokens, width))
        k3 = self.view(call.vid("key"), (batches, keys, width))
        v3 = self.view(call.vid("value"), (batches, keys, v[-1]))
        kt = self.op("aten.permute_copy.default", k3, (batches, width, keys), k3, self.ints((0, 2, 1)))
        scores = self.op("aten.bmm.default", q3, (batches, group * tokens, keys), q3, kt)
        scale = call["scale"] if call["scale"] is not None else 1.0 / math.sqrt(width)
        scores = self.op("aten.mul.Tensor", scores, (batches, group * tokens, keys), scores,
                         self.constant(torch.tensor([scale]), q3))
        mask = self._mask(call, batches, group, tokens, keys, q3)
        if mask is not None:
            scores = self.op("aten.add.Tensor", scores, (batches, group * tokens, keys), scores, mask,
                             self.value(Int(1)))
        probs = self.op("aten._softmax.default", scores, (batches, group * tokens, keys), scores,
                        self.value(Int(2)), self.value(Bool(False)))
        out = self.op("aten.bmm.default", probs, (batches, group * tokens, v[-1]), probs, v3)
        self.emit("aten.view_copy.default", out, self.ints(call.out.shape), call.output_vids[0])

    def _mask(self, call: Call, batches: int, group: int, tokens: int, keys: int, like: int) -> int | None:
        """The additive mask of the scores [batches, group * tokens, keys], or None."""
        if call["is_causal"]:
            causal = torch.ones(tokens, keys, dtype=torch.bool).tril()
            mask = torch.zeros(tokens, keys).masked_fill(~causal, float("-inf"))
            return self.constant(mask.repeat(group, 1), like)
        if call["attn_mask"] is None:
            return None
        given = call["attn_mask"]
        if not given.dtype.is_float:
            raise RuntimeRefused(f"{call.decl.name} (a {given.dtype.name} attn_mask; the runtime adds float masks only)")
        shape = (1,) * (4 - len(given.shape)) + tuple(given.shape)
        if math.prod(shape[:-2]) == batches * group and shape[-2:] == (tokens, keys):
            return self.view(call.vid("attn_mask"), (batches, group * tokens, keys))
        if math.prod(shape[:-2]) == 1 and shape[-2:] == (tokens, keys):
            rows = self.view(call.vid("attn_mask"), (tokens, keys))
            if group == 1:
                return rows
            return self.op("aten.cat.default", rows, (group * tokens, keys),
                           self.value(ValueList((rows,) * group)), self.value(Int(0)))
        raise RuntimeRefused(f"{call.decl.name} (an attn_mask of shape {list(given.shape)} broadcast over heads)")

    def _rms_norm(self, call: Call) -> None:
        x, shape = call.vid("input"), call.out.shape
        if len(call["normalized_shape"]) != 1:
            raise RuntimeRefused(f"{call.decl.name} (normalized over {len(call['normalized_shape'])} dims)")
        eps = call["eps"] if call["eps"] is not None else torch.finfo(torch_dtype(call.out.dtype)).eps
        mean_shape = (*shape[:-1], 1)
        square = self.op("aten.mul.Tensor", x, shape, x, x)
        mean = self.op("aten.mean.dim", x, mean_shape, square, self.ints((-1,)), self.value(Bool(True)),
                       self.value(Null()))
        shifted = self.op("aten.add.Tensor", x, mean_shape, mean, self.constant(torch.tensor([eps]), x),
                          self.value(Int(1)))
        inverse = self.op("aten.rsqrt.default", x, mean_shape, shifted)
        if call["weight"] is None:
            self.emit("aten.mul.Tensor", x, inverse, call.output_vids[0])
            return
        normed = self.op("aten.mul.Tensor", x, shape, x, inverse)
        self.emit("aten.mul.Tensor", normed, self.prepacked(call.vid("weight")), call.output_vids[0])

    def _matmul(self, call: Call) -> None:
        a, b = call.tensor("self").shape, call.tensor("other").shape
        out = call.output_vids[0]
        if len(a) == 2 and len(b) == 2:
            self.emit("aten.mm.default", call.vid("self"), call.vid("other"), out)
        elif len(a) > 2 and len(b) == 2:
            rows = self.view(call.vid("self"), (math.prod(a[:-1]), a[-1]))
            product = self.op("aten.mm.default", rows, (math.prod(a[:-1]), b[-1]), rows, call.vid("other"))
            self.emit("aten.view_copy.default", product, self.ints(call.out.shape), out)
        elif len(a) == len(b) > 2 and a[:-2] == b[:-2]:
            batches = math.prod(a[:-2])
            left = self.view(call.vid("self"), (batches, *a[-2:]))
            right = self.view(call.vid("other"), (batches, *b[-2:]))
            product = self.op("aten.bmm.default", left, (batches, a[-2], b[-1]), left, right)
            self.emit("aten.view_copy.default", product, self.ints(call.out.shape), out)
        else:
            raise RuntimeRefused(f"{call.decl.name} (of {list(a)} by {list(b)}: vectors or broadcast batch dims)")

    # ---- step 2: tag ----------------------------------------------------------------------------

    def tag(self, op: OperatorCall, call: Call) -> None:
        rule = RUNTIME[op.name]
        inputs = [vid for vid in self._tensor_ids(op.args[:-1]) if self.graph.values[vid].constant_id < 0]
        outputs = self._tensor_ids(op.args[-1:])
        self._check_dtypes(op, call, rule)
        want = self._want(op, call, rule, inputs, outputs)
        name, args = op.name, [self._moved(vid, want) for vid in op.args[:-1]]
        if name == CLONE and want == BUFFER:  # the runtime copies no buffer into a buffer with clone
            name, args = "aten.view_copy.default", [args[0], self.ints(self.graph.values[args[0]].dims)]
        for vid in outputs:
            self._set(vid, want)
        self.chain.append(OperatorCall(0, name, (*args, op.args[-1])))

    def _tensor_ids(self, vids) -> list[int]:
        found = []
        for vid in vids:
            value = self.graph.values[vid]
            items = value.items if isinstance(value, ValueList) else (vid,)
            found += [item for item in items if isinstance(self.graph.values[item], Tensor)]
        return found

    def _check_dtypes(self, op: OperatorCall, call: Call, rule: Implementation) -> None:
        indices = {call.vid(rule.indices)} if rule.indices else set()
        floats = set()
        for vid in self._tensor_ids(op.args):
            dtype = self.graph.values[vid].dtype
            if dtype not in ({dtypes.INT32} if vid in indices else rule.dtypes):
                raise RuntimeRefused(f"{op.name} (on {dtype.name})")
            if dtype.is_float:
                floats.add(dtype.name)
        if op.name == "aten.linear.default" and len(floats) > 1:
            # vkx's products read each operand as stored (a 16-bit LM's fp32 logits); the runtime's take one dtype
            raise RuntimeRefused(f"{op.name} (of {' and '.join(sorted(floats))} tensors: one dtype; --dtype fp32)")

    def repr_of(self, vid: int) -> Repr:
        t = self.graph.values[vid]
        return t.storage_type, t.memory_layout

    def _want(self, op: OperatorCall, call: Call, rule: Implementation, inputs: list[int], outputs: list[int]) -> Repr:
        """The one representation of the op's activations (the runtime syncs them all)."""
        tensors = inputs + outputs
        if rule.storage == "follow":
            decided = [self.repr_of(vid) for vid in inputs if vid not in self.open]
            want = decided[0] if decided else BUFFER
            fits = want == BUFFER or all(fits_texture(self.graph.values[vid], want[1]) for vid in tensors)
            return want if fits else BUFFER
        if rule.storage == "buffer":
            return BUFFER
        want = self._fixed(op, call, rule)
        if want != BUFFER and not all(fits_texture(self.graph.values[vid], want[1]) for vid in tensors):
            raise RuntimeRefused(f"{op.name} (tensors past the runtime's texture limits {list(TEXTURE_LIMITS)})")
        return want

    def _fixed(self, op: OperatorCall, call: Call, rule: Implementation) -> Repr:
        """The representation of an op the runtime implements for some representations only."""
        if rule.storage == "texture":
            return CHANNELS
        if rule.storage == "conv":
            batch = call.tensor("input").shape[0]
            if batch != 1:
                raise RuntimeRefused(f"{op.name} (a batch of {batch}; the runtime convolves one image)")
            return CHANNELS
        rank = len(call.tensor("self").shape)
        dims = {d % rank for d in call["dim"] or range(rank)}
        if dims == {rank - 1}:
            return BUFFER  # the runtime's per-row reduction
        whcn = {rank - 1 - d for d in dims}
        if not call["keepdim"] or len(dims) > 2 or (len(dims) == 2 and not whcn <= {0, 1, 2}):
            raise RuntimeRefused(f"{op.name} (over dims {sorted(dims)}, keepdim={call['keepdim']})")
        return StorageType.TEXTURE_3D, PACKED_BY_WHCN[min({0, 1, 2} - whcn)]  # packed along a kept dim

    def _set(self, vid: int, want: Repr) -> None:
        self.graph.values[vid] = replace(self.graph.values[vid], storage_type=want[0], memory_layout=want[1])

    def _as(self, vid: int, want: Repr) -> int:
        """`vid` in representation `want`: itself (tagged so, if still open), else a transition clone, or
        for a prepacked constant a second prepack (done once, at load)."""
        if vid in self.open:
            self.open.discard(vid)
            self._set(vid, want)
        if self.repr_of(vid) == want:
            return vid
        if (vid, want) not in self._transitions:
            copy = self.tensor(vid, self.graph.values[vid].dims)
            self._set(copy, want)
            source = (self.weights[vid],) if vid in self.weights else (vid, self.value(Null()))
            self.chain.append(OperatorCall(0, PREPACK if vid in self.weights else CLONE, (*source, copy)))
            self._transitions[vid, want] = copy
        return self._transitions[vid, want]

    def _moved(self, vid: int, want: Repr) -> int:
        """Argument `vid` with its activations in `want` (constants and non-tensors as they are)."""
        value = self.graph.values[vid]
        if isinstance(value, Tensor):
            return vid if value.constant_id >= 0 else self._as(vid, want)
        if isinstance(value, ValueList):
            moved = tuple(self._moved(item, want) for item in value.items)
            return vid if moved == value.items else self.value(ValueList(moved))
        return vid
