"""Run in a fresh process: load a model, run it once, print its memory report as JSON.

usage: python -m tests.memory.measure MODEL.pte SCHEDULE UPLOAD [EXTERNAL]
"""
from __future__ import annotations

import json
import sys

import numpy as np

from vkx.loader import load
from vkx.loader.gpu.device import default_device


def main() -> None:
    path, schedule, upload = sys.argv[1:4]
    ext = sys.argv[4:5]
    dev = default_device()
    with load(path, ext, schedule=schedule, upload=upload, trace_memory=True) as p:
        shape, _ = p.input_specs[0]
        p(np.ones(shape, np.float32))
        report = p.memory
    phases = report["phases"]
    base = phases[0]["rss"]
    loading = [ph for ph in phases[1:] if ph["name"] != "after execute"]
    report["load_peak_over_baseline"] = max(ph["peak_rss"] for ph in loading) - base
    report["peak_over_baseline"] = max(ph["peak_rss"] for ph in phases[1:]) - base
    report["load_seconds"] = phases[-2]["seconds"]
    report["device_memory_is_host_rss"] = dev.is_cpu  # lavapipe: vkAllocateMemory is malloc
    print(json.dumps(report))


if __name__ == "__main__":
    main()
