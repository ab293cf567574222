"""Layer, group and batch norm within four storage buffers a stage (the Android baseline profile's
maxPerStageDescriptorStorageBuffers): their split dispatches against torch in every float dtype, rows
and channels of 1, odd and prime sizes, tensors bound in parts; on a device of six or more, the one
dispatch of six bindings as before."""
from __future__ import annotations

import pytest
import torch

from tests.loader.helpers import baseline_device, scalar_value
from vkx.format import vkgraph as g
from vkx.loader import load_graph
from vkx.loader.gpu.device import Device
from vkx.loader.build.graph import GraphBuilder

from .conftest import FLOAT_DTYPES, Const, _datatype, assert_close_in, rand, run_graph

pytestmark = pytest.mark.vulkan

by_dtype = pytest.mark.parametrize("dtype", FLOAT_DTYPES)
BASELINE = "android-baseline-2022"
NORMS = ("layer_norm", "group_norm", "batch_norm")
SPLITS = {"NORM_ONLY", "STATS_ONLY", "TABLE_STATS", "TABLE_AFFINE", "FROM_TABLE"}
"""The defines of the dispatches a norm splits into (loader/ops/reduce.py, _norm_passes, _batch_norm_table)."""
AFFINES = ("affine", "plain", "weight", "bias")


@pytest.fixture(scope="module")
def baseline():
    with baseline_device() as dev:
        assert dev.limits.max_per_stage_descriptor_storage_buffers == 4
        yield dev


@pytest.fixture(scope="module")
def desktop():
    dev = Device(profile="")  # the device's own limits, also in a run under --device-profile
    yield dev
    dev.close()


@pytest.fixture
def recorded(monkeypatch) -> list[tuple[str, int, set[str]]]:
    """(shader, bindings, its SPLITS defines) of every norm dispatch recorded while the test runs."""
    seen: list[tuple[str, int, set[str]]] = []
    dispatch = GraphBuilder.dispatch

    def recording(self, shader, bindings, push, groups, defines=None, spec=()):
        if shader in NORMS:
            seen.append((shader, len(bindings), SPLITS & set(defines or {})))
        return dispatch(self, shader, bindings, push, groups, defines, spec)

    monkeypatch.setattr(GraphBuilder, "dispatch", recording)
    return seen


def _affine(kind: str, shape: tuple[int, ...], dtype: torch.dtype, seed: int):
    """(weight, bias) of an affine `kind`: both, neither, one of them."""
    w = rand(*shape, seed=seed).to(dtype) if kind in ("affine", "weight") else None
    b = rand(*shape, seed=seed + 1).to(dtype) if kind in ("affine", "bias") else None
    return w, b


def _const(t: torch.Tensor | None) -> Const | None:
    return None if t is None else Const(t)


def _layer_norm(x: torch.Tensor, norm: tuple[int, ...], w, b, **load):
    """native_layer_norm's (out, mean, rstd) through run_graph, and torch's."""
    rows = tuple(x.shape[:x.dim() - len(norm)]) + (1,) * len(norm)
    got = run_graph("aten.native_layer_norm.default", [x, list(norm), _const(w), _const(b), 1e-5],
                    [(tuple(x.shape), x.dtype), (rows, x.dtype), (rows, x.dtype)], **load)
    return got, torch.native_layer_norm(x, list(norm), w, b, 1e-5)


def _group_norm(x: torch.Tensor, groups: int, w, b, **load):
    """native_group_norm's (out, mean, rstd) through run_graph, and torch's."""
    n, c, hw = x.shape[0], x.shape[1], x[0, 0].numel()
    args = [x, _const(w), _const(b), n, c, hw, groups, 1e-5]
    got = run_graph("aten.native_group_norm.default", args,
                    [(tuple(x.shape), x.dtype), ((n, groups), x.dtype), ((n, groups), x.dtype)], **load)
    return got, torch.ops.aten.native_group_norm.default(x, w, b, n, c, hw, groups, 1e-5)


def _batch_norm(x: torch.Tensor, stats_dtype: torch.dtype, w, b, **load):
    """_native_batch_norm_legit_no_training's out through run_graph, and torch's."""
    c = x.shape[1]
    mean, var = rand(c, seed=10).to(stats_dtype), (rand(c, seed=11).abs() + 0.2).to(stats_dtype)
    op = "aten._native_batch_norm_legit_no_training.default"
    got = run_graph(op, [x, _const(w), _const(b), Const(mean), Const(var), 0.1, 1e-5],
                    [(tuple(x.shape), x.dtype), ((0,), x.dtype), ((0,), x.dtype)], **load)
    return got[0], torch.ops.aten._native_batch_norm_legit_no_training.default(x, w, b, mean, var, 0.1, 1e-5)[0]


@pytest.mark.parametrize("shape,norm", [((1, 1), (1,)), ((3, 17), (17,)), ((2, 5, 7), (5, 7)), ((13,), (13,)),
                                        ((4, 67), (67,)), ((2, 1031), (1031,))])
@pytest.mark.parametrize("affine", AFFINES[:3])
@by_dtype
def test_layer_norm_in_four_buffers(baseline, recorded, shape, norm, affine, dtype):
    x = (rand(*shape, seed=2, scale=2.0) + 0.5).to(dtype)
    w, b = _affine(affine, norm, dtype, 3)
    got, want = _layer_norm(x, norm, w, b, device=baseline)
    for g_, w_ in zip(got, want):
        assert_close_in(g_, w_, dtype, terms=torch.Size(norm).numel(), each=True)
    assert recorded == [("layer_norm", 4, {"NORM_ONLY"}), ("layer_norm", 3, {"STATS_ONLY"})]


@pytest.mark.parametrize("shape,groups", [((1, 1, 1), 1), ((2, 6, 3), 3), ((3, 5, 2), 5), ((1, 12, 5, 7), 4),
                                          ((2, 4, 13, 11), 2)])
@pytest.mark.parametrize("affine", AFFINES)
@by_dtype
def test_group_norm_in_four_buffers(baseline, recorded, shape, groups, affine, dtype):
    x = (rand(*shape, seed=4, scale=3.0) + 1.5).to(dtype)
    w, b = _affine(affine, shape[1:2], dtype, 5)
    got, want = _group_norm(x, groups, w, b, device=baseline)
    for g_, w_ in zip(got, want):
        assert_close_in(g_, w_, dtype, terms=x[0].numel() // groups, each=True)
    assert recorded == [("group_norm", 4, {"NORM_ONLY"}), ("group_norm", 3, {"STATS_ONLY"})]


@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (2, 5, 1, 7), (3, 13, 11)])
@pytest.mark.parametrize("affine", AFFINES)
@by_dtype
def test_batch_norm_in_four_buffers(baseline, recorded, shape, affine, dtype):
    x = rand(*shape, seed=9, scale=2.0).to(dtype)
    w, b = _affine(affine, shape[1:2], dtype, 12)
    got, want = _batch_norm(x, dtype, w, b, device=baseline)
    assert_close_in(got, want, dtype, each=True)
    table = [("batch_norm", 3, {"TABLE_STATS"})] + ([] if affine == "plain" else [("batch_norm", 3, {"TABLE_AFFINE"})])
    assert recorded == [*table, ("batch_norm", 3, {"FROM_TABLE"})]


def test_mixed_dtypes_in_four_buffers(baseline):
    """fp16 activations with fp32 weights and statistics."""
    x = rand(4, 9, seed=5, scale=2.0).half()
    w, b = rand(9, seed=6), rand(9, seed=7)
    got = run_graph("aten.native_layer_norm.default", [x, [9], Const(w), Const(b), 1e-5],
                    [((4, 9), torch.float16), ((4, 1), torch.float32), ((4, 1), torch.float32)], device=baseline)
    want = torch.native_layer_norm(x.float(), [9], w, b, 1e-5)
    assert_close_in(got[0], want[0].half(), torch.float16, each=True)
    assert_close_in(got[1:], want[1:], torch.float32, each=True)
    x = rand(2, 3, 5, seed=9).half()
    got, want = _batch_norm(x, torch.float32, rand(3, seed=12), None, device=baseline)
    assert_close_in(got, want.half(), torch.float16, each=True)


def test_norms_bound_in_parts_in_four_buffers(baseline, recorded):
    """Tensors over the binding range: each block of rows (layer norm, its statistics at an offset)
    or of elements (batch norm, one table) in its own dispatches."""
    small = {"device": baseline, "max_binding_bytes": 8192}
    x = rand(40, 96, seed=8, scale=2.0)
    w, b = _affine("affine", (96,), torch.float32, 3)
    got, want = _layer_norm(x, (96,), w, b, **small)
    for g_, w_ in zip(got, want):
        assert_close_in(g_, w_, torch.float32, terms=96, each=True)
    blocks = len(recorded) // 2
    assert blocks > 1 and recorded == [("layer_norm", 4, {"NORM_ONLY"}), ("layer_norm", 3, {"STATS_ONLY"})] * blocks
    recorded.clear()
    x = rand(2, 7, 37, 11, seed=9)
    got, want = _batch_norm(x, torch.float32, *_affine("affine", (7,), torch.float32, 12), **small)
    assert_close_in(got, want, torch.float32, each=True)
    assert recorded[:2] == [("batch_norm", 3, {"TABLE_STATS"}), ("batch_norm", 3, {"TABLE_AFFINE"})]
    assert len(recorded) > 3 and all(r == ("batch_norm", 3, {"FROM_TABLE"}) for r in recorded[2:])


def _run_first_output_only(name: str, args: list, outs: list[tuple[tuple[int, ...], torch.dtype]], device: Device):
    """Run op `name` (`args`: torch tensors are graph inputs, the rest scalars) in a graph whose only
    output is the op's first: its other outputs are read by no one."""
    values: list = []
    inputs: list[torch.Tensor] = []
    arg_ids = []
    for a in args:
        if isinstance(a, torch.Tensor):
            values.append(g.Tensor(_datatype(a.dtype), tuple(a.shape)))
            inputs.append(a)
        else:
            values.append(scalar_value(a))
        arg_ids.append(len(values) - 1)
    out_ids = []
    for shape, dtype in outs:
        values.append(g.Tensor(_datatype(dtype), shape))
        out_ids.append(len(values) - 1)
    values.append(g.ValueList(tuple(out_ids)))
    input_ids = [i for i, a in zip(arg_ids, args) if isinstance(a, torch.Tensor)]
    graph = g.VkGraph(chain=[g.OperatorCall(0, name, (*arg_ids, len(values) - 1))], values=values,
                      input_ids=input_ids, output_ids=out_ids[:1], constants=[])
    program = load_graph(graph, [], device=device)
    try:
        return program(*inputs)  # one output: the tensor itself
    finally:
        program.close()


@by_dtype
def test_unread_statistics_are_not_written_in_four_buffers(baseline, recorded, dtype):
    """Mean and rstd that no op reads and no graph returns (an exported layer or group norm's): the
    NORM_ONLY dispatch alone."""
    x = (rand(3, 4, 7, seed=2, scale=2.0) + 0.5).to(dtype)
    got = _run_first_output_only("aten.native_layer_norm.default", [x, [7], None, None, 1e-5],
                                 [((3, 4, 7), dtype), ((3, 4, 1), dtype), ((3, 4, 1), dtype)], baseline)
    assert_close_in(got, torch.native_layer_norm(x, [7], None, None, 1e-5)[0], dtype, terms=7, each=True)
    got = _run_first_output_only("aten.native_group_norm.default", [x, None, None, 3, 4, 7, 2, 1e-5],
                                 [((3, 4, 7), dtype), ((3, 2), dtype), ((3, 2), dtype)], baseline)
    want = torch.ops.aten.native_group_norm.default(x, None, None, 3, 4, 7, 2, 1e-5)[0]
    assert_close_in(got, want, dtype, terms=14, each=True)
    assert recorded == [("layer_norm", 4, {"NORM_ONLY"}), ("group_norm", 4, {"NORM_ONLY"})]


@by_dtype
def test_desktop_keeps_one_dispatch_of_six_buffers(desktop, recorded, dtype):
    """A device of six storage buffers or more: each norm is the one six-binding dispatch it was."""
    assert desktop.limits.max_per_stage_descriptor_storage_buffers >= 6
    x = (rand(2, 6, 5, seed=2, scale=2.0) + 0.5).to(dtype)
    for (got, want), terms in [(_layer_norm(x, (5,), *_affine("affine", (5,), dtype, 3), device=desktop), 5),
                               (_group_norm(x, 3, *_affine("affine", (6,), dtype, 5), device=desktop), 10)]:
        for g_, w_ in zip(got, want):
            assert_close_in(g_, w_, dtype, terms=terms, each=True)
    got, want = _batch_norm(x, dtype, *_affine("affine", (6,), dtype, 12), device=desktop)
    assert_close_in(got, want, dtype, each=True)
    assert recorded == [("layer_norm", 6, set()), ("group_norm", 6, set()), ("batch_norm", 6, set())]
