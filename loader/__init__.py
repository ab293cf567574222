"""The Vulkan loader: `load(path)` -> `Program`; `load_graph(graph, constants)` -> `Program` of one method.

Rooms and modules: program (`Program`: a loaded file's methods and the load they share, `Load`:
weights, state, memory, its one release path), errors (the typed errors), upload (the load and its
stages: files, loading, stages, options, named_data, copy, staging, prepack, trace, report), build
(graph building and fusion: graph, fuse, fuse_rotary, chain), ops (the op builders, one module per
kind of op), execute (methods and their calls: method, plan, ports, record, hazards, kernels), gpu
(the Vulkan device: device, limits, _profiles_regen, memory, shaders, spirv, pipeline_cache), lm
(causal LMs: token generation, greedy decoding's device recordings, perplexity; the load path never
imports it). Each room's own docstring says what its modules hold.
"""
from __future__ import annotations

import importlib
from typing import Any

_ENTRY_POINTS = {"load": "upload.files", "load_graph": "upload.loading", "Program": "program",
                 "Method": "execute.method", "PlanMethod": "execute.plan", "LoadError": "errors"}
"""Each public name and the module it is imported from on first use (no Vulkan before then)."""
__all__ = list(_ENTRY_POINTS)


def __getattr__(name: str) -> Any:
    module = _ENTRY_POINTS.get(name)
    if module is None:
        raise AttributeError(f"module 'vkx.loader' has no attribute {name!r}")
    return getattr(importlib.import_module(f"vkx.loader.{module}"), name)
