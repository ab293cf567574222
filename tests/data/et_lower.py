"""ExecuTorch's own Vulkan export of a model, as the make_et_*.py scripts here make their files."""
from __future__ import annotations

from typing import Any

import torch
from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
from executorch.exir import ExecutorchProgramManager, to_edge_transform_and_lower


def vulkan_program(model: torch.nn.Module, example: tuple, options: dict[str, Any] | None = None
                   ) -> ExecutorchProgramManager:
    """`model` traced by torch.export on `example` and lowered by ExecuTorch's VulkanPartitioner
    (`options`: its compile options); `.buffer` is the .pte's bytes."""
    exported = torch.export.export(model, example)
    return to_edge_transform_and_lower(exported, partitioner=[VulkanPartitioner(options)]).to_executorch()
