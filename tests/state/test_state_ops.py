"""The state ops on hand-built graphs: `vkx.state` then `vkx.index_copy` / `vkx.copy` into it,
call after call, against the same updates in torch; every dtype a state may have."""
from __future__ import annotations

import pytest
import torch

from vkx.format import vkgraph as g
from vkx.format.opset import check_graph
from vkx.loader import load_graph
from vkx.loader.errors import BadProgramError, InputError

DATATYPES = {torch.float32: g.DataType.FLOAT32, torch.float16: g.DataType.FLOAT16,
             torch.int32: g.DataType.INT32, torch.int8: g.DataType.INT8}


def state_graph(update: str, shape, dtype, dim: int, n: int, initial: torch.Tensor | None = None) -> g.VkGraph:
    """inputs (positions int32 [n], source) -> the state after `update` (vkx.index_copy or vkx.copy)."""
    dt = DATATYPES[dtype]
    graph = g.VkGraph()
    values = graph.values

    def add(v) -> int:
        values.append(v)
        return len(values) - 1

    init = add(g.Null()) if initial is None else add(g.Tensor(dt, tuple(shape), constant_id=0))
    if initial is not None:
        graph.constants = [g.ConstantRef(g.NAMED_OFFSET, initial.numel() * initial.element_size(), "init")]
    state = add(g.Tensor(dt, tuple(shape)))
    graph.chain.append(g.OperatorCall(0, "vkx.state.default", (add(g.String("cache")), init, state)))
    out = add(g.Tensor(dt, tuple(shape)))
    if update == "vkx.index_copy.default":
        source_shape = tuple(shape[:dim]) + (n,) + tuple(shape[dim + 1:])
        positions, source = add(g.Tensor(g.DataType.INT32, (n,))), add(g.Tensor(dt, source_shape))
        graph.input_ids = [positions, source]
        graph.chain.append(g.OperatorCall(1, update, (state, add(g.Int(dim)), positions, source, out)))
    else:
        source = add(g.Tensor(dt, tuple(shape)))
        graph.input_ids = [source]
        graph.chain.append(g.OperatorCall(1, update, (state, source, out)))
    graph.output_ids = [out]
    check_graph(graph)
    return graph


def values_of(shape, dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=gen) * 4).to(dtype)
    return torch.randint(-100, 100, shape, generator=gen).to(dtype)


@pytest.mark.parametrize("dtype", list(DATATYPES))
@pytest.mark.parametrize("shape,dim", [((6, 5), 0), ((2, 7, 3), 1), ((1, 2, 9, 4), 2), ((3, 8), 1)])
def test_index_copy_into_state(dtype, shape, dim):
    n = 2
    graph = state_graph("vkx.index_copy.default", shape, dtype, dim, n)
    want = torch.zeros(shape, dtype=dtype)
    with load_graph(graph) as program:
        for step in range(6):
            positions = torch.tensor([(2 * step) % shape[dim], (2 * step + 1) % shape[dim]], dtype=torch.int32)
            source = values_of(tuple(shape[:dim]) + (n,) + tuple(shape[dim + 1:]), dtype, step)
            want.index_copy_(dim, positions.long(), source)
            assert torch.equal(program(positions, source), want)
        assert torch.equal(program.state("cache"), want)
        program.reset()
        assert torch.equal(program.state("cache"), torch.zeros(shape, dtype=dtype))


def test_positions_outside_the_state_are_refused_and_write_nothing():
    """The call checks the positions on the host (vkx.format.indexing); the state is untouched."""
    graph = state_graph("vkx.index_copy.default", (4, 3), torch.float32, 0, 2)
    with load_graph(graph) as program:
        source = torch.ones(2, 3)
        for positions in ([-1, 4], [3, 7]):
            with pytest.raises(InputError, match="is outside the cache"):
                program(torch.tensor(positions, dtype=torch.int32), source)
        assert torch.equal(program.state("cache"), torch.zeros(4, 3))
        got = program(torch.tensor([3, 0], dtype=torch.int32), source)
        assert torch.equal(got, torch.tensor([[1.0] * 3] + [[0.0] * 3] * 2 + [[1.0] * 3]))


def test_copy_into_state_with_an_initial_constant():
    initial = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    graph = state_graph("vkx.copy.default", (3, 4), torch.float32, 0, 0, initial)
    with load_graph(graph, [initial.numpy().tobytes()]) as program:
        assert torch.equal(program.state("cache"), initial)
        x = torch.randn(3, 4)
        assert torch.equal(program(x), x)
        assert torch.equal(program.state("cache"), x)
        program.reset()
        assert torch.equal(program.state("cache"), initial)


def test_a_state_declared_twice_is_refused():
    graph = state_graph("vkx.copy.default", (3, 4), torch.float32, 0, 0)
    first = graph.chain[0]
    again = len(graph.values)
    graph.values.append(g.Tensor(g.DataType.FLOAT32, (3, 4)))
    graph.chain.insert(1, g.OperatorCall(5, first.name, (first.args[0], first.args[1], again)))
    with pytest.raises(BadProgramError, match="state 'cache' is declared twice"):
        load_graph(graph)


def test_an_update_into_a_tensor_that_is_not_state_is_refused(tmp_path):
    """A crafted file whose index_copy writes into an input (it could as well be a weight) neither
    validates nor loads."""
    from vkx.format import validate, write_program
    from vkx.format.common import ScalarType
    from vkx.format.errors import InvalidValueError
    from vkx.format.writer import IOSpec

    graph = state_graph("vkx.index_copy.default", (4, 3), torch.float32, 0, 1)
    update = graph.chain[1]
    base = len(graph.values)
    graph.values.append(g.Tensor(g.DataType.FLOAT32, (4, 3)))
    graph.input_ids.append(base)
    graph.chain[1] = g.OperatorCall(1, update.name, (base,) + update.args[1:])
    with pytest.raises(BadProgramError, match="not a state tensor"):
        load_graph(graph)
    path = tmp_path / "bad.pte"
    inputs = [IOSpec(ScalarType.INT, (1,)), IOSpec(ScalarType.FLOAT, (1, 3)), IOSpec(ScalarType.FLOAT, (4, 3))]
    write_program(path, graph, [], inputs, [IOSpec(ScalarType.FLOAT, (4, 3))])
    with pytest.raises(InvalidValueError, match="not a state tensor"):
        validate(path)
