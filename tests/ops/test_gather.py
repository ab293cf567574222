"""The gathers against torch, in every dtype a device tensor has: embedding, gather, index and
index_select (hand-built one-op graphs), bit-exact."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from .conftest import (ALL_DTYPES, Const, Fn, Values, assert_close, assert_close_in, assert_equal, rand, rand_of,
                       run_graph, run_vkx)

pytestmark = pytest.mark.vulkan

by_dtype = pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dim, dtype):
    x = rand_of((4, 5, 6), 12, dtype)
    shape = [3, 4, 5]
    size = x.shape[dim]
    index = torch.randint(-size, size, shape, generator=torch.Generator().manual_seed(dim + 2))
    want = torch.gather(x, dim, index % size)
    got = run_graph("aten.gather.default", [x, dim, index.to(torch.int32)], (tuple(shape), dtype))
    assert_close(got, want)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("case", ["one", "two", "mask"])
def test_index(case, dtype):
    x = rand_of((4, 6, 3), 13, dtype)
    g = torch.Generator().manual_seed(3)
    if case == "one":
        indices = [torch.randint(-4, 4, (2, 5), generator=g)]
    elif case == "two":
        indices = [torch.randint(0, 4, (5, 1), generator=g), torch.randint(-6, 6, (1, 2), generator=g)]
    else:  # transformers' padding mask: mask[batch_idx, kv_idx] with broadcast aranges
        x = x[:, :, 0].contiguous()
        indices = [torch.arange(4).view(4, 1, 1, 1), torch.arange(6).view(1, 1, 1, 6)]
    want = x[tuple(indices)]
    got = run_graph("aten.index.Tensor", [x, Values([i.to(torch.int32) for i in indices])],
                    (tuple(want.shape), dtype))
    assert_close(got, want)


@pytest.mark.parametrize("shape,dim,index", [((4, 9, 3), 1, [3, 1, 5, 5, 8]), ((4, 9, 3), -3, [2]), ((7,), 0, [6, 0])])
@by_dtype
def test_index_select(shape, dim, index, dtype):
    x = rand_of(shape, 13, dtype)
    idx = torch.tensor(index, dtype=torch.int32)
    want = x.index_select(dim, idx)
    assert_equal(run_graph("aten.index_select.default", [x, dim, idx], (tuple(want.shape), dtype)), want)


@pytest.mark.parametrize("idx_shape", [(1,), (7,), (2, 5), (2, 3, 3)])
@by_dtype
def test_embedding(idx_shape, dtype):
    w = rand_of((17, 6), 30, dtype)
    idx = torch.randint(0, 17, idx_shape, generator=torch.Generator().manual_seed(31), dtype=torch.int32)
    want = F.embedding(idx, w) if dtype.is_floating_point else w[idx.long()]
    assert_equal(run_graph("aten.embedding.default", [Const(w), idx, -1, False, False], (tuple(want.shape), dtype)), want)


@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int8, torch.uint8])
def test_embedding_index_types(idx_dtype):
    w = rand_of((33, 5), 32, torch.float16)
    idx = torch.tensor([[0, 32, 5], [7, 7, 1]], dtype=idx_dtype)
    want = w[idx.long()]
    assert_equal(run_graph("aten.embedding.default", [Const(w), idx], ((2, 3, 5), torch.float16)), want)


@pytest.mark.parametrize("table,out", [(torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                                       (torch.float32, torch.float16)], ids=str)
def test_embedding_converts(table, out):
    """A table stored in another dtype than the activations (an fp16-weight export)."""
    w = rand_of((33, 5), 33, table)
    idx = torch.tensor([[0, 32, 5], [7, 7, 1]], dtype=torch.int32)
    got = run_graph("aten.embedding.default", [Const(w), idx], ((2, 3, 5), out))
    assert_close_in(got, w[idx.long()].to(out), out, each=True)


@pytest.mark.parametrize("binding", [None, 128])
def test_embedding_out_of_range_is_zero(binding):
    """torch raises for such indices; a file may hold them: they read no memory outside the table."""
    w = rand_of((9, 4), 34, torch.float32) + 100  # no zero rows
    idx = torch.tensor([0, -1, 9, 8, 2**31 - 1, -2**31, 4], dtype=torch.int32)
    want = w[idx.clamp(0, 8).long()]
    want[(idx < 0) | (idx > 8)] = 0
    kwargs = {} if binding is None else {"max_binding_bytes": binding}  # row blocks: each writes only its own
    assert_equal(run_graph("aten.embedding.default", [Const(w), idx], ((7, 4), torch.float32), **kwargs), want)


def test_embedding_split_table():
    """A table larger than one binding is split by rows; a small binding limit tests it cheaply."""
    w = rand(301, 5, seed=33)  # 6020 bytes; 4096-byte bindings -> row blocks
    idx = torch.tensor([[0, 300, 150, 51], [52, 203, 204, 299]], dtype=torch.int32)
    got = run_graph("aten.embedding.default", [Const(w), idx, -1, False, False], (2, 4, 5),
                    max_binding_bytes=4096)
    assert_close(got, F.embedding(idx, w), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [None, "fp16"])
def test_module_embedding(dtype):
    emb = torch.nn.Embedding(33, 7)
    with torch.no_grad():
        emb.weight.copy_(rand(33, 7, seed=110))
    module = Fn(lambda m, idx: m.emb(idx) * 2)
    module.emb = emb
    idx = torch.tensor([[0, 5, 32], [7, 7, 1]])
    tol = 1e-2 if dtype else 0
    assert_close(run_vkx(module, [idx], dtype=dtype), module(idx), rtol=tol, atol=tol)


def test_exported_expand_gather_index():
    fn = Fn(lambda m, x, i: torch.gather(x.expand(3, 4, 5), 2, i) + x[0].t()[i[:, :, 0]][..., :2])
    inputs = (rand(1, 4, 5, seed=7), torch.randint(0, 5, (3, 4, 2), generator=torch.Generator().manual_seed(1)))
    assert_close(run_vkx(fn, inputs), fn(*inputs))
