"""A file that passes `vkx validate` is safe to load and computes what it says.

- A memory plan sound for the chain as written must stay sound for the chain the loader runs: a
  fused kernel reads its inputs while it writes, so a plan that gave its output an input's memory
  (that input's last reader was an op fused away) gets the output a tensor of its own. Before, a
  rotary's output planned into its sin table's memory was off by up to 2.4 on lavapipe.
- No op may write a weight (a constant or a prepack output) or a state tensor it did not make:
  before, validate took an op writing a constant, and each call changed the weight.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from .fmt_tiny import tiny_constants, tiny_graph
from .plan_mutants import graph_and_constants, write_graph
from tests.cli.conftest import one_error_line, vkx as run_vkx
from vkx.format import validate
from vkx.format import vkgraph as vk
from vkx.format.memplan import MemoryPlanError, check_memory_plan
from vkx.loader.errors import ProgramFormatError


@pytest.fixture(scope="module")
def rotary(tmp_path_factory):
    """transformers' rotary embedding of x [1, 2, 4, 8] by tables computed in the graph, then a relu
    (the rotation's output no graph output): (graph, constants, inputs), and the values of the
    tables and of the rotation's output."""
    import torch

    import vkx

    class Rotary(torch.nn.Module):
        def forward(self, x, angles):
            cos, sin = angles.cos(), angles.sin()
            turned = torch.cat((-x[..., 4:], x[..., :4]), -1)
            return (x * cos + turned * sin).relu()

    x, angles = torch.randn(1, 2, 4, 8, generator=torch.Generator().manual_seed(0)), torch.randn(4, 8)
    path = tmp_path_factory.mktemp("rotary") / "rotary.pte"
    vkx.export_model(Rotary(), (x, angles), str(path))
    graph, constants = graph_and_constants(path)
    made = {op.name: op.args[-1] for op in graph.chain}
    return graph, constants, [x.numpy(), angles.numpy()], made


def _moved(graph: vk.VkGraph, vid: int, to: int) -> vk.VkGraph:
    values = list(graph.values)
    values[vid] = dataclasses.replace(values[vid], mem_obj_id=graph.values[to].mem_obj_id)
    return dataclasses.replace(graph, values=values)


def _run(graph: vk.VkGraph, constants, inputs) -> np.ndarray:
    from vkx.loader import load_graph
    with load_graph(graph, constants) as program:
        return program.run_numpy(*inputs)[0]


@pytest.mark.vulkan
def test_a_rotary_output_in_its_tables_memory_computes_what_the_file_says(rotary, tmp_path):
    graph, constants, inputs, made = rotary
    y, sin = made["aten.add.Tensor"], made["aten.sin.default"]
    mutant = _moved(graph, y, sin)
    validate(write_graph(tmp_path / "m.pte", mutant, constants))  # sound for the chain as written
    np.testing.assert_array_equal(_run(mutant, constants, inputs), _run(graph, constants, inputs))


@pytest.mark.vulkan
def test_every_plan_validate_takes_gives_the_same_answers(rotary):
    """Each activation moved into each other memory object: refused, or the unmutated answers."""
    graph, constants, inputs, _ = rotary
    want = _run(graph, constants, inputs)
    planned = [vid for vid, v in enumerate(graph.values) if isinstance(v, vk.Tensor) and v.mem_obj_id >= 0
               and vid not in graph.input_ids]
    owners = {graph.values[vid].mem_obj_id: vid for vid in planned}
    accepted = 0
    for vid in planned:
        for obj, owner in owners.items():
            if obj == graph.values[vid].mem_obj_id:
                continue
            mutant = _moved(graph, vid, owner)
            try:
                check_memory_plan(mutant)
            except MemoryPlanError:
                continue
            accepted += 1
            np.testing.assert_array_equal(_run(mutant, constants, inputs), want,
                                          err_msg=f"value {vid} in object {obj}: accepted, but the answer changed")
    assert accepted >= 3


@pytest.mark.parametrize("written, what", [(2, "constant 2"), (6, r"made by chain\[0\] \(et_vk.prepack.default\)")])
def test_an_op_writing_a_weight_is_refused(tmp_path, written, what):
    """relu(bias) written into the shift constant (value 2) or into its prepacked copy (value 6)."""
    graph = tiny_graph()
    graph = dataclasses.replace(graph, chain=[*graph.chain, vk.OperatorCall(9, "aten.relu.default", (1, written))])
    path = write_graph(tmp_path / "m.pte", graph, tiny_constants())
    with pytest.raises(MemoryPlanError, match=rf"vkgraph.chain\[4\]: aten.relu.default writes value {written}, "
                                              rf"{what}: weights are read-only"):
        validate(path)
    line = one_error_line(run_vkx("validate", path))
    assert f"writes value {written}" in line


@pytest.mark.vulkan
def test_the_loader_refuses_an_op_writing_a_weight(tmp_path):
    import vkx
    graph = tiny_graph()
    graph = dataclasses.replace(graph, chain=[*graph.chain, vk.OperatorCall(9, "aten.relu.default", (1, 2))])
    with pytest.raises(ProgramFormatError, match="writes value 2, constant 2"):
        vkx.load(write_graph(tmp_path / "m.pte", graph, tiny_constants()))


def _without_defaults(graph: vk.VkGraph) -> tuple[vk.VkGraph, int]:
    """`graph` with each call ended before its trailing arguments that hold their declared default (a
    call may leave them out), and how many arguments went."""
    from vkx.format import opset
    chain, dropped = [], 0
    for op in graph.chain:
        given, decl = list(op.args[:-1]), opset.lookup(op.name).args
        while given and decl[len(given) - 1].default is not ... and \
                _holds(graph.values[given[-1]], decl[len(given) - 1].default):
            given.pop()
            dropped += 1
        chain.append(dataclasses.replace(op, args=(*given, op.args[-1])))
    return dataclasses.replace(graph, chain=chain), dropped


def _holds(value: vk.Value, default) -> bool:
    if default is None:
        return isinstance(value, vk.Null)
    return isinstance(value, (vk.Int, vk.Double, vk.Bool)) and value.value == default


def test_calls_without_their_optional_arguments_fuse_and_compute_as_full_ones(tmp_path):
    """A call may end before its trailing optional arguments (an add's alpha, a linear's bias, an sdpa's
    scale): fusion reads arguments by their declaration. Before, a residual add without alpha raised an
    untyped ValueError while loading, and patterns read an output where the argument was left out."""
    import torch

    import vkx

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.q = torch.nn.Parameter(torch.rand(64) + 0.5), torch.nn.Linear(64, 64, bias=False)
            self.kv, self.out = torch.nn.Linear(64, 32, bias=False), torch.nn.Linear(64, 64, bias=False)

        def forward(self, x):
            h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm
            q = self.q(h).view(1, 4, 4, 16).transpose(1, 2)
            k = self.kv(h).view(1, 4, 2, 16).transpose(1, 2)
            k = k[:, :, None].expand(1, 2, 2, 4, 16).reshape(1, 4, 4, 16)
            attended = torch.nn.functional.scaled_dot_product_attention(q, k, k, is_causal=True)
            return self.out(attended.transpose(1, 2).reshape(1, 4, 64)[:, -1:]) + x[:, -1:]

    torch.manual_seed(0)
    x = torch.randn(1, 4, 64)
    path = tmp_path / "block.pte"
    vkx.export_model(Block().eval(), (x,), str(path))
    graph, constants = graph_and_constants(path)
    short, dropped = _without_defaults(graph)
    assert dropped >= 3, dropped
    validate(write_graph(tmp_path / "short.pte", short, constants))  # a file may hold these calls
    from vkx.loader import load_graph
    counts = []
    for each in (graph, short):
        with load_graph(each, constants) as program:
            counts.append((program.run_numpy(x.numpy())[0], program.dispatch_count))
    (full, full_dispatches), (out, dispatches) = counts
    np.testing.assert_array_equal(out, full)
    assert dispatches == full_dispatches
