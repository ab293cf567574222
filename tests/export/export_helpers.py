"""Helpers for the export tests: checks of a written file by vkx.format, by the op
contract (`vkx.format.contract`) and by ExecuTorch 1.5.1."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from vkx.format import ProgramFile, opset
from vkx.format.validate import validate
from vkx.format.vkgraph import MemoryLayout, StorageType, Tensor, ValueList, VkGraph

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


class Fn(nn.Module):
    """A module around `fn(self, *inputs)`, holding the given layers/parameters."""

    def __init__(self, fn, **parts):
        super().__init__()
        self.fn = fn
        for name, part in parts.items():
            setattr(self, name, part)

    def forward(self, *inputs):
        return self.fn(self, *inputs)


def check_graph(graph: VkGraph) -> None:
    """Every op binds to its contract declaration with every argument written out, and reads only defined values."""
    opset.check_graph(graph)
    defined = {i for i, v in enumerate(graph.values) if not isinstance(v, Tensor) or v.constant_id >= 0}
    defined |= set(graph.input_ids)
    for call in graph.chain:
        declared = len(opset.OPS[call.name].args)
        assert len(call.args) == declared + 1, f"{call.name}: {len(call.args) - 1} args, the contract declares {declared}"
        *reads, written = call.args
        for value_id in reads:
            value = graph.values[value_id]
            items = value.items if isinstance(value, ValueList) else (value_id,)
            assert all(item in defined for item in items), f"{call.name} reads value {value_id} before it is written"
        out = graph.values[written]
        outs = out.items if isinstance(out, ValueList) else (written,)
        for item in outs:
            tensor = graph.values[item]
            assert isinstance(tensor, Tensor) and tensor.constant_id < 0
            assert (tensor.storage_type, tensor.memory_layout) == (StorageType.BUFFER, MemoryLayout.TENSOR_WIDTH_PACKED)
            defined.add(item)
    for value_id in graph.input_ids + graph.output_ids:
        assert isinstance(graph.values[value_id], Tensor) and graph.values[value_id].constant_id < 0
    assert all(value_id in defined for value_id in graph.output_ids)


def check_file(path: Path, external: Path | None = None) -> VkGraph:
    """vkx.format validates the file; its graph keeps the op contract. Returns the graph."""
    validate(path, external=[external] if external else [])
    with ProgramFile.open(path) as program:
        graph = program.vulkan.graph
    check_graph(graph)
    return graph


def et_deserialize(path: Path):
    """ExecuTorch 1.5.1's own reader over the file."""
    from executorch.exir._serialize._program import deserialize_pte_binary
    return deserialize_pte_binary(path.read_bytes())


def et_vkgraph(path: Path):
    """ExecuTorch's own VkGraph reader (through flatc) over the file's first delegate blob."""
    from executorch.backends.vulkan.serialization import vulkan_graph_serialize as serialize
    program = et_deserialize(path).program
    blob = program.backend_delegate_data[program.execution_plan[0].delegates[0].processed.index].data
    return serialize.flatbuffer_to_vk_graph(serialize.extract_vk_flatbuffer(blob))


def ops_of(graph: VkGraph) -> set[str]:
    return {call.name for call in graph.chain}


def randn(*sizes: int) -> torch.Tensor:
    return torch.randn(*sizes, generator=torch.Generator().manual_seed(sum(sizes)))
