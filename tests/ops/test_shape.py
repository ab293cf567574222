"""Shape ops against torch, bit-exact in every dtype: view, permute, slice, cat, embedding."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from .conftest import (EXPORT_DTYPES, FLOAT_DTYPES, Const, Fn, Values, assert_close, assert_close_in, rand, rand_of,
                       run_graph, run_vkx)

pytestmark = pytest.mark.vulkan

ALL_DTYPES = (*FLOAT_DTYPES, torch.int32, torch.int8, torch.uint8, torch.bool)
DTYPE_IDS = [str(d).removeprefix("torch.") for d in ALL_DTYPES]


def _equal(got, want):
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    assert tuple(got.shape) == tuple(want.shape), f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert torch.equal(got, want) or (want.is_floating_point() and torch.equal(got.isnan(), want.isnan())
                                      and torch.equal(got.nan_to_num(), want.nan_to_num())), f"{got} != {want}"


by_dtype = pytest.mark.parametrize("dtype", ALL_DTYPES, ids=DTYPE_IDS)


@pytest.mark.parametrize("shape,size", [((3, 8), (24,)), ((2, 3, 7), (6, 7)), ((17,), (1, 17, 1)),
                                        ((5,), (5,)), ((), (1,))])
@by_dtype
def test_view_copy(shape, size, dtype):
    x = rand_of(shape, 1, dtype)
    _equal(run_graph("aten.view_copy.default", [x, list(size)], (size, dtype)), x.reshape(size))


def test_view_copy_infers_minus_one():
    x = rand_of((3, 8), 1, torch.float16)
    _equal(run_graph("aten.view_copy.default", [x, [-1, 4]], ((6, 4), torch.float16)), x.reshape(-1, 4))


@pytest.mark.parametrize("shape,dims", [
    ((3, 7), [1, 0]),
    ((2, 3, 5), [2, 0, 1]),
    ((2, 3, 5), [-1, -2, -3]),
    ((2, 1, 3, 4), [0, 2, 1, 3]),        # moving a size-1 dim: a plain copy
    ((2, 3, 4, 5), [0, 1, 3, 2]),
    ((2, 3, 2, 3, 2, 3), [5, 3, 1, 4, 2, 0]),
    ((4, 8), [0, 1]),
])
@by_dtype
def test_permute_copy(shape, dims, dtype):
    x = rand_of(shape, 2, dtype)
    want = x.permute(dims).contiguous()
    _equal(run_graph("aten.permute_copy.default", [x, list(dims)], (tuple(want.shape), dtype)), want)


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
@by_dtype
def test_slice_copy(shape, dim, start, end, step, dtype):
    x = rand_of(shape, 3, dtype)
    want = torch.ops.aten.slice_copy.Tensor(x, dim, start, end, step)
    _equal(run_graph("aten.slice_copy.Tensor", [x, dim, start, end, step], (tuple(want.shape), dtype)), want)


def test_slice_copy_defaults():
    """ExecuTorch may leave out dim, start, end and step: 0, None, None, 1."""
    x = rand_of((5, 3), 3, torch.bfloat16)
    _equal(run_graph("aten.slice_copy.Tensor", [x], ((5, 3), torch.bfloat16)), x)


@pytest.mark.parametrize("shapes,dim", [
    ([(3,), (5,), (1,)], 0),
    ([(2, 3), (2, 5)], 1),
    ([(2, 3), (4, 3), (1, 3)], 0),
    ([(2, 3, 4), (2, 1, 4), (2, 7, 4)], -2),
    ([(2, 3, 4), (2, 3, 1)], -1),
    ([(2, 3), (0,), (2, 1)], 1),     # legacy empty 1-D input is skipped
])
@by_dtype
def test_cat(shapes, dim, dtype):
    xs = [rand_of(s, 10 + i, dtype) for i, s in enumerate(shapes)]
    want = torch.cat(xs, dim)
    _equal(run_graph("aten.cat.default", [Values(xs), dim], (tuple(want.shape), dtype)), want)


@pytest.mark.parametrize("dtypes", [(torch.float16, torch.float32), (torch.bfloat16, torch.float16),
                                    (torch.int8, torch.int32), (torch.bool, torch.uint8)], ids=str)
def test_cat_promotes(dtypes):
    """torch.cat of mixed dtypes gives the promoted dtype: the parts convert at load."""
    xs = [rand_of((2, 3), 12, dtypes[0]), rand_of((2, 5), 13, dtypes[1]), rand_of((2, 1), 14, dtypes[0])]
    want = torch.cat(xs, 1)
    _equal(run_graph("aten.cat.default", [Values(xs), 1], ((2, 9), want.dtype)), want)


def test_cat_with_constant():
    x = rand(2, 3, seed=20)
    c = rand(2, 2, seed=21)
    want = torch.cat([c, x], 1)
    got = run_graph("aten.cat.default", [Values([Const(c), x]), 1], (2, 5))
    assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("idx_shape", [(1,), (7,), (2, 5), (2, 3, 3)])
@by_dtype
def test_embedding(idx_shape, dtype):
    w = rand_of((17, 6), 30, dtype)
    idx = torch.randint(0, 17, idx_shape, generator=torch.Generator().manual_seed(31), dtype=torch.int32)
    want = F.embedding(idx, w) if dtype.is_floating_point else w[idx.long()]
    _equal(run_graph("aten.embedding.default", [Const(w), idx, -1, False, False], (tuple(want.shape), dtype)), want)


@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int8, torch.uint8])
def test_embedding_index_types(idx_dtype):
    w = rand_of((33, 5), 32, torch.float16)
    idx = torch.tensor([[0, 32, 5], [7, 7, 1]], dtype=idx_dtype)
    want = w[idx.long()]
    _equal(run_graph("aten.embedding.default", [Const(w), idx], ((2, 3, 5), torch.float16)), want)


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
    _equal(run_graph("aten.embedding.default", [Const(w), idx], ((7, 4), torch.float32), **kwargs), want)


def test_embedding_split_table():
    """A table larger than one binding is split by rows; a small binding limit tests it cheaply."""
    w = rand(301, 5, seed=33)  # 6020 bytes; 4096-byte bindings -> row blocks
    idx = torch.tensor([[0, 300, 150, 51], [52, 203, 204, 299]], dtype=torch.int32)
    got = run_graph("aten.embedding.default", [Const(w), idx, -1, False, False], (2, 4, 5),
                    max_binding_bytes=4096)
    assert_close(got, F.embedding(idx, w), rtol=0, atol=0)


SMALL_BINDING = 1024  # bytes: forces the split paths on tiny tensors


@by_dtype
def test_view_clone_split(dtype):
    x = rand_of((3, 1203), 34, dtype)  # 3609 elements: over 1024 bytes in every dtype
    got = run_graph("aten.view_copy.default", [x, [3609]], ((3609,), dtype), max_binding_bytes=SMALL_BINDING)
    _equal(got, x.reshape(3609))
    got = run_graph("aten.clone.default", [x, None], ((3, 1203), dtype), max_binding_bytes=SMALL_BINDING)
    _equal(got, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8], ids=str)
def test_cat_into_large_output(dtype):
    k = 4 // dtype.itemsize  # the same byte sizes in every dtype
    a, b = rand_of((2, 350 * k), 35, dtype), rand_of((2, 201 * k), 36, dtype)  # out 4408 bytes
    got = run_graph("aten.cat.default", [Values([a, b]), 1], ((2, 551 * k), dtype), max_binding_bytes=4096)
    _equal(got, torch.cat([a, b], 1))
    a, b = rand_of((700 * k,), 35, dtype), rand_of((401 * k,), 36, dtype)
    got = run_graph("aten.cat.default", [Values([a, b]), 0], ((1101 * k,), dtype), max_binding_bytes=4096)
    _equal(got, torch.cat([a, b]))


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


@pytest.mark.parametrize("dtype", EXPORT_DTYPES)
@pytest.mark.parametrize("case", list(MODULES))
def test_module(case, dtype):
    fn, shapes = MODULES[case]
    module = Fn(fn)
    inputs = [rand(*s, seed=100 + i).to(dtype) for i, s in enumerate(shapes)]
    got, want = run_vkx(module, inputs), module(*inputs)
    for g_, w_ in zip(got, want) if isinstance(want, tuple) else [(got, want)]:
        _equal(g_, w_)


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
