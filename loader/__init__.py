"""The Vulkan loader: `load(path)` / `load_graph(graph, constants)` -> `Program`.

Modules: device (instance, device, queue, validation), memory (allocator +
ledger), staging (upload ring), named_data (freeable buffers read from
the files with pread), shaders (SPIR-V by variant + pipelines), spirv (the prebuilt
SPIR-V archive, built with the package), pipeline_cache (the driver's compiled pipelines
kept on disk), graph (OpBuilder, dispatch list),
prepack (constant upload), record (execute command buffer), runner (Program),
trace (memory timeline), program (load orders), plan (a whole ExecuTorch
execution plan: delegates on the GPU, CPU kernels through kernels.py).
"""
from __future__ import annotations

from typing import Any

__all__ = ["load", "load_graph", "Program", "PlanProgram", "LoadError"]


def __getattr__(name: str) -> Any:
    if name == "load_graph":
        from vkx.loader.program import load_graph
        return load_graph
    if name == "load":
        from vkx.loader.files import load
        return load
    if name == "Program":
        from vkx.loader.runner import Program
        return Program
    if name == "PlanProgram":
        from vkx.loader.plan import PlanProgram
        return PlanProgram
    if name == "LoadError":
        from vkx.loader.errors import LoadError
        return LoadError
    raise AttributeError(f"module 'vkx.loader' has no attribute {name!r}")
