import numpy as np
import pytest

from vkx.format import vkgraph as g
from vkx.loader import load_graph
from vkx.loader.errors import UnsupportedOpError

from .helpers import relu_add_graph, weights


@pytest.mark.parametrize("schedule", ["lazy", "eager"])
@pytest.mark.parametrize("upload", ["auto", "staging"])
def test_relu_add(schedule, upload):
    if schedule == "eager" and upload == "direct":
        pytest.skip()
    w = weights()
    x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    with load_graph(relu_add_graph(), [w.tobytes()], schedule=schedule, upload=upload) as p:
        out = p(x)
        ref = np.maximum(x, 0) + w
        np.testing.assert_array_equal(out.numpy(), ref)
        assert p.ledger.total > 0
    assert p.ledger.is_zero


def test_unsupported_op_before_allocation():
    graph = relu_add_graph()
    graph.chain.append(g.OperatorCall(2, "aten.nope.default", (0, 3)))
    with pytest.raises(UnsupportedOpError, match="aten.nope.default"):
        load_graph(graph, [weights().tobytes()])
