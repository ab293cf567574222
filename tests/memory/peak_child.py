"""Run in a fresh process: load a .pte, run it once, print peak load memory as JSON.

usage: python -m tests.memory.peak_child MODEL.pte SCHEDULE [EXTERNAL]

Peak = the highest VmHWM of the load's phases over the "before load" RSS (the
device already exists then), plus the ledger's peak device bytes on a device
whose memory is not host memory (a discrete GPU); on lavapipe device memory is
host memory and is already in the RSS.
"""
from __future__ import annotations

import json
import sys

import numpy as np

from vkx.loader import load
from vkx.loader.gpu.device import default_device


def main() -> None:
    path, schedule, *external = sys.argv[1:]
    device = default_device()
    with load(path, external, schedule=schedule, trace_memory=True) as program:
        # numpy has no bfloat16: run_numpy takes float32 for bfloat16 inputs.
        inputs = [np.ones(shape, "float32" if dtype == "bfloat16" else dtype) for shape, dtype in program.input_specs]
        program.run_numpy(*inputs)
        report = program.memory
    phases = report["phases"]
    baseline = phases[0]["rss"]
    host_peak = max(p["peak_rss"] for p in phases[1:] if p["name"] != "after execute") - baseline
    # the staging ring is host memory (in VmRSS once written): on a discrete GPU only the rest is device memory
    device_peak = 0 if device.is_cpu else report["ledger"]["peak_total"] - report["ledger"]["peak"].get("staging", 0)
    print(json.dumps({"host_peak": host_peak, "device_peak": device_peak, "peak": host_peak + device_peak,
                      "device_memory_is_host": device.is_cpu,
                      "staging_peak": report["ledger"]["peak"].get("staging", 0),
                      "io_peak": report["ledger"]["peak"].get("io", 0),
                      "state_peak": report["ledger"]["peak"].get("state", 0),
                      "upload": report["upload"], "device": report["device"],
                      "weight_bytes": report["weight_bytes"]}))


if __name__ == "__main__":
    main()
