"""Prebuilt SPIR-V: the package's archive holds every declared variant of the sources as they are;
the builders of registered shaders request only declared variants (swept over dtypes, operand
kinds and paths, without a device); a variant not prebuilt, and an archive older than its source,
are typed errors."""
from __future__ import annotations

import itertools
import shutil
import zipfile
from pathlib import Path

import pytest

from vkx.format import opset, dtypes
from vkx.format import vkgraph as g
from vkx.loader import ops
from vkx.loader.gpu import shaders, spirv
from vkx.loader.errors import BadProgramError, ShaderError, VariantNotBuiltError
from vkx.loader.build.graph import GraphBuilder
from vkx.loader.gpu.limits import Limits
from vkx.loader.ops import elementwise

from .helpers import no_device_limits, scalar_value

DEVICE_TYPES = sorted((d for d in dtypes.ALL if d.on_device), key=str)
FLOATS = (dtypes.FLOAT32, dtypes.FLOAT16, dtypes.BFLOAT16)


def test_archive_holds_every_declared_variant_of_the_current_sources():
    archive = shaders.packaged_dir() / spirv.ARCHIVE
    assert spirv.is_current(archive, shaders.packaged_dir(), ops.all_variants()), \
        f"{archive} is missing or stale: run `make shaders`"


def test_every_shader_declares_its_variants():
    """The installed runtime never compiles: every shader's builders declare its variant space."""
    root = shaders.packaged_dir()
    missing = sorted(p.stem for p in root.glob("*.comp") if p.stem not in ops.all_variants())
    assert not missing, f"shaders whose builders declare no variants: {missing}"


def _requests(name: str, operands: list, out, limits: Limits = no_device_limits(max_storage_buffer_range=1 << 30),
              **device) -> list[tuple[str, tuple]]:
    """(shader, defines) of every dispatch the builder of `name` records for `operands` (a
    (shape, dtype) tensor or a number each) and `out` (one, or a list of several), built without a
    device (GraphBuilder's `limits` and device arguments); [] when the contract refuses."""
    values: list = []

    def add(v) -> int:
        values.append(v)
        return len(values) - 1

    def arg(a) -> int:
        if isinstance(a, tuple):
            return add(g.Tensor(a[1].datatype, a[0]))
        return add(scalar_value(a))

    ids = [arg(a) for a in operands]
    out_ids = [arg(o) for o in out] if isinstance(out, list) else [arg(out)]
    out_id = add(g.ValueList(tuple(out_ids))) if isinstance(out, list) else out_ids[0]
    graph = g.VkGraph(chain=[g.OperatorCall(0, name, (*ids, out_id))], values=values,
                      input_ids=[i for i, a in zip(ids, operands) if isinstance(a, tuple)], output_ids=out_ids)
    try:
        built = GraphBuilder(graph, limits, **device).build()
    except (BadProgramError, ops.UnsupportedOpError):
        return []
    return [(d.shader, d.defines) for d in built.dispatches]


def _declared() -> set[tuple[str, tuple]]:
    return {(s, tuple(sorted((str(k), str(v)) for k, v in d.items())))
            for s, ds in ops.all_variants().items() for d in ds}


def _elementwise_ops(family: str) -> list[str]:
    return sorted(n for n, d in opset.OPS.items() if d.family == family)


def test_binary_builders_request_only_declared_variants():
    declared, seen = _declared(), set()
    shapes = [((4,), (4,)), ((3,), (3,)), ((2, 3), (3,)), ((4,), (1,))]  # vec4, scalar, strided, scalar tensor
    for name in _elementwise_ops("binary"):
        alpha = [1] if opset.lookup(name).has("alpha") else []
        # a dtype reaches binary.comp as a specialization constant: its kind is what picks a variant
        for ta, tb, to in itertools.product((dtypes.FLOAT16, dtypes.INT8, dtypes.BOOL), repeat=3):
            for sa, sb in shapes:
                out = ((2, 3) if len(sa) == 2 else sa, to)
                for a, b in [((sa, ta), (sb, tb)), ((sa, ta), 2), ((sa, ta), 2.5), (3, (sb, tb))]:
                    seen.update(_requests(name, [a, b, *alpha], out))
    assert seen and seen <= declared, sorted(seen - declared)[:3]


def test_unary_builders_request_only_declared_variants():
    declared, seen = _declared(), set()
    calls = [(n, []) for n in _elementwise_ops("unary")] + [
        ("aten.gelu.default", ["none"]), ("aten.gelu.default", ["tanh"]),
        ("aten.leaky_relu.default", [0.2]), ("aten.hardshrink.default", [1.5]),
        ("aten.clamp.default", [-1.0, 2.0])] + [("aten.pow.Tensor_Scalar", [e]) for e in (*elementwise.POW_GLSL, 1.7)]
    for (name, extra), ti, to, shape in itertools.product(calls, DEVICE_TYPES, DEVICE_TYPES, [(4,), (3,)]):
        seen.update(_requests(name, [(shape, ti), *extra], (shape, to)))
    assert seen and seen <= declared, sorted(seen - declared)[:3]


def test_copy_cast_fill_builders_request_only_declared_variants():
    declared, seen = _declared(), set()
    for ti, to in itertools.product(DEVICE_TYPES, repeat=2):
        for shape in [(16,), (3,), (2, 3)]:
            seen.update(_requests("aten._to_copy.default", [(shape, ti)], (shape, to)))
        seen.update(_requests("aten.permute_copy.default", [((2, 3), ti), [1, 0]], ((3, 2), ti)))
        seen.update(_requests("aten.full.default", [[3], 2], ((3,), to)))
    assert {s for s, _ in seen} == {"cast", "copy_strided", "fill"} and seen <= declared, sorted(seen - declared)[:3]


def test_coop_gemm_builders_request_only_declared_variants():
    """fp16 products on a device with cooperative matrices: both tilings, split-K, both B layouts,
    a bias, fp32 attention scores, and split-K's reduce after them."""
    declared = {(s, tuple(sorted((str(k), str(v)) for k, v in d.items())))
                for s, ds in ops.all_variants().items() for d in ds}
    seen = set()
    f16 = dtypes.FLOAT16
    for units in (1, 132):
        device = dict(limits=no_device_limits(max_storage_buffer_range=1 << 30, max_compute_shared_memory_size=49152),
                      compute_units=units, fp16_cooperative_matrix=True)
        for m, k, n in [(512, 2048, 8192), (512, 2048, 2048), (64, 2048, 512)]:
            seen.update(_requests("aten.linear.default", [((m, k), f16), ((n, k), f16), ((n,), f16)], ((m, n), f16),
                                  **device))
            seen.update(_requests("aten.linear.default", [((m, k), f16), ((n, k), f16), None], ((m, n), f16),
                                  **device))
            seen.update(_requests("aten.mm.default", [((m, k), f16), ((k, n), f16)], ((m, n), f16), **device))
        q, kv = ((1, 32, 512, 64), f16), ((1, 32, 640, 64), f16)
        seen.update(_requests("aten.scaled_dot_product_attention.default",
                              [q, kv, kv, None, 0.0, True, None, False], q, **device))
    seen = {(s, d) for s, d in seen if s in ("matmul_coop", "matmul_reduce")}
    assert {s for s, _ in seen} == {"matmul_coop", "matmul_reduce"}
    assert seen <= declared, sorted(seen - declared)[:3]


def test_attention_builders_request_only_declared_variants():
    """Prefill attention's softmax over short and long rows (a 4,160-position cache once asked for a
    variant no test had recorded) and decode attention, split or not, in each dtype, with each
    mask dtype, read as itself and through 32-bit words."""
    declared, seen = _declared(), set()
    narrow = no_device_limits(max_storage_buffer_range=1 << 30, features=frozenset())
    for limits, S, causal, dtype in itertools.product((no_device_limits(max_storage_buffer_range=1 << 30), narrow),
                                                      (48, 640, 4160), (False, True), FLOATS):
        for L in (1, 16):
            q, kv = ((1, 4, L, 32), dtype), ((1, 4, S, 32), dtype)
            for mask in (None, *(((L, S), dt) for dt in (*FLOATS, dtypes.BOOL))):
                seen.update(_requests("aten.scaled_dot_product_attention.default",
                                      [q, kv, kv, mask, 0.0, causal and mask is None, None, False], q, limits,
                                      compute_units=132))
    seen = {(s, d) for s, d in seen if s.startswith("attention_")}
    assert {s for s, _ in seen} == {"attention_softmax", "attention_decode"}
    assert seen <= declared, sorted(seen - declared)[:3]


def test_et_case_builders_request_only_declared_variants():
    """flip, 8da4w's activation quantization, group norm, transposed convolution, grid sampling."""
    declared, seen = _declared(), set()
    floats = (dtypes.FLOAT32, dtypes.FLOAT16, dtypes.BFLOAT16)
    for t in DEVICE_TYPES:
        seen.update(_requests("aten.flip.default", [((2, 3), t), [0, 1]], ((2, 3), t)))
    for x, z in itertools.product(floats, (dtypes.INT8, dtypes.INT32)):
        seen.update(_requests("torchao.choose_qparams_affine.default", [((3, 32), x), "ASYMMETRIC", [1, 32], None, -128, 127],
                              [((3,), x), ((3,), z)]))
    for t, (c, hw), affine in itertools.product(floats, [(4, 4), (4, 16), (8, 512)], (False, True)):
        params = [((c,), t), ((c,), t)] if affine else [None, None]
        seen.update(_requests("aten.native_group_norm.default", [((2, c, hw), t), *params, 2, c, hw, 2, 1e-5],
                              [((2, c, hw), t), ((2, 2), t), ((2, 2), t)]))
    for t, bias in itertools.product(floats, (False, True)):
        seen.update(_requests("aten.convolution.default", [((1, 4, 3, 3), t), ((4, 2, 2, 2), t),
                                                           ((2,), t) if bias else None, [2], [0], [1], True, [0], 1],
                              ((1, 2, 6, 6), t)))
        seen.update(_requests("aten.grid_sampler_2d.default", [((1, 2, 4, 4), t), ((1, 3, 3, 2), t), int(bias), 1, bias],
                              ((1, 2, 3, 3), t)))
    shaders_ = {"flip", "act_quant", "group_norm", "conv_transpose2d", "grid_sampler"}
    mine = {(s, d) for s, d in seen if s in shaders_}
    assert {s for s, _ in mine} == shaders_ and mine <= declared, sorted(mine - declared)[:3]


def _archive_of(tmp_path: Path) -> shaders.Prebuilt:
    """An archive of tests/loader/shaders/test_relu.comp (one variant, no defines), beside its source."""
    root = tmp_path / "shaders"
    shutil.copytree(Path(__file__).parent / "shaders", root)
    spirv.build(root, root / spirv.ARCHIVE, {"test_relu": [{}]})
    return shaders.Prebuilt(root / spirv.ARCHIVE)


def test_a_variant_not_prebuilt_is_typed(tmp_path):
    prebuilt = _archive_of(tmp_path)
    assert prebuilt.holds("test_relu") and not prebuilt.holds("test_add")
    assert prebuilt.get("test_relu", {})[:4] == b"\x03\x02\x23\x07"  # SPIR-V magic
    with pytest.raises(VariantNotBuiltError, match=r"shader test_relu: variant not prebuilt \(X=1 Y=float\)"):
        prebuilt.get("test_relu", {"Y": "float", "X": 1})


def test_an_archive_older_than_its_source_is_refused(tmp_path):
    prebuilt = _archive_of(tmp_path)
    source = prebuilt.path.parent / "test_relu.comp"
    source.write_text(source.read_text() + "\n// changed\n")
    with pytest.raises(ShaderError, match="built from another test_relu.comp: run `make shaders`"):
        prebuilt.get("test_relu", {})
    assert not spirv.is_current(prebuilt.path, prebuilt.path.parent, {"test_relu": [{}]})


def test_archive_is_reproducible(tmp_path):
    first = _archive_of(tmp_path / "a").path.read_bytes()
    assert _archive_of(tmp_path / "b").path.read_bytes() == first
    with zipfile.ZipFile(_archive_of(tmp_path / "c").path) as z:
        assert sorted(z.namelist()) == sorted([spirv.SOURCES, spirv.entry_name("test_relu", {})])


def test_a_header_rebuilds_only_the_shaders_that_include_it(tmp_path):
    """A shader's SPIR-V is rebuilt when its source or a header it includes (through another header
    too) changes; a header it does not include changes nothing."""
    root = tmp_path / "shaders"
    shutil.copytree(Path(__file__).parent / "shaders", root)
    (root / "inner.glslh").write_text("#define BIAS_OF(x) ((x) + 0.0)\n")
    (root / "outer.glslh").write_text('#include "inner.glslh"\n')
    relu = (root / "test_relu.comp").read_text()
    (root / "test_headers.comp").write_text(relu.replace("#version 450\n", '#version 450\n#include "outer.glslh"\n', 1))
    variants = {"test_relu": [{}], "test_headers": [{}]}
    archive = root / spirv.ARCHIVE
    assert spirv.build(root, archive, variants)["compiled"] == 2
    assert spirv.build(root, archive, variants)["compiled"] == 0  # unchanged: nothing compiled again
    (root / "unused.glslh").write_text("#define UNUSED 1\n")
    assert spirv.is_current(archive, root, variants)
    (root / "inner.glslh").write_text("#define BIAS_OF(x) ((x) + 1.0)\n")
    assert not spirv.is_current(archive, root, variants)
    assert spirv.build(root, archive, variants)["compiled"] == 1  # test_headers alone
    assert spirv.is_current(archive, root, variants)


def test_a_build_says_how_far_it_is(tmp_path, capsys):
    """`make shaders` takes minutes on a small machine: a line on stderr at each tenth of the variants."""
    root = tmp_path / "shaders"
    shutil.copytree(Path(__file__).parent / "shaders", root)
    variants = {"test_relu": [{"UNUSED": i} for i in range(10)]}  # ten defines sets, ten variants
    spirv.build(root, root / spirv.ARCHIVE, variants, progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == [f"vkx: compiled {n} of 10 shader variants" for n in range(1, 11)]
