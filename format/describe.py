"""describe(): a JSON-able report of a .pte (schema "vkx.describe/2", documented in docs/format.md).

Reads metadata only (never segment bytes), so it is fast on files of any size.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from . import vkgraph as vk
from .common import FileRange
from .errors import FormatError
from .external import ExternalData, constant_tensors, named_external
from .names import io_names
from .liveness import lifetimes, peak_live_bytes, shared_object_bytes
from .methods import constant_keys, methods as methods_of, states as graph_states
from .program import SEGMENT, ExecutionPlan
from .pte import ProgramFile, VulkanDelegate

SCHEMA = "vkx.describe/2"


IMPORT_ALIGNMENT = 64
"""A named constant whose file bytes start on a multiple of this can be used in place by a device
with VK_EXT_external_memory_host (upload="import"): the loader imports the enclosing pages and binds
the buffer at the constant's offset in them, which must be a multiple of the buffer's alignment
(64 on lavapipe; docs/memory.md)."""

LAZY_PEAK = "W + max(S, A + IO + state)"
EAGER_PEAK = "2W + A + IO + w + state"


def lazy_peak(W: int, A: int, IO: int, state: int, S: int = 0) -> int:
    """The most device memory a lazy load holds (LAZY_PEAK): what `vkx inspect` prints (S = 0: it knows
    no device, so no ring), what `program.memory` reports and what tests/memory holds loads to. The
    stages' order makes it the bound (vkx.loader.upload.stages): each weight is allocated right before its
    upload, so the weights stage holds at most W plus the staging ring (S, at most W / 100; 0 on the
    direct and import paths), and the ring is freed before the state, the activations and the io
    buffers are allocated, after which the load holds W + A + IO + state (docs/memory.md)."""
    return W + max(S, A + IO + state)


def eager_peak(W: int, A: int, IO: int, w: int, state: int) -> int:
    """Peak of an eager load (EAGER_PEAK): every weight and activation allocated first, then each
    weight's host copy kept and copied through a staging buffer of its own size."""
    return 2 * W + A + IO + w + state


def owns_external(program: str | os.PathLike, external: str | os.PathLike) -> bool:
    """Whether the .pte at `program` records that its weights were written to `external`
    (vkx.format.metadata), so that an export to `program` may replace `external`."""
    try:
        with ProgramFile.open(program) as pf:
            written = pf.metadata.external_data
        return written is not None and os.path.samefile(Path(program).parent / written, external)
    except (FormatError, OSError):  # no program there, not a vkx file, or the recorded file is gone
        return False


def _alignment(offset: int) -> int:
    """Largest power of two dividing offset (capped at 1 MiB; 0 counts as 1 MiB)."""
    cap = 1 << 20
    return cap if offset % cap == 0 else offset & -offset


def compile_spec(value: bytes) -> dict[str, Any]:
    """A compile spec's value: {"json": value} when its bytes are UTF-8 JSON (vkx's io names), else {"hex": ...}."""
    try:
        return {"json": json.loads(value.decode("utf-8"))}
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return {"hex": value.hex()}


def _tensor(g: vk.VkGraph, vid: int, name: str | None) -> dict[str, Any]:
    t = g.values[vid] if 0 <= vid < len(g.values) else None
    if not isinstance(t, vk.Tensor):
        return {"id": vid, "name": name, "kind": type(t).__name__ if t is not None else "missing"}
    return {"id": vid, "name": name, "dtype": t.datatype.name, "dims": list(t.dims), "bytes": t.nbytes}


def activation_totals(g: vk.VkGraph) -> tuple[int, int]:
    """(A, A_live): shared-object bytes, and the peak of live activation bytes in chain order."""
    return shared_object_bytes(g), peak_live_bytes(lifetimes(g))


QUANTIZED = {"vkx.linear_q.default": (1, 4, 5), "vkx.embedding_q.default": (0, 3, 4)}
"""vkx's weight-only quantized ops: the argument indices of their weight, bits and group_size."""


def quantized_weights(g: vk.VkGraph) -> list[dict[str, Any]]:
    """The graph's quantized weights by role and scheme: role "embedding", "head" (a product giving a graph
    output, or reading the embedding's weight: tied) or "linear"; bits; group_size; "affine" or "symmetric"
    (docs/format.md, "Quantized weights"); how many weights."""
    embedded = {op.args[0] for op in g.chain if op.name == "vkx.embedding_q.default"}
    kinds: Counter = Counter()
    seen: set[tuple[int, str]] = set()
    for op in g.chain:
        if op.name not in QUANTIZED:
            continue
        weight, bits, group = (op.args[i] for i in QUANTIZED[op.name])
        scales = g.values[op.args[QUANTIZED[op.name][0] + 1]]  # each op's scales follow its weight
        if op.name == "vkx.embedding_q.default":
            role = "embedding"
        elif weight in embedded or op.args[-1] in g.output_ids:
            role = "head"
        else:
            role = "linear"
        if (weight, role) in seen:
            continue
        seen.add((weight, role))
        affine = isinstance(scales, vk.Tensor) and len(scales.dims) == 3
        kinds[(role, _int(g, bits), _int(g, group), "affine" if affine else "symmetric")] += 1
    return [{"role": role, "bits": bits, "group_size": group, "scales": form, "weights": n}
            for (role, bits, group, form), n in sorted(kinds.items())]


def _int(g: vk.VkGraph, vid: int) -> int | None:
    value = g.values[vid] if 0 <= vid < len(g.values) else None
    return value.value if isinstance(value, vk.Int) else None


def _vkgraph(v: VulkanDelegate, constants: list[dict[str, Any]], path: str) -> dict[str, Any]:
    g = v.graph
    names_in, names_out = io_names(v.compile_specs, len(g.input_ids), len(g.output_ids),
                                   f"execution_plan[{v.plan_index}].delegates[{v.delegate_index}]", path)
    return {
        "version": g.version,
        "values": len(g.values),
        "value_kinds": dict(Counter(type(x).__name__ for x in g.values).most_common()),
        "ops": dict(Counter(op.name for op in g.chain).most_common()),
        "quantized": quantized_weights(g),
        "chain_length": len(g.chain),
        "inputs": [_tensor(g, i, name) for i, name in zip(g.input_ids, names_in)],
        "outputs": [_tensor(g, i, name) for i, name in zip(g.output_ids, names_out)],
        "constant_layout": g.constant_layout,
        "constants": constants,
    }


def describe(path: str | os.PathLike, external: Sequence[str | os.PathLike] = ()) -> dict[str, Any]:
    """Everything `vkx inspect` shows, as plain JSON-able data."""
    exts = []
    try:
        with ProgramFile.open(path) as pf:
            for e in named_external(pf, external):
                exts.append(ExternalData.open(e))
            return _describe(pf, exts)
    finally:
        for e in exts:
            e.close()


def _describe(pf: ProgramFile, exts: list[ExternalData]) -> dict[str, Any]:
    p, h = pf.program, pf.header
    users: dict[int, list[str]] = {}
    if p.constant_segment is not None:
        users.setdefault(p.constant_segment[0], []).append("constant_segment")
    for pi, plan in enumerate(p.execution_plan):
        for di, d in enumerate(plan.delegates):
            if d.location == SEGMENT:
                users.setdefault(d.index, []).append(f"execution_plan[{pi}].delegates[{di}] ({d.id})")
    for nd in p.named_data or ():
        users.setdefault(nd.segment_index, []).append(f"named_data {nd.key}")
    sbo = h.segment_base_offset if h else 0
    segments = [{"index": i, "offset": r.offset, "relative_offset": r.offset - sbo, "size": r.size,
                 "alignment": _alignment(r.offset), "used_by": users.get(i, [])} for i, r in enumerate(pf.segments)]
    where: dict[str, FileRange] = dict(pf.named_data)
    for e in reversed(exts):  # earlier external files win
        where.update(e.named_data)
    key_info: dict[str, dict[str, Any]] = {}
    several = methods_of(pf)
    shared: set[str] = set()  # methods of one file load one device tensor per named key, whichever reads it
    graphs = {(d.plan_index, d.delegate_index): _delegate(d, where, pf.path, key_info,
                                                          shared if several else set())
              for d in pf.vulkan_delegates}
    state_list = describe_states(pf)
    named = []
    for src in [pf] + exts:
        for key, r in src.named_data.items():
            info = key_info.get(key, {"dtype": None, "dims": None, "constant_ids": [], "users": []})
            named.append({"key": key, "file": "pte" if src is pf else src.path, "offset": r.offset, "bytes": r.size, **info})
    tensors = tensor_list(named)
    folder = os.path.dirname(os.path.abspath(pf.path))
    recorded = {os.path.abspath(os.path.join(folder, name)) for name in pf.metadata.external_files}
    return {
        "schema": SCHEMA,
        "file": {"path": pf.path, "bytes": pf.size},
        "header": None if h is None else {"length": h.length, "program_size": h.program_size,
                                          "segment_base_offset": h.segment_base_offset,
                                          "segment_data_size": h.segment_data_size},
        "program": {"version": p.version, "plans": [
            {"name": plan.name, "values": len(plan.values), "inputs": list(plan.inputs), "outputs": list(plan.outputs),
             "instructions": sum(len(c.instructions) for c in plan.chains), "operators": len(plan.operators),
             "non_const_buffer_sizes": list(plan.non_const_buffer_sizes),
             "calls": _calls(plan),
             "cpu_ops": dict(Counter(_op(plan, i.index) for c in plan.chains for i in c.instructions
                                     if i.kind == "KernelCall" and 0 <= i.index < len(plan.operators)))}
            for plan in p.execution_plan]},
        "segments": segments,
        "named_data": named,
        "tensors": tensors,
        "files": file_totals(tensors),
        "external": [{"path": e.path, "kind": e.kind, "bytes": e.size, "entries": len(e.named_data),
                      "recorded": os.path.abspath(e.path) in recorded} for e in exts],
        "metadata": {"external_files": list(pf.metadata.external_files),
                     "eos_token_ids": list(pf.metadata.eos_token_ids)},
        "delegates": [{"plan": pi, "index": di, "id": d.id, "location": "segment" if d.location == SEGMENT else "inline",
                       "data_index": d.index, "compile_specs": {k: compile_spec(val) for k, val in d.compile_specs},
                       "vulkan": graphs.get((pi, di))}
                      for pi, plan in enumerate(p.execution_plan) for di, d in enumerate(plan.delegates)],
        "methods": describe_methods(pf, graphs),
        "states": state_list,
        "totals": _totals(list(graphs.values()), sum(x["bytes"] for x in state_list), bool(several)),
    }


def _delegate(v: VulkanDelegate, where: dict[str, FileRange], path: str,
              key_info: dict[str, dict[str, Any]], stored: set[str]) -> dict[str, Any]:
    """One VulkanBackend delegate: its blob, VH00 header and VkGraph (with where each constant is).
    `stored`: the byte ranges already counted in W (a byte range of a file is one device tensor, as
    the loader loads it, whatever constants and keys read it)."""
    constants: list[dict[str, Any]] = []
    tensors = constant_tensors(v.graph)
    W = w = count = ready = ready_bytes = 0
    for k, c in enumerate(v.graph.constants):
        t = tensors.get(k)
        nbytes = t.nbytes if t is not None else c.length
        r = where.get(c.named_key) if c.is_named else None
        tensor = (r.path, r.offset, r.size) if r is not None else c.named_key if c.is_named else ("legacy", k)
        if tensor not in stored:
            stored.add(tensor)
            W, w, count = W + nbytes, max(w, nbytes), count + 1
            if r is not None and nbytes and r.offset % IMPORT_ALIGNMENT == 0:
                ready, ready_bytes = ready + 1, ready_bytes + nbytes
        constants.append({
            "id": k, "key": c.named_key if c.is_named else None, "bytes": nbytes,
            "dtype": t.datatype.name if t else None, "dims": list(t.dims) if t else None,
            "location": ("legacy" if not c.is_named else "missing" if r is None
                         else "pte" if r.path == path else r.path),
        })
        if c.is_named and t is not None:
            info = key_info.setdefault(c.named_key, {"dtype": t.datatype.name, "dims": list(t.dims),
                                                     "constant_ids": [], "users": []})
            info["constant_ids"].append(k)
            info["users"].append({"plan": v.plan_index, "delegate": v.delegate_index, "id": k})
    A, A_live = activation_totals(v.graph)
    graph = _vkgraph(v, constants, path)
    IO = sum(t.get("bytes", 0) for t in graph["inputs"] + graph["outputs"])
    return {
        "plan": v.plan_index, "index": v.delegate_index,
        "blob": {"offset": v.blob.offset, "size": v.blob.size},
        "vh00": {"header_length": v.header.header_length, "flatbuffer_offset": v.header.flatbuffer_offset,
                 "flatbuffer_size": v.header.flatbuffer_size, "bytes_offset": v.header.bytes_offset,
                 "bytes_size": v.header.bytes_size},
        "legacy_section": {"offset": v.legacy_section.offset, "size": v.legacy_section.size},
        "graph": graph,
        "totals": {"constants": count, "W": W, "w": w, "A": A, "A_live": A_live, "IO": IO,
                   "import_ready": ready, "import_ready_bytes": ready_bytes},
    }


def tensor_list(named: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per stored tensor (a byte range of a file) with all its names, in file order:
    the keys of `named` ("named_data" entries) that share its bytes."""
    tensors: dict[tuple, dict[str, Any]] = {}
    for n in named:
        t = tensors.setdefault((n["file"], n["offset"], n["bytes"]), {
            "names": [], "dtype": None, "dims": None, "bytes": n["bytes"], "file": n["file"], "offset": n["offset"],
            "users": []})
        t["names"].append(n["key"])
        if t["dtype"] is None and n["dtype"] is not None:
            t["dtype"], t["dims"] = n["dtype"], n["dims"]
        t["users"] += n["users"]
    return list(tensors.values())


def file_totals(tensors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per file ("pte" or an external path), the stored tensors a constant reads and their bytes."""
    out: dict[str, dict[str, Any]] = {}
    for t in tensors:
        if t["users"]:
            f = out.setdefault(t["file"], {"file": t["file"], "tensors": 0, "bytes": 0})
            f["tensors"] += 1
            f["bytes"] += t["bytes"]
    return list(out.values())


def _totals(delegates: list[dict[str, Any]], state: int, methods: bool) -> dict[str, int]:
    """Load memory of every delegate, loaded one after another: delegate k loads while the ones before it
    hold their weights, activations and io buffers (lazy_peak, eager_peak), plus the state.

    Methods (`methods`) load as one: each W counts only byte ranges no method before it read, and
    their activations take turns in one allocation (A = the largest method's)."""
    W = w = A = A_live = IO = peak_eager = constants = ready = ready_bytes = 0
    for d in delegates:
        t = d["totals"]
        held = 0 if methods else A
        peak_eager = max(peak_eager, W + eager_peak(t["W"], held + t["A"], IO + t["IO"], t["w"], state))
        if methods:
            A, A_live = max(A, t["A"]), max(A_live, t["A_live"])
        else:
            A, A_live = A + t["A"], A_live + t["A_live"]
        W, w, IO, constants = W + t["W"], max(w, t["w"]), IO + t["IO"], constants + t["constants"]
        ready, ready_bytes = ready + t["import_ready"], ready_bytes + t["import_ready_bytes"]
    if methods:
        peak_eager = eager_peak(W, A, IO, w, state)
    return {"constants": constants, "W": W, "w": w, "A": A, "A_live": A_live, "IO": IO, "state": state,
            "peak_eager": peak_eager, "peak_lazy": lazy_peak(W, A, IO, state),
            "import_ready": ready, "import_ready_bytes": ready_bytes}


def describe_methods(pf: ProgramFile, graphs: dict[tuple[int, int], dict[str, Any]]) -> list[dict[str, Any]]:
    """Each plan as a method: its io, the state it names and the named constants it reads."""
    out = []
    for v in pf.vulkan_delegates:
        if v.delegate_index != 0 and any(m["plan"] == v.plan_index for m in out):
            continue
        g = graphs[v.plan_index, v.delegate_index]["graph"]
        out.append({"name": pf.program.execution_plan[v.plan_index].name, "plan": v.plan_index,
                    "inputs": g["inputs"], "outputs": g["outputs"],
                    "states": [x.name for x in graph_states(v.graph)],
                    "constants": constant_keys(v.graph),
                    "A": graphs[v.plan_index, v.delegate_index]["totals"]["A"]})
    return out


def describe_states(pf: ProgramFile) -> list[dict[str, Any]]:
    """Every state tensor (by name, once) with its bytes, its initial value and the methods naming it."""
    found: dict[str, dict[str, Any]] = {}
    for v in pf.vulkan_delegates:
        for x in graph_states(v.graph):
            entry = found.setdefault(x.name, {
                "name": x.name, "dtype": x.tensor.datatype.name, "dims": list(x.tensor.dims),
                "bytes": x.tensor.nbytes, "initial": "zeros" if x.zeros else x.initial_key, "methods": []})
            entry["methods"].append(pf.program.execution_plan[v.plan_index].name)
    return list(found.values())


def _op(plan: ExecutionPlan, index: int) -> str:
    name, overload = plan.operators[index]
    return f"{name}.{overload or 'default'}"


def _calls(plan: ExecutionPlan) -> list[dict[str, Any]]:
    """Every instruction of every chain, in order: what it calls and its value ids."""
    out = []
    for ci, chain in enumerate(plan.chains):
        for ii, ins in enumerate(chain.instructions):
            call: dict[str, Any] = {"chain": ci, "index": ii, "kind": ins.kind, "args": list(ins.args)}
            if ins.kind == "KernelCall":
                call["op"] = _op(plan, ins.index) if 0 <= ins.index < len(plan.operators) else None
            elif ins.kind == "DelegateCall":
                call["delegate"] = ins.index
            elif ins.kind == "JumpFalseCall":
                call["destination"] = ins.index
            out.append(call)
    return out
