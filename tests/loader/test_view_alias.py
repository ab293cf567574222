"""view_copy of a contiguous tensor costs no dispatch where no other tensor can overwrite its
bytes meanwhile (loader/build/graph.py `alias_view`), and stays a copy where one can."""
import numpy as np
import pytest

from vkx.format import vkgraph as g
from vkx.loader import load_graph

from .helpers import tensor

pytestmark = pytest.mark.vulkan


def _two_views(t_mem: int, in_source: bool, dt=g.DataType.FLOAT32):
    """out = view(relu(a)) * view(neg(a)); neg(a) gets memory object `t_mem` (0 is relu(a)'s,
    free by the file's plan once the first view has copied it); each view is planned into its
    source's object (`in_source`, as vkx plans them) or into one of its own."""
    values = [tensor([4, 6], dt), tensor([4, 6], dt, mem=0), g.IntList((24,)), tensor([24], dt, mem=0 if in_source else 1),
              tensor([4, 6], dt, mem=t_mem), tensor([24], dt, mem=t_mem if in_source else 3), tensor([24], dt, mem=4)]
    chain = [g.OperatorCall(0, "aten.relu.default", (0, 1)),
             g.OperatorCall(1, "aten.view_copy.default", (1, 2, 3)),
             g.OperatorCall(2, "aten.neg.default", (0, 4)),
             g.OperatorCall(3, "aten.view_copy.default", (4, 2, 5)),
             g.OperatorCall(4, "aten.mul.Tensor", (3, 5, 6))]
    return g.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=[6], constants=[])


@pytest.mark.parametrize("dt,np_dt", [(g.DataType.FLOAT32, np.float32), (g.DataType.FLOAT16, np.float16)])
@pytest.mark.parametrize("t_mem,in_source,dispatches", [(2, True, 3), (2, False, 5), (0, False, 5)],
                         ids=["aliased", "planned-apart", "memory-reused"])
def test_view_aliases_unless_its_memory_is_reused(t_mem, in_source, dispatches, dt, np_dt):
    a = np.random.default_rng(0).standard_normal((4, 6)).astype(np_dt)
    with load_graph(_two_views(t_mem, in_source, dt)) as p:
        # both views alias when the plan gives each its source's object; planned into objects of
        # their own (where another tensor may reuse the source's bytes meanwhile) they stay copies
        assert p.dispatch_count == dispatches
        np.testing.assert_array_equal(np.asarray(p(a)), (np.maximum(a, 0) * -a).reshape(24))


def test_view_of_an_input_and_of_a_constant():
    """A view of a graph input (never written) and a view of a view alias; a view that is a graph
    output is copied (its io port keeps its own shape)."""
    w = np.random.default_rng(1).standard_normal(12).astype(np.float32)
    values = [tensor([3, 4]), tensor([12], cid=0), g.IntList((12,)), tensor([12], mem=0),
              g.IntList((3, 4)), tensor([3, 4], mem=1), tensor([12], mem=1), tensor([12], mem=3)]
    chain = [g.OperatorCall(0, "aten.view_copy.default", (0, 2, 3)),      # input -> alias
             g.OperatorCall(1, "aten.view_copy.default", (1, 4, 5)),      # an output: copied
             g.OperatorCall(2, "aten.view_copy.default", (5, 2, 6)),      # of that output, in its object -> alias
             g.OperatorCall(3, "aten.mul.Tensor", (3, 6, 7))]
    graph = g.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=[7, 5],
                      constants=[g.ConstantRef(g.NAMED_OFFSET, 48, "w")])
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    with load_graph(graph, [w.tobytes()]) as p:
        assert p.dispatch_count == 2  # the mul, and the copy into output 5
        prod, view = p(x)
        np.testing.assert_array_equal(np.asarray(prod), x.reshape(12) * w)
        np.testing.assert_array_equal(np.asarray(view), w.reshape(3, 4))


def test_vkx_plan_gives_a_view_its_source_memory():
    """vkx's plan puts a view in its source's memory object, so every view of the example
    transformer block (q, k, v split into heads, the heads merged back) is free."""
    import tempfile

    import torch

    import vkx
    from vkx.export.model_file import load_model_file
    from pathlib import Path

    module, inputs = load_model_file(Path(__file__).resolve().parents[2] / "examples" / "transformer.py")
    with tempfile.TemporaryDirectory() as tmp:
        vkx.export_model(module, inputs, f"{tmp}/m.pte")
        with vkx.load(f"{tmp}/m.pte") as program:
            ops = program.profile(*inputs, runs=1)
            got = program(*inputs)
    assert not [node for node, _, _ in ops if "view_copy" in node]
    with torch.no_grad():
        torch.testing.assert_close(got, module(*inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dims,aliased", [((0, 2, 1, 3), True), ((0, 1, 3, 2), False)],
                         ids=["size-1-dims-move", "elements-move"])
def test_permute_that_keeps_the_element_order_is_a_view(dims, aliased):
    """[1, 1, 4, 6] -> [1, 4, 1, 6] moves no element: planned into its source's object
    (vkx.format.liveness.is_view) and aliased; swapping the last two dims is a copy."""
    from vkx.format import liveness

    out_shape = [[1, 1, 4, 6][d] for d in dims]
    # the exporter's plan: a view in its source's object, a copy in one of its own
    values = [tensor([1, 1, 4, 6]), tensor([1, 1, 4, 6], mem=0), g.IntList(dims),
              tensor(out_shape, mem=0 if aliased else 2), tensor(out_shape, mem=1)]
    chain = [g.OperatorCall(0, "aten.relu.default", (0, 1)),
             g.OperatorCall(1, "aten.permute_copy.default", (1, 2, 3)),
             g.OperatorCall(2, "aten.neg.default", (3, 4))]
    graph = g.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=[4], constants=[])
    assert (3 in liveness.view_sources(graph)) == aliased
    a = np.random.default_rng(2).standard_normal((1, 1, 4, 6)).astype(np.float32)
    with load_graph(graph) as p:
        assert p.dispatch_count == (2 if aliased else 3)
        np.testing.assert_array_equal(np.asarray(p(a)), -np.maximum(a, 0).transpose(dims))


@pytest.mark.parametrize("start,end,aliased", [(-1, None, True), (0, 1, True), (0, 0, False)],
                         ids=["last-of-one", "whole", "empty"])
def test_slice_that_keeps_every_element_is_a_view(start, end, aliased):
    """A decode step's logits_to_keep slice ([1, 1, 8] -> its last position, [1, 1, 8]) keeps every
    element: planned into its source's object (vkx.format.liveness.is_view) and aliased."""
    from vkx.format import liveness

    out_shape = [1, 1 if aliased else 0, 8]
    values = [tensor([1, 1, 8]), tensor([1, 1, 8], mem=0), g.Int(1), g.Int(start),
              g.Null() if end is None else g.Int(end), g.Int(1), tensor(out_shape, mem=0 if aliased else 2),
              tensor(out_shape, mem=1)]
    chain = [g.OperatorCall(0, "aten.relu.default", (0, 1)),
             g.OperatorCall(1, "aten.slice_copy.Tensor", (1, 2, 3, 4, 5, 6)),
             g.OperatorCall(2, "aten.neg.default", (6, 7))]
    graph = g.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=[7], constants=[])
    assert (6 in liveness.view_sources(graph)) == aliased
    a = np.random.default_rng(3).standard_normal((1, 1, 8)).astype(np.float32)
    with load_graph(graph) as p:
        if aliased:
            assert p.dispatch_count == 2
            np.testing.assert_array_equal(np.asarray(p(a)), -np.maximum(a, 0))
