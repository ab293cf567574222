"""Shape and layout ops against torch, bit-exact in every dtype: view, permute, slice, cat, casts,
expand, unsqueeze, squeeze, select, split, dim-order copies, constant_pad_nd, pixel_shuffle (flip:
test_flip.py)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.loader.helpers import no_device_limits
from vkx.loader.errors import BadProgramError

from .conftest import (ALL_DTYPES, EXPORT_DTYPES, Const, Fn, Values, assert_close, assert_equal, rand, rand_of,
                       run_graph, run_vkx)

pytestmark = pytest.mark.vulkan

by_dtype = pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)


@pytest.mark.parametrize("shape,size", [((3, 8), (24,)), ((2, 3, 7), (6, 7)), ((17,), (1, 17, 1)),
                                        ((5,), (5,)), ((), (1,))])
@by_dtype
def test_view_copy(shape, size, dtype):
    x = rand_of(shape, 1, dtype)
    assert_equal(run_graph("aten.view_copy.default", [x, list(size)], (size, dtype)), x.reshape(size))


def test_view_copy_infers_minus_one():
    x = rand_of((3, 8), 1, torch.float16)
    assert_equal(run_graph("aten.view_copy.default", [x, [-1, 4]], ((6, 4), torch.float16)), x.reshape(-1, 4))


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
    assert_equal(run_graph("aten.permute_copy.default", [x, list(dims)], (tuple(want.shape), dtype)), want)


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
    assert_equal(run_graph("aten.slice_copy.Tensor", [x, dim, start, end, step], (tuple(want.shape), dtype)), want)


def test_slice_copy_defaults():
    """ExecuTorch may leave out dim, start, end and step: 0, None, None, 1."""
    x = rand_of((5, 3), 3, torch.bfloat16)
    assert_equal(run_graph("aten.slice_copy.Tensor", [x], ((5, 3), torch.bfloat16)), x)


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
    assert_equal(run_graph("aten.cat.default", [Values(xs), dim], (tuple(want.shape), dtype)), want)


@pytest.mark.parametrize("dtypes", [(torch.float16, torch.float32), (torch.bfloat16, torch.float16),
                                    (torch.int8, torch.int32), (torch.bool, torch.uint8)], ids=str)
def test_cat_promotes(dtypes):
    """torch.cat of mixed dtypes gives the promoted dtype: the parts convert at load."""
    xs = [rand_of((2, 3), 12, dtypes[0]), rand_of((2, 5), 13, dtypes[1]), rand_of((2, 1), 14, dtypes[0])]
    want = torch.cat(xs, 1)
    assert_equal(run_graph("aten.cat.default", [Values(xs), 1], ((2, 9), want.dtype)), want)


def test_cat_with_constant():
    x = rand(2, 3, seed=20)
    c = rand(2, 2, seed=21)
    want = torch.cat([c, x], 1)
    got = run_graph("aten.cat.default", [Values([Const(c), x]), 1], (2, 5))
    assert_close(got, want, rtol=0, atol=0)


# --------------------------------------------------------------------------- the other shape and layout ops

@pytest.mark.parametrize("dst", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("src", ALL_DTYPES, ids=str)
def test_to_copy(src, dst):
    x = rand_of((5, 3), 7, src)
    assert_close(run_graph("aten._to_copy.default", [x], ((5, 3), dst)), x.to(dst))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("shape, size", [((1, 3, 1), (2, 3, 4)), ((3,), (2, 4, 3)), ((2, 1, 3, 1), (2, 5, 3, 2))])
def test_expand(shape, size, dtype):
    x = rand_of(shape, 8, dtype)
    assert_close(run_graph("aten.expand_copy.default", [x, list(size)], (size, dtype)), x.expand(size))


@pytest.mark.parametrize("shape,dim", [((3, 5), 0), ((3, 5), 2), ((3, 5), -1), ((3, 5), -3), ((), 0), ((4,), -1)])
@by_dtype
def test_unsqueeze_copy(shape, dim, dtype):
    x = rand_of(shape, 1, dtype)
    want = x.unsqueeze(dim)
    assert_equal(run_graph("aten.unsqueeze_copy.default", [x, dim], (tuple(want.shape), dtype)), want)


@pytest.mark.parametrize("shape,dims", [((1, 3, 1, 5), [0, 2]), ((1, 3, 1, 5), [-2]), ((2, 3), [1]), ((1,), [0])])
@by_dtype
def test_squeeze_copy_dims(shape, dims, dtype):
    x = rand_of(shape, 2, dtype)
    want = torch.ops.aten.squeeze_copy.dims(x, dims)
    assert_equal(run_graph("aten.squeeze_copy.dims", [x, dims], (tuple(want.shape), dtype)), want)


@pytest.mark.parametrize("shape,dim,index", [((4, 5, 6), 0, 3), ((4, 5, 6), 1, -1), ((4, 5, 6), -1, 2), ((7,), 0, -7),
                                             ((2, 1, 3, 12), 2, 0)])
@by_dtype
def test_select_copy(shape, dim, index, dtype):
    x = rand_of(shape, 3, dtype)
    want = x.select(dim, index).contiguous()
    assert_equal(run_graph("aten.select_copy.int", [x, dim, index], (tuple(want.shape), dtype)), want)


@pytest.mark.parametrize("shape,sizes,dim", [((2, 3, 12), [2, 4, 6], -1), ((9, 4), [0, 9], 0),
                                            ((3, 7, 2), [3, 1, 3], 1)])
@by_dtype
def test_split_with_sizes_copy(shape, sizes, dim, dtype):
    _split_matches("aten.split_with_sizes_copy.default", rand_of(shape, 4, dtype), sizes, dim)


@pytest.mark.parametrize("shape,size,dim", [((2, 10), 4, 1), ((6, 3), 2, 0), ((5, 3), 5, 0), ((4, 3), 7, -2)])
@by_dtype
def test_split_copy(shape, size, dim, dtype):
    _split_matches("aten.split_copy.Tensor", rand_of(shape, 5, dtype), size, dim)


def _split_matches(op: str, x: torch.Tensor, split, dim: int) -> None:
    """`op` (a split into sizes, or into chunks of one size) gives torch.split's pieces."""
    want = torch.split(x, split, dim)
    got = run_graph(op, [x, split, dim], [(tuple(w.shape), x.dtype) for w in want])
    assert len(got) == len(want)
    for g_, w in zip(got, want):
        assert_equal(g_, w.contiguous())


def test_split_sizes_must_cover_the_dim():
    x = rand(4, 6)
    with pytest.raises(BadProgramError, match=r"split_sizes \[2, 3\] do not add up to 6"):
        run_graph("aten.split_with_sizes_copy.default", [x, [2, 3], 1], [(4, 2), (4, 3)])


@pytest.mark.parametrize("src,dst", [(torch.float32, torch.float16), (torch.float32, torch.bfloat16),
                                     (torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                                     (torch.int32, torch.float32), (torch.float32, torch.int32),
                                     (torch.float16, torch.bool), (torch.uint8, torch.int32)], ids=str)
def test_to_dim_order_copy(src, dst):
    x = rand_of((3, 4, 5), 6, src)
    want = x.to(dst)
    got = run_graph("dim_order_ops._to_dim_order_copy.default", [x, None, None, None, None, False, [0, 1, 2]],
                    ((3, 4, 5), dst))
    assert_equal(got, want)


@by_dtype
def test_clone_dim_order_and_alias_copy(dtype):
    x = rand_of((2, 3, 4), 7, dtype)
    assert_equal(run_graph("dim_order_ops._clone_dim_order.default", [x, False, None], ((2, 3, 4), dtype)), x)
    assert_equal(run_graph("aten.alias_copy.default", [x], ((2, 3, 4), dtype)), x)


def test_dim_order_must_be_a_permutation():
    with pytest.raises(BadProgramError, match=r"dim_order \[0, 0\] for 2 dims"):
        run_graph("dim_order_ops._to_dim_order_copy.default", [rand(2, 3), None, None, None, None, False, [0, 0]],
                  (2, 3))


@pytest.mark.parametrize("shape,pad,value", [((2, 3, 4), [1, 2], 0.0), ((2, 3, 4), [0, 1, 2, 0], -1.5),
                                             ((2, 3, 4), [1, 1, 1, 1, 1, 1], 2.0), ((3, 5), [-1, 2, 1, -2], 0.25),
                                             ((4,), [-4, 1], 3.0)])
@by_dtype
def test_constant_pad_nd(shape, pad, value, dtype):
    x = rand_of(shape, 17, dtype)
    value = value if dtype.is_floating_point else int(abs(value))
    want = F.pad(x, pad, value=value)
    assert_equal(run_graph("aten.constant_pad_nd.default", [x, pad, value], (tuple(want.shape), dtype)), want)


@pytest.mark.parametrize("shape,r", [((2, 4, 3, 5), 2), ((9, 2, 3), 3)])
@by_dtype
def test_pixel_shuffle(shape, r, dtype):
    x = rand_of(shape, 11, dtype)
    want = F.pixel_shuffle(x.float() if dtype == torch.bool else x, r).to(dtype)
    assert_equal(run_graph("aten.pixel_shuffle.default", [x, r], (tuple(want.shape), dtype)), want)


def test_unread_outputs_are_not_computed():
    """max-pool indices and split pieces that no op reads and the graph does not return: no work, no memory."""
    from vkx.format import vkgraph as gr
    from vkx.loader.build.graph import GraphBuilder
    f32, i32 = gr.DataType.FLOAT32, gr.DataType.INT32
    values = [gr.Tensor(f32, (1, 2, 8, 8)), gr.IntList((2, 2)), gr.Tensor(f32, (1, 2, 4, 4)),
              gr.Tensor(i32, (1, 2, 4, 4)), None, gr.IntList((1, 3)), gr.Int(-1), gr.Tensor(f32, (1, 2, 4, 1)), gr.Tensor(f32, (1, 2, 4, 3)), None]
    values[4] = gr.ValueList((2, 3))
    values[9] = gr.ValueList((7, 8))
    chain = [gr.OperatorCall(0, "aten.max_pool2d_with_indices.default", (0, 1, 4)),
             gr.OperatorCall(1, "aten.split_with_sizes_copy.default", (2, 5, 6, 9))]
    graph = gr.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=[8], constants=[])
    built = GraphBuilder(graph, no_device_limits()).build()
    assert [d.shader for d in built.dispatches] == ["pool2d", "copy_strided"]
    assert ("INDICES", "1") not in built.dispatches[0].defines
    assert {t.vid for t in built.used_tensors()} == {0, 2, 8}


SMALL_BINDING = 1024  # bytes: forces the split paths on tiny tensors


@by_dtype
def test_view_clone_split(dtype):
    x = rand_of((3, 1203), 34, dtype)  # 3609 elements: over 1024 bytes in every dtype
    got = run_graph("aten.view_copy.default", [x, [3609]], ((3609,), dtype), max_binding_bytes=SMALL_BINDING)
    assert_equal(got, x.reshape(3609))
    got = run_graph("aten.clone.default", [x, None], ((3, 1203), dtype), max_binding_bytes=SMALL_BINDING)
    assert_equal(got, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8], ids=str)
def test_cat_into_large_output(dtype):
    k = 4 // dtype.itemsize  # the same byte sizes in every dtype
    a, b = rand_of((2, 350 * k), 35, dtype), rand_of((2, 201 * k), 36, dtype)  # out 4408 bytes
    got = run_graph("aten.cat.default", [Values([a, b]), 1], ((2, 551 * k), dtype), max_binding_bytes=4096)
    assert_equal(got, torch.cat([a, b], 1))
    a, b = rand_of((700 * k,), 35, dtype), rand_of((401 * k,), 36, dtype)
    got = run_graph("aten.cat.default", [Values([a, b]), 0], ((1101 * k,), dtype), max_binding_bytes=4096)
    assert_equal(got, torch.cat([a, b]))


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
        assert_equal(g_, w_)


