"""`load()` leaves the process's VmHWM alone unless a memory trace is asked for (subprocess)."""
from __future__ import annotations

import json

import pytest

from .chain_model import write_chain
from .conftest import run_py

pytestmark = pytest.mark.vulkan  # the device is opened in child processes too

MiB = 1 << 20

HWM = r"""
import json, sys
import numpy as np
from vkx.loader import load
from vkx.loader.gpu.device import default_device
from vkx.loader.upload.trace import read_status, reset_peak
path, trace = sys.argv[1], sys.argv[2] == "1"
default_device()
spike = np.ones(1 << 30, np.uint8)  # raise the high-water mark well over what the load reaches
# (1 GiB: a discrete GPU's driver alone keeps ~0.5 GiB resident after its first load)
del spike
before = read_status()["VmHWM"]
with load(path, trace_memory=trace) as p:
    p(np.ones(p.input_specs[0][0], np.float32))
    phases = p.memory["phases"]
print(json.dumps({"before": before, "after": read_status()["VmHWM"], "rss": read_status()["VmRSS"],
                  "load_peaks": [ph["peak_rss"] for ph in phases[1:]], "resets": reset_peak()}))
"""


def test_load_keeps_the_high_water_mark(tmp_path):
    path = tmp_path / "small.pte"
    write_chain(str(path), 2, 4096)
    plain = json.loads(run_py(HWM, str(path), "0"))
    assert plain["after"] >= plain["before"] > plain["rss"] + 200 * MiB
    traced = json.loads(run_py(HWM, str(path), "1"))
    if traced["resets"]:  # a kernel that lets the process reset its own VmHWM
        assert traced["after"] < traced["before"] - 200 * MiB
        assert max(traced["load_peaks"]) < traced["before"] - 200 * MiB  # per-phase peaks, not the spike
