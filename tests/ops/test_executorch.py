"""The ops of ExecuTorch's Vulkan vocabulary (format/op_et.py) through hand-built graphs, against torch
(ATen's ops, and for et_vk.* the reference kernels of executorch/backends/vulkan/custom_ops_lib.py
written out here): shape copies bit-exact in every dtype, math in fp32/fp16/bf16."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vkx.loader.errors import BadProgramError
from tests.loader.helpers import no_device_limits

from .conftest import FLOAT_DTYPES, Const, assert_close_in, rand, rand_of, run_graph

pytestmark = pytest.mark.vulkan

ALL_DTYPES = (*FLOAT_DTYPES, torch.int32, torch.int8, torch.uint8, torch.bool)
by_dtype = pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
by_float = pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)


def _equal(got, want):
    assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape), \
        f"{got.dtype} {tuple(got.shape)} != {want.dtype} {tuple(want.shape)}"
    assert torch.equal(got, want), f"{got} != {want}"


# --------------------------------------------------------------------------- shape copies

@pytest.mark.parametrize("shape,dim", [((3, 5), 0), ((3, 5), 2), ((3, 5), -1), ((3, 5), -3), ((), 0), ((4,), -1)])
@by_dtype
def test_unsqueeze_copy(shape, dim, dtype):
    x = rand_of(shape, 1, dtype)
    want = x.unsqueeze(dim)
    _equal(run_graph("aten.unsqueeze_copy.default", [x, dim], (tuple(want.shape), dtype)), want)


@pytest.mark.parametrize("shape,dims", [((1, 3, 1, 5), [0, 2]), ((1, 3, 1, 5), [-2]), ((2, 3), [1]), ((1,), [0])])
@by_dtype
def test_squeeze_copy_dims(shape, dims, dtype):
    x = rand_of(shape, 2, dtype)
    want = torch.ops.aten.squeeze_copy.dims(x, dims)
    _equal(run_graph("aten.squeeze_copy.dims", [x, dims], (tuple(want.shape), dtype)), want)


@pytest.mark.parametrize("shape,dim,index", [((4, 5, 6), 0, 3), ((4, 5, 6), 1, -1), ((4, 5, 6), -1, 2), ((7,), 0, -7),
                                             ((2, 1, 3, 12), 2, 0)])
@by_dtype
def test_select_copy(shape, dim, index, dtype):
    x = rand_of(shape, 3, dtype)
    want = x.select(dim, index).contiguous()
    _equal(run_graph("aten.select_copy.int", [x, dim, index], (tuple(want.shape), dtype)), want)


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
        _equal(g_, w.contiguous())


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
    _equal(got, want)


@by_dtype
def test_clone_dim_order_and_alias_copy(dtype):
    x = rand_of((2, 3, 4), 7, dtype)
    _equal(run_graph("dim_order_ops._clone_dim_order.default", [x, False, None], ((2, 3, 4), dtype)), x)
    _equal(run_graph("aten.alias_copy.default", [x], ((2, 3, 4), dtype)), x)


def test_dim_order_must_be_a_permutation():
    with pytest.raises(BadProgramError, match=r"dim_order \[0, 0\] for 2 dims"):
        run_graph("dim_order_ops._to_dim_order_copy.default", [rand(2, 3), None, None, None, None, False, [0, 0]],
                  (2, 3))


@pytest.mark.parametrize("dtype,value", [(torch.float32, 0.1), (torch.float16, -3.5), (torch.bfloat16, 1e3),
                                         (torch.float32, float("-inf")), (torch.int32, -7), (torch.uint8, 200),
                                         (torch.bool, 1), (torch.int8, 0)], ids=str)
def test_full_like(dtype, value):
    x = rand_of((3, 5), 8, dtype)
    want = torch.full_like(x, value)
    got = run_graph("aten.full_like.default", [x, value, None, None, None, False, None], ((3, 5), dtype))
    _equal(got, want)


def test_full_like_refuses_a_fraction_for_an_integer_output():
    x = rand_of((3,), 8, torch.int32)
    with pytest.raises(BadProgramError, match="fill_value 0.5 for a int32 output"):
        run_graph("aten.full_like.default", [x, 0.5], ((3,), torch.int32))


# --------------------------------------------------------------------------- max pool with indices

POOLS = [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, stride=2, padding=0, ceil_mode=True),
         dict(kernel_size=3, stride=1, padding=1, dilation=2)]


@pytest.mark.parametrize("kwargs", POOLS, ids=["resnet", "ceil", "dilated"])
@by_float
def test_max_pool2d_with_indices(kwargs, dtype):
    x = rand(2, 3, 9, 11, seed=9, dtype=dtype)
    x[0, 1, 4, 4] = float("nan")
    x[1, 0, :3, :3] = float("-inf")  # a window of -inf only: torch's index is its first element
    want, want_idx = F.max_pool2d(x, return_indices=True, **kwargs)
    k, s, p, d = kwargs["kernel_size"], kwargs["stride"], kwargs["padding"], kwargs.get("dilation", 1)
    got, idx = run_graph("aten.max_pool2d_with_indices.default",
                         [x, [k, k], [s, s], [p, p], [d, d], kwargs.get("ceil_mode", False)],
                         [(tuple(want.shape), dtype), (tuple(want.shape), torch.int32)])
    assert torch.equal(got.isnan(), want.isnan()) and got.isnan().any()
    assert torch.equal(got.nan_to_num(), want.nan_to_num())  # max is exact in any dtype
    _equal(idx.long(), want_idx)


def test_max_pool2d_with_indices_defaults():
    """ExecuTorch may leave out stride ([]: the kernel), padding, dilation and ceil_mode."""
    x = rand(1, 2, 8, 8, seed=10)
    want, want_idx = F.max_pool2d(x, 2, return_indices=True)
    got, idx = run_graph("aten.max_pool2d_with_indices.default", [x, [2, 2]],
                         [(tuple(want.shape), torch.float32), (tuple(want.shape), torch.int32)])
    _equal(got, want)
    _equal(idx.long(), want_idx)


# --------------------------------------------------------------------------- et_vk fused ops

def _rms_norm_reference(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


@pytest.mark.parametrize("shape", [(2, 5, 64), (3, 17), (7,)])
@by_float
def test_et_rms_norm(shape, dtype):
    x = rand(*shape, seed=11, scale=2.0, dtype=dtype)
    w = (torch.rand(shape[-1], generator=torch.Generator().manual_seed(1)) + 0.5).to(dtype)
    want = _rms_norm_reference(x, w, 1e-6)
    got = run_graph("et_vk.rms_norm.default", [x, Const(w), 1e-6], (shape, dtype))
    assert_close_in(got, want, dtype, each=True)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


def _rope_hf_reference(x, cos, sin, start):
    r = cos.shape[-1]
    c, s = cos[start:start + x.shape[1]].unsqueeze(1).float(), sin[start:start + x.shape[1]].unsqueeze(1).float()
    rot = x[..., :r].float()
    return torch.cat([rot * c + _rotate_half(rot) * s, x[..., r:].float()], -1).to(x.dtype)


def _tables(rows, cols, dtype):
    angles = torch.outer(torch.arange(rows).float(), 1.0 / 100 ** (torch.arange(cols // 2).float() / cols))
    angles = torch.cat([angles, angles], -1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


@pytest.mark.parametrize("rotary,start", [(16, 0), (12, 3)], ids=["full", "partial_at_3"])
@by_float
def test_et_apply_rotary_emb_hf(rotary, start, dtype):
    xq, xk = rand(2, 5, 4, 16, seed=12, scale=2.0, dtype=dtype), rand(2, 5, 2, 16, seed=13, scale=2.0, dtype=dtype)
    cos, sin = _tables(10, rotary, torch.float32)
    got = run_graph("et_vk.apply_rotary_emb_hf.default", [xq, xk, Const(cos), Const(sin), start],
                    [(xq.shape, dtype), (xk.shape, dtype)])
    for g_, x in zip(got, (xq, xk)):
        want = _rope_hf_reference(x, cos, sin, start)
        assert_close_in(g_, want, dtype, terms=2, each=True)
        if rotary < 16:
            _equal(g_[..., rotary:], x[..., rotary:])


@by_float
def test_et_apply_rotary_emb_interleaved(dtype):
    xq, xk = rand(1, 6, 4, 8, seed=14, scale=2.0, dtype=dtype), rand(1, 6, 2, 8, seed=15, scale=2.0, dtype=dtype)
    angles = torch.outer(torch.arange(6).float(), 1.0 / 100 ** (torch.arange(4).float() / 4))
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    got = run_graph("et_vk.apply_rotary_emb.default", [xq, xk, cos, sin], [(xq.shape, dtype), (xk.shape, dtype)])
    for g_, x in zip(got, (xq, xk)):
        re, im = x.float().reshape(*x.shape[:-1], -1, 2).unbind(-1)
        c, s = cos.float()[None, :, None, :], sin.float()[None, :, None, :]
        want = torch.stack([re * c - im * s, re * s + im * c], -1).flatten(3).to(dtype)
        assert_close_in(g_, want, dtype, terms=2, each=True)


def test_rotary_tables_must_hold_the_positions():
    xq = rand(1, 5, 2, 8)
    cos, sin = _tables(6, 8, torch.float32)
    with pytest.raises(BadProgramError, match="positions 2..7 outside the 6-row tables"):
        run_graph("et_vk.apply_rotary_emb_hf.default", [xq, xq, cos, sin, 2], [tuple(xq.shape)] * 2)


@pytest.mark.parametrize("masked,scale", [(False, None), (True, None), (True, 0.3)], ids=["plain", "mask", "scale"])
@by_float
def test_et_sdpa(masked, scale, dtype):
    q, k, v = (rand(2, 3, 5 if i == 0 else 7, 16, seed=16 + i, dtype=dtype) for i in range(3))
    args = [q, k, v]
    mask = None
    if masked:
        mask = torch.zeros(5, 7).masked_fill(torch.ones(5, 7, dtype=torch.bool).triu(3), float("-inf")).to(dtype)
        args.append(mask)
        args.append(scale)
    s = 1 / 16 ** 0.5 if scale is None else scale
    scores = (q.double() @ k.double().transpose(-1, -2)) * s + (0 if mask is None else mask.double())
    want = (torch.softmax(scores, -1) @ v.double()).to(dtype)
    got = run_graph("et_vk.sdpa.default", args, ((2, 3, 5, 16), dtype))
    assert_close_in(got, want, dtype, terms=16)


def test_unread_outputs_are_not_computed():
    """max-pool indices and split pieces that no op reads and the graph does not return: no work, no memory."""
    from vkx.format import vkgraph as gr
    from vkx.loader.graph import GraphBuilder
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


@pytest.mark.parametrize("shape,pad,value", [((2, 3, 4), [1, 2], 0.0), ((2, 3, 4), [0, 1, 2, 0], -1.5),
                                             ((2, 3, 4), [1, 1, 1, 1, 1, 1], 2.0), ((3, 5), [-1, 2, 1, -2], 0.25),
                                             ((4,), [-4, 1], 3.0)])
@by_dtype
def test_constant_pad_nd(shape, pad, value, dtype):
    x = rand_of(shape, 17, dtype)
    value = value if dtype.is_floating_point else int(abs(value))
    want = F.pad(x, pad, value=value)
    _equal(run_graph("aten.constant_pad_nd.default", [x, pad, value], (tuple(want.shape), dtype)), want)


@by_dtype
def test_zeros_and_ones_like(dtype):
    x = rand_of((4, 3), 18, dtype)
    for name, want in (("zeros_like", torch.zeros_like(x)), ("ones_like", torch.ones_like(x))):
        _equal(run_graph(f"aten.{name}.default", [x], ((4, 3), dtype)), want)


SPECIALS = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.25, -0.4]
UNARY = {  # op, arguments after self -> torch
    ("sqrt", ()): torch.sqrt,
    ("round", ()): torch.round,
    ("leaky_relu", ()): F.leaky_relu,
    ("leaky_relu", (0.2,)): lambda x: F.leaky_relu(x, 0.2),
    ("hardshrink", ()): F.hardshrink,
    ("hardshrink", (1.25,)): lambda x: F.hardshrink(x, 1.25),
}


@pytest.mark.parametrize("op,extra", list(UNARY), ids=[f"{o}{list(a)}" for o, a in UNARY])
@pytest.mark.parametrize("n", [20, 37], ids=["vec4", "scalar"])
@by_float
def test_unary(op, extra, n, dtype):
    x = torch.cat([torch.tensor(SPECIALS), rand(n - len(SPECIALS), seed=19, scale=4.0)]).to(dtype)
    want = UNARY[(op, extra)](x)
    got = run_graph(f"aten.{op}.default", [x, *extra], ((n,), dtype))
    assert_close_in(got, want, dtype, each=True)


@pytest.mark.parametrize("shape,r", [((2, 4, 3, 5), 2), ((9, 2, 3), 3)])
@by_dtype
def test_pixel_shuffle(shape, r, dtype):
    x = rand_of(shape, 11, dtype)
    want = F.pixel_shuffle(x.float() if dtype == torch.bool else x, r).to(dtype)
    _equal(run_graph("aten.pixel_shuffle.default", [x, r], (tuple(want.shape), dtype)), want)


@by_float
def test_hardtanh(dtype):
    x = rand(4, 9, seed=12, dtype=dtype, scale=2.0)
    x[0, 0] = float("nan")
    got = run_graph("aten.hardtanh.default", [x, -0.5, 0.75], ((4, 9), dtype))
    want = F.hardtanh(x, -0.5, 0.75)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())


@pytest.mark.parametrize("shape,dim,index", [((4, 9, 3), 1, [3, 1, 5, 5, 8]), ((4, 9, 3), -3, [2]), ((7,), 0, [6, 0])])
@by_dtype
def test_index_select(shape, dim, index, dtype):
    x = rand_of(shape, 13, dtype)
    idx = torch.tensor(index, dtype=torch.int32)
    want = x.index_select(dim, idx)
    _equal(run_graph("aten.index_select.default", [x, dim, idx], (tuple(want.shape), dtype)), want)
