"""Hand-built VkGraphs for loader tests."""
from __future__ import annotations

import numpy as np

from vkx.format import vkgraph as g


def tensor(dims, dt=g.DataType.FLOAT32, cid=-1, mem=-1):
    return g.Tensor(dt, tuple(dims), constant_id=cid, mem_obj_id=mem)


def relu_add_graph(n=1000, wdtype=g.DataType.FLOAT32, shared=True):
    """out = relu(x) + w, with w a constant; mid and out share a memory object when `shared`."""
    values = [
        tensor([n]),                                    # 0 x
        tensor([n], wdtype, cid=0),                     # 1 w
        tensor([n], mem=0 if shared else -1),           # 2 relu(x)
        tensor([n], mem=1 if shared else -1),           # 3 out
    ]
    chain = [g.OperatorCall(0, "test.relu.default", (0, 2)),
             g.OperatorCall(1, "test.add.default", (2, 1, 3))]
    consts = [g.ConstantRef(g.NAMED_OFFSET, n * wdtype.itemsize, "w")]
    return g.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=[3], constants=consts)


def weights(n=1000, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)
