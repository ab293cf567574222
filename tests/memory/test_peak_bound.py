"""The lazy load's claim on real exported models: lazy/named peaks at the loader's bound,
`lazy_peak` (W + max(S, A + IO + state): vkx.format.describe, the formula `program.memory` prints), plus a
fixed overhead; legacy/eager at 2W or more. Each load runs in a fresh process.

The fixed overhead is what a load costs beyond the tensors: the file pages of
the one 4 MiB copy chunk in flight before it is released, pipelines, descriptor
pools, command buffers and Python objects. On lavapipe (device memory is host
memory) that is under 24 MiB: measured 8 MiB. On a discrete GPU the driver also
allocates host memory of its own on first use (command and descriptor pools,
the mappings of host-visible memory): measured 22 to 54 MiB on an H200, so the
bound allows 64 MiB there. Neither grows with W or with the largest tensor.
"""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import vkx
from vkx.format.describe import lazy_peak

from .conftest import run_py

pytestmark = pytest.mark.vulkan  # the device is opened in child processes too

MiB = 1 << 20
OVERHEAD_HOST_MEMORY_DEVICE = 24 * MiB
OVERHEAD_DISCRETE_GPU = 64 * MiB


def even_model() -> nn.Module:
    """4 × Linear(4096, 4096): W = 256 MiB, largest constant 64 MiB."""
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(4096, 4096), nn.ReLU())])


def lopsided_model() -> nn.Module:
    """Linear(4096, 8192) + Linear(8192, 4096): W = 256 MiB, largest constant W / 2."""
    return nn.Sequential(nn.Linear(4096, 8192), nn.ReLU(), nn.Linear(8192, 4096))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    directory = tmp_path_factory.mktemp("peak")
    files = {}
    torch.manual_seed(0)
    for name, make in (("even", even_model), ("lopsided", lopsided_model)):
        module = make().eval()
        for layout in ("named", "legacy"):
            path = directory / f"{name}-{layout}.pte"
            report = vkx.export_model(module, (torch.randn(1, 4096),), path, layout=layout)
            files[name, layout] = (path, report.constant_bytes, report.memory)
        del module
    return files


def peak(path, schedule: str) -> dict:
    return json.loads(run_py("tests.memory.peak_child", str(path), schedule, module=True))


def bound_of(measured: dict, W: int, A: int) -> int:
    """`lazy_peak` of the file's W and planned A, with the io, state and staging ring the load allocated."""
    return lazy_peak(W, A, measured["io_peak"], measured["state_peak"], measured["staging_peak"])


@pytest.mark.parametrize("name", ["even", "lopsided"])
def test_lazy_named_peak_is_the_lazy_bound(exported, name):
    path, W, plan = exported[name, "named"]
    A = plan.total_nbytes
    lazy = peak(path, "lazy")
    overhead = OVERHEAD_HOST_MEMORY_DEVICE if lazy["device_memory_is_host"] else OVERHEAD_DISCRETE_GPU
    bound = bound_of(lazy, W, A) + overhead
    print(f"\n{name}: W {W / MiB:.1f} MiB, A {A / MiB:.2f} MiB, S {lazy['staging_peak'] / MiB:.1f} MiB, "
          f"lazy/named peak {lazy['peak'] / MiB:.1f} MiB = {lazy['peak'] / W:.3f} W (bound {bound / MiB:.1f} MiB)")
    assert lazy["peak"] <= bound


def test_legacy_eager_peaks_at_2W_lazy_named_at_W(exported):
    named, W, _ = exported["even", "named"]
    legacy, _, _ = exported["even", "legacy"]
    lazy = peak(named, "lazy")
    eager = peak(legacy, "eager")
    print(f"\nW {W / MiB:.1f} MiB: legacy/eager {eager['peak'] / MiB:.1f} MiB ({eager['peak'] / W:.2f} W), "
          f"lazy/named {lazy['peak'] / MiB:.1f} MiB ({lazy['peak'] / W:.2f} W), ratio {eager['peak'] / lazy['peak']:.2f}")
    assert eager["peak"] >= 1.8 * W
    assert lazy["peak"] < eager["peak"] / 1.6


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_16_bit_models_keep_the_claim_and_their_size(tmp_path, dtype):
    """A 16-bit model is half the bytes in the file and on the device, and the old order still
    costs about twice the new one."""
    torch.manual_seed(0)
    module = even_model().eval()
    files = {}
    for layout in ("named", "legacy"):
        path = tmp_path / f"even-{dtype}-{layout}.pte"
        report = vkx.export_model(module, (torch.randn(1, 4096),), path, layout=layout, dtype=dtype)
        files[layout] = (path, report.constant_bytes, report.memory.total_nbytes)
    path, W, A = files["named"]
    assert W == sum(p.numel() * 2 for p in module.parameters())
    lazy = peak(path, "lazy")
    eager = peak(files["legacy"][0], "eager")
    assert lazy["weight_bytes"] == W and eager["weight_bytes"] == W  # device bytes == file bytes
    overhead = OVERHEAD_HOST_MEMORY_DEVICE if lazy["device_memory_is_host"] else OVERHEAD_DISCRETE_GPU
    print(f"\n{dtype}: W {W / MiB:.1f} MiB, lazy/named {lazy['peak'] / W:.3f} W, legacy/eager "
          f"{eager['peak'] / W:.2f} W, ratio {eager['peak'] / lazy['peak']:.2f}")
    assert lazy["peak"] <= bound_of(lazy, W, A) + overhead
    assert eager["peak"] >= 1.9 * lazy["peak"] - overhead
