"""The op contract (vkx.format.contract): declarations, binding, shape rules, and validate() running them."""
from __future__ import annotations

import dataclasses

import pytest

from vkx.format import InvalidValueError, contract, op_rules, opset, validate
from vkx.format import vkgraph as vk

from .fmt_tiny import GOLDEN, tiny_graph, tiny_payloads
from vkx.format import IOSpec, ScalarType, write_program

F32 = vk.DataType.FLOAT32


def _write(path, graph: vk.VkGraph) -> None:
    write_program(path, graph, tiny_payloads(), [IOSpec(ScalarType.FLOAT, (1, 4))],
                  [IOSpec(ScalarType.FLOAT, (1, 3))])


def _with_value(graph: vk.VkGraph, vid: int, value) -> vk.VkGraph:
    values = list(graph.values)
    values[vid] = value
    return dataclasses.replace(graph, values=values)


def _with_op(graph: vk.VkGraph, index: int, **changes) -> vk.VkGraph:
    chain = list(graph.chain)
    chain[index] = dataclasses.replace(chain[index], **changes)
    return dataclasses.replace(graph, chain=chain)


def test_the_golden_program_satisfies_the_contract():
    calls = opset.check_graph(tiny_graph())
    assert [c.decl.name for c in calls] == [op.name for op in tiny_graph().chain]
    linear = calls[1]
    assert linear.tensor("weight").shape == (3, 4) and linear["bias"].shape == (3,)
    assert linear.out.shape == (1, 3)
    validate(GOLDEN / "tiny_named.pte")


def _act(dims):
    return vk.Tensor(F32, dims, mem_obj_id=1, storage_type=vk.StorageType.BUFFER,
                     memory_layout=vk.MemoryLayout.TENSOR_WIDTH_PACKED, staging_datatype=F32)


MUTATIONS = {
    "linear output too narrow": lambda g: _with_value(g, 4, _act((1, 2))),
    "linear output too wide": lambda g: _with_value(g, 4, _act((1, 5))),
    "input batch 10^6": lambda g: _with_value(g, 3, _act((1_000_000, 4))),
    "input with the wrong K": lambda g: _with_value(g, 3, _act((1, 5))),
    "prepack output of another shape": lambda g: _with_value(g, 6, _act((4,))),
    "relu output of another shape": lambda g: _with_value(g, 5, _act((3, 1))),
    "add that does not broadcast": lambda g: _with_value(g, 8, _act((2, 3))),
    "datatype UNSET": lambda g: _with_value(g, 5, dataclasses.replace(g.values[5], datatype=vk.DataType.UNSET)),
    "dim past 32-bit indexing": lambda g: _with_value(g, 3, _act((2**31, 4))),
    "alpha is a String": lambda g: _with_value(g, 7, vk.String("x")),
    "weight is an Int": lambda g: _with_op(g, 1, args=(3, 7, 1, 4)),
    "linear without its weight": lambda g: _with_op(g, 1, args=(3, 4)),
    "unknown op": lambda g: _with_op(g, 2, name="aten.frobnicate.default"),
    "relu with an extra argument": lambda g: _with_op(g, 2, args=(4, 7, 5)),
}


@pytest.mark.parametrize("name", MUTATIONS)
def test_validate_refuses_calls_that_break_their_declaration(tmp_path, name):
    graph = MUTATIONS[name](tiny_graph())
    with pytest.raises(contract.ContractError):
        opset.check_graph(graph)
    path = tmp_path / "m.pte"
    _write(path, graph)
    with pytest.raises(InvalidValueError) as info:
        validate(path)
    assert "vkgraph" in info.value.where


def test_a_number_past_float32_is_refused_unless_it_saturates():
    g = tiny_graph()
    eps = vk.Double(1e308)
    with pytest.raises(contract.ContractError, match="does not fit a float32"):
        opset.check_graph(_with_value(g, 7, eps))
    conv = opset.lookup("et_vk.conv_with_clamp.default")
    assert conv.arg("output_max").saturates and not opset.lookup("aten.add.Tensor").arg("alpha").saturates


def test_trailing_defaults_may_be_left_out():
    g = tiny_graph()
    call = opset.check_graph(_with_op(g, 3, args=(5, 6, 8)))[3]  # add without alpha
    assert call["alpha"] == 1 and call.vid("alpha") is None


def test_declaring_an_op_twice_is_an_error():
    with pytest.raises(ValueError, match="declared twice"):
        opset.declare(opset.lookup("aten.relu.default"))


def test_shape_rules_match_torch():
    import torch
    F = torch.nn.functional
    for a, b in [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((5, 2, 3), (3, 4)), ((2, 1, 3, 4), (5, 4, 2))]:
        assert op_rules.matmul_shape(a, b) == tuple(torch.matmul(torch.ones(a), torch.ones(b)).shape)
    assert op_rules.matmul_shape((2, 3), (4, 5)) is None
    for size in (5, 6, 7):
        for start, end, step in [(None, None, 2), (-3, None, 1), (1, -1, 3), (10, 20, 1), (-100, 2, 1)]:
            s, n = op_rules.slice_length(size, start, end, step)
            assert n == len(range(size)[start:end:step]) and (n == 0 or s == range(size)[start:end:step][0])
    for size, k, st, pad, dil, ceil in [(7, 3, 2, 1, 1, True), (8, 2, 2, 0, 1, True), (9, 3, 3, 1, 2, False)]:
        want = F.max_pool2d(torch.ones(1, 1, size, size), k, st, pad, dil, ceil_mode=ceil).shape[-1]
        assert op_rules.window_size(size, k, st, pad, dil, ceil) == want
