"""Programs of several methods and their state, as the file holds them (docs/format.md,
"Methods" and "State"): which plans are methods, the state tensors each declares, and the
constants each reads. Shared by `describe()`, `validate()` and the loader."""
from __future__ import annotations

from dataclasses import dataclass

from . import vkgraph as vk
from .op_state import STATE
from .program import ExecutionPlan
from .pte import VULKAN_BACKEND, ProgramFile, VulkanDelegate

SCORE = "score"
"""A causal LM's method of every position's logits (`vkx export DIR --score`, read by `vkx perplexity`)."""


@dataclass(frozen=True)
class StateDecl:
    """One `vkx.state` call of a graph."""
    name: str
    tensor: vk.Tensor
    initial_key: str | None
    """The named key of its initial value; None for zeros (or a legacy constant)."""
    zeros: bool


def is_method(plan: ExecutionPlan) -> bool:
    """The plan is one VulkanBackend delegate call from its inputs to its outputs."""
    calls = [i for c in plan.chains for i in c.instructions]
    return (len(calls) == 1 and calls[0].kind == "DelegateCall" and len(plan.delegates) == 1
            and plan.delegates[0].id == VULKAN_BACKEND and calls[0].args == plan.inputs + plan.outputs)


def methods(pf: ProgramFile) -> list[VulkanDelegate] | None:
    """Each plan's delegate, when the file has several plans and every one is a method; else None."""
    plans = pf.program.execution_plan
    if len(plans) < 2 or not all(is_method(plan) for plan in plans):
        return None
    by_plan = {v.plan_index: v for v in pf.vulkan_delegates}
    return [by_plan[i] for i in range(len(plans))]


def states(graph: vk.VkGraph) -> list[StateDecl]:
    """The graph's `vkx.state` calls that are well formed (validate checks the others)."""
    found = []
    for call in graph.chain:
        if call.name != STATE or len(call.args) != 3 or not all(0 <= a < len(graph.values) for a in call.args):
            continue
        name, initial, out = (graph.values[a] for a in call.args)
        if not isinstance(name, vk.String) or not isinstance(out, vk.Tensor):
            continue
        key = None
        if isinstance(initial, vk.Tensor) and 0 <= initial.constant_id < len(graph.constants):
            ref = graph.constants[initial.constant_id]
            key = ref.named_key if ref.is_named else None
        found.append(StateDecl(name.value, out, key, isinstance(initial, vk.Null)))
    return found


def constant_keys(graph: vk.VkGraph) -> list[str]:
    """The named keys the graph's constants read, each once, in constant order."""
    return list(dict.fromkeys(c.named_key for c in graph.constants if c.is_named))
