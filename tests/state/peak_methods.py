"""Run in a fresh process: load a several-method .pte, call every method once, print as JSON the
load's peak memory (the highest VmHWM of its phases over the "before load" RSS, plus the
ledger's device peak where device memory is not host memory) and the ledger.

usage: python -m tests.state.peak_methods MODEL.pte UPLOAD
"""
from __future__ import annotations

import json
import sys

import numpy as np

from vkx.loader import load
from vkx.loader.gpu.device import default_device


def main() -> None:
    device = default_device()
    with load(sys.argv[1], upload=sys.argv[2], trace_memory=True) as program:
        for name in program.methods:
            method = program[name]
            method.run_numpy(*[np.zeros(shape, dtype) for shape, dtype in method.input_specs])
        report = program.memory
    phases = report["phases"]
    host_peak = max(p["peak_rss"] for p in phases[1:] if p["name"] != "after execute") - phases[0]["rss"]
    # the staging ring is host memory (in VmRSS once written): on a discrete GPU only the rest is device memory
    device_peak = 0 if device.is_cpu else report["ledger"]["peak_total"] - report["ledger"]["peak"].get("staging", 0)
    print(json.dumps({"peak": host_peak + device_peak, "device_memory_is_host": device.is_cpu,
                      "weight_bytes": report["weight_bytes"], "ledger_peak": report["ledger"]["peak"],
                      "staging_peak": report["ledger"]["peak"].get("staging", 0), "upload": report["upload"]}))


if __name__ == "__main__":
    main()
