"""The Vulkan loader: `load(path)` -> `Program`; `load_graph(graph, constants)` -> `Method`.

Modules: device (instance, device, queue, validation), memory (allocator +
ledger), staging (upload ring), named_data (freeable buffers read from
the files with pread), shaders (SPIR-V by variant + pipelines), spirv (the prebuilt
SPIR-V archive, built with the package), pipeline_cache (the driver's compiled pipelines
kept on disk), graph (OpBuilder, dispatch list),
prepack (constant upload), record (execute command buffer), method (Method: one loaded
graph), program (Program: a loaded file's methods), trace (memory timeline), stages (the
load stages and their driver), files (a .pte and its external data as a constant source),
plan (a whole ExecuTorch execution plan: delegates on the GPU, CPU kernels through kernels.py).
"""
from __future__ import annotations

from typing import Any

__all__ = ["load", "load_graph", "Program", "Method", "PlanMethod", "LoadError"]


def __getattr__(name: str) -> Any:
    if name == "load_graph":
        from vkx.loader.stages import load_graph
        return load_graph
    if name == "load":
        from vkx.loader.files import load
        return load
    if name == "Program":
        from vkx.loader.program import Program
        return Program
    if name == "Method":
        from vkx.loader.method import Method
        return Method
    if name == "PlanMethod":
        from vkx.loader.plan import PlanMethod
        return PlanMethod
    if name == "LoadError":
        from vkx.loader.errors import LoadError
        return LoadError
    raise AttributeError(f"module 'vkx.loader' has no attribute {name!r}")
