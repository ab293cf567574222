"""The lazy load's one formula (vkx.format.describe.lazy_peak): what `program.memory` prints and what the
memory tests bound a load by; a load keeps to it."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import vkx
from vkx.format.describe import LAZY_PEAK, lazy_peak


def test_the_ring_counts_only_where_it_exceeds_what_comes_after_it():
    """W + max(S, A + IO + state): the ring is freed before the state, activations and io are allocated."""
    assert LAZY_PEAK == "W + max(S, A + IO + state)"
    assert lazy_peak(100, 10, 2, 3) == lazy_peak(100, 10, 2, 3, S=15) == 115
    assert lazy_peak(100, 10, 2, 3, S=40) == 140


@pytest.mark.vulkan
@pytest.mark.parametrize("schedule, upload", [("lazy", "direct"), ("lazy", "staging"), ("eager", "auto")])
def test_the_report_prints_the_bound_and_the_load_keeps_to_it(tmp_path, schedule, upload):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 256)).eval()
    path = tmp_path / "m.pte"
    vkx.export_model(model, (torch.randn(4, 512),), path)
    with vkx.load(path, schedule=schedule, upload=upload) as program:
        program(np.zeros((4, 512), np.float32))
        report = program.memory
    if schedule == "eager":
        assert report.lazy_peak is None and "lazy bound" not in str(report)
        return
    peak = report["ledger"]["peak"]
    assert report.lazy_peak == lazy_peak(peak["weights"], report.A, peak["io"], peak.get("state", 0),
                                         peak.get("staging", 0))
    assert report.W <= peak["weights"] and report.peak <= report.lazy_peak
    assert f"device peak {report.peak:,} B (lazy bound {LAZY_PEAK}: {report.lazy_peak:,} B)" in str(report)
