"""The Vulkan loader: `load(path)` -> `Program`; `load_graph(graph, constants)` -> `Program` of one method.

Modules: files (a .pte and its external data opened, a Program returned), program (Program:
a loaded file's methods and the load they share, `Load`: weights, state, memory, its one release
path), method (Method: one loaded graph, called; `LoadedMethod`, the interface every method offers;
`Tail`, the one way to extend a method by a tail graph), plan (PlanMethod: a whole ExecuTorch
execution plan, delegates on the GPU, CPU ops through kernels), kernels (a plan's CPU ops bound to
torch), stages (the load stages), options (their choices, free of torch and Vulkan), loading (the one
driver that runs them over a file's methods), device (instance, device, queue, validation), limits (device profiles and the checks
of every pipeline against the limits in force), _profiles_regen (the profiles' figures read from
Khronos' published files into profiles.json), memory (allocator + ledger), staging (upload
ring), named_data (freeable buffers read from the files with pread), prepack (constant upload),
copy (host copies on a few threads), shaders (SPIR-V by variant + pipelines), spirv (the
prebuilt SPIR-V archive, built with the package), pipeline_cache (the driver's compiled
pipelines kept on disk), graph (tensors and the dispatch list), fuse (chains of ops one kernel
does), fuse_rotary (its rotary-and-cache-write pattern), chain (what the patterns read of a graph's
op chain), ops (one module per op family: an OperatorCall into dispatches), hazards (where a barrier
is needed), record (the execute command buffer), ports (a call's inputs and outputs), trace
(memory timeline), report (what a load used, as `program.memory`, and the lazy peak's one formula),
lm (causal LMs: token generation, greedy decoding's device recordings, perplexity; the load path
never imports it), errors (the typed errors).
"""
from __future__ import annotations

import importlib
from typing import Any

_ENTRY_POINTS = {"load": "files", "load_graph": "loading", "Program": "program", "Method": "method",
                 "PlanMethod": "plan", "LoadError": "errors"}
"""Each public name and the module it is imported from on first use (no Vulkan before then)."""
__all__ = list(_ENTRY_POINTS)


def __getattr__(name: str) -> Any:
    module = _ENTRY_POINTS.get(name)
    if module is None:
        raise AttributeError(f"module 'vkx.loader' has no attribute {name!r}")
    return getattr(importlib.import_module(f"vkx.loader.{module}"), name)
