"""Two methods load their shared weights once: the peak of loading a two-method file is
W + max(A_prefill, A_decode) + state + the fixed overhead (tests/memory/test_peak_bound.py says
what the overhead is), not 2W. Each load runs in a fresh process."""
from __future__ import annotations

import json

import pytest
import torch

import vkx
from vkx.format import describe
from vkx.format.describe import lazy_peak

from tests.memory.conftest import run_py
from tests.memory.test_peak_bound import MiB, OVERHEAD_DISCRETE_GPU, OVERHEAD_HOST_MEMORY_DEVICE

from .models import Decoder

pytestmark = pytest.mark.vulkan  # the device is opened in child processes too


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    model = Decoder(vocab=16384, dim=1024, heads=8, layers=2, max_len=64).eval()  # W = 192 MiB
    inputs = {"prefill": (torch.randint(0, 16384, (1, 16)), torch.arange(16)),
              "decode": (torch.tensor([[5]]), torch.tensor([16]))}
    path = tmp_path_factory.mktemp("peak") / "decoder.pte"
    report = vkx.export_model(model, inputs, path)
    return path, report


@pytest.mark.parametrize("upload", ["staging", "auto"])
def test_two_method_peak_is_W_plus_max_A_plus_state(exported, upload):
    """staging copies every weight once (the peak is about W, not 2W); auto imports them where
    the device can (lavapipe: the peak is far below W)."""
    path, report = exported
    d = describe(path)
    W, state = d["totals"]["W"], d["totals"]["state"]
    assert W == report.constant_bytes > 150 * MiB
    A = {m["name"]: m["A"] for m in d["methods"]}
    measured = json.loads(run_py("tests.state.peak_methods", str(path), upload, module=True))
    assert measured["weight_bytes"] == W
    # weights once; small ones share 4 MiB pool blocks (loader/gpu/memory.py), hence the slack
    assert W <= measured["ledger_peak"]["weights"] + measured["ledger_peak"]["imported"] <= W + 4 * MiB
    assert measured["ledger_peak"]["state"] == state
    overhead = OVERHEAD_HOST_MEMORY_DEVICE if measured["device_memory_is_host"] else OVERHEAD_DISCRETE_GPU
    io = measured["ledger_peak"].get("io", 0)
    bound = lazy_peak(W, max(A.values()), io, state, measured["staging_peak"]) + overhead
    print(f"\n{upload} ({measured['upload']}): W {W / MiB:.1f} MiB, A {A}, state {state / MiB:.2f} MiB: peak {measured['peak'] / MiB:.1f} MiB "
          f"= {measured['peak'] / W:.3f} W (bound {bound / MiB:.1f} MiB)")
    assert measured["peak"] <= bound
    if measured["upload"] == "ring":
        assert measured["peak"] >= 0.9 * W  # the weights were copied: once
