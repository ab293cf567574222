"""vkx.linear_q and vkx.embedding_q with affine scales ([N, G, 2] (scale, offset) pairs, w = q * scale +
offset: int4's default, vkx.export.quantize) through every kernel path, against torch computing with
the same dequantized weights (`dequantize`, torch's F.linear / F.embedding).

The paths: one row of activations (matvec_q.comp, its scale groups of 32 to 128 values, a ragged last
group), a few rows (linear_q.comp, 16-byte loads or words), 16 rows or more (dequant_q.comp, then the
float products), the embedding gather (embedding_q.comp), and the fused one-row forms of matvec_q.comp
(GLU, SEGMENTS, NORM, the residual in the epilogue) through small modules. Each test checks the
kernel that ran took the AFFINE packing. The weights have a per-row mean, so each group's offset is far
from zero: the single-op tests check that reading the pairs as symmetric scales is far off, and a kernel
dropping the offsets fails every test here. Last, every affine request on every device class of
tests/loader/test_variants.py is a declared variant (the packaged archive holds only those).
"""
from __future__ import annotations

import copy
import itertools

import pytest
import torch
import torch.nn.functional as F

from vkx.export.quantize import QuantLinear, dequantize, quantize_module, quantize_weight
from vkx.loader.ops.quant import BIASED_BINDINGS, DEQUANT_ROWS

from .conftest import Const, assert_close_in, assert_norm_close, rand, run_graph
from .test_fused import _NAMES, GatedMLP, NormedProducts, ProductPlusResidual, Projections, _export, _run_both

pytestmark = pytest.mark.vulkan

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _weight(n: int, k: int, seed: int) -> torch.Tensor:
    """A weight of real magnitude whose rows have means of their own (the groups' offsets matter)."""
    return rand(n, k, seed=seed) + rand(n, 1, seed=seed + 100, scale=2.0)


def _affine(n: int, k: int, bits: int, group: int, seed: int = 1,
            scale_dtype: torch.dtype = torch.float16) -> tuple[torch.Tensor, torch.Tensor]:
    q, s = quantize_weight(_weight(n, k, seed), bits, group, scale_dtype, affine=True)
    assert s.shape == (n, -(-k // group), 2) and s[..., 1].abs().max() > 0.5
    return q, s


def _want(x: torch.Tensor, q, s, bits: int, group: int, bias: torch.Tensor | None) -> torch.Tensor:
    """torch's product (fp64) with the dequantized weight."""
    w = dequantize(q, s, bits, group).double()
    return F.linear(x.double(), w, None if bias is None else bias.double())


def _far_without_offsets(got: torch.Tensor, x, q, s, bits, group, bias) -> None:
    """The negative control: the scales read as symmetric ones (offsets dropped) give a result far from vkx's."""
    wrong = F.linear(x.double(), (dequantize(q, s[..., 0], bits, group)).double(),
                     None if bias is None else bias.double())
    assert (got.double() - wrong).abs().max() > 0.1 * wrong.abs().max()


def _affine_dispatches(dispatches, kernel: str) -> list[dict]:
    """The defines of the dispatches of `kernel`, each checked to take the AFFINE packing."""
    found = [d for s, d, _ in dispatches if s == kernel]
    assert found and all(d.get("AFFINE") == 1 for d in found), dispatches
    return found


def _bias_apart() -> bool:
    """Whether the device binds fewer storage buffers a stage than the biased kernels (the Android
    baseline's 4): the bias is then added by a dispatch of its own."""
    from vkx.loader.gpu.device import default_device

    return default_device().limits.max_per_stage_descriptor_storage_buffers < BIASED_BINDINGS


def _shaders(dispatches) -> list[str]:
    return [s for s, _, _ in dispatches]


# --------------------------------------------------------------------------- one row: matvec_q.comp

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("k,group", [(512, 32), (512, 64), (512, 128), (576, 128), (960, 128), (960, 64),
                                     (4352, 128)], ids=str)
@pytest.mark.parametrize("bits", [4, 8])
def test_one_row_takes_matvec_q(bits, k, group, with_bias, dtype, dispatches):
    """Groups of 32 to 128 values, a ragged last group (576 and 960 in groups of 128: 64 values), K of
    136 int4 chunks (more than a workgroup's invocations); x, bias and out in each float dtype."""
    n = 37
    q, s = _affine(n, k, bits, group)
    x = rand(1, k, seed=2).to(dtype)
    bias = rand(n, seed=3).to(dtype) if with_bias else None
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), Const(bias) if with_bias else None, bits, group],
                    ((1, n), dtype))
    assert _shaders(dispatches) == ["matvec_q"] + (["binary"] if with_bias and _bias_apart() else [])
    _affine_dispatches(dispatches, "matvec_q")
    want = _want(x, q, s, bits, group, bias)
    tol = 1e-5 if dtype == torch.float32 else 2 * torch.finfo(dtype).eps  # one rounding of the output
    assert_norm_close(got.double(), want, rtol=tol, atol=tol, kind=_NAMES[dtype])
    _far_without_offsets(got, x, q, s, bits, group, bias)


@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("bits", [4, 8])
def test_scales_of_other_dtypes(bits, scale_dtype, dispatches):
    """The pairs in fp32 or bf16 (a bf16 model's): one row, a few rows, many rows."""
    n, k, group = 29, 256, 64
    q, s = _affine(n, k, bits, group, seed=4, scale_dtype=scale_dtype)
    for m, kernel in ((1, "matvec_q"), (3, "linear_q"), (DEQUANT_ROWS, "dequant_q")):
        x = rand(m, k, seed=5)
        got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), None, bits, group], (m, n))
        _affine_dispatches(dispatches, kernel)
        assert_norm_close(got, _want(x, q, s, bits, group, None), rtol=1e-5, atol=1e-5)


def test_weight_larger_than_one_binding(dispatches):
    """Row blocks: each block's pairs read at its first row's (row0)."""
    n, k, group = 203, 256, 64
    q, s = _affine(n, k, 4, group, seed=6)
    for m, kernel in ((1, "matvec_q"), (3, "linear_q")):
        x = rand(m, k, seed=7)
        dispatches.clear()
        got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), None, 4, group], (m, n),
                        max_binding_bytes=128 * 33)  # blocks of 33 rows of 128 bytes
        assert _shaders(dispatches) == [kernel] * 7
        _affine_dispatches(dispatches, kernel)
        assert_norm_close(got, _want(x, q, s, 4, group, None), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- a few rows: linear_q.comp

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("m", [3, 5])
@pytest.mark.parametrize("bits,k,group", [(4, 256, 32), (4, 576, 128), (4, 72, 8), (8, 256, 32), (8, 960, 128),
                                          (8, 40, 40)], ids=str)
def test_a_few_rows_take_linear_q(bits, k, group, m, with_bias, dtype, dispatches):
    """int8 with 16-byte loads (VEC: 256 and 960) or by words (40), int4 by words; the ragged last group."""
    n = 37
    q, s = _affine(n, k, bits, group, seed=8)
    x = rand(m, k, seed=9).to(dtype)
    bias = rand(n, seed=10).to(dtype) if with_bias else None
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), Const(bias) if with_bias else None, bits, group],
                    ((m, n), dtype))
    assert _shaders(dispatches) == ["linear_q"] + (["binary"] if with_bias and _bias_apart() else [])
    (defines,) = _affine_dispatches(dispatches, "linear_q")
    assert bool(defines.get("VEC")) == (bits == 8 and k % 16 == 0 and group % 16 == 0)
    want = _want(x, q, s, bits, group, bias)
    tol = 1e-5 if dtype == torch.float32 else 2 * torch.finfo(dtype).eps
    assert_norm_close(got.double(), want, rtol=tol, atol=tol, kind=_NAMES[dtype])
    _far_without_offsets(got, x, q, s, bits, group, bias)


# --------------------------------------------------------------------------- many rows: dequant_q.comp

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("m,n", [(16, 37), (40, 64)], ids=str)
@pytest.mark.parametrize("bits,k,group", [(4, 256, 32), (4, 576, 128), (8, 256, 64), (8, 960, 128)], ids=str)
def test_many_rows_dequantize_the_weight(bits, k, group, m, n, with_bias, dtype, dispatches):
    """The weight dequantized (w = q * scale + offset) into the scratch in x's dtype, then the float
    product: the 16-bit weights rounded once more than torch's fp32 product."""
    q, s = _affine(n, k, bits, group, seed=11)
    x = rand(m, k, seed=12).to(dtype)
    bias = rand(n, seed=13).to(dtype) if with_bias else None
    got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), Const(bias) if with_bias else None, bits, group],
                    ((m, n), dtype))
    assert "dequant_q" in _shaders(dispatches) and "linear_q" not in _shaders(dispatches)
    _affine_dispatches(dispatches, "dequant_q")
    want = _want(x.float(), q, s, bits, group, None if bias is None else bias.float())
    tol = 1e-5 if dtype == torch.float32 else 2 * torch.finfo(dtype).eps * (k ** 0.5)
    assert_norm_close(got.double(), want, rtol=tol, atol=tol, kind=_NAMES[dtype])
    _far_without_offsets(got, x, q, s, bits, group, bias)


# --------------------------------------------------------------------------- embedding_q.comp

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim,group", [(64, 32), (576, 128)], ids=str)
@pytest.mark.parametrize("bits", [4, 8])
def test_embedding_gathers_affine_rows(bits, dim, group, dtype, dispatches):
    """Pairs and rows in each dtype (a 16-bit export's table), a ragged last group (576 in groups of
    128), the table in row blocks; indices outside the table give zeros."""
    vocab = 100
    q, s = _affine(vocab, dim, bits, group, seed=14, scale_dtype=torch.float32 if dtype == torch.float32 else dtype)
    # 100 and -1 are outside the table; constant, since a call refuses such an input (format/indexing.py)
    idx = torch.tensor([[0, 99, 57], [100, -1, 3]], dtype=torch.int32)
    got = run_graph("vkx.embedding_q.default", [Const(q), Const(s), Const(idx), bits, group], ((2, 3, dim), dtype),
                    max_binding_bytes=2048 if dim == 64 else 16384)  # the table in row blocks
    assert len(_affine_dispatches(dispatches, "embedding_q")) > 1
    table = dequantize(q, s, bits, group)
    inside = (idx >= 0) & (idx < vocab)
    want = torch.where(inside[..., None], F.embedding(idx.clamp(0, vocab - 1).long(), table),
                       torch.zeros(())).to(dtype)
    assert_close_in(got, want, dtype, each=True)
    assert got[~inside].eq(0).all()


# --------------------------------------------------------------------------- matvec_q.comp's fused forms

def _fused_binds(bindings: int) -> bool:
    """Whether the device binds a fused kernel's `bindings` storage buffers (the Android baseline's 4 do
    not: tests/ops/test_fused.py's four-buffer test covers what it runs instead)."""
    from vkx.loader.gpu.device import default_device

    return default_device().limits.max_per_stage_descriptor_storage_buffers >= bindings


def _quantized(module: torch.nn.Module, dtype: torch.dtype, bits: int, group: int,
               affine=lambda name: True) -> torch.nn.Module:
    """`module` in `dtype`, each of its Linear children vkx.linear_q of `bits` in groups of `group`, the
    scales affine where `affine(name)` (in the model's dtype's scale dtype, as quantize_module stores them).
    Each weight row is first moved by a mean of its own, three times the weights' spread: the offsets
    then carry most of the products (a kernel dropping them is off by more than the 16-bit tolerances)."""
    module = copy.deepcopy(module).to(dtype)
    scale_dtype = torch.bfloat16 if dtype == torch.bfloat16 else torch.float16
    for i, (name, child) in enumerate(list(module.named_children())):
        if isinstance(child, torch.nn.Linear):
            with torch.no_grad():
                child.weight += (rand(child.weight.shape[0], 1, seed=50 + i) * 3 * child.weight.float().std()).to(dtype)
            q, s = quantize_weight(child.weight, bits, group, scale_dtype, affine=affine(name))
            setattr(module, name, QuantLinear(child, q, s, bits, group))
    return module


def _run(module, inputs: list, dtype: torch.dtype, tmp_path, monkeypatch):
    """The exported module's fused and unfused outputs and dispatch counts, and torch's output."""
    path = _export(module, tuple(inputs), tmp_path, dtype)
    xs = [x.to(dtype) for x in inputs]
    fused, fused_shaders, unfused, unfused_shaders = _run_both(path, xs if len(xs) > 1 else xs[0], monkeypatch)
    with torch.no_grad():
        want = module(*xs)
    return fused, fused_shaders, unfused, unfused_shaders, want


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: _NAMES[d])
@pytest.mark.parametrize("bits,group", [(4, 32), (8, 64), (4, 128)], ids=str)
def test_swiglu_and_residual_fused(bits, group, dtype, tmp_path, monkeypatch, dispatches):
    """GLU (gate and up in one dispatch) and the down product with its residual add in the epilogue."""
    if not _fused_binds(6):
        pytest.skip("matvec_q's GLU binds 6 storage buffers")
    module = _quantized(GatedMLP(128, 256).eval(), dtype, bits, group)
    fused, fused_shaders, unfused, unfused_shaders, want = _run(module, [rand(1, 1, 128, seed=5) * 2], dtype,
                                                                tmp_path, monkeypatch)
    assert fused_shaders == {"matvec_q": 2} and sum(unfused_shaders.values()) == 6
    found = _affine_dispatches(dispatches, "matvec_q")
    assert any(d.get("GLU") for d in found) and all(d["BITS"] == bits for d in found)
    for got in (fused, unfused):
        assert_close_in(got, want, dtype, terms=256)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: _NAMES[d])
@pytest.mark.parametrize("bits,group", [(4, 32), (8, 96)], ids=str)
def test_three_products_in_one_dispatch(bits, group, dtype, tmp_path, monkeypatch, dispatches):
    """SEGMENTS: q, k and v's products of one row in one dispatch."""
    if not _fused_binds(10):
        pytest.skip("matvec_q's SEGMENTS binds 10 storage buffers")
    module = _quantized(Projections(96).eval(), dtype, bits, group)
    fused, fused_shaders, unfused, unfused_shaders, want = _run(module, [rand(1, 96, seed=6) * 2], dtype,
                                                                tmp_path, monkeypatch)
    assert fused_shaders.get("matvec_q") == 1 and unfused_shaders.get("matvec_q") == 3
    assert any(d.get("SEGMENTS") for d in _affine_dispatches(dispatches, "matvec_q"))
    for got in (fused, unfused):
        assert_close_in(got, want, dtype, terms=96)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: _NAMES[d])
@pytest.mark.parametrize("bits,group", [(4, 32), (8, 32), (4, 64)], ids=str)
def test_rms_norm_folded_into_the_products(bits, group, dtype, tmp_path, monkeypatch, dispatches):
    """NORM with SEGMENTS (q, k, v), with GLU (the MLP) and with one product (the head)."""
    if not _fused_binds(11):
        pytest.skip("matvec_q's NORM with SEGMENTS binds 11 storage buffers")
    torch.manual_seed(0)
    module = _quantized(NormedProducts(hidden=256).eval(), dtype, bits, group)
    inputs = [rand(1, 1, 64, seed=s) * 3 for s in (1, 2, 3)]
    fused, fused_shaders, unfused, unfused_shaders, want = _run(module, inputs, dtype, tmp_path, monkeypatch)
    assert fused_shaders == {"matvec_q": 4, "binary": 1} and unfused_shaders["reduce_dims"] == 3
    norms = [d for d in _affine_dispatches(dispatches, "matvec_q") if d.get("NORM")]
    assert {("GLU" in d, "SEGMENTS" in d) for d in norms} == {(True, False), (False, True), (False, False)}
    for f, u, w in zip(fused, unfused, want):
        assert_close_in(f, w, dtype, terms=256)
        assert_close_in(u, w, dtype, terms=256)


@pytest.mark.parametrize("bits", [4, 8])
def test_residual_add_in_the_epilogue(bits, tmp_path, monkeypatch, dispatches):
    """The residual read as the product's bias (5 bindings; on 4 the add stays a dispatch of its own)."""
    module = _quantized(ProductPlusResidual(256, 96, False).eval(), torch.float32, bits, 64)
    inputs = [rand(1, 1, 256, seed=1), rand(1, 1, 96, seed=2) * 3]
    fused, fused_shaders, unfused, unfused_shaders, want = _run(module, inputs, torch.float32, tmp_path, monkeypatch)
    assert fused_shaders == ({"matvec_q": 1} if _fused_binds(BIASED_BINDINGS) else {"matvec_q": 1, "binary": 1})
    assert unfused_shaders == {"matvec_q": 1, "binary": 1}
    _affine_dispatches(dispatches, "matvec_q")
    for got in (fused, unfused):
        assert_close_in(got, want, torch.float32, terms=256)


def test_products_of_mixed_packings_stay_apart(tmp_path, monkeypatch, dispatches):
    """Affine and symmetric scales are two packings: a GLU or three products of both stay unfused (each
    product its own packing), and equal torch's."""
    dtype = torch.float32
    mlp = _quantized(GatedMLP(64, 256).eval(), dtype, 4, 32, affine=lambda name: name != "up")
    fused, fused_shaders, _, unfused_shaders, want = _run(mlp, [rand(1, 1, 64, seed=7)], dtype, tmp_path, monkeypatch)
    assert fused_shaders.get("matvec_q") == 3 and unfused_shaders.get("matvec_q") == 3
    assert {d.get("AFFINE") for s, d, _ in dispatches if s == "matvec_q"} == {1, None}
    assert not any(d.get("GLU") for _, d, _ in dispatches)
    assert_close_in(fused, want, dtype, terms=256)
    dispatches.clear()
    projections = _quantized(Projections(96).eval(), dtype, 8, 32, affine=lambda name: name != "k")
    (tmp_path / "p").mkdir()
    fused, fused_shaders, _, _, want = _run(projections, [rand(1, 96, seed=8)], dtype, tmp_path / "p", monkeypatch)
    assert fused_shaders.get("matvec_q") == 3 and not any(d.get("SEGMENTS") for _, d, _ in dispatches)
    assert_close_in(fused, want, dtype, terms=96)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: _NAMES[d])
def test_quantize_module_int4_is_affine_end_to_end(dtype, tmp_path, monkeypatch, dispatches):
    """export_model(quantize="int4"): affine int4 linears (the embedding int8, symmetric), fused as the
    float model is, equal to torch running the quantized module."""
    module = NormedProducts(hidden=256).eval()
    inputs = [rand(1, 1, 64, seed=s) * 3 for s in (1, 2, 3)]
    path = _export(module, tuple(inputs), tmp_path, dtype, quantize="int4")
    xs = [x.to(dtype) for x in inputs]
    fused, _, unfused, _ = _run_both(path, xs, monkeypatch)
    assert all(d.get("AFFINE") == 1 for s, d, _ in dispatches if s == "matvec_q")
    with torch.no_grad():
        quantized = quantize_module(copy.deepcopy(module).to(dtype), "int4")
        assert quantized.q.scales.dim() == 3
        want = quantized(*xs)
    for f, u, w in zip(fused, unfused, want):
        assert_close_in(f, w, dtype, terms=256)
        assert_close_in(u, w, dtype, terms=256)


# --------------------------------------------------------------------------- the variants are declared

def test_every_affine_request_is_a_declared_variant(tmp_path):
    """Built without a device on every device class of tests/loader/test_variants.py (its words mode, its
    profiles): affine vkx.linear_q of 1, 3 and 16 rows, any float x, pairs and out, a bias or none, and
    vkx.embedding_q; then the fused forms of affine int4 and int8 modules in each dtype. Every request is
    among the declared variants (the packaged archive holds those only) and AFFINE ones were requested."""
    import random

    from tests.loader import test_variants as tv

    rng = random.Random(7)
    cases = []
    for tx, ts, to in tv.combos(rng, [tv.FLOATS] * 3, limit=9):
        for bits, (n, k, group) in itertools.product((4, 8), ((37, 256, 32), (64, 576, 128), (5, 72, 8))):
            w = tv.T((n, k // 2) if bits == 4 else (n, k), tv.U8 if bits == 4 else tv.I8, const=True)
            s = tv.T((n, -(-k // group), 2), ts, const=True)
            for rows in ((1,), (3,), (DEQUANT_ROWS,)):
                bias = tv.T((n,), tx, const=True) if tv.maybe(rng) else None
                cases.append(tv.one("vkx.linear_q.default", tv.T((*rows, k), tx), w, s, bias, bits, group,
                                    out=tv.T((*rows, n), to)))
            cases.append(tv.one("vkx.embedding_q.default", w, s, tv.T((2, 3), tv.I32), bits, group,
                                out=tv.T((2, 3, k), to)))
    found = tv.sweep_cases("affine", cases, tv.few_units, rng)
    graphs = []
    for i, (dtype, bits) in enumerate(itertools.product(DTYPES, (4, 8))):
        torch.manual_seed(0)
        module = _quantized(NormedProducts(hidden=256).eval(), dtype, bits, 32)
        path = _export(module, tuple(rand(1, 1, 64, seed=s) for s in (1, 2, 3)), tmp_path, dtype)
        with tv.ProgramFile.open(path) as pf:
            graphs += [(f"NormedProducts int{bits} {dtype}", d.graph) for d in pf.vulkan_delegates]
        path.unlink()
    for device in tv.DEVICES:
        found.merge(tv.sweep_graphs(graphs, device))
    assert found.ok, found.report()
    affine = {(shader, "GLU=1" in text, "SEGMENTS=1" in text, "NORM=1" in text)
              for shader, text in found.seen if "AFFINE=1" in text}
    assert {s for s, *_ in affine} == {"matvec_q", "linear_q", "dequant_q", "embedding_q"}
    assert {("matvec_q", True, False, True), ("matvec_q", False, True, True), ("matvec_q", False, False, True)} <= affine
