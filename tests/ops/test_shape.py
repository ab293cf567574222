"""Shape ops against torch: view, permute, slice, cat, embedding."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from .conftest import Const, Fn, Values, assert_close, rand, run_graph, run_vkx

pytestmark = pytest.mark.vulkan


@pytest.mark.parametrize("shape,size", [((3, 8), (24,)), ((2, 3, 7), (6, 7)), ((17,), (1, 17, 1)),
                                        ((5,), (5,)), ((), (1,))])
def test_view_copy(shape, size):
    x = rand(*shape, seed=1)
    assert_close(run_graph("aten.view_copy.default", [x, list(size)], size), x.reshape(size), rtol=0, atol=0)


def test_view_copy_int():
    x = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    got = run_graph("aten.view_copy.default", [x, [4, 3]], ((4, 3), torch.int32))
    assert_close(got, x.reshape(4, 3))


@pytest.mark.parametrize("shape,dims", [
    ((3, 7), [1, 0]),
    ((2, 3, 5), [2, 0, 1]),
    ((2, 3, 5), [-1, -2, -3]),
    ((2, 1, 3, 4), [0, 2, 1, 3]),        # moving a size-1 dim: a plain copy
    ((2, 3, 4, 5), [0, 1, 3, 2]),
    ((2, 3, 2, 3, 2, 3), [5, 3, 1, 4, 2, 0]),
    ((4, 8), [0, 1]),
])
def test_permute_copy(shape, dims):
    x = rand(*shape, seed=2)
    want = x.permute(dims)
    got = run_graph("aten.permute_copy.default", [x, list(dims)], tuple(want.shape))
    assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("shape,dim,start,end,step", [
    ((10,), 0, 2, 7, 1),
    ((10,), 0, None, None, 3),
    ((4, 9), 1, -5, None, 2),
    ((4, 9), -1, 1, -1, 1),
    ((4, 9), 0, 1, 100, 1),           # end clamped
    ((4, 9), 0, -100, 2, 1),          # start clamped
    ((3, 5, 7), 1, 1, 4, 2),
    ((3, 5, 7), 2, 0, 7, 3),
    ((3, 5, 7), 0, 2, 3, 1),
    ((6, 8), 1, 0, 4, 1),             # a chunk (split)
])
def test_slice_copy(shape, dim, start, end, step):
    x = rand(*shape, seed=3)
    want = torch.ops.aten.slice_copy.Tensor(x, dim, start, end, step)
    got = run_graph("aten.slice_copy.Tensor", [x, dim, start, end, step], tuple(want.shape))
    assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("shapes,dim", [
    ([(3,), (5,), (1,)], 0),
    ([(2, 3), (2, 5)], 1),
    ([(2, 3), (4, 3), (1, 3)], 0),
    ([(2, 3, 4), (2, 1, 4), (2, 7, 4)], -2),
    ([(2, 3, 4), (2, 3, 1)], -1),
    ([(2, 3), (0,), (2, 1)], 1),     # legacy empty 1-D input is skipped
])
def test_cat(shapes, dim):
    xs = [rand(*s, seed=10 + i) for i, s in enumerate(shapes)]
    want = torch.cat(xs, dim)
    got = run_graph("aten.cat.default", [Values(xs), dim], tuple(want.shape))
    assert_close(got, want, rtol=0, atol=0)


def test_cat_with_constant():
    x = rand(2, 3, seed=20)
    c = rand(2, 2, seed=21)
    want = torch.cat([c, x], 1)
    got = run_graph("aten.cat.default", [Values([Const(c), x]), 1], (2, 5))
    assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("idx_shape", [(1,), (7,), (2, 5), (2, 3, 3)])
def test_embedding(idx_shape):
    w = rand(17, 6, seed=30)
    idx = torch.randint(0, 17, idx_shape, generator=torch.Generator().manual_seed(31))
    want = F.embedding(idx, w)
    got = run_graph("aten.embedding.default", [Const(w), idx, -1, False, False], tuple(want.shape))
    assert_close(got, want, rtol=0, atol=0)


def test_embedding_fp16_table():
    w = rand(33, 5, seed=32).half()
    idx = torch.tensor([[0, 32, 5], [7, 7, 1]])
    want = F.embedding(idx, w.float())
    got = run_graph("aten.embedding.default", [Const(w), idx, -1, False, False], tuple(want.shape))
    assert_close(got, want, rtol=1e-2, atol=1e-2)


def test_embedding_split_table():
    """A table larger than one binding is split by rows; a small binding limit tests it cheaply."""
    w = rand(301, 5, seed=33)  # 6020 bytes; 4096-byte bindings -> row blocks
    idx = torch.tensor([[0, 300, 150, 51], [52, 203, 204, 299]])
    got = run_graph("aten.embedding.default", [Const(w), idx, -1, False, False], (2, 4, 5),
                    max_binding_bytes=4096)
    assert_close(got, F.embedding(idx, w), rtol=0, atol=0)


SMALL_BINDING = 1024  # bytes: forces the split paths on tiny tensors


def test_view_clone_split():
    x = rand(3, 301, seed=34)  # 3612 bytes
    got = run_graph("aten.view_copy.default", [x, [903]], (903,), max_binding_bytes=SMALL_BINDING)
    assert_close(got, x.reshape(903), rtol=0, atol=0)
    got = run_graph("aten.clone.default", [x, None], (3, 301), max_binding_bytes=SMALL_BINDING)
    assert_close(got, x, rtol=0, atol=0)


def test_cat_into_large_output():
    a, b = rand(2, 350, seed=35), rand(2, 201, seed=36)  # out 4408 bytes
    got = run_graph("aten.cat.default", [Values([a, b]), 1], (2, 551), max_binding_bytes=4096)
    assert_close(got, torch.cat([a, b], 1), rtol=0, atol=0)
    a, b = rand(700, seed=35), rand(401, seed=36)
    got = run_graph("aten.cat.default", [Values([a, b]), 0], (1101,), max_binding_bytes=4096)
    assert_close(got, torch.cat([a, b]), rtol=0, atol=0)


# --------------------------------------------------------------------------- through the exporter

MODULES = {
    "reshape": (lambda m, x: (x * 2).reshape(4, 6), [(2, 3, 4)]),
    "flatten_unsqueeze": (lambda m, x: torch.flatten(x + 1, 1).unsqueeze(0), [(2, 3, 5)]),
    "permute": (lambda m, x: (x + 1).permute(2, 0, 1), [(2, 3, 5)]),
    "transpose": (lambda m, x: (x + 1).transpose(-1, -2), [(3, 7)]),
    "slice": (lambda m, x: (x + 1)[:, 1:6:2], [(4, 9)]),
    "slice_negative": (lambda m, x: (x + 1)[-3:, :-1], [(5, 4)]),
    "chunk": (lambda m, x: torch.chunk(x + 1, 3, dim=-1), [(2, 9)]),
    "split": (lambda m, x: torch.split(x + 1, [2, 5], dim=0), [(7, 3)]),
    "cat": (lambda m, x, y: torch.cat([x, y * 2], dim=1), [(2, 3), (2, 5)]),
    "cat_neg": (lambda m, x, y: torch.cat([x + 1, y, x], dim=-1), [(3, 2, 1), (3, 2, 4)]),
}


@pytest.mark.parametrize("case", list(MODULES))
def test_module(case):
    fn, shapes = MODULES[case]
    module = Fn(fn)
    inputs = [rand(*s, seed=100 + i) for i, s in enumerate(shapes)]
    assert_close(run_vkx(module, inputs), module(*inputs), rtol=0, atol=0)


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
