"""Peak host memory of an export, in a fresh process: exporting in the model's own dtype adds
a few MiB to the model's footprint; converting to fp16/bf16 adds the converted weights (the one
copy of each weight byte: the file is written from it), never a second copy of the model."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .export_helpers import ROOT

MiB = 1 << 20
LAYERS, WIDTH = 4, 2048
W = LAYERS * (WIDTH * WIDTH + WIDTH) * 4
"""The model's fp32 weight bytes (64 MiB)."""

CHILD = r"""
import json, sys
from pathlib import Path
import torch
from torch import nn
import vkx.export

def status(field):
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(field + ":"))
    return int(line.split()[1]) * 1024

layers, width, dtype, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
vkx.export.export_model(nn.Linear(4, 4), (torch.randn(1, 4),), out, dtype=dtype)  # torch.export's first use
torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]).eval()
Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
baseline = status("VmRSS")
report = vkx.export.export_model(model, (torch.randn(1, width),), out, dtype=dtype)
print(json.dumps({"over": status("VmHWM") - baseline, "constant_bytes": report.constant_bytes}))
"""


def export_peak(dtype: str, out) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(LAYERS), str(WIDTH), dtype, str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("dtype, converted", [("fp32", 0), ("bf16", W // 2), ("fp16", W // 2)])
def test_export_peak_is_the_model_plus_the_converted_weights(dtype, converted, tmp_path):
    result = export_peak(dtype, tmp_path / "m.pte")
    assert result["constant_bytes"] == (W // 2 if converted else W)
    print(f"\n{dtype}: export peak over the model {result['over'] / MiB:.1f} MiB "
          f"(converted weights {converted / MiB:.0f} MiB, W {W / MiB:.0f} MiB)")
    assert result["over"] <= converted + W // 10
