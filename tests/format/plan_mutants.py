"""Plan-only mutants of a VkGraph (what `vkx validate` must see through), a .pte written around one,
and a .pte whose delegate call points at another plan tensor.

Each mutant keeps every tensor's dtype and shape and every op's contract: only the memory plan
(`mem_obj_id`s) or the order and wiring of the chain changes, as a hostile or broken exporter would.
"""
from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Iterator, Sequence

from vkx.format import ConstantPayload, ExternalData, IOSpec, ProgramFile, resolve_constants, write_program
from vkx.format import vkgraph as vk
from vkx.format.generated import program_generated as fb
from vkx.format.liveness import DEDICATED, activation_ids


def _planned(graph: vk.VkGraph) -> list[int]:
    """Activations with a shared memory object (not prepack outputs nor state)."""
    dedicated = {vid for call in graph.chain if call.name in DEDICATED for vid in activation_ids(graph, call.args[-1:])}
    return [vid for vid, v in enumerate(graph.values) if isinstance(v, vk.Tensor) and v.constant_id < 0
            and v.mem_obj_id >= 0 and v.nbytes and vid not in dedicated]


def _objects(graph: vk.VkGraph, vids: Sequence[int], to: int) -> vk.VkGraph:
    values = list(graph.values)
    for vid in vids:
        values[vid] = dataclasses.replace(values[vid], mem_obj_id=to)
    return dataclasses.replace(graph, values=values)


def _chain(graph: vk.VkGraph, chain: list[vk.OperatorCall]) -> vk.VkGraph:
    return dataclasses.replace(graph, chain=chain)


def plan_mutants(graph: vk.VkGraph, seed: int = 0, per_kind: int = 6) -> Iterator[tuple[str, vk.VkGraph]]:
    """(what, mutant) of each kind: one activation moved to another object; every activation in
    object 0; two neighbouring ops swapped; the chain reversed; the chain cut; an op's output
    redirected to another tensor of its dtype and shape; the op writing a graph output removed."""
    rng = random.Random(seed)
    planned = _planned(graph)
    objects = sorted({graph.values[vid].mem_obj_id for vid in planned})
    moves = [(vid, obj) for vid in planned for obj in objects if obj != graph.values[vid].mem_obj_id]
    for vid, obj in rng.sample(moves, min(per_kind, len(moves))):
        yield f"value {vid} moved to object {obj}", _objects(graph, [vid], obj)
    yield "every activation in object 0", _objects(graph, planned, 0)
    chain = list(graph.chain)
    for i in rng.sample(range(len(chain) - 1), min(per_kind, len(chain) - 1)):
        swapped = chain[:i] + [chain[i + 1], chain[i]] + chain[i + 2:]
        yield f"ops {i} and {i + 1} swapped", _chain(graph, swapped)
    yield "chain reversed", _chain(graph, chain[::-1])
    yield f"chain cut after {len(chain) // 2} ops", _chain(graph, chain[:len(chain) // 2])
    same: dict[tuple, list[int]] = {}
    for vid in planned:
        t = graph.values[vid]
        same.setdefault((t.datatype, t.dims), []).append(vid)
    redirects = [(i, other) for i, call in enumerate(chain) if call.args and call.args[-1] in planned
                 for other in same[graph.values[call.args[-1]].datatype, graph.values[call.args[-1]].dims]
                 if other != call.args[-1]]
    for i, other in rng.sample(redirects, min(per_kind, len(redirects))):
        call = chain[i]
        redirected = chain[:i] + [dataclasses.replace(call, args=(*call.args[:-1], other))] + chain[i + 1:]
        yield f"op {i}'s output redirected from value {call.args[-1]} to {other}", _chain(graph, redirected)
    for k, out in enumerate(graph.output_ids):
        writers = [i for i, call in enumerate(chain) if out in activation_ids(graph, call.args[-1:])]
        if writers and out not in graph.input_ids:
            yield f"op {writers[-1]} (writing output {k}) removed", _chain(graph, chain[:writers[-1]] + chain[writers[-1] + 1:])


def graph_and_constants(pte: Path, external: Sequence[Path] = ()) -> tuple[vk.VkGraph, list[bytes]]:
    """The first delegate's graph and the bytes of each of its constants."""
    exts = [ExternalData.open(e) for e in external]
    try:
        with ProgramFile.open(pte) as pf:
            files = {f.path: f for f in [pf, *exts]}
            return pf.vulkan.graph, [bytes(files[r.path].read_range(r)) for r in resolve_constants(pf, exts)]
    finally:
        for e in exts:
            e.close()


def write_graph(path: Path, graph: vk.VkGraph, constants: Sequence[bytes]) -> Path:
    """A one-method .pte holding `graph` (a copy: the writer fills in its constants) and `constants`."""
    graph = dataclasses.replace(graph, chain=list(graph.chain), values=list(graph.values))
    payloads = [ConstantPayload(f"c{cid}", len(data), lambda data=data: data) for cid, data in enumerate(constants)]
    io = [IOSpec(graph.values[vid].dtype.scalar_type, tuple(graph.values[vid].dims))
          for vid in [*graph.input_ids, *graph.output_ids]]
    write_program(path, graph, payloads, io[:len(graph.input_ids)], io[len(graph.input_ids):])
    return path


def redirect_delegate_arg(src: Path, dst: Path, instruction: int, arg: int, to: int) -> None:
    """Copy a .pte with execution_plan[0].chains[0].instructions[instruction] (a DelegateCall)'s
    args[arg] set to value `to` (patched in place: the int32 is in the program flatbuffer)."""
    buf = bytearray(src.read_bytes())
    ins = fb.Program.GetRootAs(buf, 0).ExecutionPlan(0).Chains(0).Instructions(instruction)
    call = fb.DelegateCall()
    table = ins.InstrArgs()
    call.Init(table.Bytes, table.Pos)
    assert call.Args(arg) != to
    at = call._tab.Vector(call._tab.Offset(6)) + 4 * arg  # field 1, args: [int]
    buf[at:at + 4] = to.to_bytes(4, "little", signed=True)
    dst.write_bytes(bytes(buf))
