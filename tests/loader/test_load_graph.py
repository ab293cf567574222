import numpy as np
import pytest

from vkx.format import vkgraph as g
from vkx.loader import load_graph
from vkx.loader.errors import UnsupportedOpError

from .helpers import no_device_limits, relu_add_graph, weights


@pytest.mark.parametrize("schedule, upload", [("lazy", "auto"), ("lazy", "staging"), ("lazy", "direct"),
                                              ("eager", "auto"), ("eager", "staging")])
def test_relu_add(schedule, upload):
    w = weights()
    x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    with load_graph(relu_add_graph(), [w.tobytes()], schedule=schedule, upload=upload) as p:
        out = p(x)
        ref = np.maximum(x, 0) + w
        np.testing.assert_array_equal(out, ref)
        assert p.ledger.total > 0
    assert p.ledger.is_zero


def test_load_graph_returns_a_program_that_owns_its_load():
    """load_graph gives a Program, as vkx.load does: its one method "forward" is called as the program
    and owns nothing of the load (no memory, state or ledger of its own; closing it refuses its calls
    and leaves the load), which the program holds and releases."""
    from vkx.loader import Method, Program
    from vkx.loader.errors import LoadError
    w = weights()
    x = np.ones(1000, np.float32)
    p = load_graph(relu_add_graph(), [w.tobytes()])
    assert isinstance(p, Program) and p.methods == ["forward"] and p["forward"] is p.only
    method = p.only
    assert isinstance(method, Method) and method.load is p.only.load
    program_only = {"memory", "ledger", "timeline", "states", "state", "reset", "methods", "weight_bytes", "upload"}
    assert program_only.isdisjoint(dir(method))
    assert p.memory.W == w.nbytes and p.upload in ("direct", "ring") and p.states == []
    method.close()
    with pytest.raises(LoadError, match="program is closed"):
        method(x)
    assert p.ledger.total > 0 and not p.closed
    p.close()
    assert p.closed and p.ledger.is_zero
    with pytest.raises(LoadError, match="program is closed"):
        p.reset()


def test_unsupported_op_before_allocation():
    graph = relu_add_graph()
    graph.chain.append(g.OperatorCall(2, "aten.nope.default", (0, 3)))
    with pytest.raises(UnsupportedOpError, match="aten.nope.default"):
        load_graph(graph, [weights().tobytes()])


def _prepacked_add(out_dtype):
    """out = x + prepack(w): w an fp16 constant, its prepack output in `out_dtype`."""
    from .helpers import tensor
    n = 100
    values = [tensor([n]), tensor([n], g.DataType.FLOAT16, cid=0), tensor([n], out_dtype), tensor([n])]
    chain = [g.OperatorCall(0, "et_vk.prepack.default", (1, 2)), g.OperatorCall(1, "test.add.default", (0, 2, 3))]
    graph = g.VkGraph(values=values, chain=chain, input_ids=[0], output_ids=[3],
                      constants=[g.ConstantRef(g.NAMED_OFFSET, 2 * n, "w")])
    w = np.linspace(-3, 3, n).astype(np.float16)
    return graph, w


@pytest.mark.parametrize("schedule", ["lazy", "eager"])
def test_prepack_of_a_weight_used_as_stored_is_free(schedule):
    """Same dtype: the prepack output is the constant's own device tensor; nothing runs per call."""
    from vkx.loader.build.graph import GraphBuilder
    graph, w = _prepacked_add(g.DataType.FLOAT16)
    built = GraphBuilder(graph, no_device_limits()).build()
    assert not built.prepack_dispatches and [d.shader for d in built.dispatches] == ["test_add"]
    with load_graph(graph, [w.tobytes()], schedule=schedule) as p:
        assert p.dispatch_count == 1
        assert p.weight_bytes == w.nbytes
        assert p.ledger.snapshot()["used"]["weights"] == w.nbytes  # one device tensor, not two


def test_prepack_that_converts_runs_once_at_load():
    """fp16 weight -> fp32 device tensor (older files): one load-time dispatch, none per call."""
    from vkx.loader.build.graph import GraphBuilder
    graph, w = _prepacked_add(g.DataType.FLOAT32)
    built = GraphBuilder(graph, no_device_limits()).build()
    assert [d.shader for d in built.prepack_dispatches] == ["cast"]
    assert [d.shader for d in built.dispatches] == ["test_add"]
    x = np.arange(100, dtype=np.float32)
    with load_graph(graph, [w.tobytes()]) as p:
        assert p.dispatch_count == 1
        for _ in range(3):
            np.testing.assert_array_equal(p(x), x + w.astype(np.float32))


def test_tensors_of_one_constant_must_have_one_size():
    """A 4096-byte tensor bound to a 40-byte constant: refused before anything runs (validate's rule)."""
    from vkx.loader.errors import BadProgramError
    from .helpers import tensor
    values = [tensor([10], cid=0), tensor([1024], cid=0), tensor([10]), tensor([1024])]
    chain = [g.OperatorCall(0, "test.relu.default", (0, 2)), g.OperatorCall(1, "test.relu.default", (1, 3))]
    graph = g.VkGraph(values=values, chain=chain, output_ids=[2, 3],
                      constants=[g.ConstantRef(g.NAMED_OFFSET, 40, "c")])
    with pytest.raises(BadProgramError, match="one size"):
        load_graph(graph, [bytes(40)])


def test_activations_past_the_device_heap_are_refused_before_any_work():
    """A graph whose shapes agree but whose activations cannot fit: a typed error, no allocation."""
    from vkx.loader.gpu.device import default_device
    from vkx.loader.errors import OutOfDeviceMemoryError
    from .helpers import tensor
    heap = max(default_device().heap_sizes)
    n = min(heap // 4 + 1024, 1 << 30)  # elements of one fp32 tensor: within 32-bit indexing
    count = heap // (4 * n) + 1  # activations in objects of their own, together past the largest heap
    values = [tensor([n])] + [tensor([n], mem=i) for i in range(count)]
    graph = g.VkGraph(values=values, input_ids=[0], output_ids=[count],
                      chain=[g.OperatorCall(i, "test.relu_split.default", (i, i + 1)) for i in range(count)])
    with pytest.raises(OutOfDeviceMemoryError, match="activations") as info:
        load_graph(graph, [])
    assert info.value.ledger["total"] == 0


@pytest.mark.parametrize("bad,error", [({"memory_budget": "lots"}, "memory_budget"), ({"memory_budget": -5}, "memory_budget"),
                                       ({"staging_chunks": 0}, "staging_chunks"), ({"schedule": "soon"}, "schedule"),
                                       ({"staging_chunk_bytes": 4096}, "staging_chunk_bytes must be at least 64 KiB")])
def test_bad_load_options_are_typed(bad, error):
    from vkx.loader.errors import LoadError
    from .helpers import relu_add_graph, weights
    graph = relu_add_graph()
    options = {"schedule": "lazy", **bad}
    with pytest.raises(LoadError, match=error):
        load_graph(graph, [weights()], **options)


def test_load_of_no_path_is_typed():
    import vkx
    from vkx.loader.errors import FileError
    with pytest.raises(FileError, match="path of a .pte"):
        vkx.load(None)


def test_every_declared_op_has_one_builder():
    """The contract and the loader agree: each declared op (bar test-only ones) has a builder, and a
    second builder for one op is refused."""
    from vkx.format import opset
    from vkx.loader import ops
    ops._load_all()
    declared = {n for n in opset.OPS if not n.startswith("test.")}
    assert declared <= set(ops.BUILDERS), sorted(declared - set(ops.BUILDERS))
    with pytest.raises(ValueError, match="two builders"):
        ops.builds("aten.relu.default")(lambda b, call: None)
