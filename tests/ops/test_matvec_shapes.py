"""The matrix-vector kernels (shaders/matvec.comp, matvec_q.comp) at every workgroup shape a device
class or bench/matvec.py's sweep may choose (invocations and rows specialization constants 0 and 1),
with subgroup sums (lavapipe has subgroup arithmetic) and with the shared-memory tree (the
android-baseline-2022 profile has none), against torch in every weight dtype; under a profile, the
workgroup within its invocations and the sums it has."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import vkx
from vkx.export import export_model
from vkx.export.quantize import dequantize, quantize_weight
from vkx.loader.gpu.device import Device, default_device
from vkx.loader.ops import STORAGE_FEATURES, gemm, quant
from tests.loader.helpers import baseline_device, no_device_limits

from .conftest import Const, assert_close_in, assert_norm_close, rand, run_graph
from .test_fused import NormedProducts, _reference

pytestmark = pytest.mark.vulkan

SHAPES = [gemm.MatvecShape(1, 32), gemm.MatvecShape(2, 256), gemm.MatvecShape(4, 128),
          gemm.MatvecShape(8, 64), gemm.MatvecShape(16, 128)]
Q_SHAPES = SHAPES + [gemm.MatvecShape(1, 32, 1), gemm.MatvecShape(4, 128, 1), gemm.MatvecShape(16, 64, 1),
                     gemm.MatvecShape(8, 64, 2)]
"""matvec_q.comp's: also invocations reading a word or two a step (its SPAN)."""


def _id(shape: gemm.MatvecShape) -> str:
    return f"{shape.rows}x{shape.invocations}" + (f"/{shape.span}" if shape.span != 4 else "")


def _shape(monkeypatch, kernel: str, shape: gemm.MatvecShape) -> None:
    """Every device class takes `shape` as it is (a GPU's rows are not cut for small products)."""
    for cls in ("cpu", "gpu", "small"):
        monkeypatch.setitem(gemm.MATVEC_SHAPES, (cls, kernel), shape)
    monkeypatch.setattr(gemm, "MATVEC_GROUPS_PER_UNIT", 0)


def _chosen(shape: gemm.MatvecShape) -> tuple[tuple[int, int], bool]:
    """The specialization constants (invocations, rows) and whether subgroup sums are used, for `shape`
    on the device in force (a profile caps the invocations and may lack subgroup operations)."""
    limits = default_device().limits
    return ((min(shape.invocations, limits.max_compute_work_group_invocations), shape.rows),
            "subgroupOperations" in limits.features)


def test_a_gpu_cuts_rows_to_keep_its_compute_units_busy():
    """gemm.MATVEC_GROUPS_PER_UNIT on a GPU of 132 compute units (an H200): rows a workgroup halve
    while a product would have fewer than 4 x 132 workgroups; a CPU device keeps its shape."""
    gpu = SimpleNamespace(limits=no_device_limits(features=frozenset({*STORAGE_FEATURES.values(),
                                                                      "subgroupOperations"})),
                          is_cpu=False, compute_units=132)
    rows = {(kernel, n): gemm.matvec_shape(gpu, kernel, 256, n)[0].rows
            for kernel, n in [("matvec", 128256), ("matvec", 3072), ("matvec", 2048), ("matvec_q", 8192),
                              ("matvec_q", 2048), ("matvec_q", 37)]}
    assert rows == {("matvec", 128256): 4, ("matvec", 3072): 4, ("matvec", 2048): 2, ("matvec_q", 8192): 8,
                    ("matvec_q", 2048): 2, ("matvec_q", 37): 1}
    cpu = SimpleNamespace(limits=gpu.limits, is_cpu=True, compute_units=132)
    assert gemm.matvec_shape(cpu, "matvec", 256, 37)[0].rows == gemm.MATVEC_SHAPES["cpu", "matvec"].rows


@pytest.mark.parametrize("shape", SHAPES, ids=_id)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_matvec_every_shape(shape, dtype, monkeypatch, dispatches):
    """K = 2056: 257 chunks of 8, more than any workgroup's invocations; N = 37: a partial last workgroup."""
    _shape(monkeypatch, "matvec", shape)
    x, w, b = rand(1, 2056, seed=1, dtype=dtype), rand(37, 2056, seed=2, dtype=dtype), rand(37, seed=3, dtype=dtype)
    got = run_graph("aten.linear.default", [x, Const(w), Const(b)], ((1, 37), dtype))
    [(shader, defines, spec)] = dispatches
    assert shader == "matvec" and (spec[:2], "SUBGROUP" in defines) == _chosen(shape)
    assert_close_in(got, F.linear(x, w, b), dtype, terms=1)


@pytest.mark.parametrize("shape", Q_SHAPES, ids=_id)
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_matvec_q_every_shape(shape, bits, dtype, monkeypatch, dispatches):
    _shape(monkeypatch, "matvec_q", shape)
    n, k = 37, 4352 if bits == 4 else 2176  # 136 chunks of 16 bytes a row
    q, s = quantize_weight(rand(n, k, seed=1), bits, 64)
    x = rand(1, k, seed=2).to(dtype)
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), None, bits, 64], ((1, n), dtype))
    [(shader, defines, spec)] = dispatches
    assert shader == "matvec_q" and (spec[:2], "SUBGROUP" in defines) == _chosen(shape)
    assert spec[quant.SPAN_CONSTANT] == shape.span
    want = x.double() @ dequantize(q, s, bits, 64).double().T
    assert_norm_close(got.double(), want, rtol=1e-5 if dtype == torch.float32 else 4e-3, atol=1e-5)


@pytest.fixture(scope="module")
def fused_files(tmp_path_factory) -> dict:
    """test_fused.NormedProducts (RMSNorms folded into q/k/v's SEGMENTS, a GLU and an LM head; a
    down product with its residual), its inputs and its file in each export dtype, with float
    weights and with int4 and int8 ones."""
    torch.manual_seed(0)
    modules = {None: NormedProducts().eval(), "q": NormedProducts(hidden=256).eval()}  # int4's groups of 32 split 256
    inputs = (rand(1, 64, seed=3) * 2, rand(1, 64, seed=4) * 2, rand(1, 64, seed=5) * 2)
    files = {}
    for dtype, name in ((torch.float32, "fp32"), (torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        for quantize in (None, "int4", "int8"):
            module = modules[quantize and "q"]
            path = tmp_path_factory.mktemp("fused") / f"{name}-{quantize}.pte"
            export_model(copy.deepcopy(module), inputs, str(path), dtype=name, quantize=quantize)
            files[dtype, quantize] = module, path
    return inputs, files


@pytest.mark.parametrize("shape,quantize", [(s, q) for q in (None, "int4", "int8") for s in (Q_SHAPES if q else SHAPES)],
                         ids=lambda v: _id(v) if isinstance(v, gemm.MatvecShape) else str(v))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_fused_products_every_shape(shape, dtype, quantize, fused_files, monkeypatch, dispatches):
    """The three products of one row (SEGMENTS), SwiGLU's (GLU) and a plain product, each with an
    RMSNorm folded in (NORM), at each shape, against torch, float weights and int4/int8 ones: a
    device class's shape, or fewer rows on a product of few rows (gemm.MATVEC_GROUPS_PER_UNIT), takes
    these variants in every LLM decode."""
    kernel = "matvec" if quantize is None else "matvec_q"
    _shape(monkeypatch, kernel, shape)
    inputs, files = fused_files
    module, path = files[dtype, quantize]
    with vkx.load(str(path)) as program:
        got = program(*(x.to(dtype) for x in inputs))
    kinds = sorted(("SEGMENTS" in d, "GLU" in d, "NORM" in d) for s, d, _ in dispatches if s == kernel)
    assert kinds == [(False, False, False), (False, False, True), (False, True, True), (True, False, True)]
    assert {spec[1] for s, _, spec in dispatches if s == kernel} == {shape.rows}
    if quantize:
        assert {spec[quant.SPAN_CONSTANT] for s, _, spec in dispatches if s == kernel} == {shape.span}
    want = _reference(copy.deepcopy(module), [x.to(dtype) for x in inputs], dtype, quantize)
    for g, w in zip(got, want):
        assert_close_in(g, w, dtype, terms=200)


def test_short_rows_take_fewer_invocations(dispatches):
    x, w = rand(1, 64, seed=1), rand(40, 64, seed=2)
    run_graph("aten.linear.default", [x, Const(w), None], (1, 40))
    [(_, _, spec)] = dispatches
    assert spec[0] == gemm.MIN_INVOCATIONS  # 8 chunks of 8: the fewest invocations


@pytest.fixture(scope="module")
def baseline():
    with baseline_device() as dev:
        yield dev


def test_shared_memory_sums_without_subgroup_operations(baseline, dispatches):
    """The baseline has no subgroup operations and 128 invocations a workgroup: the tree variant,
    fp32 (its only float type without 16-bit storage) and int4/int8 weights."""
    assert "subgroupOperations" not in baseline.limits.features
    x, w, b = rand(1, 3000, seed=4), rand(45, 3000, seed=5), rand(45, seed=6)
    got = run_graph("aten.linear.default", [x, Const(w), Const(b)], (1, 45), device=baseline)
    assert_norm_close(got, F.linear(x, w, b))
    for bits in (4, 8):
        q, s = quantize_weight(rand(45, 4096, seed=7), bits, 32)
        xq = rand(1, 4096, seed=8)
        got = run_graph("vkx.linear_q.default", [xq, Const(q), Const(s), None, bits, 32], (1, 45), device=baseline)
        assert_norm_close(got, xq.double() @ dequantize(q, s, bits, 32).double().T, rtol=1e-5, atol=1e-5)
    assert [(d[0], "SUBGROUP" in d[1]) for d in dispatches] == [("matvec", False), ("matvec_q", False),
                                                                 ("matvec_q", False)]
    assert all(d[2][0] <= 128 and d[2][0] * d[2][1] <= 2048 for d in dispatches)
