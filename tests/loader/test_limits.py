"""Device profiles and the limits in force (vkx.loader.gpu.limits): kernels chosen within them,
every pipeline checked against them, what is over them refused with a LimitError."""
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from vkx.loader.gpu import _profiles_regen
from vkx.loader.gpu.device import Device
from vkx.loader.errors import LimitError
from vkx.loader.gpu.limits import FEATURES, PROFILES, Limits, check_pipeline, pipeline_needs
from vkx.loader.ops.gemm import product_defines
from vkx.loader.gpu.shaders import compile_spirv, pipelines_for

from vkx.format import dtypes
from vkx.export.quantize import dequantize, quantize_weight

from ..ops.conftest import Const, assert_close, assert_norm_close, rand, run_graph

pytestmark = pytest.mark.vulkan

BASELINE = "android-baseline-2022"


@pytest.fixture(scope="module")
def baseline():
    dev = Device(profile=BASELINE)
    yield dev
    dev.close()


def _kernels(dev: Device) -> set[tuple[str, tuple]]:
    """(shader, defines) of every pipeline made on `dev` so far."""
    return {(name, defines) for name, defines, *_ in pipelines_for(dev)._pipelines}


def test_under_takes_the_lower_limit_the_higher_alignment_and_the_common_features():
    dev = Limits((1, 2, 0), 1 << 27, 16, 128, 32768, 1024, (1024, 1024, 1024), (65535,) * 3, 32, 8, 8,
                 frozenset({"shaderInt16", "storageBuffer16BitAccess"}))
    got = dev.under(PROFILES[BASELINE])
    assert (got.max_storage_buffer_range, got.min_storage_buffer_offset_alignment) == (1 << 27, 256)
    assert (got.max_compute_work_group_invocations, got.max_compute_work_group_size) == (128, (128, 128, 64))
    assert (got.max_per_stage_descriptor_storage_buffers, got.max_bound_descriptor_sets) == (4, 4)
    assert got.api_version == (1, 1, 106) and got.max_spirv_version == (1, 3)
    assert got.subgroup_size == 8  # the baseline names none: the device's
    assert got.features == {"shaderInt16"}
    assert dev.under(PROFILES["adreno-7xx"]).subgroup_size == 128


def test_device_under_a_profile_reports_and_enables_only_what_is_in_force(baseline):
    assert baseline.profile == BASELINE
    assert baseline.limits.max_compute_work_group_invocations == 128
    assert baseline.limits.min_storage_buffer_offset_alignment == 256
    assert baseline.limits.max_storage_buffer_range <= 1 << 28
    assert baseline.features["storageBuffer16BitAccess"] is False and baseline.features["shaderInt16"] is True
    assert baseline.describe()["limits"]["maxComputeWorkGroupInvocations"] == 128


def test_unknown_profile_is_refused_naming_the_known_ones():
    with pytest.raises(LimitError, match="unknown device profile 'phone'.*android-baseline-2022"):
        Device(profile="phone")


SPEC_SIZED = """#version 450
#extension GL_EXT_shader_16bit_storage : require
layout(local_size_x_id = 0, local_size_y_id = 1) in;
layout(constant_id = 2) const int ROWS = 4;
layout(constant_id = 3) const uint TILE = 16;
layout(std430, binding = 0) buffer Out { float16_t y[]; };
shared float partial[ROWS * 64 + 1];
shared vec4 tile[TILE << 1];
shared float picked[ROWS > 8 ? 32 : 16];
void main() {
    partial[gl_LocalInvocationIndex] = 1.0;
    tile[gl_LocalInvocationIndex % (TILE << 1)] = vec4(1.0);
    picked[gl_LocalInvocationIndex % 16] = 2.0;
    barrier();
    y[gl_LocalInvocationIndex] = float16_t(partial[0] + tile[0].x + picked[0]);
}
"""


def test_pipeline_needs_reads_workgroup_size_shared_memory_and_features(tmp_path):
    """Sizes set by specialization constants (and expressions of them) as the pipeline will have them."""
    (tmp_path / "spec_sized.comp").write_text(SPEC_SIZED)
    from vkx.loader.gpu.spirv import glslc
    code = glslc(tmp_path / "spec_sized.comp", {})
    default = pipeline_needs(code)
    assert default.local_size == (1, 1, 1)
    assert default.shared_bytes == 4 * (4 * 64 + 1) + 16 * 32 + 4 * 16
    assert default.features == {"storageBuffer16BitAccess"}
    given = pipeline_needs(code, (64, 2, 16, 8))
    assert given.local_size == (64, 2, 1) and given.shared_bytes == 4 * (16 * 64 + 1) + 16 * 16 + 4 * 32


def test_a_kernel_over_a_limit_is_refused_naming_kernel_limit_and_value():
    """matmul_tiled's 16 x 16 workgroup with RT = CT = 4, BK = 16 (specialization constants 0-2) and a
    bf16 B: the limits are checked with the constants the pipeline will have."""
    spirv = compile_spirv("matmul_tiled", product_defines(False, dtypes.FLOAT32, dtypes.BFLOAT16, False, None, False))
    tiling = (4, 4, 16)
    baseline = PROFILES[BASELINE]
    with pytest.raises(LimitError, match=r"kernel matmul_tiled: maxComputeWorkGroupInvocations is 128 in force, "
                                         r"the kernel needs 256"):
        check_pipeline(baseline, "matmul_tiled", spirv, 3, 128, tiling)
    wide = Limits(**{**baseline.__dict__, "max_compute_work_group_invocations": 1024,
                     "max_compute_work_group_size": (1024,) * 3, "max_compute_shared_memory_size": 4096})
    with pytest.raises(LimitError, match="maxComputeSharedMemorySize is 4096 in force, the kernel needs 8192"):
        check_pipeline(wide, "matmul_tiled", spirv, 3, 128, tiling)
    check_pipeline(Limits(**{**wide.__dict__, "max_compute_shared_memory_size": 2048, "features": frozenset(FEATURES)}),
                   "matmul_tiled", spirv, 3, 128, (1, 1, 4))  # 2 * 16 * 16 * 4 bytes: a smaller tiling fits
    roomy = Limits(**{**wide.__dict__, "max_compute_shared_memory_size": 32768})
    with pytest.raises(LimitError, match="needs storageBuffer16BitAccess"):  # B is bf16
        check_pipeline(roomy, "matmul_tiled", spirv, 3, 128, tiling)
    with pytest.raises(LimitError, match="maxPerStageDescriptorStorageBuffers is 4 in force, the kernel needs 5"):
        check_pipeline(roomy, "matmul_tiled", spirv, 5, 128, tiling)
    with pytest.raises(LimitError, match=r"kernel matmul_tiled: is SPIR-V 1.5, which Vulkan 1.1 in force does not accept"):
        newer = spirv[:4] + (0x00010500).to_bytes(4, "little") + spirv[8:]
        check_pipeline(Limits(**{**roomy.__dict__, "features": frozenset(FEATURES)}), "matmul_tiled", newer, 3, 128, tiling)


def test_kernels_are_chosen_within_the_profile_and_match_torch(baseline):
    x = rand(3, 2048, seed=1, scale=3.0)
    assert_close(run_graph("aten._softmax.default", [x, -1, False], (tuple(x.shape), torch.float32),
                           device=baseline), torch.softmax(x, -1))
    a, w = rand(64, 96, seed=2), rand(80, 96, seed=3)
    assert_close(run_graph("aten.linear.default", [a, Const(w), None], ((64, 80), torch.float32), device=baseline),
                 a @ w.T, rtol=1e-4, atol=1e-4)
    made = {name: (defines, spec) for name, defines, _, spec in pipelines_for(baseline)._pipelines}
    assert made["softmax"][1][0] == 128  # the row workgroup: specialization constant 0
    assert "matmul" in made and "matmul_tiled" not in made
    for name, defines, nbindings, spec in pipelines_for(baseline)._pipelines:
        check_pipeline(baseline.limits, name, compile_spirv(name, dict(defines)), nbindings, 128, spec)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_activations_without_16_bit_storage_are_held_in_fp32(baseline, dtype):
    """The output keeps the file's dtype; the activations between are fp32 on the device, so the
    result is torch's fp32 one rounded once: within one rounding of the output dtype."""
    x, w = rand(4, 64, seed=4, scale=3.0).to(dtype), rand(24, 64, seed=5).to(dtype)
    got = run_graph("aten._softmax.default", [x, -1, False], (tuple(x.shape), dtype), device=baseline)
    assert got.dtype == dtype
    assert_close(got, torch.softmax(x.float(), -1).to(dtype))
    got = run_graph("aten.linear.default", [x, Const(w), None], ((4, 24), dtype), device=baseline)
    assert got.dtype == dtype
    assert_norm_close(got.float(), x.float() @ w.float().T, rtol=1e-2, atol=1e-2)


def test_8_bit_activations_without_8_bit_storage_are_held_in_words_converted_as_their_type(baseline):
    """bool, int8 and uint8 activations live in int32 words; every store converts as the 8-bit
    type would (nonzero is true, integers wrap), so results equal torch's."""
    x = torch.tensor([[0.0, 0.25, -3.0, 2.5], [1.0, -0.5, 0.0, 7.0]])
    assert torch.equal(run_graph("aten._to_copy.default", [x], ((2, 4), torch.bool), device=baseline),
                       x.to(torch.bool))
    assert torch.equal(run_graph("aten.lt.Tensor", [x, 0.5], ((2, 4), torch.bool), device=baseline), x < 0.5)
    a = torch.tensor([[100, -128, 7, 127]], dtype=torch.int8)
    assert torch.equal(run_graph("aten.add.Tensor", [a, a, 1], ((1, 4), torch.int8), device=baseline), a + a)
    u = torch.tensor([[200, 3, 255, 0]], dtype=torch.uint8)
    assert torch.equal(run_graph("aten.mul.Tensor", [u, u], ((1, 4), torch.uint8), device=baseline), u * u)


@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_weights_run_without_int8_arithmetic(bits):
    """adreno-7xx has 8/16-bit storage but no shaderInt8: int4 and int8 weights still run."""
    dev = Device(profile="adreno-7xx")
    try:
        assert dev.features["shaderInt8"] is False and dev.features["storageBuffer8BitAccess"] is True
        q, s = quantize_weight(rand(37, 256, seed=1), bits, 32)
        for m in (1, 3):  # matvec_q and linear_q
            x = rand(m, 256, seed=2)
            got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), None, bits, 32], (m, 37), device=dev)
            assert_norm_close(got, x.double() @ dequantize(q, s, bits, 32).double().T, rtol=1e-5, atol=1e-5)
    finally:
        dev.close()


def test_bindings_offset_by_the_profile_alignment(baseline):
    """A slice bound in parts at a small range: every offset a multiple of 256 (graph.dispatch checks)."""
    x = torch.arange(3000, dtype=torch.float32).reshape(30, 100)
    got = run_graph("aten.slice_copy.Tensor", [x, 0, 3, 29, 1], (26, 100), device=baseline,
                    max_binding_bytes=2048)
    np.testing.assert_array_equal(np.asarray(got), x[3:29].numpy())


@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_weights_under_the_baseline_read_their_fp16_scales_by_words(baseline, bits):
    """No 8/16-bit storage: the weights are read as words already, the fp16 scales through words."""
    q, s = quantize_weight(rand(38, 256, seed=1), bits, 32)
    for m in (1, 3):
        x = rand(m, 256, seed=2)
        got = run_graph("vkx.linear_q.default", [x, Const(q), Const(s), None, bits, 32], (m, 38), device=baseline)
        assert_norm_close(got, x.double() @ dequantize(q, s, bits, 32).double().T, rtol=1e-5, atol=1e-5)
    odd_q, odd_s = quantize_weight(rand(37, 256, seed=1), bits, 256)  # 37 scales: the last word half padding
    got = run_graph("vkx.linear_q.default", [x, Const(odd_q), Const(odd_s), None, bits, 256], (3, 37),
                    device=baseline)
    assert_norm_close(got, x.double() @ dequantize(odd_q, odd_s, bits, 256).double().T, rtol=1e-5, atol=1e-5)


def test_bool_mask_under_the_baseline_is_read_by_words(baseline):
    q, k, v = rand(1, 2, 4, 16, seed=3), rand(1, 2, 8, 16, seed=4), rand(1, 2, 8, 16, seed=5)
    mask = rand(4, 8, seed=6) > 0
    mask[:, 0] = True  # no fully masked row
    got = run_graph("aten.scaled_dot_product_attention.default",
                    [q, k, v, Const(mask), 0.0, False, None, False], (1, 2, 4, 16), device=baseline)
    assert_close(got, torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask), rtol=1e-4, atol=1e-5)


def test_large_tensors_bound_in_parts_at_a_small_range_on_256_byte_offsets(baseline):
    small = {"device": baseline, "max_binding_bytes": 8192}
    table, idx = rand(50, 96, seed=7), torch.tensor([0, 49, 17, 33, 48], dtype=torch.int32)
    got = run_graph("aten.embedding.default", [Const(table), idx, -1, False, False], (5, 96), **small)
    assert_close(got, table[idx.long()])
    x, w, b = rand(40, 96, seed=8), rand(72, 96, seed=9), rand(72, seed=10)
    assert_close(run_graph("aten.linear.default", [x, Const(w), Const(b)], (40, 72), **small),
                 torch.nn.functional.linear(x, w, b), rtol=1e-4, atol=1e-4)
    rows = rand(12, 1024, seed=11)
    assert_close(run_graph("aten._softmax.default", [rows, -1, False], (12, 1024), **small), torch.softmax(rows, -1))
    q, s = quantize_weight(rand(96, 256, seed=12), 4, 32)  # 12 KiB of packed weight
    for m in (1, 3):
        xq = rand(m, 256, seed=13)
        got = run_graph("vkx.linear_q.default", [xq, Const(q), Const(s), None, 4, 32], (m, 96), **small)
        assert_norm_close(got, xq.double() @ dequantize(q, s, 4, 32).double().T, rtol=1e-5, atol=1e-5)


def test_embedding_over_the_binding_range_in_force(baseline):
    """A table just over maxStorageBufferRange in force (128 MiB on lavapipe) is gathered in parts."""
    width = 1024
    rows = baseline.limits.max_storage_buffer_range // (4 * width) + 3
    table = torch.arange(rows, dtype=torch.float32)[:, None] + torch.linspace(0, 1, width)
    idx = torch.tensor([0, rows - 1, rows - 4, rows // 2], dtype=torch.int32)
    got = run_graph("aten.embedding.default", [Const(table), idx, -1, False, False], (4, width), device=baseline)
    assert_close(got, table[idx.long()])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_and_8_bit_weights_of_every_reading_kernel_are_read_by_words(baseline, dtype):
    """Under the baseline each kernel that reads a weight (a constant, kept as stored) reads a 16- or
    8-bit one through words, odd element counts included, and matches torch."""
    x = rand(3, 7, seed=20)
    table = rand(3, 7, seed=21).to(dtype)
    mask = rand(3, 7, seed=22) > 0
    assert_close(run_graph("aten.where.self", [Const(mask), Const(table), x], ((3, 7), dtype), device=baseline),
                 torch.where(mask, table, x.to(dtype)))
    assert_close(run_graph("aten._to_copy.default", [Const(table)], ((3, 7), torch.float32), device=baseline),
                 table.float())
    index = torch.tensor([[2, 0, 1, 1, 0, 2, 2]], dtype=torch.int32)
    assert_close(run_graph("aten.gather.default", [Const(table), 0, index, False], ((1, 7), dtype), device=baseline),
                 torch.gather(table, 0, index.long()))
    assert_close(run_graph("aten.add.Tensor", [x, Const(table), 1], ((3, 7), dtype), device=baseline),
                 (x + table.float()).to(dtype))
    w, b = rand(5, 7, seed=23).to(dtype), rand(5, seed=24).to(dtype)
    assert_close(run_graph("aten.linear.default", [x.to(dtype), Const(w), Const(b)], ((3, 5), dtype),
                           device=baseline), torch.nn.functional.linear(x, w.float(), b.float()).to(dtype),
                 rtol=1e-2, atol=1e-2)
    img, kernel = rand(1, 3, 6, 6, seed=25).to(dtype), rand(4, 3, 3, 3, seed=26).to(dtype)
    assert_close(run_graph("aten.convolution.default", [img, Const(kernel), None, [1, 1], [0, 0], [1, 1], False,
                                                         [0, 0], 1], ((1, 4, 4, 4), dtype), device=baseline),
                 torch.nn.functional.conv2d(img.float(), kernel.float()).to(dtype), rtol=1e-2, atol=1e-2)


def test_profiles_are_khronos_figures_as_published():
    """loader/gpu/profiles.json is what vkx.loader.gpu._profiles_regen reads from Khronos' profile files (the
    folder VKX_KHRONOS_PROFILES names: `make test` sets it, docs/profiles.md): no figure typed by hand."""
    named = os.environ.get(_profiles_regen.FOLDER_VARIABLE, "")
    folder = Path(named)
    if not named or not (folder / "VP_ANDROID_baseline_2022.json").is_file():
        pytest.skip(f"Khronos' profile files are not in {_profiles_regen.FOLDER_VARIABLE} ({named or 'unset'})")
    assert _profiles_regen.OUT.read_text() == _profiles_regen.regenerate(folder)
    baseline = PROFILES[BASELINE]
    assert baseline.api_version == (1, 1, 106) and baseline.max_compute_shared_memory_size == 16384
    assert PROFILES["android-15"].max_per_stage_descriptor_storage_buffers == 12
    assert {"storageBuffer16BitAccess", "storageBuffer8BitAccess"} <= PROFILES["android-15"].features
