"""A model for memory measurements: x -> (+ w0) -> (+ w1) -> ... with `layers`
constants of `elems` float32 each, written with vkx.format (no torch)."""
from __future__ import annotations

import sys

import numpy as np

from vkx.format import ConstantPayload, IOSpec, ScalarType, write_program
from vkx.format import vkgraph as g


def chain_graph(layers: int, elems: int) -> g.VkGraph:
    T = lambda cid=-1, mem=-1: g.Tensor(g.DataType.FLOAT32, (elems,), constant_id=cid, mem_obj_id=mem)  # noqa: E731
    values = [T(), g.Int(1)]
    chain = []
    prev = 0
    for i in range(layers):
        w = len(values)
        values.append(T(cid=i))
        out = len(values)
        values.append(T(mem=i % 2))
        chain.append(g.OperatorCall(i, "aten.add.Tensor", (prev, w, 1, out)))
        prev = out
    return g.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=[prev])


def weight(i: int, elems: int) -> np.ndarray:
    return np.random.default_rng(i).standard_normal(elems, dtype=np.float32)


def write_chain(path: str, layers: int, elems: int, layout: str = "named", external: str | None = None) -> None:
    graph = chain_graph(layers, elems)
    payloads = []
    for i in range(layers):
        payloads.append(ConstantPayload(f"w{i}-{elems}", elems * 4, lambda i=i: weight(i, elems).tobytes()))
    spec = IOSpec(ScalarType.FLOAT, (elems,))
    write_program(path, graph, payloads, [spec], [spec], layout=layout, external_data=external)


def expected(layers: int, elems: int, x: np.ndarray) -> np.ndarray:
    out = x.copy()
    for i in range(layers):
        out = out + weight(i, elems)
    return out


if __name__ == "__main__":
    write_chain(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:])
