"""load_graph with the op modules' relu / add / linear, checked against torch."""
import numpy as np
import pytest
import torch

from vkx.format import vkgraph as g
from vkx.loader import load_graph

from .helpers import tensor


def mlp_graph(n=5, k=37, m=23):
    """y = relu(linear(x, W, b)) + x2 ; W, b constants."""
    v = [
        tensor([n, k]),                       # 0 x
        tensor([m, k], cid=0),                # 1 W
        tensor([m], cid=1),                   # 2 b
        tensor([n, m], mem=0),                # 3 lin
        tensor([n, m], mem=1),                # 4 relu
        tensor([n, m]),                       # 5 x2
        g.Int(1),                             # 6 alpha
        tensor([n, m], mem=0),                # 7 out
    ]
    chain = [g.OperatorCall(0, "aten.linear.default", (0, 1, 2, 3)),
             g.OperatorCall(1, "aten.relu.default", (3, 4)),
             g.OperatorCall(2, "aten.add.Tensor", (4, 5, 6, 7))]
    consts = [g.ConstantRef(g.NAMED_OFFSET, m * k * 4, "W"), g.ConstantRef(g.NAMED_OFFSET, m * 4, "b")]
    return g.VkGraph(chain=chain, values=v, input_ids=[0, 5], output_ids=[7], constants=consts)


@pytest.mark.parametrize("schedule,upload", [("lazy", "auto"), ("lazy", "staging"), ("eager", "auto")])
def test_mlp_matches_torch(schedule, upload):
    torch.manual_seed(0)
    W, b = torch.randn(23, 37), torch.randn(23)
    x, x2 = torch.randn(5, 37), torch.randn(5, 23)
    with load_graph(mlp_graph(), [W.numpy().tobytes(), b.numpy().tobytes()],
                    schedule=schedule, upload=upload) as p:
        out = p(x, x2)
        ref = torch.relu(torch.nn.functional.linear(x, W, b)) + x2
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        out2 = p(x, x2)
        assert torch.equal(out, out2)
    assert p.ledger.is_zero


def test_eager_and_lazy_bit_identical():
    rng = np.random.default_rng(3)
    W, b = rng.standard_normal((23, 37)).astype(np.float32), rng.standard_normal(23).astype(np.float32)
    x, x2 = rng.standard_normal((5, 37)).astype(np.float32), rng.standard_normal((5, 23)).astype(np.float32)
    outs = []
    for schedule, upload in [("lazy", "auto"), ("lazy", "staging"), ("eager", "auto")]:
        with load_graph(mlp_graph(), [W.tobytes(), b.tobytes()], schedule=schedule, upload=upload) as p:
            outs.append(p(x, x2))
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
